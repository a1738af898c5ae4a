"""flowsim's communication layer: every transfer of a run on one shared network model.

Collectives run through ASTRA-SIM's system layer (`system`), point-to-point sends as single
messages, all on one network model (`netmodels`: unaware, aware or fluid). Two shortcuts keep it
fast without changing any result:

* **isolated collectives are timed once.** A collective whose links carry nothing else while
  it runs takes the time it takes alone, so that time is computed once per distinct collective
  (kind, members, size) and reused; a symmetric collective (every rank does what rank 0 does,
  rotated, on a network that looks the same from every rank) is simulated for rank 0 alone, on
  one queue or one shared link per *orbit* of links (`Lanes`). With `unaware`, links are never
  shared, so every collective takes this path.
* **the rest is simulated message by message**, together. When a transfer starts on links that
  an isolated collective holds, that collective is replayed message by message from its start
  (alone, as it was until now: the same result) and continues, sharing its links, from now on.

Each shortcut can be turned off (`shortcuts.Shortcuts`); tests/backends/test_fast_paths.py runs
random bundles through every one and through none.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simstudy.backends.base import BackendError
from simstudy.backends.flowsim.buckets import links_model
from simstudy.backends.flowsim.netmodels import CORE_NETMODELS, FLUID_SOLVERS, NETMODELS, Msg, NetModel, core_picks
from simstudy.backends.flowsim.roce import roce_links
from simstudy.backends.flowsim.routes import IntArray, Lanes, Route, Routes
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.flowsim.system import CollectivePlan, CollectiveRun, NotAlike, Planner, lane_images
from simstudy.backends.flowsim.tcp import TCP_NETMODELS, TcpPaths, tcp_modelled
from simstudy.backends.network import Network
from simstudy.backends.patterns import TreeTurns
from simstudy.backends.traffic_build import WorkloadInfo
from simstudy.chakra import NodeType
from simstudy.compiler.attributes import in_network_of
from simstudy.spec import Congestion

#: Rows handed on at a time when an isolated collective's messages are copied to every rank.
EMIT_BLOCK = 1 << 20


@dataclass
class Timing:
    """A collective alone: when each member finishes and every message (relative to the start;
    for a lane plan, rank 0's messages only)."""

    finish: IntArray  # per member
    t_send: IntArray
    t_arrive: IntArray
    src: IntArray
    dst: IntArray
    nbytes: IntArray
    chunk: IntArray
    step: IntArray
    xor: NDArray[np.bool_]
    #: the members in the order they finished (indices into `finish`): members that finish at one
    #: instant hear of it in this order, as on the full path, where it is their last messages' order
    #: (on FIFO links the order in which they issue what comes next decides which message queues)
    order: IntArray
    #: when only counts are kept: (messages, bytes, the ranks that sent, the bytes each sent), and no
    #: messages above
    counted: tuple[int, int, IntArray, NDArray[np.float64]] | None = None
    _in_order: tuple[list[int], list[int]] | None = field(default=None, repr=False)  # `in_order()`, once made

    def in_order(self) -> tuple[list[int], list[int]]:
        """(`order`, each one's finish) as lists: a timing is found again for many collectives."""
        if self._in_order is None:
            self._in_order = (self.order.tolist(), self.finish[self.order].tolist())
        return self._in_order

    @property
    def messages(self) -> int:
        """Its messages (a lane plan's: rank 0's)."""
        return self.counted[0] if self.counted is not None else len(self.src)


class _Recorder:
    """A timed collective's messages, as columns of int64 (not a tuple per message); `counts_only`:
    only their number, bytes and bytes sent per rank (what a run that keeps no rows needs)."""

    def __init__(self, plan: CollectivePlan, hosts: int, *, counts_only: bool) -> None:
        self.plan = plan
        self.counts_only = counts_only
        self.cols = tuple(array("q") for _ in range(8))
        self.transfers = 0
        self.total = 0
        self.sent = np.zeros(hosts) if counts_only else None
        self._sent: dict[int, int] = {}
        self.n = 0
        #: columns recorded in blocks (`add_batch`), after those of `cols`
        self.blocks: list[list[IntArray]] = []
        offsets = [ph.step_offset for ph in plan.phases]
        self._offsets = np.asarray(offsets or [0], dtype=np.int64)
        self._xor = np.asarray([ph.symmetry == "xor" for ph in plan.phases] or [False], dtype=np.int64)

    def add(self, msg: Msg) -> None:
        self.n += 1
        if self.counts_only:
            self.transfers += 1
            self.total += msg.size
            self._sent[msg.src] = self._sent.get(msg.src, 0) + msg.size
            return
        _, c, p, st = msg.ctx
        ph = self.plan.phases[p]
        for col, v in zip(self.cols, (msg.t_send, msg.t_arrive, msg.src, msg.dst, msg.size, c, ph.step_offset + st,
                                      ph.symmetry == "xor"), strict=True):
            col.append(v)

    def add_batch(self, t_send: IntArray, t_arrive: IntArray, src: IntArray, dst: IntArray, size: IntArray,
                  chunk: IntArray, phase: IntArray, step: IntArray) -> None:
        """Messages recorded by the compiled core, as columns (`add`'s, message by message)."""
        self.n += len(src)
        if self.counts_only:
            assert self.sent is not None
            self.transfers += len(src)
            self.total += int(size.sum())
            # whole bytes: the sums are exact in any order (np.add.at's, element by element, were slower)
            self.sent += np.bincount(src, weights=size.astype(np.float64), minlength=len(self.sent))
            return
        self.blocks.append([t_send, t_arrive, src, dst, size, chunk, self._offsets[phase] + step, self._xor[phase]])

    def columns(self) -> list[IntArray]:
        cols = [np.frombuffer(c, dtype=np.int64).copy() if len(c) else np.empty(0, dtype=np.int64)
                for c in self.cols]
        if self.blocks:
            cols = [np.concatenate([col, *(b[k] for b in self.blocks)]) for k, col in enumerate(cols)]
        return cols

    def counted(self) -> tuple[int, int, IntArray, NDArray[np.float64]] | None:
        """(messages, bytes, the ranks that sent, the bytes each sent), when only counts are kept."""
        if self.sent is None:
            return None
        for r, b in self._sent.items():
            self.sent[r] += b
        ranks = np.flatnonzero(self.sent)
        return self.transfers, self.total, ranks, self.sent[ranks]


@dataclass(eq=False)
class Activity:
    """A collective or a send in flight on the shared network."""

    links: IntArray
    fast: bool
    start: int
    plan: CollectivePlan | None = None
    timing: Timing | None = None
    members: tuple[int, ...] = ()
    reported: set[int] = field(default_factory=set)
    finished: bool = False
    ctx: Any = None
    starts: list[int] | None = None
    run: CollectiveRun | None = None
    report: tuple[int, ...] = ()
    turn: int = 0
    #: the flow id of its chunk 0 (chunk c is flow + c): ECMP may route each flow its own way
    flow: int = 0
    #: the paths ECMP chose for its flows (see `Comms._choices`): with its plan, what its timing depends on
    choices: tuple[int, ...] = ()
    #: messages of its timing not handed on yet
    pending: int = 0
    #: members of its timing told that they are done by the compiled walk (`Comms._launch`), not in `reported`
    told: int = 0


def _sends_meet_fifo(congestion: Congestion, info: WorkloadInfo) -> bool:
    """Whether point-to-point sends may meet isolated collectives on FIFO links (`aware`): there,
    when a send starts at the instant the collective sends one of its own messages on that link,
    the replay of the collective (`Comms._replay`) can queue the two in the other order than the
    full path does (tests/backends/test_fast_paths.py found two such bundles), so such a run
    takes no `isolated` shortcut. In-network all-reduces send their chunks as such sends
    (`flowsim.in_network`). Fluid sharing does not depend on that order."""
    if not congestion.fifo:
        return False
    traces = {id(nodes): nodes for nodes in info.nodes}.values()  # ranks with one trace share its list
    return any(n.type == NodeType.COMM_SEND_NODE or in_network_of(n) is not None for nodes in traces for n in nodes)


class Comms:
    """Every transfer of a run, on one network model in one of the congestion modes."""

    def __init__(self, info: WorkloadInfo, net: Network, mode: str | Congestion, sched: Scheduler,
                 emit: Callable[..., None], *, planner: Planner | None = None,
                 count: Callable[[int, int, IntArray, NDArray[np.float64]], None] | None = None,
                 isolated: bool = True, solver: str = "fast",
                 model: NetModel | None = None, engine: str = "python") -> None:
        if model is None and mode not in NETMODELS:
            raise ValueError(f"unknown congestion mode {mode!r}; expected one of {', '.join(NETMODELS)}")
        if solver not in FLUID_SOLVERS:
            raise ValueError(f"unknown fluid solver {solver!r}; expected one of {', '.join(FLUID_SOLVERS)}")
        mode = Congestion(mode)
        self.info = info
        self.mode = mode
        #: the model's class (fluid: the solver chosen; a model from elsewhere, never timed alone: its type)
        self.model_class: type[NetModel] = (FLUID_SOLVERS[solver] if mode.fluid else NETMODELS[mode]
                                            if mode in NETMODELS or model is None else type(model))
        self.sched = sched
        #: TCP (`tcp`), for the congestion modes that model it, when a link loses packets or the
        #: transport asks for TCP without loss
        self.tcp = (TcpPaths(net.topology.transport, net.capacity, net.latency, net.loss, net.topology.queue.packets)
                    if model is None and mode in TCP_NETMODELS and tcp_modelled(net) else None)
        self.routes = Routes(net, cut_loss=self.tcp is None)
        self.route = self.routes.shared_route if mode.shares_links else self.routes.route
        self.buckets = net.buckets if model is None and mode.fluid else {}  # links behind token buckets
        #: RoCE with DCQCN, for the fluid mode (`flowsim.roce`)
        self.roce = roce_links(net, mode) if model is None else None
        model = model or links_model(mode, sched, self.routes.effective, net.latency, self.tcp, self.buckets,
                                     self.roce)
        #: the compiled core runs the model and the collectives (its own model: fluid's `fast` solver, no TCP)
        self.compiled = (engine == "compiled" and model is None and self.tcp is None and mode in CORE_NETMODELS
                         and (not mode.fluid or solver == "fast"))
        if self.compiled:
            self.model_class = CORE_NETMODELS[mode]
        self.model: NetModel = model or self.model_class(sched, self.routes.effective, net.latency)
        #: the compiled collectives' routes, by (src, dst, size, flow): the shared network's, and each lane set's
        self._core_routes: dict[tuple[int, int, int, int], Any] = {}
        #: the paths of each pair, for the compiled runs to keep routes by the path ECMP picks (not by
        #: flow: a collective then finds the routes of earlier ones); none where pairs are pinned
        self._core_paths: Any = None
        if self.compiled and not net.pinned:
            from simstudy.backends.flowsim import _core

            self._core_paths = _core.PathCounts(lambda s, d: len(net.paths(s, d)))
        self.emit = emit
        #: when given, isolated collectives only report (transfers, bytes, bytes sent per rank)
        self.count = count
        self.lane_planner = planner or Planner(info, lanes=True)
        self.full_planner = Planner(info, lanes=False)
        self.timings: dict[tuple[int, tuple[int, ...]], Timing] = {}
        #: plans a collective has started with (on a shared network: `_worth_timing`)
        self._met: set[int] = set()
        self.tree_turns = TreeTurns()
        self._turn = 0
        self._plan_links: dict[tuple[int, tuple[int, ...]], IntArray] = {}
        self._plan_pairs: dict[int, list[tuple[int, int]]] = {}
        self._plan_multi: dict[int, list[tuple[int, int, int]]] = {}
        self._lanes: dict[tuple[str, ...], Lanes] = {}
        self.shared = mode.shares_links
        #: the shortcut: time a collective alone when nothing else uses its links (else: always message by
        #: message); never on a model whose messages are not timed alone (TCP under loss, the packet network),
        #: nor where a send may meet a replayed collective on a FIFO link (`_sends_meet_fifo`)
        self.isolated = isolated and self.model.timed_alone and not _sends_meet_fifo(mode, info)
        nlinks = len(net.capacity)
        self.fast_owner: list[Activity | None] = [None] * nlinks
        self.detailed = np.zeros(nlinks, dtype=np.int64)
        self.stats = {"fast": 0, "detailed": 0, "replayed": 0, "staggered": 0, "timed": 0, "lanes": 0}
        #: messages of collectives run message by message that arrived but are not handed on yet
        self.unflushed = 0
        #: messages of timed collectives not handed on yet, and the collective being timed
        self.timed_pending = 0
        self._timing_now: _Recorder | None = None
        self._timing_sched: Scheduler | None = None
        #: the compiled run being timed (its messages are recorded in C++ until it hands them on)
        self._timing_core: Any = None
        #: called now and then in long private runs (a collective timed alone, a replay)
        self.tick: Callable[[], None] | None = None

    def timing_ns(self) -> int:
        """How far the collective being timed alone has got (ns from its start; 0 when none is)."""
        return self._timing_sched.now if self._timing_now is not None and self._timing_sched is not None else 0

    def simulated(self) -> int:
        """Messages simulated and not yet handed on as rows or counts (for a run's progress)."""
        now = self._timing_now
        if now is not None and self._timing_core is not None:  # the compiled run counts what it recorded
            return self.unflushed + self.timed_pending + int(self._timing_core.recorded)
        return self.unflushed + self.timed_pending + (now.n if now is not None else 0)

    # -- collectives -------------------------------------------------------------------------

    def collective(self, kind: str, members: tuple[int, ...], size: int, group: bool,
                   done: Callable[[int, int], None], ctx: Any, *, report: tuple[int, ...] | None = None,
                   flow: int = 0) -> None:
        """Start a collective that every member issued now; `done(rank, t)` is called as each
        member finishes (only for the members in `report`, when given). Its chunk c is flow
        `flow + c` (what ECMP hashes on a graph that hashes flows)."""
        start = self.sched.now
        plan = self._plan(kind, members, size, group)
        choices = self._choices(plan, flow)
        act = Activity(self._links(plan, flow, choices), True, start, plan, None, members, ctx=(kind, done, ctx),
                       report=members if report is None else report, turn=self._turn, flow=flow, choices=choices)
        shared_links = self.shared and not self._isolated(act.links)
        if not self.isolated or shared_links or not self._worth_timing(plan, choices):
            self._detailed(act)
            return
        self.stats["fast"] += 1
        if not self.shared:
            self._launch(act)
            return
        for link in act.links.tolist():
            self.fast_owner[link] = act
        # another transfer may still start on these links now: time it alone once the instant is over, if none has
        self.sched.after_all(start, self._launch, act)

    def _worth_timing(self, plan: CollectivePlan, choices: tuple[int, ...]) -> bool:
        """Whether to time an isolated collective alone (else: message by message on the shared
        network, which gives the same results). On a shared network a timing is wasted when another
        collective starts on the collective's links before it ends: the collective is replayed from
        its start (ResNet-50 DP 4,096 fluid: a 10 s timing, then a 10 s replay). So there, a
        collective of every rank (the largest, one plan per size) is timed only where the timing
        may be found again: its plan met before and routed by its pairs (a plan routed by its own
        flows is timed for one use). A group's collective (LLaMA's tensor- and data-parallel groups:
        many small plans, each found again many times) and a lane plan (one rank's messages) are
        timed as they come. Without sharing nothing is ever replayed."""
        if not self.shared or plan.lane or plan.group:
            return True
        if choices:
            return False
        if id(plan) in self._met:
            return True
        self._met.add(id(plan))
        return False

    def _launch(self, act: Activity) -> None:
        """An isolated collective: its timing alone, and when each member finishes."""
        if not act.fast:
            return
        assert act.plan is not None
        timing = act.timing = self._timing(act.plan, act.flow, act.choices)
        act.pending = timing.messages * (len(act.members) if act.plan.lane else 1)
        self.timed_pending += act.pending
        s = self.sched
        members = act.members
        order, finish = timing.in_order()  # in the order the full path would tell them
        if act.report is not members:  # only some are told (identical ranks, replicas: one stands for all)
            if max(finish) != min(finish):  # then the others it stands for would not run as it does
                raise NotAlike(f"a collective of {len(members)} ranks ({act.ctx[0]}) does not finish them at once")
            report = set(act.report)
            keep = [k for k, i in enumerate(order) if members[i] in report]
            order, finish = [order[k] for k in keep], [finish[k] for k in keep]
        first = 0
        schedule = getattr(act.ctx[1], "schedule", None)
        # unshared links: nothing replays it; the compiled walk tells every member but the last one
        if (not self.shared and len(order) > 1 and schedule is not None
                and schedule(act.start, finish[:-1], [members[i] for i in order[:-1]])):
            act.told = first = len(order) - 1
        for k in range(first, len(order)):
            s.at(act.start + finish[k], self._fast_done, act, members[order[k]])

    def staggered(self, kind: str, members: tuple[int, ...], size: int, group: bool, joined: list[int],
                  done: Callable[[int, int], None], ctx: Any, *, flow: int = 0) -> Activity:
        """Start a collective that only the members `joined` have issued (by now): as ASTRA-SIM
        does, they start sending, and each other member starts when it issues it (`join`)."""
        plan = self._plan(kind, members, size, group)
        choices = self._choices(plan, flow)
        act = Activity(self._links(plan, flow, choices), False, self.sched.now, plan, None, members,
                       ctx=(kind, done, ctx), starts=[], report=members, turn=self._turn, flow=flow, choices=choices)
        self.stats["staggered"] += 1
        if self.shared:
            self._expand_overlapping(act.links)
        run = self._run_detailed(act, self.sched, start=False)
        act.run = run
        for rank in joined:
            self.join(act, rank)
        return act

    def join(self, act: Activity, rank: int) -> None:
        """A member of a staggered collective issues it now."""
        assert act.run is not None
        act.run.start_rank(act.run.index(rank))

    def _plan(self, kind: str, members: tuple[int, ...], size: int, group: bool) -> CollectivePlan:
        """The (lane) plan of a collective starting now; the double binary tree's two trees are
        used in turn, chunk after chunk, across collectives (ASTRA-SIM's DoubleBinaryTreeTopology)."""
        plan = self.lane_planner.plan(kind, members, size, group)
        turn = 0
        if plan.odd_phases is not None:
            turn = self.tree_turns.take(kind, plan.chunks)
            plan = self.lane_planner.plan(kind, members, size, group, turn)
        self._turn = turn
        return plan

    def _fast_done(self, act: Activity, rank: int) -> None:
        if not act.fast or rank in act.reported:
            return
        act.reported.add(rank)
        _, done, _ctx = act.ctx
        if len(act.reported) + act.told == len(act.report):
            act.fast = False
            self._release_fast(act)
            self._emit_timing(act)
            if act.choices:  # routed by its own flows: another collective seldom takes the same paths
                assert act.plan is not None
                self.timings.pop((id(act.plan), act.choices), None)
                self._plan_links.pop((id(act.plan), act.choices), None)
        done(rank, self.sched.now)

    def _release_fast(self, act: Activity) -> None:
        if self.shared:
            for link in act.links.tolist():
                if self.fast_owner[link] is act:
                    self.fast_owner[link] = None

    def _isolated(self, links: IntArray) -> bool:
        if self.detailed[links].any():
            return False
        owner = self.fast_owner
        return all(owner[i] is None for i in links.tolist())

    def _expand_overlapping(self, links: IntArray) -> None:
        owner = self.fast_owner
        seen: list[Activity] = []
        for i in links.tolist():
            act = owner[i]
            if act is not None and act not in seen:
                seen.append(act)
        for act in seen:
            self._replay(act)

    def _detailed(self, act: Activity) -> None:
        """Run a collective message by message on the shared model, from now."""
        self._expand_overlapping(act.links)
        self.stats["detailed"] += 1
        act.fast = False
        self._run_detailed(act, self.sched)

    def _run_detailed(self, act: Activity, sched: Scheduler, *, start: bool = True) -> CollectiveRun:
        assert act.plan is not None
        kind, done, ctx = act.ctx
        plan = self.full_planner.plan(kind, act.members, act.plan.size, act.plan.group, act.turn)
        self.detailed[act.links] += 1

        rows: list[tuple[int, int, int, int, int, int, int]] = []
        offsets = [ph.step_offset for ph in plan.phases]
        runs: list[Any] = []  # the compiled run, which keeps its messages until it hands them on

        def flush() -> None:
            if runs:
                runs[0].flush()
            elif rows:
                cols = [np.asarray(c, dtype=np.int64) for c in zip(*rows, strict=True)]
                self.unflushed -= len(rows)
                rows.clear()
                self.emit(kind, ctx, *cols)

        report = set(act.report)
        left = [len(act.members)]

        def rank_done(rank: int, t: int) -> None:
            # (the compiled run counts the members the walk was told of directly: `tell`)
            left[0] = len(act.members) - runs[0].done if runs else left[0] - 1
            if not left[0] and not act.finished:  # every member done: its links are free, its rows whole
                # (before the last member hears of it, as a timed collective's: what it starts next
                # finds the links free)
                act.finished = True
                self.detailed[act.links] -= 1
                flush()
                # the run refers to this function, which refers to the run: let go of it now, so
                # that it is freed at once instead of by the cycle collector
                runs.clear()
                act.run = None
            if rank not in act.reported and rank in report:
                act.reported.add(rank)
                done(rank, t)

        def message(msg: Msg) -> None:
            _, c, p, st = msg.ctx
            rows.append((msg.t_send, msg.t_arrive, msg.src, msg.dst, msg.size, c, offsets[p] + st))
            self.unflushed += 1
            if len(rows) >= 65536:
                flush()

        if self.compiled:
            steps = np.asarray(offsets or [0], dtype=np.int64)

            def batch(t_send: IntArray, t_arrive: IntArray, src: IntArray, dst: IntArray, size: IntArray,
                      chunk: IntArray, phase: IntArray, step: IntArray) -> None:
                self.emit(kind, ctx, t_send, t_arrive, src, dst, size, chunk, steps[phase] + step)

            # where only counts are kept, the core counts (no columns to hand on and count again)
            core = self._core_run(plan, sched, self.model, self.route, rank_done, batch, act.flow, self._core_routes,
                                  self.count)
            runs.append(core)
            tell = getattr(done, "tell", None)  # each member's end told to the compiled walk directly
            if tell is not None:
                tell(core, report.difference(act.reported))
            if start:
                core.start()
            return core  # type: ignore[no-any-return]
        run = CollectiveRun(plan, sched, self.model, self.route, rank_done, message, flow=act.flow)
        if start:
            run.start()
        return run

    def _core_run(self, plan: CollectivePlan, sched: Scheduler, model: NetModel, route: Callable[..., Route],
                  done: Callable[[int, int], None], batch: Callable[..., None], flow: int,
                  cache: dict[tuple[int, int, int, int], Any], count: Callable[..., None] | None = None) -> Any:
        """A collective on the compiled core (`_core.CoreCollectiveRun`): `CollectiveRun`'s events,
        its messages handed on in blocks of columns (`batch`), or only counted (`count(messages,
        bytes, the ranks that sent, the bytes each sent)`, where the run keeps no rows); routes kept
        in `cache`, by flow only where routes depend on it (bounded: ECMP per flow gives every
        collective flows of its own)."""
        from simstudy.backends.flowsim import _core

        per_flow = self.routes.per_flow and route is self.route
        if len(cache) > 1 << 20:
            cache.clear()
        return _core.CoreCollectiveRun(plan, sched, model, route, done, batch,  # type: ignore[arg-type]
                                       flow=flow, routes=cache, per_flow=per_flow, on_count=count,
                                       paths=self._core_paths if per_flow else None)

    def _replay(self, act: Activity) -> None:
        """Turn an isolated collective into a message-by-message one: replay it alone from its
        start until now (it was alone until now, so this is what happened), then go on sharing."""
        self.stats["replayed"] += 1
        self.timed_pending -= act.pending
        act.pending = 0
        self._release_fast(act)
        act.fast = False
        private = type(self.sched)(act.start)
        self.model.sched = private
        try:
            run = self._run_detailed(act, private)
            private.run_before(self.sched.now, self.tick)
        finally:
            self.model.sched = self.sched
        run.sched = self.sched
        private.drain_into(self.sched)

    # -- point to point ----------------------------------------------------------------------

    def send(self, src: int, dst: int, size: int, arrived: Callable[[Msg], None], ctx: Any, *, flow: int = 0) -> None:
        """A point-to-point message of flow `flow`; `arrived(msg)` when it has arrived."""
        keys, mult, latency, alone = self.route(src, dst, size, flow)
        if self.shared:
            links = np.asarray(keys, dtype=np.int64)
            self._expand_overlapping(links)
            self.detailed[links] += 1

        def deliver(msg: Msg) -> None:
            if self.shared:
                self.detailed[np.asarray(msg.keys, dtype=np.int64)] -= 1
            arrived(msg)

        self.model.send(Msg(src, dst, size, keys, mult, latency, alone, deliver, ctx))

    # -- isolated timings --------------------------------------------------------------------

    def _lanes_for(self, plan: CollectivePlan) -> Lanes:
        sym = ["rotate"] * len(self.routes.dims)
        for ph in plan.phases:
            if ph.symmetry == "xor":
                for k, (_, n, _) in enumerate(self.routes.dims):
                    if ph.dim == k or (ph.dim < 0 and n > 1):
                        sym[k] = "xor"
        key = tuple(sym)
        lanes = self._lanes.get(key)
        if lanes is None:
            lanes = self._lanes[key] = Lanes(self.routes, key, self.mode)
        return lanes

    def _timing(self, plan: CollectivePlan, flow: int = 0, choices: tuple[int, ...] = ()) -> Timing:
        found = self.timings.get((id(plan), choices))
        if found is not None:
            return found
        self.stats["timed"] += 1
        self.stats["lanes"] += plan.lane
        sched = type(self.sched)(0)
        lanes = self._lanes_for(plan) if plan.lane else None
        if lanes is not None:
            model = self.model_class(sched, lanes.capacity, lanes.latency)
            route = lanes.route
        else:
            model = self.model_class(sched, self.routes.effective, self.routes.net.latency)
            route = self.route
        finish = np.zeros(len(plan.members), dtype=np.int64)
        order: list[int] = []
        # a lane plan's messages are rank 0's (copied to every rank); otherwise, when only counts are
        # kept, a timing keeps its counts, not its messages (memory by ranks, not by messages)
        rec = _Recorder(plan, self.routes.net.hosts, counts_only=self.count is not None and not plan.lane)
        index = {r: i for i, r in enumerate(plan.members)}

        def done(rank: int, t: int) -> None:
            finish[index[rank]] = t
            order.append(index[rank])

        if self.compiled:
            cache = self._core_routes if lanes is None else lanes.core_routes
            run: Any = self._core_run(plan, sched, model, route, done, rec.add_batch, flow, cache)
        else:
            run = CollectiveRun(plan, sched, model, route, done, rec.add, flow=flow)
        run.start()
        self._timing_now, self._timing_sched = rec, sched
        self._timing_core = run if self.compiled else None
        try:
            sched.run_before(math.inf, self.tick)
        finally:
            self._timing_now = None
        if self.compiled:
            run.flush()
        if run.done < plan.sim_ranks:  # as the full path (and ASTRA-SIM, whose ranks never finish either)
            raise BackendError(f"flowsim: deadlock: {plan.kind} of {len(plan.members)} ranks never finished on "
                               f"{plan.sim_ranks - run.done} of them: its chunks wait for queues that others hold")
        if plan.lane:  # rank 0 stands for every member: they finish together, in rank order
            finish[:] = finish[0]
            order = list(range(len(plan.members)))
        arr = rec.columns()
        timing = Timing(finish, arr[0], arr[1], arr[2], arr[3], arr[4], arr[5], arr[6], arr[7].astype(bool),
                        np.asarray(order, dtype=np.int64), rec.counted())
        self.timings[(id(plan), choices)] = timing
        return timing

    def _pairs(self, plan: CollectivePlan) -> list[tuple[int, int]]:
        """Every (source, destination) of the plan's simulated ranks' messages, in a fixed order."""
        found = self._plan_pairs.get(id(plan))
        if found is None:
            pairs: dict[tuple[int, int], None] = {}
            n = plan.sim_ranks
            for progs in (plan.phases, plan.odd_phases or []):
                for ph in progs:
                    src = np.repeat(np.tile(np.asarray(plan.members[:n], dtype=np.int64), ph.stored),
                                    np.diff(ph.out_ptr))
                    pairs.update(dict.fromkeys(zip(src.tolist(), ph.out_dst.tolist(), strict=True)))
            found = self._plan_pairs[id(plan)] = list(pairs)
        return found

    def _choices(self, plan: CollectivePlan, flow: int) -> tuple[int, ...]:
        """Which path ECMP gives each flow of the collective between ends that have several (empty
        when routes do not depend on flows, or no pair has a choice): with the plan, all its
        timing and links depend on. Where links are not shared (`unaware`), a pair whose paths all
        cost alike (`Routes.alike`: a non-blocking Clos) changes no time, whichever ECMP picks, and
        is left out: such a collective's timing is found again for every instance."""
        if not self.routes.per_flow or plan.lane:
            return ()
        net = self.routes.net
        multi = self._plan_multi.get(id(plan))
        if multi is None:
            multi = self._plan_multi[id(plan)] = [
                (s, d, len(net.paths(s, d))) for s, d in self._pairs(plan)
                if len(net.paths(s, d)) > 1 and (self.shared or not self.routes.alike(s, d))]
        if not multi:
            return ()
        if self.compiled and not net.pinned:  # `net.pick` in C (a property test compares them)
            return core_picks(multi, flow, plan.chunks)
        return tuple(net.pick(s, d, flow + c, n) for s, d, n in multi for c in range(plan.chunks))

    def _links(self, plan: CollectivePlan, flow: int = 0, choices: tuple[int, ...] = ()) -> IntArray:
        """Every link the collective's messages cross (none is needed without sharing); its chunk
        c is flow `flow + c`, routed as `choices` say."""
        if not self.shared:
            return np.empty(0, dtype=np.int64)
        found = self._plan_links.get((id(plan), choices))
        if found is not None:
            return found
        pairs = self._pairs(plan)
        if plan.lane:
            lanes = self._lanes_for(plan)
            used: set[int] = set()
            for s, d in pairs:
                used.update(int(lanes.orbit[i]) for i in self.routes.links(s, d)[0])
            links = lanes.links_of(used)
        else:
            out: set[int] = set()
            flows = range(flow, flow + plan.chunks) if choices else (flow,)
            for s, d in pairs:
                for f in flows:
                    out.update(self.routes.links(s, d, f)[0])
            links = np.fromiter(sorted(out), dtype=np.int64, count=len(out))
        self._plan_links[(id(plan), choices)] = links
        return links

    def _emit_timing(self, act: Activity) -> None:
        """The messages of an isolated collective, every rank's (a lane plan's rank-0 messages are
        copied to every rank), in blocks of about `EMIT_BLOCK` rows."""
        t = act.timing
        assert t is not None and act.plan is not None
        self.timed_pending -= act.pending
        act.pending = 0
        if t.counted is not None:
            assert self.count is not None
            self.count(*t.counted)
            return
        if not len(t.src):
            return
        kind, _, ctx = act.ctx
        n = len(act.members) if act.plan.lane else 1
        if self.count is not None:  # only counts are kept
            if act.plan.lane:  # every member sends what rank 0 does
                ranks = np.asarray(act.members, dtype=np.int64)
                sent = np.full(len(ranks), float(t.nbytes.sum()))
            else:
                ranks, which = np.unique(t.src, return_inverse=True)
                sent = np.bincount(which, weights=t.nbytes.astype(np.float64), minlength=len(ranks))
            self.count(len(t.src) * n, int(t.nbytes.sum()) * n, ranks, sent)
            return
        step = max(1, EMIT_BLOCK // n)
        dims = [(s, size) for s, size, _ in self.routes.dims]
        for lo in range(0, len(t.src), step):
            sl = slice(lo, lo + step)
            if act.plan.lane:
                idx, src, dst = lane_images(n, dims, t.dst[sl], t.xor[sl])
                idx += lo
            else:
                idx = np.arange(lo, min(lo + step, len(t.src)))
                src, dst = t.src[sl], t.dst[sl]
            self.emit(kind, ctx, act.start + t.t_send[idx], act.start + t.t_arrive[idx], src, dst, t.nbytes[idx],
                      t.chunk[idx], t.step[idx])
