"""flowsim's full path (every shortcut off: every member simulated message by message on the
shared network) against ASTRA-SIM's binaries, where the order in which a rank sends its messages
decides finish times: a direct phase's sends queue on the rank's first link (a switch's uplink, a
ring's links), and ASTRA-SIM's direct algorithm (`AllToAll`) sends to its peers in ring order
from the next one. Also collectives whose ranks issue them at different times, which always take
the full path."""

from __future__ import annotations

from pathlib import Path

import pytest

from simstudy import chakra
from simstudy.backends import AstraSimBackend, BackendError, FlowsimBackend
from simstudy.backends.flowsim import FULL
from simstudy.backends.locate import describe_search, find_astra_sim
from simstudy.chakra import Node, NodeType
from tests.backends.bundles import collective_node, write_bundle

pytestmark = pytest.mark.astrasim
KINDS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]


def binary(mode: str) -> Path:
    found = find_astra_sim(aware=mode == "aware")
    if found is None:
        pytest.skip(f"no ASTRA-SIM binary: {describe_search(aware=mode == 'aware')}")
    return found


@pytest.mark.parametrize("mode", ["aware", "unaware"])
@pytest.mark.parametrize("topology", ["Switch", "Ring"])
@pytest.mark.parametrize("kind", KINDS)
def test_direct_phases_send_in_ring_order(kind: str, topology: str, mode: str, tmp_path: Path) -> None:
    """One direct collective of every rank, 3 chunks, 2 in flight, on 6 NPUs, run by the full path."""
    b = write_bundle(tmp_path / "b", [(topology, 6, 50.0, 500.0)], [[collective_node(0, kind, 3 << 20)]] * 6,
                     algorithm="direct", splits=3, active=2)
    a = AstraSimBackend(binary(mode), aware=mode == "aware").run(b, tmp_path / "a", timeout_s=120)
    f = FlowsimBackend(congestion=mode, shortcuts=FULL).run(b, tmp_path / "f")
    assert [r.finish_ns for r in f.ranks] == [r.finish_ns for r in a.ranks]


@pytest.mark.parametrize("mode", ["aware", "unaware"])
@pytest.mark.parametrize(("algorithm", "kind"), [("direct", "all_gather"), ("direct", "all_reduce"),
                                                 ("ring", "all_reduce"), ("halvingDoubling", "reduce_scatter")])
def test_staggered_starts(algorithm: str, kind: str, mode: str, tmp_path: Path) -> None:
    """Rank r computes r microseconds before the collective: the early ranks start sending and the
    others join as they issue it (ASTRA-SIM's ranks start their part when they issue it)."""
    traces = []
    for r in range(8):
        traces.append([Node(0, "compute", NodeType.COMP_NODE, duration_micros=1 + 3 * r,
                            attrs=[chakra.is_cpu_op(False), chakra.num_ops(1)]),
                       collective_node(1, kind, 1 << 20, deps=(0,))])
    b = write_bundle(tmp_path / "b", [("Switch", 8, 50.0, 500.0)], traces, algorithm=algorithm, splits=2)
    a = AstraSimBackend(binary(mode), aware=mode == "aware").run(b, tmp_path / "a", timeout_s=120)
    for shortcuts in (FULL, None):
        f = FlowsimBackend(congestion=mode, **({} if shortcuts is None else {"shortcuts": shortcuts})).run(
            b, tmp_path / f"f{shortcuts is None}")
        assert [r.finish_ns for r in f.ranks] == [r.finish_ns for r in a.ranks]


@pytest.mark.parametrize("splits", [1, 3])
def test_direct_all_reduce_on_two_dimensions(splits: int, tmp_path: Path) -> None:
    """A gated direct all-reduce phase per dimension, ranks starting 0-16 us apart: a rank still in
    its first phase receives (and reduces) messages of the second; they count for the second."""
    traces = [[Node(0, "compute", NodeType.COMP_NODE, duration_micros=1 + 2 * r,
                    attrs=[chakra.is_cpu_op(False), chakra.num_ops(1)]),
               collective_node(1, "all_reduce", 1 << 20, deps=(0,))] for r in range(9)]
    b = write_bundle(tmp_path / "b", [("FullyConnected", 3, 50.0, 500.0), ("Switch", 3, 25.0, 700.0)], traces,
                     algorithm="direct", splits=splits)
    a = AstraSimBackend(binary("unaware")).run(b, tmp_path / "a", timeout_s=120)
    for shortcuts in (FULL, None):
        f = FlowsimBackend(congestion="unaware", **({} if shortcuts is None else {"shortcuts": shortcuts})).run(
            b, tmp_path / f"f{shortcuts is None}")
        assert [r.finish_ns for r in f.ranks] == [r.finish_ns for r in a.ranks]


def test_local_bw_aware_chunks_that_wait_for_each_other(tmp_path: Path) -> None:
    """localBWAware on 3 dimensions, 2 chunks, one in flight per queue, ranks starting 1-8 us apart:
    a dimension's all-gather shares the queue of its reduce-scatter, and ranks that drifted apart
    wait for each other's queues. ASTRA-SIM's ranks never finish; flowsim says deadlock on every
    path."""
    delays = [1, 5, 1, 2, 1, 3, 3, 3, 8, 3, 1, 1]
    traces = [[Node(0, "compute", NodeType.COMP_NODE, duration_micros=delays[r],
                    attrs=[chakra.is_cpu_op(False), chakra.num_ops(1)]),
               collective_node(1, "all_reduce", 65536, deps=(0,))] for r in range(12)]
    b = write_bundle(tmp_path / "b", [("Ring", 2, 12.5, 0.0), ("Ring", 3, 12.5, 0.0), ("Switch", 2, 12.5, 0.0)],
                     traces, splits=2, optimization="localBWAware")
    with pytest.raises(BackendError, match="did not finish"):
        AstraSimBackend(binary("unaware")).run(b, tmp_path / "a", timeout_s=120)
    for shortcuts in (FULL, None):
        with pytest.raises(BackendError, match="deadlock"):
            FlowsimBackend(congestion="unaware", **({} if shortcuts is None else {"shortcuts": shortcuts})).run(
                b, tmp_path / f"f{shortcuts is None}")
