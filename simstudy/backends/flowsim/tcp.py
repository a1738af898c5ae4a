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

Without loss, where the transport asks for it (`transport.model: tcp`; `ideal`, the default, moves
a message at the link rate from its first byte), a message goes as the packet network's TCP
(CUBIC, Linux's and ns-3's defaults) sends it, each direction of a connection keeping its window
from one message to the next (`Window`):

* **headers**: every segment of `mss` payload bytes takes `transport.wire_bytes` on the links (IP,
  TCP with timestamps and the link's frame): 3.6% of the rate at MSS 1448;
* **the congestion window**, in rounds of one round trip while it is below what fills the path:
  a new connection starts at the initial window (10 segments) in slow start (doubling a round)
  and HyStart ends that at about twice the initial window; before any loss CUBIC then grows one
  segment for every `CUBIC_CNT` acknowledged (Linux's `bictcp_update` caps its count at 20 while no
  loss has set a maximum: 5% a round), after one one segment a round (CUBIC's TCP-friendly region,
  where its cubic growth is far slower on these round trips). A window past the path's bytes in
  flight plus its queue loses a packet: it falls to `CUBIC_BETA` of that;
* **ACKs behind the other direction's data**: while the reverse direction of the connection has a
  message on the way, its window goes out as a burst into the queue that this direction's ACKs
  share. Once a window's burst outlasts half a round trip on the link, a round takes half a round
  trip plus the window's time on the link (the other direction's window taken as large as this
  one's): the path never fills, and the window, not the link, sets the pace.

Measured against ns-3 on a grid of rate, round trip and message size, one way and both ways
(`benchmarks/tcp_lossless.py`, which prints the error per cell). After a retransmission timeout
of idle time a window restarts as Linux's does (`transport.slow_start_after_idle`, which the
packet network runs too). Not modelled: the delayed ACK of an odd last segment, a window shared
by messages in flight on one connection at once (each flow takes the window as it stood when it
was sent).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from simstudy.backends.flowsim.netmodels import Flow, FluidNet, Msg, NetModel, UnawareNet
from simstudy.backends.flowsim.routes import Routes
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.network import Network
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
#: Without loss: CUBIC grows its window one segment for every CUBIC_CNT acknowledged until its
#: first loss (Linux's and ns-3's cap on CUBIC's `cnt` while no loss has set a maximum window).
CUBIC_CNT = 20
#: HyStart ends a new connection's slow start at this many times its initial window (ns-3: 16-20
#: segments from 10, measured with `benchmarks/tcp_lossless.py`'s paths).
SLOW_START_EXIT = 2
#: CUBIC's multiplicative decrease at a loss.
CUBIC_BETA = 0.7


