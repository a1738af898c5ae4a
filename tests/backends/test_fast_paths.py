"""flowsim's shortcuts are proven against the full path they stand for: random small bundles
(written as Chakra ET files here) run through the full path (no shortcut: every member of every
collective message by message on the shared network) and through every shortcut (isolated
collectives timed once, orbit lanes, identical ranks), in all three congestion modes, must give
the same finish times, spans and traffic rows. The bundles draw every native algorithm and every
collective it implements (all-to-all included), 1-3 dimensions of rings, switches and fully
connected NPUs, 1-2 active chunks, computes that stagger the ranks' starts, two communicator
groups (jobs) side by side, sends, and topology.json files whose links differ from one another."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings

from simstudy.backends import BackendError, FlowsimBackend
from simstudy.compiler import Bundle
from simstudy.compiler.topology_file import NativeDim, native_topology
from tests.backends.bundles import collective_node, write_bundle
from tests.backends.fastpaths import MODES, Case, Op, assert_same, cases, run_paths

#: Examples per test (at least 500 in all run in CI; see docs/concepts/backend.md, "Shortcuts").
ONE_COLLECTIVE = 300
WORKLOADS = 250


def examples(n: int) -> settings:
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check(case: Case) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bundle = case.bundle(Path(tmp) / "b")
        for mode in MODES:
            assert_same(run_paths(bundle, Path(tmp), mode))


@examples(ONE_COLLECTIVE)
@given(cases(max_ops=1, groups=False, sends=False, computes=False))
def test_one_collective_of_every_rank(case: Case) -> None:
    """One collective of every rank: the lanes and identical ranks engage wherever the network
    is symmetric (and are refused where a topology.json makes links differ)."""
    check(case)


#: Found by this test in a fresh install's run: a send from rank 1 starts on the link to rank 0 at
#: the instant the double binary tree's replayed all-reduce sends on it (aware, FIFO links): flowsim
#: now runs aware workloads with sends without the `isolated` shortcut.
SEND_MEETS_TREE = Case(
    dims=[("Ring", 4, 12.5, 0.0)], algorithms=["doubleBinaryTree"], active=1, splits=1, optimization="baseline",
    ops=[Op(kind="all_reduce", size=4096, group=None, src=0, dst=0, micros=(1,)),
         Op(kind="send", size=1024, group=None, src=1, dst=0, micros=(1,))],
    groups={}, topology=None)


#: Found by this test: group 1's all-reduce (ranks 0-3) is timed alone, and its members hear that
#: they are done in rank order, where on the full path they hear it in the order of their last
#: messages; the collective of every rank that they issue next (staggered: group 2 is still busy)
#: then sends 0 -> 1 and 2 -> 1 at one instant in the other order, and on a FIFO link (aware) the
#: other message waits. Members of a timed collective now hear it in the order it finished them.
DONE_ORDER_MEETS_FIFO = Case(
    dims=[("Switch", 4, 12.5, 0.0), ("Ring", 2, 12.5, 0.0)], algorithms=["doubleBinaryTree", "ring"], active=1,
    splits=1, optimization="baseline",
    ops=[Op(kind="all_reduce", size=4096, group="1"), Op(kind="all_reduce", size=65536, group="2"),
         Op(kind="all_reduce", size=4096, group=None)],
    groups={"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}, topology=None)


@examples(WORKLOADS)
@given(cases(max_npus=8, max_ops=5))
@example(SEND_MEETS_TREE)
@example(DONE_ORDER_MEETS_FIFO)
def test_workloads(case: Case) -> None:
    """Several ops per rank: staggered starts, groups whose collectives share links, sends that
    meet isolated collectives (replayed message by message from their start)."""
    check(case)


def _uneven_ring(tmp: Path, slow: str) -> Bundle:
    """A 1 MiB ring all-reduce of 4 NPUs whose topology.json makes link `slow` half as fast and
    twice as long as the others (ASTRA-SIM's network.yml has one bandwidth per dimension)."""
    topo = native_topology([NativeDim("Ring", 4, 50.0, 500.0)]).to_json()
    for link in topo["links"]:
        if f"{link['src']}->{link['dst']}" == slow:
            link["bytes_per_ns"] /= 2
            link["latency_ns"] *= 2
    return write_bundle(tmp, [("Ring", 4, 50.0, 500.0)], [[collective_node(0, "all_reduce", 1 << 20)]] * 4,
                        topology=topo)


@pytest.mark.parametrize("mode", MODES)
def test_links_that_differ_are_honoured_not_averaged(mode: str, tmp_path: Path) -> None:
    """One slow link of a ring: no rank stands for the others (no lanes, no identical ranks), and
    every mode charges that link its own speed (unaware read every link of a dimension as its
    first one; the orbit plan gave each orbit the speed of its last link)."""
    results = run_paths(_uneven_ring(tmp_path / "b", "h2->h3"), tmp_path, mode)
    assert_same(results)
    assert results["all"].details["lanes"] == 0 and not results["all"].details["identical_ranks"]
    even = FlowsimBackend(congestion=mode).run(_uneven_ring(tmp_path / "e", "none"), tmp_path / "e")
    assert even.details["lanes"] > 0 and even.details["identical_ranks"]
    assert results["all"].finish_ns > even.finish_ns


@pytest.mark.parametrize("mode", MODES)
def test_a_collective_that_deadlocks_fails_on_every_path(mode: str, tmp_path: Path) -> None:
    """localBWAware on 3 dimensions, 2 chunks, one chunk in flight per queue, one slow link: ranks
    drift apart, and a rank's all-gather waits for a queue that its reduce-scatter of the next chunk
    holds while a neighbour's waits the other way (ASTRA-SIM's ranks never finish such runs either:
    tests/backends/test_full_path.py). Every path says so; timed alone it reported finish 0."""
    dims = [("Ring", 2, 12.5, 0.0), ("Ring", 3, 12.5, 0.0), ("Switch", 2, 12.5, 0.0)]
    topo = native_topology([NativeDim(*d) for d in dims]).to_json()  # type: ignore[arg-type]
    topo["links"][0]["bytes_per_ns"] /= 2
    case = Case(dims, ["ring"] * 3, 1, 2, "localBWAware", [Op("all_reduce", size=65536)], topology=topo)
    results = run_paths(case.bundle(tmp_path / "b"), tmp_path, mode)
    assert_same(results)
    assert all(isinstance(r, BackendError) for r in results.values())


def test_the_examples_take_the_shortcuts(tmp_path: Path) -> None:
    """On the drawn kinds of bundle the shortcuts do engage (else the properties would hold
    trivially): identical ranks and lanes on a symmetric collective, a send meeting an isolated
    collective replays it, ranks issuing at different times start it staggered."""
    sym = write_bundle(tmp_path / "s", [("Switch", 4, 50.0, 500.0), ("Ring", 2, 25.0, 500.0)],
                       [[collective_node(0, "all_reduce", 1 << 20)]] * 8, splits=2, active=2)
    d = FlowsimBackend(congestion="fluid").run(sym, tmp_path / "rs").details
    assert d["identical_ranks"] and d["lanes"] > 0 and d["fast"] > 0
    case = Case([("Ring", 4, 50.0, 500.0)], ["ring"], 1, 2, "baseline",
                [Op("compute", micros=(1, 1, 1, 9)), Op("all_reduce", size=1 << 20),
                 Op("send", size=1 << 20, src=0, dst=2), Op("all_gather", size=1 << 16)])
    d = FlowsimBackend(congestion="fluid").run(case.bundle(tmp_path / "w"), tmp_path / "rw").details
    assert d["staggered"] > 0 and not d["identical_ranks"]
    # group {0, 1}'s all-reduce runs alone on the links between them until rank 3's send to rank 1
    # (3 -> 0 -> 1) reaches one of them: then it is replayed message by message
    replay = Case([("Ring", 4, 50.0, 500.0)], ["ring"], 1, 1, "baseline",
                  [Op("compute", micros=(1, 1, 1, 2)), Op("all_reduce", size=1 << 22, group="1"),
                   Op("send", size=1 << 20, src=3, dst=1)], {"1": [0, 1], "2": [2, 3]})
    results = run_paths(replay.bundle(tmp_path / "p"), tmp_path / "p", "fluid")
    assert results["all"].details["replayed"] > 0
    assert_same(results)
