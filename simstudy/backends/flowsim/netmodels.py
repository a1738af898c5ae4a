"""flowsim's three network models: how long a message takes on links that other messages also use.

Every transfer (a collective's message, a point-to-point send) is a `Msg` handed to the model,
which calls `msg.deliver(msg)` when it has arrived. A message names the links of its route by
key: link ids on the whole network, or link orbits when a symmetric collective is simulated for
one representative rank (then `mult` says how many links of each orbit the route crosses).

* `UnawareNet` - ASTRA-SIM's congestion-unaware analytical model: a message takes a fixed time,
  computed by the caller from its route (`Msg.alone_ns`); links are never shared.
* `AwareNet` - ASTRA-SIM's congestion-aware analytical model: a message is stored and forwarded
  hop by hop as one chunk; each link sends one message at a time, in FIFO order; a hop takes
  int(size / bandwidth) of the link's time and arrives int(latency + size / bandwidth) after it
  started (astra-network-analytical's `Link::schedule_chunk_transmission`).
* `FluidNet` - every message is a flow; flows that share links get max-min fair rates
  (progressive filling), recomputed once per instant at which flows start or end, over the flows
  connected to the change through shared links only. A message arrives its path latency after
  its last byte left; a flow that kept one rate all along arrives exactly
  int(latency + size / rate) after it started, as ASTRA-SIM charges an uncontended message.

A fluid model's `shares` (None: max-min fair) may weigh the flows instead (`Shares`, the policies
of `sharing`): weighted max-min (a flow's share of a bottleneck proportional to its weight), and
strict priority classes (each class, lower first, filled max-min on what the classes before it
left of each link; a flow left nothing waits, at rate 0, until its component is solved again).
"""

from __future__ import annotations

import importlib.util
import math
import operator
from collections import deque
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any, Protocol, Union

import numpy as np

from simstudy.backends.flowsim.sched import Scheduler
from simstudy.spec import Congestion

#: Components of at most this many flows are filled in pure Python; larger ones with numpy.
_SMALL = 12


class Msg:
    """One transfer on the network."""

    __slots__ = ("alone_ns", "ctx", "deliver", "dst", "keys", "latency", "mult", "size", "src", "t_arrive",
                 "t_send")

    def __init__(self, src: int, dst: int, size: int, keys: tuple[int, ...], mult: tuple[int, ...] | None,
                 latency: float, alone_ns: int, deliver: Callable[[Msg], None], ctx: Any = None) -> None:
        self.src = src
        self.dst = dst
        self.size = size
        self.keys = keys
        self.mult = mult
        self.latency = latency
        self.alone_ns = alone_ns
        self.deliver = deliver
        self.ctx = ctx
        self.t_send = 0
        self.t_arrive = 0


class Clock(Protocol):
    """A network with a clock of its own (a packet simulator): the engine calls `advance(t)` before
    it runs an event at time t (None: it has none left) and goes on while the network is `busy`."""

    def busy(self) -> bool: ...

    def advance(self, t_next: int | None) -> None: ...


class Shares(Protocol):
    """How a fluid model weighs the flows of a component (see `sharing`): per flow, a weight
    (weighted max-min) and a class (strict priority, lower first); None for either: all alike."""

    #: whether a flow's weight changes while it runs (then the model reports every rate change and
    #: drained flow, and never looks a component's rates up)
    dynamic: bool

    def of(self, flows: list[Flow], now: int) -> tuple[list[float] | None, list[int] | None]: ...

    def moved(self, f: Flow, rate: float, now: int) -> None:
        """Flow `f` goes from its rate `f.rate` to `rate` now."""

    def drained(self, f: Flow, now: int) -> None:
        """Flow `f` has sent its last byte now."""