class Window:
    """One direction of a TCP connection without loss: its congestion window and slow start
    threshold (segments), whether it has lost a packet (CUBIC's growth changes then), and when its
    last message's last segment left and at what pace (segments a ns)."""

    __slots__ = ("cwnd", "initial", "last_ns", "lost", "pace", "ssthresh")

    def __init__(self, initial: float) -> None:
        self.initial = float(initial)
        self.cwnd = float(initial)
        self.ssthresh = SLOW_START_EXIT * float(initial)
        self.lost = False
        self.last_ns = -math.inf
        self.pace = 0.0

    def grow(self, n: float, most: float) -> None:
        """n segments acknowledged at the link's pace; a window past `most` loses a packet."""
        if self.cwnd < self.ssthresh:
            k = min(n, self.ssthresh - self.cwnd)
            self.cwnd += k
            n -= k
        if n > 0:
            self.cwnd = math.sqrt(self.cwnd**2 + 2 * n) if self.lost else self.cwnd + n / CUBIC_CNT
        if self.cwnd > most:
            self.cut(most)

    def cut(self, at: float) -> None:
        """A loss: CUBIC's window falls to `CUBIC_BETA` of `at`, and grows as after a loss from then on."""
        self.cwnd = self.ssthresh = max(CUBIC_BETA * at, 2.0)
        self.lost = True

    def start(self, now: float, rtt_ns: float, queue: float, seg_ns: float, rto_ns: float = math.inf) -> float:
        """A message starts at `now` on a path of round trip `rtt_ns`, whose first queue holds
        `queue` segments and where a segment takes `seg_ns`: the time its start loses.

        After `rto_ns` or more of idle time (Linux's slow start after idle, `tcp_cwnd_restart`) the
        window is halved once per `rto_ns` beyond the first, not below the initial window, and slow
        starts back to 3/4 of what it was. Then it sends what it has room for at once, into the
        first queue: room beyond the queue is lost (the window is cut, the lost segments go again,
        and the link idles for what of a round trip the queue does not cover). The room is the
        window less what the last message still has unacknowledged (what it sent in the last
        round trip before `now`)."""
        idle = now - self.last_ns
        if idle > rto_ns and self.last_ns > -math.inf:
            segs = int(self.cwnd)  # whole segments, as Linux halves snd_cwnd
            restart = min(self.initial, segs)
            self.ssthresh = max(self.ssthresh, float((segs >> 1) + (segs >> 2)))
            while (idle := idle - rto_ns) > 0 and segs > restart:
                segs >>= 1
            self.cwnd = float(max(segs, restart))
        in_flight = min(self.cwnd, self.pace * max(0.0, self.last_ns + rtt_ns - now))
        lost = self.cwnd - in_flight - queue
        if lost <= 0:
            return 0.0
        self.cut(self.cwnd)
        return max(0.0, rtt_ns - queue * seg_ns) + lost * seg_ns

    def send_ns(self, n: float, now: float, rtt_ns: float, fill: float, queue: float, seg_ns: float,
                both: float = 0.0) -> float:
        """The time (ns, the last segment out; its latency not counted) n segments sent at `now`
        take from this window (`start` done) on a path of round trip `rtt_ns`, where `fill`
        segments in flight fill the path, its first queue holds `queue` and a segment takes
        `seg_ns` at its rate. The window grows as they are acknowledged, a round trip a round;
        past the path and its queue it loses a packet.

        `both`: how many of them go while the other direction of the connection sends too. Their
        ACKs then wait in that direction's first queue behind its window's burst (taken as large as
        this one's): once a window outlasts half a round trip on the link, a round takes half a
        round trip plus the window's time on the link, and the path never fills."""
        t = 0.0
        most = rtt_ns / seg_ns + queue
        half = rtt_ns / (2 * seg_ns)  # the window whose burst outlasts half a round trip
        while n > 1e-9:
            w = self.cwnd
            mutual = both > 1e-9
            if not mutual and w >= fill:  # the path is full: the rest at its rate
                t += n * seg_ns
                self.grow(n, most)
                n = 0.0
                break
            if mutual and w >= half:  # rounds of half a round trip plus the window's time
                cap, per_round, per_segment = math.inf, rtt_ns / 2, seg_ns
            else:  # rounds of a round trip, until the window fills the path (or outlasts half of it)
                cap, per_round, per_segment = (half if mutual else fill), rtt_ns, 0.0
            most_k = min(n, both) if mutual else n
            if w < self.ssthresh:  # slow start: the window doubles a round
                end = min(self.ssthresh, cap, w + most_k)
                k, rounds = end - w, math.log2(end / w)
            elif not self.lost:  # CUBIC before its first loss: 1 / CUBIC_CNT a segment
                end = min(cap, w + most_k / CUBIC_CNT)
                k, rounds = (end - w) * CUBIC_CNT, math.log(end / w) / math.log1p(1 / CUBIC_CNT)
            else:  # after a loss: one segment a round
                end = min(cap, math.sqrt(w * w + 2 * most_k))
                k, rounds = (end * end - w * w) / 2, end - w
            t += per_round * rounds + per_segment * k
            n -= k
            if mutual:
                both = max(0.0, both - k)
            self.cwnd = end
            if self.cwnd > most:
                self.cut(most)
        w = self.cwnd
        self.last_ns = now + t
        self.pace = w / (rtt_ns / 2 + w * seg_ns) if both > 1e-9 and w >= half else min(1.0 / seg_ns, w / rtt_ns)
        return t


