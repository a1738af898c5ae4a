"""flowsim's RoCE (`flowsim.roce`): fair shares less RoCE's headers where flows do not meet, and
DCQCN's cuts, the switches' queues and their marks where they do. Against the packet network:
`tests/backends/test_roce.py` and `benchmarks/roce_fluid.py`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simstudy.backends import simulate
from simstudy.backends.estimate import python_only
from simstudy.backends.flowsim.probe import arrivals
from simstudy.backends.network import Network
from simstudy.compiler.topology_file import topology_of
from simstudy.spec import BackendSpec, Scenario, Star
from simstudy.spec.transport import Transport

GOODPUT = 1024 / 1070


def net(npus: int, gbps: float, **roce: Any) -> Network:
    transport = Transport.model_validate({"kind": "roce", "roce": roce})
    star = Star(npus=npus, bandwidth_gbps=gbps, latency_ns=1000, transport=transport)
    return Network.from_topology(topology_of(star))


def test_a_flow_alone_moves_at_its_line_rate_less_headers() -> None:
    """Nothing queues: the message takes its bytes at the link's payload rate plus the path's latency."""
    size = 1 << 20
    (t,) = arrivals(net(2, 100), [(1, 0, size, 0)])
    assert t == int(2000 + size / (100 / 8 * GOODPUT))


def test_flows_that_meet_pay_for_dcqcns_cuts() -> None:
    """Two senders at 25 Gbit/s into one receiver: with DCQCN the queue passes K_min, the CNPs halve
    both senders and their rates climb back slowly, so the pair takes longer than fair shares (DCQCN
    off: each sender at its line rate, PFC holding the rest, the receiver's link always busy)."""
    size = 1 << 20
    fair = max(arrivals(net(3, 25, dcqcn={"enabled": False}), [(1, 0, size, 0), (2, 0, size, 0)]))
    assert fair == pytest.approx(2000 + 2 * size / (25 / 8 * GOODPUT), rel=0.001)
    dcqcn = max(arrivals(net(3, 25), [(1, 0, size, 0), (2, 0, size, 0)]))
    assert dcqcn > 1.5 * fair


def test_a_cut_rate_carries_over_to_the_queue_pairs_next_message() -> None:
    """A queue pair keeps its DCQCN rate from one message to the next, as the NIC's does: a message
    sent right after an incast is slower than the same message on a fresh network."""
    size = 1 << 20
    fresh = arrivals(net(9, 100), [(1, 0, size, 0)])[0]
    after = arrivals(net(9, 100), [*[(s, 0, size, 0) for s in range(1, 9)], (1, 0, size, 3_000_000)])
    assert after[-1] - 3_000_000 > 1.5 * fresh


def test_a_job_on_roce_runs_dcqcn_on_the_python_engine(tmp_path: Path) -> None:
    """The compiled core has no DCQCN: a fluid run on RoCE says it ran Python and why, counts its
    CNPs, and the estimate knows it; unaware keeps the compiled core (headers only)."""
    sc = Scenario.model_validate({
        "name": "roce_ps", "model": "small_cnn",
        "parallelism": {"dp": 4, "aggregation": {"kind": "parameter_server", "servers": 1}},
        "topology": {"kind": "star", "npus": 5, "bandwidth_gbps": 25, "latency_ns": 1000,
                     "transport": {"kind": "roce"}},
        "training": {"batch_size_per_worker": 8, "iterations": 2}})
    fluid = simulate(sc, tmp_path / "fluid", BackendSpec(congestion="fluid", engine="compiled", traffic="none"))
    assert fluid.details["engine"] == "python" and "DCQCN" in fluid.details["engine_python_because"]
    assert fluid.details["roce"]["cnps"] > 0
    assert python_only(sc, fluid=True) and not python_only(sc, fluid=False)
    off = sc.model_copy(update={"topology": sc.topology.model_copy(update={"transport": Transport.model_validate(
        {"kind": "roce", "roce": {"dcqcn": {"enabled": False}}})})})
    fair = simulate(off, tmp_path / "fair", BackendSpec(congestion="fluid", traffic="none"))
    assert fluid.finish_ns > fair.finish_ns