class NetModel:
    """What every model offers: `send` a message now, on the scheduler `sched`."""

    name = ""
    #: whether a collective whose links carry nothing else may be timed alone once and reused
    timed_alone = True
    #: a network with a clock of its own, advanced by the engine (None: the engine's clock is the network's)
    clock: Clock | None = None

    def __init__(self, sched: Scheduler, capacity: Sequence[float], latency: Sequence[float]) -> None:
        self.sched = sched
        self.capacity = list(capacity)
        self.latency = list(latency)

    def send(self, msg: Msg) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def _arrive(self, msg: Msg) -> None:
        msg.t_arrive = self.sched.now
        msg.deliver(msg)


class UnawareNet(NetModel):
    name = "unaware"

    def send(self, msg: Msg) -> None:
        s = self.sched
        msg.t_send = s.now
        s.at(s.now + msg.alone_ns, self._arrive, msg)


class _Link:
    __slots__ = ("bpns", "busy", "latency", "waiting")

    def __init__(self, bpns: float, latency: float) -> None:
        self.bpns = bpns
        self.latency = latency
        self.busy = False
        self.waiting: deque[tuple[Msg, int]] = deque()


class AwareNet(NetModel):
    name = "aware"

    def __init__(self, sched: Scheduler, capacity: Sequence[float], latency: Sequence[float]) -> None:
        super().__init__(sched, capacity, latency)
        self.links: dict[int, _Link] = {}

    def _link(self, key: int) -> _Link:
        link = self.links.get(key)
        if link is None:
            link = self.links[key] = _Link(self.capacity[key], self.latency[key])
        return link

    def send(self, msg: Msg) -> None:
        msg.t_send = self.sched.now
        if not msg.keys:
            self.sched.at(self.sched.now, self._arrive, msg)
            return
        self._enter(msg, 0)

    def _enter(self, msg: Msg, hop: int) -> None:
        link = self._link(msg.keys[hop])
        if link.busy:
            link.waiting.append((msg, hop))
        else:
            self._transmit(link, msg, hop)

    def _transmit(self, link: _Link, msg: Msg, hop: int) -> None:
        link.busy = True
        s = self.sched
        ser = msg.size / link.bpns
        s.at(s.now + int(link.latency + ser), self._hop_done, msg, hop)
        s.at(s.now + int(ser), self._free, link)

    def _hop_done(self, msg: Msg, hop: int) -> None:
        if hop + 1 == len(msg.keys):
            self._arrive(msg)
        else:
            self._enter(msg, hop + 1)

    def _free(self, link: _Link) -> None:
        link.busy = False
        if link.waiting:
            msg, hop = link.waiting.popleft()
            self._transmit(link, msg, hop)


class Flow:
    """A message in flight in a fluid model: its share of its links, its rate and what is left to send."""

    __slots__ = ("const", "keys", "msg", "mult", "rate", "remaining", "route", "seq", "t_upd", "version")

    def __init__(self, msg: Msg, mult: tuple[int, ...], now: int, seq: int,
                 keys: tuple[int, ...] | None = None) -> None:
        self.seq = seq
        self.msg = msg
        #: what the flow shares: its message's links (and, for a model that caps flows, a key of its own)
        self.keys = msg.keys if keys is None else keys
        self.mult = mult
        self.remaining = float(msg.size)
        self.rate = 0.0
        self.t_upd = now
        self.version = 0
        self.const = True
        self.route = 0


