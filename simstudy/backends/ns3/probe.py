"""Messages on the packet network without a workload.

`message_times`: one connection, one message after another (or one each way at once). What
`benchmarks/tcp_model.py` measures to calibrate flowsim's TCP model under loss, what
`benchmarks/tcp_lossless.py` measures without loss, and what a test checks the packet network with:
how long each of `count` messages of `size` bytes takes from rank `src` to rank `dst`, each sent
when the one before has arrived (as a ring step's messages go).

`arrivals`: messages from several ranks at once, each on its own connection or queue pair (what
`benchmarks/roce_fluid.py` calibrates flowsim's RoCE against, and the RoCE tests measure).

`replay`: the messages a run sent (`Ns3Backend(record_sends=True)`), all queued at once in a fresh
fabric of the same network and run to the end with no engine between them: the C++-only reference
of `benchmarks/ns3_profile.py`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simstudy.backends.base import BackendError
from simstudy.backends.network import Network
from simstudy.backends.ns3.fabric import FULL_MESH_RANKS, Fabric
from simstudy.compiler.topology_file import NetworkTopology


def _arrivals(fab: Fabric, n: int, what: str) -> list[tuple[int, int]]:
    """Run ns-3 until `n` messages have arrived: their (id, time ns), in the order they came; a
    BackendError naming `what` where they never do."""
    done: list[tuple[int, int]] = []
    while len(done) < n:
        got = fab.run_until(-1)
        if not got:
            raise BackendError(f"ns-3: {what} never arrived")
        done += got
    return done


def message_times(topology: NetworkTopology, src: int, dst: int, size: int, count: int,
                  *, gap_ns: int = 0, both_ways: bool = False) -> tuple[list[int], dict[str, int | float]]:
    """Each message's time (ns, from its send until the receiver has its last byte) and the
    network's counters (`Fabric.stats`). `gap_ns` waits between an arrival and the next send.
    `both_ways`: each time a message goes each way at once (a ring step of two ranks: each
    direction's data shares its links with the other's ACKs), timed until both have arrived."""
    fab = Fabric(Network.from_topology(topology))
    try:
        streams = [fab.stream(src, dst)] + ([fab.stream(dst, src)] if both_ways else [])
        t = fab.t0_ns
        out: list[int] = []
        for i in range(count):
            for k, stream in enumerate(streams):
                fab.send(stream, size, i * len(streams) + k, t)
            done = _arrivals(fab, len(streams), f"message {i} of {size} bytes")
            t_done = max(t_end for _, t_end in done)
            out.append(t_done - t)
            t = t_done + gap_ns
        stats = fab.stats()
    finally:
        fab.close()
    return out, stats


def arrivals(topology: NetworkTopology, sends: list[tuple[int, int, int, int]], *, bin_ns: int = 0
             ) -> tuple[list[int], dict[str, Any], dict[str, tuple[int, int]], list[NDArray[np.float64]]]:
    """Messages (src, dst, bytes, start ns after the job's start) carried to their ends: each one's
    arrival (ns after the job's start), the network's counters (`Fabric.stats`), its paused links
    (RoCE: `Fabric.pauses`) and, with `bin_ns` on RoCE, the bytes each message's queue pair
    delivered per bin from the job's start."""
    fab = Fabric(Network.from_topology(topology), qp_bin_ns=bin_ns)
    try:
        t0 = fab.t0_ns
        streams = [fab.stream(src, dst) for src, dst, _, _ in sends]
        for i, ((_, _, size, at), stream) in enumerate(zip(sends, streams, strict=True)):
            fab.send(stream, size, i, t0 + at)
        done = dict(_arrivals(fab, len(sends), f"some of {len(sends)} messages"))
        skip = t0 // bin_ns if bin_ns else 0
        rx = [fab.qp_received(s)[skip:] for s in streams] if bin_ns and fab.roce else []
        return [done[i] - t0 for i in range(len(sends))], fab.stats(), fab.pauses(), rx
    finally:
        fab.close()


def replay(topology: NetworkTopology, sends: list[tuple[int, int, int, int]],
           queue_pairs: list[tuple[int, int]] | None = None) -> tuple[float, dict[str, int | float]]:
    """The wall seconds ns-3 takes to carry `sends` ((stream, bytes, id, ns-3 time ns), as a run's
    fabric recorded them) to their ends, queued all at once, and the network's counters. Over TCP
    only for networks whose connections all open at the start (`FULL_MESH_RANKS` ranks or fewer):
    elsewhere a run opens them when first needed, at times a replay does not know. Over RoCE (no
    handshake) on any network, given the run's `queue_pairs` (`Fabric.queue_pairs()`: each queue
    pair's ranks, in the order the run created them, which numbers the sends' streams)."""
    roce = topology.transport.kind == "roce"
    if roce and queue_pairs is None:
        raise BackendError("a replay on RoCE needs the run's queue pairs (Fabric.queue_pairs())")
    if not roce and topology.hosts > FULL_MESH_RANKS:
        raise BackendError(f"a replay needs every connection open at the start: at most {FULL_MESH_RANKS} ranks, "
                           f"not {topology.hosts}")
    fab = Fabric(Network.from_topology(topology))
    try:
        for qp, (src, dst) in enumerate(queue_pairs or []):
            if fab.stream(src, dst) != qp:
                raise BackendError(f"queue pair {qp} ({src} -> {dst}) is listed twice")
        for stream, nbytes, msg_id, t_ns in sends:
            fab.send(stream, nbytes, msg_id, t_ns)
        t0 = time.perf_counter()
        _arrivals(fab, len(sends), f"some of the replay's {len(sends)} messages")
        wall = time.perf_counter() - t0
        stats = fab.stats()
    finally:
        fab.close()
    return wall, stats
