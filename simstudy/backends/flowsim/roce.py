"""flowsim's RoCE in `fluid`: DCQCN's rates and the switches' queues as a fluid (`transport: {kind:
roce}`, the packet network's `backends/ns3/roce.h` at the scale packets cannot reach).

Max-min fair shares are DCQCN's steady state; the way there costs time the shares do not show.
Every queue pair (a rank's messages to one peer) has a link of its own in the fluid (its key)
whose capacity is its DCQCN rate, so its messages share that rate and every link max-min. Every
`DT_NS` while a switch's queue holds bytes or a queue pair sends below its line rate, `_tick`
moves the model on by what the paper's fluid analysis has (Zhu et al., SIGCOMM 2015, section 4),
with the packet network's discrete events where they are events:

* **Queues.** Each link a switch sends on holds what its queue pairs offer beyond its capacity
  (each offers its rate), at most xoff for each link feeding it (PFC pauses the rest upstream); while
  it drains, its flows leave at the link's rate, not at their offered rates.
* **Marks and CNPs.** A link's queue marks with RED's probability (0 to K_min, P_max at K_max, 1
  above); each queue pair's marked packets accumulate as expected counts. A queue's first mark
  comes when the counts of its queue pairs together reach ln 2 (the median of the first of their
  random marks) and goes to the pair marked most so far; any other pair's comes when its own count
  reaches ln 2. After a CNP a pair waits the CNP interval; the CNP reaches the sender after the
  marked packet's wait in the queue and a round trip.
* **DCQCN's sender.** The packet network's own: the cut on each CNP (alpha decaying once per alpha
  period without one), the rate timer and the byte counter, fast recovery, additive and hyper increase.

Only the fluid mode on the Python engine; messages with no queue and queue pairs at their line
rate cost nothing more than max-min (a link alone at its rate never queues).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from simstudy.backends.flowsim.netmodels import Flow, FluidNet, Msg
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.network import Network
from simstudy.spec import Congestion

#: The fluid's step while it moves (ns): a tenth of a packet time and less at the rates it models.
DT_NS = 1000
#: Expected marked packets at which a queue pair's first mark comes: each packet is marked on its
#: own, so the first mark is as likely to come before as after the expected count reaches ln 2.
FIRST_MARK = math.log(2)


def roce_modelled(net: Network, mode: Congestion) -> bool:
    """Whether flowsim runs DCQCN on `net` in `mode`: the fluid mode, on RoCE with DCQCN on."""
    return mode.fluid and net.topology.transport.dcqcn


def roce_links(net: Network, mode: Congestion) -> RoceLinks | None:
    """What `RoceFluidNet` needs of `net`, where `mode` runs DCQCN on it (else None)."""
    return RoceLinks(net) if roce_modelled(net, mode) else None


class RoceLinks:
    """What the model needs of the network beyond capacities: the spec's settings in payload bytes
    and ns, and which links a switch sends on (they queue and mark)."""

    def __init__(self, net: Network) -> None:
        topo = net.topology
        transport = topo.transport
        spec = transport.roce
        goodput = transport.goodput
        rate = goodput / 8e9  # bit/s on the wire -> payload bytes/ns
        switches = set(topo.switches)
        self.switch_sends = [link.src in switches for link in topo.links]
        self.packet = float(spec.mtu_bytes)
        self.xoff = spec.pfc.xoff_kib * 1024 if spec.pfc.enabled else math.inf
        self.kmin, self.kmax, self.pmax = spec.ecn.kmin_kib * 1024, spec.ecn.kmax_kib * 1024, spec.ecn.pmax
        d = spec.dcqcn
        self.g = d.g
        self.cnp_interval = d.cnp_interval_us * 1e3
        self.alpha_period = d.alpha_period_us * 1e3
        self.rate_timer = d.rate_timer_us * 1e3
        self.byte_counter = d.byte_counter_kib * 1024
        self.fast_recovery = d.fast_recovery_steps
        self.rai, self.rhai = d.rai_mbps * 1e6 * rate, d.rhai_mbps * 1e6 * rate
        self.min_rate = d.min_rate_mbps * 1e6 * rate

    def mark(self, queued: float) -> float:
        """RED's probability of marking a packet that joins a queue of `queued` bytes."""
        if queued <= self.kmin:
            return 0.0
        if queued > self.kmax:
            return 1.0
        return self.pmax * (queued - self.kmin) / (self.kmax - self.kmin)


class _Qp:
    """One queue pair's DCQCN state (rates in payload bytes/ns)."""

    __slots__ = ("alpha", "b_count", "bytes_since", "cnp_ready", "flows", "key", "last_cnp", "latency", "line",
                 "links", "marks", "next_timer", "rc", "rt", "t_count")

    def __init__(self, key: int, line: float, latency: float) -> None:
        self.key = key
        self.line = line
        self.latency = latency
        self.rc = self.rt = line
        self.alpha = 1.0
        self.t_count = self.b_count = 0
        self.bytes_since = 0.0
        self.next_timer: float | None = None
        self.last_cnp = -1.0
        self.cnp_ready = 0.0
        self.marks = 0.0
        self.flows: set[Flow] = set()
        self.links: tuple[int, ...] = ()


