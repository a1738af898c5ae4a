"""Messages on the packet network without a workload.

`message_times`: one connection, one message after another. What `benchmarks/tcp_model.py`
measures to calibrate flowsim's TCP model under loss, and what a test checks the packet network
with: how long each of `count` messages of `size` bytes takes from rank `src` to rank `dst`, each
sent when the one before has arrived (as a ring step's messages go).

`replay`: the messages a run sent (`Ns3Backend(record_sends=True)`), all queued at once in a fresh
fabric of the same network and run to the end with no engine between them: the C++-only reference
of `benchmarks/ns3_profile.py`.
"""

from __future__ import annotations

import time

from simstudy.backends.base import BackendError
from simstudy.backends.network import Network
from simstudy.backends.ns3.fabric import FULL_MESH_RANKS, Fabric
from simstudy.compiler.topology_file import NetworkTopology


def message_times(topology: NetworkTopology, src: int, dst: int, size: int, count: int,
                  *, gap_ns: int = 0) -> tuple[list[int], dict[str, int | float]]:
    """Each message's time (ns, from its send until the receiver has its last byte) and the
    network's counters (`Fabric.stats`). `gap_ns` waits between an arrival and the next send."""
    fab = Fabric(Network.from_topology(topology))
    try:
        stream = fab.stream(src, dst)
        t = fab.t0_ns
        out: list[int] = []
        for i in range(count):
            fab.send(stream, size, i, t)
            done = fab.run_until(-1)
            if not done:
                raise BackendError(f"ns-3: message {i} of {size} bytes never arrived")
            (_, t_done), = done
            out.append(t_done - t)
            t = t_done + gap_ns
        stats = fab.stats()
    finally:
        fab.close()
    return out, stats


def replay(topology: NetworkTopology, sends: list[tuple[int, int, int, int]]) -> tuple[float, dict[str, int | float]]:
    """The wall seconds ns-3 takes to carry `sends` ((stream, bytes, id, ns-3 time ns), as a run's
    fabric recorded them) to their ends, queued all at once, and the network's counters. Only for
    networks whose connections all open at the start (`FULL_MESH_RANKS` ranks or fewer): elsewhere
    a run opens them when first needed, at times a replay does not know."""
    if topology.hosts > FULL_MESH_RANKS:
        raise BackendError(f"a replay needs every connection open at the start: at most {FULL_MESH_RANKS} ranks, "
                           f"not {topology.hosts}")
    fab = Fabric(Network.from_topology(topology))
    try:
        for stream, nbytes, msg_id, t_ns in sends:
            fab.send(stream, nbytes, msg_id, t_ns)
        left = len(sends)
        t0 = time.perf_counter()
        while left:
            done = fab.run_until(-1)
            if not done:
                raise BackendError(f"ns-3: {left} messages of the replay never arrived")
            left -= len(done)
        wall = time.perf_counter() - t0
        stats = fab.stats()
    finally:
        fab.close()
    return wall, stats
