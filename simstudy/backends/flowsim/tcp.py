"""TCP under loss for flowsim: what a lost packet costs a message, instead of a capacity cut.

On a path that loses packets (each link i.i.d. per packet, `topology.json`'s `loss`), a message of
n segments goes as TCP would send it (Padhye, Firoiu, Towsley and Kurose, "Modeling TCP
throughput", SIGCOMM 1998, with the hosts' `transport` settings):

* **the loss-limited window caps its rate**: a flow never goes faster than
  `W_SCALE * MSS / (RTT * sqrt(2 b p / 3))` (b segments per ACK), whatever its share of the links;
  the fluid model shares the rest max-min as before;
* **a loss in the middle of the message is a timeout** when its retransmission is lost too
  (selective acknowledgements repair every other loss by fast retransmit, inside the rate above;
  a lost retransmission only a timeout finds): each of the first n - k segments starts a
  timeout with probability p Q, Q = min(1, Q_SCALE p) (Padhye's Reno estimate,
  3 sqrt(3 b p / 8), counts the timeouts of a stack without SACK: ten to fifty times too many);
* **a loss among its last `TAIL_SEGMENTS` segments** cannot bring three duplicate ACKs: with
  `loss_recovery: rfc6675` it waits for the retransmission timeout, the tail-loss timeout that
  stalls a training step for the minimum RTO. With Linux's `rack_tlp` (the default) a tail loss
  probe repairs it after max(2 RTT, 10 ms), unless the probe is lost too; but where the lost
  segment is the only one out when the probe is armed, Linux waits 2 SRTT plus the minimum RTO
  for it (`tcp_schedule_loss_probe`, "for delayed ack"), or the retransmission timeout where
  that comes first: a message of one segment, and the last segment of a message of three or
  more, whose earlier segments' ACKs have come back (of two segments, the receiver delays the
  first one's ACK, and two are out). Measured on this machine's kernel (6.18, two network
  namespaces, 1% of the data packets dropped as they arrive, each message answered with one byte
  before the next):
  a lost one-segment message took 205-214 ms more, and of messages of 3-100 segments about 1% (p)
  took 205-224 ms more, and 0-2.6% 5-24 ms more (a probe). RACK also resends a lost
  retransmission, so a loss in the middle of a message times out only when that is lost too
  (probability p Q_RACK p).

A timeout costs the retransmission timeout (max(min RTO, RTT + 4 RTT variance), backed off while
the retransmission is lost too: Padhye's f(p)), and after one in the middle of a message the
slow start back to half the window. Timeouts are drawn per message from the transport's seed,
in event order, so a run is reproducible and its iterations differ as a lossy network's do.
`W_SCALE`, `Q_SCALE` and `TAIL_SEGMENTS` are calibrated against the packet network on a grid
of losses, round trips and message sizes (`benchmarks/tcp_model.py`, which prints the error per
cell).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from simstudy.backends.flowsim.netmodels import Flow, FluidNet, Msg, NetModel, UnawareNet
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.spec import Congestion
from simstudy.spec.transport import Transport

#: The loss-limited window against Padhye's Reno window at 1% loss (CUBIC backs off to 0.7 of its
#: window, not 0.5), and how it grows as losses get rarer: W_SCALE x (p / 1%) ** -W_EXPONENT.
W_SCALE = 1.41
W_EXPONENT = 0.035
#: A loss in the middle of a message is a timeout with probability Q_SCALE x p (its retransmission
#: lost) under RFC 6675 recovery, Q_RACK x p^2 with RACK (which resends a lost retransmission too).
Q_SCALE = 1.0
Q_RACK = 1.0
#: The shortest tail loss probe timeout (Linux: 10 ms).
PTO_MIN_NS = 10e6
#: The last segments of a message whose loss only a timeout repairs (fewer than three follow).
TAIL_SEGMENTS = 3


class TcpPaths:
    """TCP's view of a network: per-path loss and round trip, and what a message's losses cost."""

    def __init__(self, transport: Transport, capacity: Sequence[float], latency: Sequence[float],
                 loss: Sequence[float]) -> None:
        self.transport = transport
        self.capacity = list(capacity)
        self.latency = list(latency)
        self.loss = list(loss)
        self.mss = transport.mss_bytes
        self.wire = transport.mss_bytes + transport.header_bytes
        self.b = 2 if transport.delayed_ack else 1
        self.min_rto_ns = transport.min_rto_ms * 1e6
        self.delack_ns = transport.delayed_ack_timeout_ms * 1e6 if transport.delayed_ack else 0.0
        self.rack_tlp = transport.loss_recovery == "rack_tlp"
        self.rng = np.random.default_rng(transport.seed)
        self._paths: dict[tuple[int, ...], tuple[float, float]] = {}
        self.timeouts = 0

    @property
    def lossy(self) -> bool:
        return any(x > 0 for x in self.loss)

    def path(self, keys: tuple[int, ...]) -> tuple[float, float]:
        """(loss probability, round trip ns) of a route: losses on any of its links; the round trip
        is twice its latency plus a segment's store-and-forward on every hop."""
        found = self._paths.get(keys)
        if found is None:
            keep = 1.0
            rtt = 0.0
            for k in keys:
                keep *= 1.0 - self.loss[k]
                rtt += 2 * self.latency[k] + self.wire / self.capacity[k]
            found = self._paths[keys] = (1.0 - keep, max(rtt, 1.0))
        return found

    def rate_cap(self, p: float, rtt_ns: float) -> float:
        """Bytes per ns the loss-limited window allows (inf without loss)."""
        if p <= 0:
            return math.inf
        return self.w_scale(p) * self.mss / (rtt_ns * math.sqrt(2 * self.b * p / 3))

    @staticmethod
    def w_scale(p: float) -> float:
        return float(W_SCALE * (p / 0.01) ** -W_EXPONENT)

    def window(self, p: float) -> float:
        """The loss-limited window, segments."""
        return self.w_scale(p) * math.sqrt(8 / (3 * self.b * p)) if p > 0 else math.inf

    def rto_ns(self, rtt_ns: float) -> float:
        """One retransmission timeout, backed off while the retransmissions are lost too."""
        return max(self.min_rto_ns, 3 * rtt_ns)

    def timeout_probability(self, p: float) -> float:
        """The probability that a loss in the middle of a message is repaired by a timeout."""
        return min(1.0, Q_RACK * p * p if self.rack_tlp else Q_SCALE * p)

    def costs(self, p: float, rtt_ns: float) -> tuple[float, float, float]:
        """(ns a timeout in the middle of a message costs, ns a loss in its tail costs where a probe
        may repair it, ns the last segment's loss costs where it is the only one out)."""
        backoff = 1 + p + 2 * p**2 + 4 * p**3 + 8 * p**4 + 16 * p**5 + 32 * p**6
        rto = self.rto_ns(rtt_ns) * backoff
        # slow start back to half the window; its first segment is ACKed only when the receiver's
        # delayed-ACK timer fires (one segment in flight, and no quick-ACK mode after a timeout)
        regrow = rtt_ns * math.log2(max(self.window(p) / 2, 2.0)) + self.delack_ns
        if not self.rack_tlp:
            return rto + regrow, rto, rto
        # a probe after max(2 RTT, 10 ms) repairs it, unless the probe is lost too
        tail = (1 - p) * (max(2 * rtt_ns, PTO_MIN_NS) + rtt_ns / 2) + p * rto
        # alone: 2 SRTT and the minimum RTO, or the retransmission timeout where that comes first
        alone = min(2 * rtt_ns + self.min_rto_ns, rto) + rtt_ns / 2
        return rto + regrow, tail, alone

    def segments(self, size: int) -> int:
        return max(1, -(-size // self.mss))

    def tail_probabilities(self, n: int, p: float) -> tuple[float, float]:
        """(probability that a loss in the last segments of a message of n is repaired by a probe,
        probability that its tail waits for a timer: with RACK-TLP its last segment lost with no
        other out, the probe armed past the minimum RTO; with RFC 6675 any tail loss, the RTO).
        `costs` gives each its time."""
        if not self.rack_tlp:
            return 0.0, 1.0 - (1.0 - p) ** min(n, TAIL_SEGMENTS)
        if n == 2:  # the first segment's ACK is delayed: two are out whichever is lost
            return 1.0 - (1.0 - p) ** 2, 0.0
        return (1.0 - p) * (1.0 - (1.0 - p) ** (min(n, TAIL_SEGMENTS) - 1)), p

    def delay_ns(self, size: int, keys: tuple[int, ...]) -> int:
        """A draw of the timeouts of one message on a route: the time they add."""
        p, rtt = self.path(keys)
        if p <= 0:
            return 0
        n = self.segments(size)
        tail = min(n, TAIL_SEGMENTS)
        mid = int(self.rng.binomial(n - tail, p * self.timeout_probability(p))) if n > tail else 0
        probed, alone = self.tail_probabilities(n, p)
        u = self.rng.random()
        hit_alone, hit_probed = u < alone, alone <= u < alone + probed
        if not mid and not hit_alone and not hit_probed:
            return 0
        self.timeouts += mid + hit_alone + hit_probed
        mid_cost, tail_cost, alone_cost = self.costs(p, rtt)
        return int(mid * mid_cost + hit_probed * tail_cost + hit_alone * alone_cost)

    def mean_delay_ns(self, size: int, p: float, rtt_ns: float) -> float:
        """The expected time the timeouts of a message add (what `delay_ns` draws)."""
        if p <= 0:
            return 0.0
        n = self.segments(size)
        tail = min(n, TAIL_SEGMENTS)
        mid_cost, tail_cost, alone_cost = self.costs(p, rtt_ns)
        probed, alone = self.tail_probabilities(n, p)
        return (n - tail) * p * self.timeout_probability(p) * mid_cost + probed * tail_cost + alone * alone_cost

    def mean_time_ns(self, size: int, p: float, rtt_ns: float, rate: float) -> float:
        """The expected time of a message alone on a path of `rate` bytes/ns: half a round trip, its
        bytes at the lesser of the rate and the loss-limited window's, and its timeouts."""
        return rtt_ns / 2 + size / min(rate, self.rate_cap(p, rtt_ns)) + self.mean_delay_ns(size, p, rtt_ns)


class TcpNet(NetModel):
    """A congestion model with TCP under loss on the paths `tcp` (the first base of a model's TCP
    variant: `class TcpFluidNet(TcpNet, FluidNet)`). Never timed alone: every message draws its
    own losses."""

    timed_alone = False

    def __init__(self, sched: Scheduler, capacity: Sequence[float], latency: Sequence[float],
                 tcp: TcpPaths | None = None) -> None:
        super().__init__(sched, capacity, latency)
        assert tcp is not None
        self.tcp = tcp


class TcpFluidNet(TcpNet, FluidNet):
    """`fluid` with TCP under loss: a flow on a lossy path has a link of its own at the rate its
    loss-limited window allows (max-min fair sharing does the rest), and arrives after its
    timeouts."""

    name = "fluid"

    def __init__(self, sched: Scheduler, capacity: Sequence[float], latency: Sequence[float],
                 tcp: TcpPaths | None = None) -> None:
        super().__init__(sched, capacity, latency, tcp)
        self.links = len(self.capacity)
        self.free_keys: list[int] = []

    def _flow(self, msg: Msg, now: int) -> Flow:
        flow = super()._flow(msg, now)
        p, rtt = self.tcp.path(msg.keys)
        if p > 0:
            key = self.free_keys.pop() if self.free_keys else len(self.capacity)
            if key == len(self.capacity):
                self.capacity.append(0.0)
            self.capacity[key] = self.tcp.rate_cap(p, rtt)
            flow.keys = (*msg.keys, key)
            flow.mult = (*flow.mult, 1)
        return flow

    def _extra_ns(self, f: Flow) -> int:
        if len(f.keys) > len(f.msg.keys):
            self.free_keys.append(f.keys[-1])
        return self.tcp.delay_ns(f.msg.size, f.msg.keys)


class TcpUnawareNet(TcpNet, UnawareNet):
    """`unaware` with TCP under loss: a message on a lossy path goes at most at its loss-limited
    window's rate and arrives after its timeouts."""

    name = "unaware"

    def send(self, msg: Msg) -> None:
        p, rtt = self.tcp.path(msg.keys)
        if p > 0:
            narrowest = min((self.capacity[k] for k in msg.keys), default=math.inf)
            slower = msg.size / self.tcp.rate_cap(p, rtt) - msg.size / narrowest
            msg.alone_ns += max(int(slower), 0) + self.tcp.delay_ns(msg.size, msg.keys)
        super().send(msg)


#: The models that take TCP under loss, by congestion mode (aware keeps the capacity cut).
TCP_NETMODELS: dict[Congestion, type[TcpNet]] = {Congestion.FLUID: TcpFluidNet, Congestion.UNAWARE: TcpUnawareNet}