class RoceFluidNet(FluidNet):
    """`fluid` with DCQCN (see the module): each queue pair's messages capped by its rate, the
    switches' queues and their marks moved on every `DT_NS` while anything is not at rest."""

    name = "fluid"

    def __init__(self, sched: Scheduler, capacity: Sequence[float], latency: Sequence[float],
                 roce: RoceLinks | None = None) -> None:
        super().__init__(sched, capacity, latency)
        assert roce is not None
        self.roce = roce
        self.links = len(self.capacity)
        self.qps: dict[tuple[int, int], _Qp] = {}
        self.qp_of: dict[Flow, _Qp] = {}
        self.queue: dict[int, float] = {}
        #: per marking link: the expected marks of its queue pairs since its last first mark
        self.first: dict[int, float] = {}
        self.ticking = False
        self.last_tick = 0
        self.cnps = 0

    # -- messages --------------------------------------------------------------------------------

    def _flow(self, msg: Msg, now: int) -> Flow:
        flow = super()._flow(msg, now)
        qp = self.qps.get((msg.src, msg.dst))
        if qp is None:
            key = len(self.capacity)
            line = min(self.capacity[k] for k in msg.keys)
            self.capacity.append(line)
            qp = self.qps[(msg.src, msg.dst)] = _Qp(key, line, float(msg.latency))
        self._timers(qp, now)
        self.capacity[qp.key] = qp.rc
        qp.flows.add(flow)
        qp.links = tuple(sorted({*qp.links, *msg.keys}))
        self.qp_of[flow] = qp
        flow.keys = (*flow.keys, qp.key)
        flow.mult = (*flow.mult, 1)
        if not self.ticking:
            self.ticking = True
            self.last_tick = now
            self.sched.at(now + DT_NS, self._tick)
        return flow

    def _extra_ns(self, f: Flow) -> int:
        qp = self.qp_of.pop(f, None)
        if qp is not None:
            qp.flows.discard(f)
        return 0

    # -- DCQCN's sender ------------------------------------------------------------------------------

    def _increase(self, qp: _Qp) -> None:
        r = self.roce
        lo, hi = min(qp.t_count, qp.b_count), max(qp.t_count, qp.b_count)
        if hi < r.fast_recovery:
            pass  # fast recovery: toward the rate before the cut
        elif lo > r.fast_recovery:
            qp.rt += (lo - r.fast_recovery) * r.rhai
        else:
            qp.rt += r.rai
        qp.rt = min(qp.rt, qp.line)
        qp.rc = min(qp.line, (qp.rt + qp.rc) / 2)
        if qp.line - qp.rc < 1e-6 * qp.line:
            qp.rc = qp.rt = qp.line

    def _timers(self, qp: _Qp, now: float) -> None:
        """The rate timer's events up to `now` (it runs while the rate is below the line rate)."""
        while qp.next_timer is not None and qp.next_timer <= now:
            qp.t_count += 1
            self._increase(qp)
            qp.next_timer = None if qp.rc >= qp.line else qp.next_timer + self.roce.rate_timer

    def _cnp(self, qp: _Qp) -> None:
        r = self.roce
        now = self.sched.now
        self._timers(qp, now)
        self.cnps += 1
        if qp.last_cnp >= 0:
            periods = math.floor((now - qp.last_cnp) / r.alpha_period)
            if periods > 0:
                qp.alpha *= (1 - r.g) ** periods
        qp.last_cnp = now
        qp.rt = qp.rc
        qp.rc = max(r.min_rate, qp.rc * (1 - qp.alpha / 2))
        qp.alpha = (1 - r.g) * qp.alpha + r.g
        qp.t_count = qp.b_count = 0
        qp.bytes_since = 0.0
        qp.next_timer = now + r.rate_timer
        self.capacity[qp.key] = qp.rc
        self._mark((qp.key,))
        self._wake()

    def _notify(self, qp: _Qp, now: int, waits: dict[_Qp, float]) -> None:
        """A marked packet of `qp`'s: its receiver's CNP, after the packet's wait in the queue and a round trip."""
        if qp not in waits:
            return
        wait = waits.pop(qp)
        qp.marks = 0.0
        qp.cnp_ready = now + self.roce.cnp_interval
        self.sched.at(now + max(1, round(wait + 2 * qp.latency)), self._cnp, qp)

    def _wake(self) -> None:
        if not self.ticking:
            self.ticking = True
            self.last_tick = self.sched.now
            self.sched.at(self.sched.now + DT_NS, self._tick)

    # -- the fluid's step ------------------------------------------------------------------------------

    def _tick(self) -> None:
        now = self.sched.now
        dt = now - self.last_tick
        self.last_tick = now
        active = [qp for qp in self.qps.values() if qp.flows]
        offered: dict[int, float] = {}
        for qp in active:
            self._timers(qp, now)
            for k in qp.links:
                offered[k] = offered.get(k, 0.0) + qp.rc
        marks, full = self._queues(active, offered, dt)
        self._cnps(active, marks, full, now, dt)
        changed = self._counters_and_caps(active, offered, dt)
        if changed:
            self._mark(changed)
        if self.queue or any(qp.rc < qp.line for qp in active):
            self.sched.at(now + DT_NS, self._tick)
        else:
            self.ticking = False

    def _queues(self, active: list[_Qp], offered: dict[int, float], dt: int
                ) -> tuple[dict[int, float], dict[int, float]]:
        """The switches' queues moved on by `dt`: what is offered beyond the capacity waits, up to
        xoff per feeding link (PFC holds the rest upstream); each marking queue's RED probability
        and each queue's most (`full`)."""
        r = self.roce
        queue = self.queue
        feeds: dict[int, set[int]] = {}
        for qp in active:
            for f in qp.flows:
                for a, b in itertools.pairwise(f.msg.keys):
                    feeds.setdefault(b, set()).add(a)
        marks: dict[int, float] = {}
        full: dict[int, float] = {}
        for k in set(offered) | set(queue):
            if not r.switch_sends[k]:
                continue
            q = queue.get(k, 0.0) + (offered.get(k, 0.0) - self.capacity[k]) * dt
            full[k] = r.xoff * max(len(feeds.get(k, ())), 1)
            q = min(max(q, 0.0), full[k])
            if q > 0:
                queue[k] = q
                p = r.mark(q)
                if p > 0:
                    marks[k] = p
            else:
                queue.pop(k, None)
        return marks, full

    def _cnps(self, active: list[_Qp], marks: dict[int, float], full: dict[int, float], now: int, dt: int) -> None:
        """Marked packets as expected counts, and the CNPs they make (see the module)."""
        r = self.roce
        queue = self.queue
        waits: dict[_Qp, float] = {}
        for qp in active:
            p_none = 1.0
            wait = 0.0
            worst = -1
            for k in qp.links:
                pk = marks.get(k)
                if pk is not None:
                    p_none *= 1 - pk
                    wait = max(wait, queue[k] / self.capacity[k])
                    if worst < 0 or pk > marks[worst]:
                        worst = k
            if p_none < 1 and now >= qp.cnp_ready:
                # its packets join the queue at its rate, or as PFC lets them where the queue is full
                arriving = (qp.rc * dt if all(queue.get(k, 0.0) < full.get(k, math.inf) for k in qp.links)
                            else sum(f.rate for f in qp.flows) * dt)
                new = arriving / r.packet * (1 - p_none)
                qp.marks += new
                waits[qp] = wait
                # the first mark among the queue pairs of a queue comes when their counts together
                # reach the median: it goes to the one marked most so far
                self.first[worst] = self.first.get(worst, 0.0) + new
        for k, total in list(self.first.items()):
            if total >= FIRST_MARK:
                self.first[k] = 0.0
                eligible = [qp for qp in waits if k in qp.links]
                if eligible:
                    self._notify(max(eligible, key=lambda q: (q.marks, -q.key)), now, waits)
        for qp in list(waits):
            if qp.marks >= FIRST_MARK:
                self._notify(qp, now, waits)
        for k in [k for k in self.first if k not in marks]:
            del self.first[k]  # the queue is below K_min again: the next first mark starts afresh

    def _counters_and_caps(self, active: list[_Qp], offered: dict[int, float], dt: int) -> list[int]:
        """The byte counters moved on by what each queue pair sent in `dt`, and each pair's cap (its
        rate, or more while a queue it crosses drains at its link's rate); the keys whose caps moved."""
        r = self.roce
        changed: list[int] = []
        for qp in active:
            sent = sum(f.rate for f in qp.flows) * dt
            if qp.rc < qp.line:
                qp.bytes_since += sent
                while qp.bytes_since >= r.byte_counter:
                    qp.bytes_since -= r.byte_counter
                    qp.b_count += 1
                    self._increase(qp)
            # a draining queue sends at its link's rate, not at what its queue pairs offer now
            cap = qp.rc
            for k in qp.links:
                if self.queue.get(k, 0.0) > 0 and 0 < offered.get(k, 0.0) < self.capacity[k]:
                    cap = max(cap, qp.rc * self.capacity[k] / offered[k])
            if abs(cap - self.capacity[qp.key]) > 1e-9 * cap:
                self.capacity[qp.key] = cap
                changed.append(qp.key)
        return changed
