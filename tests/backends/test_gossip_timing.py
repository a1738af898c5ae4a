"""Gossip and bounded staleness on flowsim, on cases small enough to work out by hand.

One layer of P = 1,000,000 fp32 parameters (4,000,000 bytes), measured compute: forward F = 1000 us,
backward B = 2000 us, optimizer 50 us; NPUs fully connected at 8 Gbit/s (1 byte/ns) with 1000 ns
latency, so one message of the parameters takes M = 1000 + 4,000,000 ns = 4.001 ms (congestion-
unaware: latency + bytes / bandwidth). A rank has one send in flight at a time (ASTRA-SIM's
workload layer), so its sends of one iteration go one after the other. Gossip's update step is the
optimizer step plus averaging peers + 1 copies into one: (peers + 2) x 4,000,000 bytes at
1600 GB/s = 10 us with 2 peers, so U = 60 us.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simstudy.backends import FlowsimBackend
from simstudy.compiler import compile_scenario
from simstudy.spec import Scenario

US = 1000
F, B, OPT, U = 1000 * US, 2000 * US, 50 * US, 60 * US
M = 1000 + 4_000_000


def finish(tmp: Path, aggregation: dict[str, Any], *, dp: int = 4, staleness: int = 0, iterations: int = 2) -> int:
    spec = {"name": "hand", "model": {"name": "one", "layers": [{"name": "w", "params": 1_000_000,
                                                                 "fwd_flops_per_sample": 1.0,
                                                                 "activation_bytes_per_sample": 4}]},
            "parallelism": {"dp": dp, "aggregation": aggregation, "staleness": staleness},
            "topology": {"kind": "fully_connected", "npus": dp, "bandwidth_gbps": 8, "latency_ns": 1000},
            "system": {"measured": {"forward_us": 1000.0, "backward_us": 2000.0, "optimizer_us": 50.0}},
            "training": {"iterations": iterations}}
    bundle = compile_scenario(Scenario.model_validate(spec), tmp / "bundle").bundle
    ranks = FlowsimBackend(congestion="unaware").run(bundle, tmp / "run").ranks
    assert len({r.finish_ns for r in ranks}) == 1  # every rank does the same
    return ranks[0].finish_ns


def test_sync_ring_gossip(tmp_path: Path) -> None:
    """Ring, 2 peers, sync, 2 iterations. Iteration 0: forward and backward end at F + B = 3 ms; the send
    to r+1 arrives at 3 ms + M, the send to r-1 (which r+1 sends r second) at 3 ms + 2M = 11.002 ms; the
    update ends at 11.062 ms and the next iteration starts. Two iterations: 2 x (F + B + 2M + U) = 22.124 ms."""
    assert finish(tmp_path, {"kind": "gossip", "peers": 2}) == 2 * (F + B + 2 * M + U) == 22_124_000


def test_async_ring_gossip(tmp_path: Path) -> None:
    """The same, async: the update follows the backward (3.06 ms), iteration 1 computes until 6.12 ms,
    but its sends wait for iteration 0's (the rank's one send in flight) and leave at 3 ms + 2M:
    the last arrives at F + B + 4M = 19.004 ms."""
    assert finish(tmp_path, {"kind": "gossip", "peers": 2, "mode": "async"}) == F + B + 4 * M == 19_004_000


def test_exponential_gossip_sends_one_message_per_iteration(tmp_path: Path) -> None:
    """Exponential, 1 peer (1 hop, then 2 hops: one message each on a fully connected network), sync:
    2 x (F + B + M + U') with U' = 50 + 3 x 4,000,000 / 1600 GB/s = 57.5 -> 58 us (whole microseconds)."""
    assert finish(tmp_path, {"kind": "gossip", "graph": "exponential"}) == 2 * (F + B + M + 58 * US) == 14_118_000


@pytest.mark.parametrize(("staleness", "expected"), [(0, 3 * (F + B + 2 * M + U)), (1, F + B + 6 * M + U),
                                                     (2, F + B + 6 * M + U)])
def test_staleness_hides_compute_behind_gossip(tmp_path: Path, staleness: int, expected: int) -> None:
    """Sync ring gossip, 3 iterations. Staleness 0: 3 x 11.062 ms = 33.186 ms. Staleness 1: iteration 1
    computes during iteration 0's messages (3-6 ms); its sends wait behind them, leaving at 3 ms + 2M;
    iteration 2's forward waits for iteration 0's update (11.002-11.062 ms) and computes until 14.062
    ms; its sends leave at 3 ms + 4M, and the last arrives at 3 ms + 6M = 27.006 ms; its update ends at
    27.066 ms. The messages (2M = 8 ms per iteration) are longer than the compute (3 ms): staleness 2
    can hide nothing more."""
    assert finish(tmp_path, {"kind": "gossip", "peers": 2}, staleness=staleness, iterations=3) == expected


def test_staleness_hides_compute_behind_all_reduce(tmp_path: Path) -> None:
    """Ring all-reduce of the 4,000,000 bytes on 2 ranks, after the whole backward (one bucket), 3
    iterations. Staleness 0: 3 x (F + B + T + OPT), with T the all-reduce's time (two steps of
    2,000,000 bytes, 2 x 2.001 ms, plus the system layer's endpoint delays): read T from it.
    Staleness 1: the all-reduces run back to back from 3 ms (each iteration's compute, 3 ms, is shorter
    than T), the next forward waiting for the update of the iteration before the last: F + B + 3T + OPT."""
    agg = {"kind": "allreduce"}
    stale0 = finish(tmp_path / "s0", agg, dp=2, iterations=3)
    t = stale0 // 3 - (F + B + OPT)
    assert 2 * 2_001_000 < t < 2 * 2_001_000 + 10_000  # two steps of M / 2 and a few endpoint delays
    assert finish(tmp_path / "s1", agg, dp=2, staleness=1, iterations=3) == F + B + 3 * t + OPT
    assert finish(tmp_path / "s2", agg, dp=2, staleness=2, iterations=3) == F + B + 3 * t + OPT
