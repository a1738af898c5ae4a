"""One shared network: transfers of different collectives, chunks and sends share links.

Hand-made bundles (one collective per rank, as ASTRA-SIM's microbenchmarks) whose finish times
follow from ASTRA-SIM's system layer and the network model by hand: see each test's docstring.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from simstudy import chakra
from simstudy.backends import FlowsimBackend
from simstudy.backends.flowsim.netmodels import FluidNet, Msg
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.chakra import GlobalMetadata, Node, NodeType
from simstudy.compiler import Bundle
from tests.backends.bundles import GIB, MEM_BW, bundle


def finish(b: Bundle, mode: str, tmp: Path) -> int:
    return FlowsimBackend(congestion=mode).run(b, tmp / mode).finish_ns


def test_two_collectives_of_different_groups_share_links(tmp_path: Path) -> None:
    """Groups {0, 2} and {1, 3} each all-reduce S bytes on a 4-NPU ring at the same time.

    A two-member ring all-reduce is two steps of one message of S/2 bytes each way, 2 hops
    (0 -> 1 -> 2; a tie goes clockwise), so every directed ring link carries one message of each
    group: 0 -> 2 and 3 -> 1 both cross link 0 -> 1. ASTRA-SIM runs a group's ring with a 10 ns
    MemBus delay per step, plus one at the start, and reduces after the first step
    (3 x floor(S/2 / mem_bw) ns). With B bytes/ns per link and latency L per hop:

    * fluid: the two messages on each link get B/2 each (max-min fair), every step takes
      int(2L + (S/2) / (B/2)): finish = 3 x 10 + reduce + 2 x int(2L + S / B);
    * unaware: links are not shared: 2 x int(2L + (S/2) / B);
    * aware: each hop is stored and forwarded (int(L + (S/2)/B) per hop); the other group's message
      reaches the shared link one hop later, after the first has left it: no queueing.
    """
    size, lat = 64 * 2**20, 500.0
    b = bundle(tmp_path / "b", "Ring", 4, size, groups={"1": [0, 2], "2": [1, 3]}, latency_ns=lat)
    bpns = 1.0 * GIB / 1e9
    half = size // 2
    reduce = 3 * math.floor(half / MEM_BW)
    assert finish(b, "fluid", tmp_path) == 30 + reduce + 2 * int(2 * lat + half / (bpns / 2))
    assert finish(b, "unaware", tmp_path) == 30 + reduce + 2 * int(2 * lat + half / bpns)
    assert finish(b, "aware", tmp_path) == 30 + reduce + 2 * 2 * int(lat + half / bpns)
    # One group alone: fluid has nothing to share, and is exactly the unaware time.
    alone = bundle(tmp_path / "alone", "Ring", 4, size, groups={"1": [0, 2], "2": [1, 3]}, latency_ns=lat)
    for r in (1, 3):
        chakra.write_trace(chakra.trace_path(alone.workload, r), GlobalMetadata(),
                           [Node(0, "idle", NodeType.COMP_NODE, duration_micros=1)])
    assert finish(alone, "fluid", tmp_path / "a") == 30 + reduce + 2 * int(2 * lat + half / bpns)


def test_chunks_of_one_collective_share_links(tmp_path: Path) -> None:
    """One all-reduce of S bytes on a 4-NPU ring cut into 2 chunks, both running at once
    (`active-chunks-per-dimension` 2). Each chunk is a ring all-reduce of S/2: 6 steps of one
    S/8 message to the next rank, reducing after the first 3, with a 10 ns endpoint delay per
    step and one at the start.

    * fluid: both chunks send on every link at the same time and get B/2 each:
      per step int(L + (S/8) / (B/2));
    * unaware: each chunk's message takes int(L + (S/8) / B), as if alone;
    * with one chunk at a time (active 1), unaware takes twice as long as with two.
    """
    size, lat = 64 * 2**20, 500.0
    bpns = 1.0 * GIB / 1e9
    msg = size // 2 // 4
    reduce = 3 * 3 * math.floor(msg / MEM_BW)

    def expected(rate: float) -> int:
        return 10 + 6 * (int(lat + msg / rate) + 10) + reduce

    two = bundle(tmp_path / "two", "Ring", 4, size, splits=2, active=2, latency_ns=lat)
    assert finish(two, "fluid", tmp_path) == expected(bpns / 2)
    assert finish(two, "unaware", tmp_path) == expected(bpns)
    one = bundle(tmp_path / "one", "Ring", 4, size, splits=2, active=1, latency_ns=lat)
    assert finish(one, "unaware", tmp_path / "one") == 2 * expected(bpns)


def test_fluid_recomputes_only_the_flows_connected_to_a_change() -> None:
    """Flows A (link 0) and B (links 0, 1) share link 0; C is alone on link 2. A flow D joining C
    on link 2 halves C's rate and leaves A and B untouched: their rates are not even recomputed."""
    sched = Scheduler()
    net = FluidNet(sched, [10.0, 10.0, 10.0], [0.0, 0.0, 0.0])
    arrived: dict[str, int] = {}

    def msg(name: str, keys: tuple[int, ...], size: int) -> Msg:
        return Msg(0, 1, size, keys, None, 0.0, 0, lambda m: arrived.__setitem__(name, sched.now))

    for name, keys in (("A", (0,)), ("B", (0, 1)), ("C", (2,))):
        net.send(msg(name, keys, 1000))
    while sched.heap and sched.heap[0][0] == 0:
        _, _, _, fn, args = sched.pop()
        fn(*args)
    flows = {f.msg.keys: f for fs in net.on_link.values() for f in fs}
    a, b, c = flows[(0,)], flows[(0, 1)], flows[(2,)]
    assert (a.rate, b.rate, c.rate) == (5.0, 5.0, 10.0)
    versions = (a.version, b.version)
    sched.at(40, lambda: net.send(msg("D", (2,), 1000)))
    while sched.heap and sched.heap[0][0] <= 40:
        _, _, _, fn, args = sched.pop()
        fn(*args)
    assert set(net._component({2})) == set(net.on_link[2]) and len(net.on_link[2]) == 2 and c.rate == 5.0
    assert (a.version, b.version) == versions
    while sched.heap:
        _, _, _, fn, args = sched.pop()
        fn(*args)
    # A and B: 1000 bytes at 5 B/ns. C: 400 bytes alone by t=40, then 600 at 5 B/ns (t=160). D: 600
    # bytes at 5 B/ns until C ends, then 400 alone at 10 B/ns (t=200).
    assert arrived == {"A": 200, "B": 200, "C": 160, "D": 200}


@pytest.mark.parametrize("mode", ["fluid", "unaware", "aware"])
def test_modes_agree_when_nothing_is_shared(mode: str, tmp_path: Path) -> None:
    """A ring all-reduce on a ring network puts one message on a link at a time: every mode gives
    ASTRA-SIM's uncontended time, d + 6 x (int(L + S/4 / B) + d) + 3 reductions."""
    size, lat = 2**20, 500.0
    b = bundle(tmp_path / "b", "Ring", 4, size, latency_ns=lat)
    msg = size // 4
    bpns = 1.0 * GIB / 1e9
    assert finish(b, mode, tmp_path) == 10 + 6 * (int(lat + msg / bpns) + 10) + 3 * 3 * math.floor(msg / MEM_BW)
