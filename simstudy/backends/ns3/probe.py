"""Messages on the packet network without a workload: one connection, one message after another.

What `benchmarks/tcp_model.py` measures to calibrate flowsim's TCP model under loss, and what a
test checks the packet network with: how long each of `count` messages of `size` bytes takes from
rank `src` to rank `dst`, each sent when the one before has arrived (as a ring step's messages go).
"""

from __future__ import annotations

from simstudy.backends.base import BackendError
from simstudy.backends.network import Network
from simstudy.backends.ns3.fabric import Fabric
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