class TcpPaths:
    """TCP's view of a network: per-path loss and round trip, and what a message's losses cost."""

    def __init__(self, transport: Transport, capacity: Sequence[float], latency: Sequence[float],
                 loss: Sequence[float], queue_packets: int = 1000) -> None:
        self.transport = transport
        #: TCP without loss too (`transport.model: tcp`): headers on the wire and the windows
        self.windows = transport.model == "tcp"
        #: the share of a link's rate a TCP flow's payload gets (the rest is headers), with `windows`
        self.goodput = transport.mss_bytes / transport.wire_bytes if self.windows else 1.0
        self.queue_packets = queue_packets
        #: each direction of each connection's window, by (src, dst) rank
        self.conns: dict[tuple[int, int], Window] = {}
        self.capacity = list(capacity)
        self.latency = list(latency)
        self.loss = list(loss)
        self.mss = transport.mss_bytes
        self.wire = transport.wire_bytes
        self.b = 2 if transport.delayed_ack else 1
        self.min_rto_ns = transport.min_rto_ms * 1e6
        self.delack_ns = transport.delayed_ack_timeout_ms * 1e6 if transport.delayed_ack else 0.0
        self.rack_tlp = transport.loss_recovery == "rack_tlp"
        self.rng = np.random.default_rng(transport.seed)
        self._paths: dict[tuple[int, ...], tuple[float, float]] = {}
        self.timeouts = 0

    def connection(self, src: int, dst: int) -> Window:
        w = self.conns.get((src, dst))
        if w is None:
            w = self.conns[(src, dst)] = Window(self.transport.initial_cwnd)
        return w

    def start_ns(self, src: int, dst: int, keys: tuple[int, ...], now: float) -> float:
        """A message starts at `now` on the connection: the time its first burst loses (`Window.start`)."""
        _, rtt = self.path(keys)
        seg_ns = self.wire / min((self.capacity[k] for k in keys), default=math.inf)
        rto = self.rto_ns(rtt) if self.transport.slow_start_after_idle else math.inf
        return self.connection(src, dst).start(now, rtt, self.queue_packets, seg_ns, rto)

    def window_ns(self, src: int, dst: int, size: int, keys: tuple[int, ...], now: float,
                  both: float = 0.0) -> float:
        """The time (ns) the connection's window lets a message of `size` bytes whose first segment
        leaves at `now` (after what `start_ns` lost) take from its first byte out to its last
        (alone on its path, at its narrowest link's rate less headers), its window grown after it.
        `both`: how many of its segments go while the other direction sends too (`Window.send_ns`)."""
        _, rtt = self.path(keys)
        seg_ns = self.wire / min((self.capacity[k] for k in keys), default=math.inf)
        return self.connection(src, dst).send_ns(size / self.mss, now, rtt, rtt / seg_ns, self.queue_packets, seg_ns,
                                                 both)

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
    """A congestion model with TCP on the paths `tcp` (the first base of a model's TCP variant:
    `class TcpFluidNet(TcpNet, FluidNet)`). Never timed alone: every message draws its own losses,
    and its window is its connection's.

    Without loss (`TcpPaths.windows`) the windows of the messages sent at one instant are set once
    every one of them is on the network (`_window_times`), so that two directions of a connection
    that start together each see the other's burst."""

    timed_alone = False

    def __init__(self, sched: Scheduler, capacity: Sequence[float], latency: Sequence[float],
                 tcp: TcpPaths | None = None) -> None:
        super().__init__(sched, capacity, latency)
        assert tcp is not None
        self.tcp = tcp
        #: each direction's messages on the way (their last byte not out yet), by (src, dst)
        self.on_way: dict[tuple[int, int], set[Msg]] = {}

    def _window_times(self, msgs: Sequence[Msg], left: Callable[[Msg], float]) -> list[float]:
        """The time (ns) each message sent now takes from its first byte out to its last, as its
        connection's window lets it (`TcpPaths.start_ns`, `window_ns`); `left(m)`: the bytes a
        message on the way has still to send (while the other direction sends, ACKs wait)."""
        tcp = self.tcp
        now = self.sched.now
        lost = []
        for m in msgs:  # every start first: each direction then sees the other on the way
            lost.append(tcp.start_ns(m.src, m.dst, m.keys, now))
            self.on_way.setdefault((m.src, m.dst), set()).add(m)
        out = []
        for m, t0 in zip(msgs, lost, strict=True):
            back = self.on_way.get((m.dst, m.src))
            both = max((left(g) / tcp.mss for g in back), default=0.0) if back else 0.0
            out.append(t0 + tcp.window_ns(m.src, m.dst, m.size, m.keys, now + t0, both))
        return out

    def _gone(self, msg: Msg) -> None:
        """A message's last byte is out: its burst no longer delays the other direction's ACKs."""
        ways = self.on_way.get((msg.src, msg.dst))
        if ways is not None:
            ways.discard(msg)