class FluidNet(NetModel):
    name = "fluid"

    def __init__(self, sched: Scheduler, capacity: Sequence[float], latency: Sequence[float]) -> None:
        super().__init__(sched, capacity, latency)
        self.on_link: dict[int, set[Flow]] = {}
        self.sent = 0
        self._dirty: tuple[Scheduler, int, set[int]] | None = None
        self.recomputes = 0
        #: how flows of different jobs share a link (None: max-min fair)
        self.shares: Shares | None = None

    def send(self, msg: Msg) -> None:
        now = self.sched.now
        msg.t_send = now
        if not msg.keys:
            self.sched.at(now + int(msg.latency), self._arrive, msg)
            return
        self.sent += 1
        flow = self._flow(msg, now)
        for k in flow.keys:
            flows = self.on_link.get(k)
            if flows is None:
                flows = self.on_link[k] = set()
            flows.add(flow)
        self._mark(flow.keys)

    def _flow(self, msg: Msg, now: int) -> Flow:
        return Flow(msg, msg.mult or (1,) * len(msg.keys), now, self.sent)

    def _mark(self, keys: Sequence[int]) -> None:
        s = self.sched
        d = self._dirty
        if d is None or d[0] is not s or d[1] != s.now:
            d = self._dirty = (s, s.now, set())
            s.after_all(s.now, self._recompute, d[2])
        d[2].update(keys)

    def _component(self, keys: set[int]) -> list[Flow]:
        seen_keys = set(keys)
        stack = list(keys)
        flows: dict[Flow, None] = {}
        on_link = self.on_link
        while stack:
            for f in on_link.get(stack.pop(), ()):
                if f not in flows:
                    flows[f] = None
                    for k in f.keys:
                        if k not in seen_keys:
                            seen_keys.add(k)
                            stack.append(k)
        # in the order they were sent: flows that drain at one instant arrive in that order whatever
        # the order of the sets that hold them (and the same with link keys as with orbit keys)
        return sorted(flows, key=lambda f: f.seq)

    def _recompute(self, keys: set[int]) -> None:
        if self._dirty is not None and self._dirty[2] is keys:
            self._dirty = None
        flows = self._component(keys)
        if not flows:
            return
        self.recomputes += 1
        now = self.sched.now
        for f in flows:
            if f.t_upd != now:
                f.remaining -= f.rate * (now - f.t_upd)
                f.t_upd = now
        rates = self._rates(flows)
        s = self.sched
        shares = self.shares
        track = shares is not None and shares.dynamic
        for f, r in zip(flows, rates, strict=True):
            if r <= 0.0:  # held back by a class before it: it waits, so its arrival is not size / rate
                f.const = False
            if r != f.rate:
                if f.rate:
                    f.const = False
                if track:
                    shares.moved(f, r, now)  # type: ignore[union-attr]
                f.rate = r
                f.version += 1
                if r > 0.0:
                    s.at(now + max(math.floor(f.remaining / r), 0), self._drain, f, f.version)

    def _rates(self, flows: list[Flow]) -> list[float]:
        """The rates of one component's flows (in the order they were sent): max-min, or as the
        model's `shares` weigh them."""
        if self.shares is None:
            return self._maxmin(flows)
        weights, classes = self.shares.of(flows, self.sched.now)
        return solve(flows, self.capacity, weights, classes)

    def _maxmin(self, flows: list[Flow]) -> list[float]:
        return _fill(flows, self.capacity, None)

    def _drain(self, f: Flow, version: int) -> None:
        if version != f.version:
            return
        f.version += 1
        msg = f.msg
        for k in f.keys:
            flows = self.on_link[k]
            flows.discard(f)
            if not flows:
                del self.on_link[k]
        self._mark(f.keys)
        now = self.sched.now
        if self.shares is not None and self.shares.dynamic:
            self.shares.drained(f, now)
        t = msg.t_send + int(msg.latency + msg.size / f.rate) if f.const else now + int(msg.latency)
        self.sched.at(max(t, now) + self._extra_ns(f), self._arrive, msg)

    def _extra_ns(self, f: Flow) -> int:
        """Time a message takes after its last byte is through (none here)."""
        return 0


#: Link capacities by key: the model's list, or what a priority class is left of them.
Capacity = Union[Sequence[float], dict[int, float]]  # noqa: UP007 - a runtime alias


