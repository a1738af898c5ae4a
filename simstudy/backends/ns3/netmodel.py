"""The packet network behind flowsim's network-model seam: every message a send on a TCP connection
(or a RoCE queue pair) in ns-3, done when the receiver has read (received in order) its last byte.

flowsim's engine keeps its own clock; ns-3 keeps another. `Ns3Net` is the engine's `clock`: before
the engine runs an event at time t it calls `advance(t)`, which runs ns-3 up to t or up to the
first message that completes before t (delivered to the engine at its time, so the engine reacts
to it before anything later). Messages go into ns-3 at the engine's time: ns-3 time = `t0_ns` +
engine time, where `t0_ns` is when the connections opened at the start are up.

With connections per direction (TensorFlow's gRPC) the receiver of every message also sends a
request of `GRPC_REQUEST_BYTES` to its sender on its own connection, as a RecvBuf call does (the
message does not wait for it: a worker posts its requests before the data is ready).
"""

from __future__ import annotations

from collections.abc import Sequence

from simstudy.backends.base import BackendError
from simstudy.backends.flowsim.netmodels import Msg, NetModel
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.ns3.fabric import Fabric

#: Payload bytes of a TensorFlow RecvBuf request (gRPC; the median in the capture matrix's
#: TensorFlow captures is 197-198 bytes), sent by a message's receiver to its sender.
GRPC_REQUEST_BYTES = 200


class Ns3Net(NetModel):
    """Messages on ns-3's TCP connections. Collectives are never timed alone (`timed_alone`): every
    message is simulated where it happens."""

    name = "ns3"
    timed_alone = False

    def __init__(self, sched: Scheduler, fabric: Fabric, capacity: Sequence[float] = (),
                 latency: Sequence[float] = ()) -> None:
        super().__init__(sched, capacity, latency)
        self.fabric = fabric
        self.t0 = fabric.t0_ns
        self.inflight: dict[int, Msg] = {}
        self.next_id = 0
        self.messages = 0
        self.requests = 0
        self.clock = self

    def send(self, msg: Msg) -> None:
        s = self.sched
        msg.t_send = s.now
        if msg.src == msg.dst or msg.size <= 0:
            s.at(s.now + int(msg.latency), self._arrive, msg)
            return
        fab = self.fabric
        stream = fab.stream(msg.src, msg.dst)
        mid = self.next_id
        self.next_id += 1
        self.inflight[mid] = msg
        self.messages += 1
        t = self.t0 + s.now
        if fab.per_direction:
            # gRPC: the receiver pulls the message with a request on its own connection
            self.requests += 1
            fab.send(stream - 1, GRPC_REQUEST_BYTES, -self.requests, t)
        fab.send(stream, msg.size, mid, t)

    # -- the engine's clock ------------------------------------------------------------------------

    def busy(self) -> bool:
        """Messages in flight in ns-3."""
        return bool(self.inflight)

    def advance(self, t_next: int | None) -> None:
        """Run ns-3 up to engine time `t_next` (None: until a message completes) and hand the engine
        every message that completed, at its time."""
        if not self.inflight:
            return  # nothing can complete: ns-3 catches up when the next message goes in
        target = -1 if t_next is None else self.t0 + t_next
        s = self.sched
        while True:
            done = self.fabric.run_until(target)
            if not done and t_next is None:
                raise BackendError(f"ns-3: {len(self.inflight)} messages in flight but nothing left to happen "
                                   f"at {self.fabric.now_ns - self.t0} ns")
            delivered = False
            for mid, t in done:
                if mid >= 0:  # (requests have negative ids: nothing waits for them)
                    s.at(t - self.t0, self._arrive, self.inflight.pop(mid))
                    delivered = True
            if delivered or t_next is not None:
                return