class TcpFluidNet(TcpNet, FluidNet):
    """`fluid` with TCP: a flow on a lossy path, or on any path where the transport asks for TCP
    without loss (`TcpPaths.windows`), has a link of its own at the rate its window allows (max-min
    fair sharing does the rest), and arrives after its timeouts. Links carry payload at their rate
    less headers there. A flow's window rate is set before the rates of the instant it is sent at."""

    name = "fluid"

    def __init__(self, sched: Scheduler, capacity: Sequence[float], latency: Sequence[float],
                 tcp: TcpPaths | None = None) -> None:
        super().__init__(sched, capacity, latency, tcp)
        if self.tcp.windows:
            self.capacity = [c * self.tcp.goodput for c in self.capacity]
        self.links = len(self.capacity)
        self.free_keys: list[int] = []
        #: flows whose window rate is not set yet, and the flow of each message on the way
        self.unset: list[Flow] = []
        self.flow_of: dict[Msg, Flow] = {}

    def _flow(self, msg: Msg, now: int) -> Flow:
        flow = super()._flow(msg, now)
        p, rtt = self.tcp.path(msg.keys)
        if p > 0 or self.tcp.windows:
            key = self.free_keys.pop() if self.free_keys else len(self.capacity)
            if key == len(self.capacity):
                self.capacity.append(0.0)
            self.capacity[key] = self.tcp.rate_cap(p, rtt)
            flow.keys = (*msg.keys, key)
            flow.mult = (*flow.mult, 1)
            if self.tcp.windows:
                self.unset.append(flow)
                self.flow_of[msg] = flow
        return flow

    def _recompute(self, keys: set[int]) -> None:
        if self.unset:
            flows, self.unset = self.unset, []
            times = self._window_times([f.msg for f in flows], lambda m: self.flow_of[m].remaining)
            for f, t in zip(flows, times, strict=True):
                if t > 0:
                    key = f.keys[-1]
                    self.capacity[key] = min(self.capacity[key], f.msg.size / t)
        super()._recompute(keys)

    def _extra_ns(self, f: Flow) -> int:
        if len(f.keys) > len(f.msg.keys):
            self.free_keys.append(f.keys[-1])
            if self.flow_of.pop(f.msg, None) is not None:
                self._gone(f.msg)
        return self.tcp.delay_ns(f.msg.size, f.msg.keys)