def solve(flows: list[Flow], cap: Capacity, weights: list[float] | None, classes: list[int] | None) -> list[float]:
    """The rates of one component's flows: weighted max-min (`weights`; None: max-min) within each
    priority class, classes in ascending order, each on what the classes before it left of every
    link (`classes` None: one class). What is left below 1e-9 of a link counts as nothing."""
    if classes is None or len(set(classes)) == 1:
        return _fill(flows, cap, weights)
    rates = [0.0] * len(flows)
    left: dict[int, float] = {}
    for c in sorted(set(classes)):
        idx = [i for i, k in enumerate(classes) if k == c]
        sub = [flows[i] for i in idx]
        avail = {k: left.get(k, cap[k]) for f in sub for k in f.keys}
        got = _fill(sub, avail, None if weights is None else [weights[i] for i in idx])
        for i, f, r in zip(idx, sub, got, strict=True):
            rates[i] = r
            for k, m in zip(f.keys, f.mult, strict=True):
                rest = left.get(k, cap[k]) - m * r
                left[k] = rest if rest > 1e-9 * cap[k] else 0.0
    return rates


def _fill(flows: list[Flow], cap: Capacity, weights: list[float] | None) -> list[float]:
    """Progressive filling: max-min rates, or weighted max-min (each flow's rate its weight x the
    bottleneck's share per unit of weight)."""
    if len(flows) == 1:
        f = flows[0]
        return [min(cap[k] / m for k, m in zip(f.keys, f.mult, strict=True))]
    if len(flows) <= _SMALL:
        return _fill_small(flows, cap, weights)
    return _fill_numpy(flows, cap, weights)


def _fill_small(flows: list[Flow], cap: Capacity, weights: list[float] | None = None) -> list[float]:
    rem: dict[int, float] = {}
    weight: dict[int, float] = {}
    count: dict[int, int] = {}  # flows not yet frozen on each link (float weights need not sum back to 0)
    ws: Sequence[float] = weights if weights is not None else [1] * len(flows)
    for f, w in zip(flows, ws, strict=True):
        for k, m in zip(f.keys, f.mult, strict=True):
            if k not in rem:
                rem[k] = cap[k]
                weight[k] = 0
                count[k] = 0
            weight[k] += m * w
            count[k] += 1
    rates = [0.0] * len(flows)
    active = set(range(len(flows)))
    while active:
        s = min(rem[k] / w for k, w in weight.items() if count[k] > 0)
        limit = s * (1 + 1e-12)
        bottleneck = {k for k, w in weight.items() if count[k] > 0 and rem[k] / w <= limit}
        frozen = [i for i in active if any(k in bottleneck for k in flows[i].keys)]
        for i in frozen:
            w = ws[i]
            rates[i] = s * w
            for k, m in zip(flows[i].keys, flows[i].mult, strict=True):
                rem[k] -= m * w * s
                weight[k] -= m * w
                count[k] -= 1
        active.difference_update(frozen)
    return rates


def _fill_numpy(flows: list[Flow], cap: Capacity, weights: list[float] | None = None) -> list[float]:
    n = len(flows)
    lens = [len(f.keys) for f in flows]
    flow_idx = np.repeat(np.arange(n), lens)
    # chained in C (a generator over every key of a large component cost more than the filling)
    link_idx = np.fromiter(chain.from_iterable(f.keys for f in flows), dtype=np.int64, count=len(flow_idx))
    mult = np.fromiter(chain.from_iterable(f.mult for f in flows), dtype=np.float64, count=len(flow_idx))
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    if w is not None:
        mult = mult * np.repeat(w, lens)
    links, local = np.unique(link_idx, return_inverse=True)
    # only the links of these flows: converting the whole capacity list would cost O(all links) per call
    remaining = np.array([cap[k] for k in links.tolist()], dtype=np.float64)
    rates = np.zeros(n)
    active = np.ones(n, dtype=bool)
    while active.any():
        on = active[flow_idx]
        weight = np.bincount(local[on], weights=mult[on], minlength=len(links))
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(weight > 0, remaining / np.where(weight > 0, weight, 1), np.inf)
        s = share.min()
        bottleneck = share <= s * (1 + 1e-12)
        frozen = np.zeros(n, dtype=bool)
        frozen[flow_idx[on & bottleneck[local]]] = True
        frozen &= active
        rates[frozen] = s if w is None else s * w[frozen]
        sel = frozen[flow_idx]
        remaining = remaining - np.bincount(local[sel], weights=mult[sel], minlength=len(links)) * s
        active &= ~frozen
    return [float(r) for r in rates]


