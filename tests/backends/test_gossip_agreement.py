"""Gossip and bounded staleness on both ASTRA-SIM binaries: flowsim's `unaware` and `aware` modes finish
every rank at the same nanosecond as ASTRA-SIM c459ab6's congestion-unaware and congestion-aware
binaries, and carry the same bytes between the same ranks.

Gossip's sends and receives are point-to-point Chakra nodes; staleness is nothing but dependencies
(the forward of iteration i + s + 1 on iteration i's update), so that both backends run it. The
cases: each graph (ring, exponential, random) in sync and async mode, with and without staleness,
on a switch and on a ring (where the aware model queues messages that share links), and all-reduce
data parallelism with staleness under PyTorch DDP's buckets, Horovod's fusion and KungFu's
point-to-point all-reduce."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simstudy.backends import AstraSimBackend
from simstudy.compiler import Bundle, compile_scenario
from simstudy.spec import Scenario
from tests.backends.bundles import agree

pytestmark = pytest.mark.astrasim


def net(kind: str, npus: int = 8) -> dict[str, Any]:
    return {"kind": kind, "npus": npus, "bandwidth_gbps": 25, "latency_ns": 700}


CASES: dict[str, dict[str, Any]] = {
    "gossip_ring2_switch": {"parallelism": {"dp": 8, "aggregation": {"kind": "gossip", "peers": 2}},
                            "topology": net("switch")},
    "gossip_ring2_ring": {"parallelism": {"dp": 8, "aggregation": {"kind": "gossip", "peers": 2}},
                          "topology": net("ring")},
    "gossip_exp1_stale1_ring": {"parallelism": {"dp": 8, "staleness": 1, "aggregation": {
        "kind": "gossip", "graph": "exponential"}}, "topology": net("ring")},
    "gossip_exp3_async_switch": {"parallelism": {"dp": 8, "aggregation": {"kind": "gossip", "graph": "exponential",
                                                                          "peers": 3, "mode": "async"}},
                                 "topology": net("switch")},
    "gossip_random3_stale2_switch": {"parallelism": {"dp": 8, "staleness": 2, "aggregation": {
        "kind": "gossip", "graph": "random", "peers": 3, "seed": 5}}, "topology": net("switch")},
    "gossip_random2_async_ring": {"parallelism": {"dp": 6, "aggregation": {"kind": "gossip", "graph": "random",
                                                                           "peers": 2, "mode": "async"}},
                                  "topology": net("ring", 6)},
    "ddp_stale1_switch": {"parallelism": {"dp": 8, "staleness": 1, "bucket_size_mib": 0.25},
                          "topology": net("switch")},
    "ddp_stale2_ring": {"parallelism": {"dp": 4, "staleness": 2}, "topology": net("ring", 4)},
    "horovod_stale1_switch": {"parallelism": {"dp": 4, "staleness": 1, "framework": "horovod"},
                              "topology": net("switch", 4)},
    "kungfu_stale1_switch": {"parallelism": {"dp": 4, "staleness": 1, "framework": {"name": "kungfu",
                                                                                     "chunk_kib": 256}},
                             "topology": net("switch", 4)},
}


def bundle(case: str, tmp: Path) -> Bundle:
    spec = {"name": case, "model": "small_cnn", "training": {"iterations": 3, "batch_size_per_worker": 16},
            **CASES[case]}
    return compile_scenario(Scenario.model_validate(spec), tmp / "bundle").bundle


@pytest.mark.parametrize("binary", ["astra_sim_bin", "aware_bin"], ids=["unaware", "aware"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_flowsim_finishes_with_astra_sim(case: str, binary: str, request: pytest.FixtureRequest,
                                         tmp_path: Path) -> None:
    agree(request.getfixturevalue(binary), binary == "aware_bin", bundle(case, tmp_path), tmp_path)


def test_staleness_shortens_a_communication_bound_job(astra_sim_bin: Path, tmp_path: Path) -> None:
    """The cases above are not vacuous: on ASTRA-SIM itself, staleness 1 finishes the ring gossip
    job sooner than staleness 0 (its compute runs during the messages of the iteration before)."""
    spec = {"name": "s", "model": "small_cnn", "training": {"iterations": 3, "batch_size_per_worker": 16},
            "topology": net("ring")}
    done = []
    for s in (0, 1):
        par = {"dp": 8, "staleness": s, "aggregation": {"kind": "gossip", "peers": 2}}
        b = compile_scenario(Scenario.model_validate({**spec, "parallelism": par}), tmp_path / f"b{s}").bundle
        done.append(AstraSimBackend(astra_sim_bin).run(b, tmp_path / f"a{s}", timeout_s=300).finish_ns)
    assert done[1] < done[0]