class TcpUnawareNet(TcpNet, UnawareNet):
    """`unaware` with TCP: a message on a lossy path goes at most at its loss-limited window's rate
    and arrives after its timeouts; where the transport asks for TCP without loss, its headers and
    its connection's window take their time too, and its ACKs wait behind the other direction's
    data while a message goes that way (its window's burst; `TcpNet`)."""

    name = "unaware"

    def __init__(self, sched: Scheduler, capacity: Sequence[float], latency: Sequence[float],
                 tcp: TcpPaths | None = None) -> None:
        super().__init__(sched, capacity, latency, tcp)
        self.unset: list[Msg] = []

    def send(self, msg: Msg) -> None:
        p, rtt = self.tcp.path(msg.keys)
        if self.tcp.windows and msg.keys:
            msg.t_send = self.sched.now
            if not self.unset:
                self.sched.after_all(self.sched.now, self._set_windows)
            self.unset.append(msg)
            return
        if p > 0:
            narrowest = min((self.capacity[k] for k in msg.keys), default=math.inf)
            msg.alone_ns += max(int(msg.size / self.tcp.rate_cap(p, rtt) - msg.size / narrowest), 0)
            msg.alone_ns += self.tcp.delay_ns(msg.size, msg.keys)
        super().send(msg)

    def _set_windows(self) -> None:
        msgs, self.unset = self.unset, []
        times = self._window_times(msgs, lambda m: float(m.size))
        s = self.sched
        for msg, t in zip(msgs, times, strict=True):
            p, rtt = self.tcp.path(msg.keys)
            narrowest = min((self.capacity[k] for k in msg.keys), default=math.inf)
            alone = max(t, msg.size / self.tcp.rate_cap(p, rtt)) if p > 0 else t
            msg.alone_ns += max(int(alone - msg.size / narrowest), 0) + self.tcp.delay_ns(msg.size, msg.keys)
            s.at(msg.t_send + msg.alone_ns, self._arrive, msg)
            s.at(msg.t_send + msg.alone_ns - int(msg.latency), self._gone, msg)


def tcp_modelled(net: Network) -> bool:
    """Whether flowsim's TCP times the messages on `net` (in the modes of `TCP_NETMODELS`): a link
    loses packets, or the topology's transport asks for TCP without loss; never on RoCE (its links'
    loss cuts their capacity, as go-back-N resends what was lost)."""
    transport = net.topology.transport
    return transport.kind == "tcp" and (transport.model == "tcp" or any(x > 0 for x in net.loss))


#: The models that take TCP (under loss, and without where the transport asks), by congestion mode
#: (aware keeps the capacity cut and the link rate).
TCP_NETMODELS: dict[Congestion, type[TcpNet]] = {Congestion.FLUID: TcpFluidNet, Congestion.UNAWARE: TcpUnawareNet}


def message_times(net: Network, src: int, dst: int, size: int, count: int, *, gap_ns: int = 0,
                  both_ways: bool = False, mode: Congestion = Congestion.FLUID) -> list[int]:
    """What `backends.ns3.probe.message_times` measures on the packet network, through flowsim's
    TCP model of `mode` on `net`: each of `count` messages of `size` bytes from rank src to rank dst
    (and one back at once, `both_ways`) sent `gap_ns` after the one before has arrived; each one's
    time, ns, until its last byte (both, both ways) has arrived."""
    sched = Scheduler()
    routes = Routes(net, cut_loss=False)
    tcp = TcpPaths(net.topology.transport, net.capacity, net.latency, net.loss, net.topology.queue.packets)
    model = TCP_NETMODELS[mode](sched, routes.effective, net.latency, tcp=tcp)
    pairs = [(src, dst), (dst, src)] if both_ways else [(src, dst)]
    arrived: list[int] = []
    out: list[int] = []

    def send(a: int, b: int) -> None:
        keys, mult, latency, alone = routes.route(a, b, size)
        model.send(Msg(a, b, size, keys, mult, latency, alone, lambda m: arrived.append(sched.now)))

    t0 = 0
    for _ in range(count):
        arrived.clear()
        for a, b in pairs:
            sched.at(t0, send, a, b)
        sched.run_before(math.inf)
        out.append(max(arrived) - t0)
        t0 = max(arrived) + gap_ns
    return out