_by_seq = operator.attrgetter("seq")


class FastFluidNet(FluidNet):
    """`FluidNet` that does not redo what it already knows: the same flows, components, instants
    and arithmetic, with the max-min rates of a component looked up when the same routes (in the
    same order) were solved before (every step of a ring sends the same pairs on the same routes,
    every chunk repeats them). Rates are a function of the component's routes, their order and
    the capacities only, so a solution found again is the one that would be computed: results
    equal `FluidNet`'s to the last ns (tests/backends/test_fluid_solver.py)."""

    #: Flows of the solutions kept at most (then they are forgotten and found again): memory
    #: bounded whatever the run's length.
    MEMO = 1 << 20

    def __init__(self, sched: Scheduler, capacity: Sequence[float], latency: Sequence[float]) -> None:
        super().__init__(sched, capacity, latency)
        self._route_ids: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
        self._route_of: dict[int, tuple[int, ...]] = {}
        self._solved: dict[tuple[Any, ...], list[float]] = {}
        self._kept = 0
        self.reused = 0

    def send(self, msg: Msg) -> None:
        now = self.sched.now
        msg.t_send = now
        keys = msg.keys
        if not keys:
            self.sched.at(now + int(msg.latency), self._arrive, msg)
            return
        self.sent += 1
        mult = msg.mult or (1,) * len(keys)
        flow = Flow(msg, mult, now, self.sent)
        ids = self._route_ids
        rid = ids.get((keys, mult))
        if rid is None:
            rid = ids[(keys, mult)] = len(ids)
        flow.route = rid
        on_link = self.on_link
        for k in keys:
            flows = on_link.get(k)
            if flows is None:
                on_link[k] = {flow}
            else:
                flows.add(flow)
        s = self.sched
        d = self._dirty
        if d is None or d[0] is not s or d[1] != now:
            d = self._dirty = (s, now, set())
            s.after_all(now, self._recompute, d[2])
        d[2].update(keys)

    def _drain(self, f: Flow, version: int) -> None:
        if version != f.version:
            return
        f.version += 1
        msg = f.msg
        on_link = self.on_link
        left: list[int] = []  # links that still carry flows: a recompute of the others would find none
        for k in msg.keys:
            flows = on_link[k]
            flows.discard(f)
            if flows:
                left.append(k)
            else:
                del on_link[k]
        s = self.sched
        now = s.now
        if self.shares is not None and self.shares.dynamic:
            self.shares.drained(f, now)
        if left:
            d = self._dirty
            if d is None or d[0] is not s or d[1] != now:
                d = self._dirty = (s, now, set())
                s.after_all(now, self._recompute, d[2])
            d[2].update(left)
        t = msg.t_send + int(msg.latency + msg.size / f.rate) if f.const else now + int(msg.latency)
        s.at(max(t, now), self._arrive, msg)

    def _component(self, keys: set[int]) -> list[Flow]:
        on_link = self.on_link
        only: Flow | None = None  # most changes touch one flow whose links carry nothing else
        for k in keys:
            flows = on_link.get(k)
            if flows is None:
                continue
            if len(flows) != 1:
                return self._search(keys)
            f = next(iter(flows))
            if only is None:
                only = f
            elif f is not only:
                return self._search(keys)
        if only is None:
            return []
        for k in only.msg.keys:
            if len(on_link[k]) != 1:
                return self._search(keys)
        return [only]

    def _search(self, keys: set[int]) -> list[Flow]:
        """`FluidNet._component` with set operations: the same flows, in the order they were sent."""
        on_link = self.on_link
        seen = set(keys)
        stack = list(keys)
        found: set[Flow] = set()
        while stack:
            flows = on_link.get(stack.pop())
            if not flows:
                continue
            new = flows - found
            if new:
                found |= new
                for f in new:
                    for k in f.msg.keys:
                        if k not in seen:
                            seen.add(k)
                            stack.append(k)
        return sorted(found, key=_by_seq)

    def _rates(self, flows: list[Flow]) -> list[float]:
        shares = self.shares
        if shares is None:
            return self._memo(tuple(f.route for f in flows), flows, None, None)
        if shares.dynamic:  # weights that move with the bytes sent: a solution seldom comes back
            return super()._rates(flows)
        weights, classes = shares.of(flows, self.sched.now)
        sig = (tuple(f.route for f in flows), tuple(weights or ()), tuple(classes or ()))
        return self._memo(sig, flows, weights, classes)

    def _memo(self, sig: tuple[Any, ...], flows: list[Flow], weights: list[float] | None,
              classes: list[int] | None) -> list[float]:
        """The rates solved for `sig` before (the routes in order, and what weighs them), or solved now."""
        rates = self._solved.get(sig)
        if rates is None:
            rates = solve(flows, self.capacity, weights, classes)
            self._kept += len(flows)
            if self._kept > self.MEMO:
                self._solved.clear()
                self._kept = len(flows)
            self._solved[sig] = rates
        else:
            self.reused += 1
        return rates


#: The model of each congestion mode flowsim runs (`Congestion`): what `--congestion` picks.
NETMODELS: dict[Congestion, type[NetModel]] = {Congestion.FLUID: FastFluidNet, Congestion.UNAWARE: UnawareNet,
                                              Congestion.AWARE: AwareNet}
#: The fluid model's solvers: `fast` (the default) and `reference`, the solver it must equal.
FLUID_SOLVERS: dict[str, type[NetModel]] = {"fast": FastFluidNet, "reference": FluidNet}

def _no_core(*_: Any) -> Any:
    raise RuntimeError(CORE_MISSING)


try:  # the compiled core (`_core.pyx`): the event queue, the system layer and these models in C++
    from simstudy.backends.flowsim import _core
except ImportError as exc:  # not built (no C++ compiler where simstudy was installed), or not loadable
    built = importlib.util.find_spec("simstudy.backends.flowsim._core") is not None
    #: why the compiled core cannot be used here (None: it can)
    CORE_MISSING: str | None = (f"the compiled core cannot be loaded ({exc})" if built else
                                "the compiled core is not built (simstudy was installed where no C++ compiler "
                                "was found; reinstall it where g++ is present)")
    #: the compiled model of each congestion mode (`NETMODELS`' in C++; the fluid one is `fast`'s)
    CORE_NETMODELS: dict[Congestion, Any] = {}
    #: `Network.pick` of many flows in C (`_core.ecmp_picks`), where the core is built
    core_picks: Callable[[list[tuple[int, int, int]], int, int], tuple[int, ...]] = _no_core
else:
    CORE_MISSING = None
    CORE_NETMODELS = {Congestion.FLUID: _core.CoreFluid, Congestion.UNAWARE: _core.CoreUnaware,
                      Congestion.AWARE: _core.CoreAware}
    core_picks = _core.ecmp_picks


def core_scheduler(now: int = 0) -> Scheduler:
    """The compiled core's event queue (`Scheduler`'s interface: `at`, `after_all`, `now`,
    `run_before`, `drain_into`)."""
    if CORE_MISSING is not None:
        raise RuntimeError(CORE_MISSING)
    return _core.CoreScheduler(now)  # type: ignore[return-value]  # Scheduler's interface, in C++
