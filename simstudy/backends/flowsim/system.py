"""ASTRA-SIM's system layer, rank by rank: how a collective becomes messages.

As ASTRA-SIM c459ab6 runs a collective (`Sys::generate_collective`, `StreamBaseline`, the
algorithms of astraccl): the collective is cut into chunks (streams) of `chunk_bytes`; each
chunk runs one phase per network dimension it uses (one phase on a group or a one-dimensional
network); a rank keeps at most `active-chunks-per-dimension` chunks running in each
dimension's queue, starting the next waiting one when one leaves. In a phase, a rank:

* waits the endpoint delay (ASTRA-SIM's MemBus: `endpoint-delay`, 10 ns for a group's ring),
  then sends its messages of step 0;
* once it has sent step s and received every message addressed to it in step s, reduces what
  it received if the algorithm says so (3 x bytes / local-mem-bw), waits the endpoint delay,
  and sends step s + 1 (or leaves the phase after the last step).

`CollectivePlan` is that program for one collective; `CollectiveRun` executes it on a network
model, for every member or, when the collective is symmetric (every rank does what rank 0
does, rotated), for rank 0 alone on link orbits (see `Lanes`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simstudy.backends.base import BackendError
from simstudy.backends.flowsim.netmodels import Msg, NetModel
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.patterns import PhaseSpec, chunking, collective_phases, dim_line, phase_messages
from simstudy.backends.traffic_build import WorkloadInfo
from simstudy.compiler.collectives import Pattern, algorithm

IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class PhaseProgram:
    """One phase of a chunk, for the simulated ranks (every member, or member 0 of a lane plan).

    Transfers are in CSR order by (step, simulated rank): those of rank index i at step s are
    `out_dst/out_bytes[out_ptr[s * R + i] : out_ptr[s * R + i + 1]]`; `in_count[s, i]` messages
    reach it in step s; `proc_ns[s]` is its reduction after receiving step s. A phase whose steps
    all send the same (a ring's: every member to its neighbour, the same bytes) keeps its first
    step only (`period` 1; step s is stored step s % period): memory by ranks, not by messages."""

    kind: str
    queue: int
    delay_ns: int
    steps: int
    out_ptr: IntArray
    out_dst: IntArray
    out_bytes: IntArray
    in_count: IntArray
    proc_ns: tuple[int, ...]
    step_offset: int
    symmetry: str | None
    dim: int
    #: ASTRA-SIM's direct (AllToAll) all-reduce: each message received in step 0 lets the rank send
    #: one message of step 1 once all of step 0 has arrived, as its MemBus events fire
    gated: bool = False
    #: steps stored (0: every step); step s is stored step s % period
    period: int = 0

    @property
    def stored(self) -> int:
        """Steps held in the arrays."""
        return self.period or self.steps


def _periodic(pattern: Pattern, steps: int) -> int:
    """How many messages one step of a pattern holds when every step sends what the first one
    does, in the same order (then the pattern is stored as that step), else 0."""
    total = len(pattern.step)
    if steps < 2 or total % steps:
        return 0
    m = total // steps
    if not (pattern.step.reshape(steps, m) == np.arange(steps)[:, None]).all():
        return 0
    for col in (pattern.src, pattern.dst, pattern.nbytes):
        rows = col.reshape(steps, m)
        if not (rows == rows[0]).all():
            return 0
    return m


@dataclass
class CollectivePlan:
    """A collective of `members`: `chunks` chunks of `chunk_bytes`, `active` running per queue."""

    kind: str
    members: tuple[int, ...]
    chunks: int
    chunk_bytes: int
    active: int
    phases: list[PhaseProgram]
    lane: bool  # simulated for member 0 alone (members are every rank, in order, and symmetric)
    size: int = 0
    group: bool = False
    #: the phases of odd chunks when they differ (the double binary tree uses its two trees in turn)
    odd_phases: list[PhaseProgram] | None = None

    @property
    def sim_ranks(self) -> int:
        return 1 if self.lane else len(self.members)


def _program(pattern: Pattern, sim: IntArray, local: dict[int, int] | None, n_sim: int, *, kind: str, queue: int,
             delay: int, proc: dict[int, int], mem_bw: float, offset: int, symmetry: str | None, dim: int,
             steps: int, gated: bool = False, compress: bool = True, first_step: bool = False) -> PhaseProgram:
    """The CSR program of a pattern for the simulated ranks `sim` (global ids); `compress`: one
    step stored when every step sends the same; `first_step`: the pattern is that step already."""
    proc_ns = tuple(3 * math.floor(proc[s] / mem_bw) if s in proc else 0 for s in range(steps))
    period = 0
    m = len(pattern.step) if first_step else _periodic(pattern, steps) if compress else 0
    if m:  # keep the first step only
        period = 1
        pattern = Pattern(pattern.step[:m], pattern.src[:m], pattern.dst[:m], pattern.nbytes[:m])
    full = steps
    steps = period or steps
    if local is None:  # lane: the pattern holds rank 0's transfers only
        src_local = np.zeros(len(pattern.src), dtype=np.int64)
        inc = np.bincount(pattern.step, minlength=steps).reshape(steps, 1)
    else:
        lut = np.full(int(max(sim.max(), pattern.src.max(initial=0), pattern.dst.max(initial=0))) + 1, -1,
                      dtype=np.int64)
        lut[sim] = np.arange(len(sim))
        src_local = lut[pattern.src]
        dst_local = lut[pattern.dst]
        inc = np.bincount(pattern.step * n_sim + dst_local, minlength=steps * n_sim).reshape(steps, n_sim)
    key = pattern.step * n_sim + src_local
    order = np.argsort(key, kind="stable")  # a rank's messages of a step in the order the pattern sends them
    ptr = np.searchsorted(key[order], np.arange(steps * n_sim + 1))
    return PhaseProgram(kind, queue, delay, full, ptr.astype(np.int64), pattern.dst[order], pattern.nbytes[order],
                        inc.astype(np.int64), proc_ns, offset, symmetry, dim, gated, period)


class NotAlike(BackendError):
    """A collective that one rank stands for finished its members at different times: the ranks it
    stands for would not run as it does (a run with replicas runs again without them)."""


class Planner:
    """Builds (and caches) the plan of every collective of a bundle: the messages `patterns`
    defines, as a program per phase. `lanes`: symmetric collectives of every rank are planned for
    rank 0 alone (on link orbits, see `routes.Lanes`)."""

    def __init__(self, info: WorkloadInfo, *, lanes: bool) -> None:
        self.info = info
        self.lanes = lanes
        system = info.system
        self.cfg = info.collectives
        self.mem_bw = float(system.get("local-mem-bw", 1600)) or 1600.0
        self.active = max(1, int(system.get("active-chunks-per-dimension", 1)))
        self.native = info.topology.routing.kind == "dimension_order"
        self.cache: dict[tuple[object, ...], CollectivePlan] = {}
        # dimensions whose links are all alike (bandwidth, latency, loss): a topology.json may give
        # each link its own, and then ranks differ and no rank stands for another on that dimension
        kinds: dict[int, set[tuple[float, float, float]]] = defaultdict(set)
        for link in info.topology.links:
            kinds[link.dim].add((link.bytes_per_ns, link.latency_ns, link.loss))
        self.uniform = {k for k, v in kinds.items() if len(v) == 1}

    def plan(self, kind: str, members: tuple[int, ...], size: int, group: bool, turn: int = 0) -> CollectivePlan:
        """The plan of a collective of `size` bytes over `members` (`group`: a communicator group
        smaller than the job, which ASTRA-SIM runs as one ring in the group file's order). `turn`
        is which of the double binary tree's two trees its first chunk uses."""
        key = (kind, members, size, group, turn % 2)
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = self._plan(kind, members, size, group, turn % 2)
        return found

    def symmetric(self, kind: str, members: tuple[int, ...], size: int) -> bool:
        """Whether a collective of every rank is symmetric: every rank does what rank 0 does,
        mapped by a symmetry of an ASTRA-SIM network (so every rank finishes at once)."""
        info = self.info
        if not self.native or members != tuple(range(info.npus)):
            return False
        chunk_bytes, _ = chunking(size, info.chunks, kind, info.npus)
        return all(self._symmetric(ph) for ph in collective_phases(self.cfg, kind, members, chunk_bytes, False))

    def _uniform(self, ph: PhaseSpec) -> bool:
        """Whether every link of the dimensions a phase uses is alike."""
        dims = self.info.topology.routing.dims
        used = [ph.dim] if ph.dim >= 0 else [k for k, d in enumerate(dims) if d.npus > 1]
        return all(k in self.uniform for k in used)

    def _plan(self, kind: str, members: tuple[int, ...], size: int, group: bool, turn: int) -> CollectivePlan:
        info = self.info
        chunk_bytes, chunks = chunking(size, info.chunks, kind, info.npus)
        spec = collective_phases(self.cfg, kind, members, chunk_bytes, group)
        lane = self.lanes and not group and self.symmetric(kind, members, size)
        phases = self._programs(spec, members, lane, turn)
        odd = self._programs(spec, members, lane, turn + 1) if any(
            algorithm(ph.algorithm).alternates for ph in spec) else None
        return CollectivePlan(kind, members, chunks, chunk_bytes, self.active, phases, lane, size, group, odd)

    def _programs(self, spec: list[PhaseSpec], members: tuple[int, ...], lane: bool,
                  turn: int) -> list[PhaseProgram]:
        info = self.info
        dim_sizes = info.dim_sizes()
        phases: list[PhaseProgram] = []
        offset = 0
        m = np.asarray(members, dtype=np.int64)
        sim = m[:1] if lane else m
        local: dict[int, int] | None = None if lane else {}
        for ph in spec:
            algo = algorithm(ph.algorithm)
            n = len(members) if ph.dim < 0 else dim_sizes[ph.dim]
            # one call of the algorithm (every member, or one line): a ring's first step only, as
            # `_program` would keep it of all its steps (N x 2(N-1) transfers at 4,096 ranks: 1 GB)
            single = ph.dim < 0 or lane or n == int(np.prod(dim_sizes))
            first = algo.first_step(ph.kind, m if ph.dim < 0 else dim_line(dim_sizes, ph.dim), ph.size,
                                    only=0 if lane else None, reverse=ph.backwards) if single else None
            one = first is not None and first[1] >= 2 and not (ph.kind in algo.gated and first[1] == 2)
            if one:
                assert first is not None
                pattern, steps = first
            else:
                pattern = phase_messages(ph, m, dim_sizes, turn, first_only=lane)
                steps = pattern.steps
                if steps == 0:
                    continue
            symmetry = algo.symmetry_of(ph.kind) if lane else None
            gated = ph.kind in algo.gated and steps == 2
            phases.append(_program(pattern, sim, local, len(sim), kind=ph.kind, queue=ph.queue, delay=ph.delay_ns,
                                   proc=algo.processing(ph.kind, n, ph.size), mem_bw=self.mem_bw, offset=offset,
                                   symmetry=symmetry, dim=ph.dim, steps=steps, gated=gated, first_step=one))
            offset += steps
        return phases

    def _symmetric(self, ph: PhaseSpec) -> bool:
        """Whether every rank of a phase does what rank 0 does, mapped by a symmetry of the network."""
        sym = algorithm(ph.algorithm).symmetry_of(ph.kind)
        dims = self.info.topology.routing.dims
        if not self._uniform(ph):
            return False
        if ph.dim < 0 and sum(1 for d in dims if d.npus > 1) > 1:
            # One ring or tree over every rank of a multi-dimensional network (collectives of every
            # rank run dimension by dimension there): no symmetry of the network maps it onto itself.
            return False
        if sym == "rotate":
            return True
        if sym == "xor":
            used = [d for d in dims if d.npus > 1] if ph.dim < 0 else [dims[ph.dim]]
            return all(d.topology != "Ring" and d.npus & (d.npus - 1) == 0 for d in used) and (
                ph.dim >= 0 or len(used) == 1)
        return False


# -- running a plan ----------------------------------------------------------------------------

#: A message record: (t_send, t_arrive, src, dst, bytes, chunk, step).
Record = tuple[int, int, int, int, int, int, int]


class CollectiveRun:
    """One collective executed rank by rank on a network model.

    `route(src, dst, size, flow)` gives a message's (keys, multiplicities, latency, uncontended
    ns); chunk c's messages are flow `flow + c`. `on_rank_done(rank, t)` is called when a member
    has finished every chunk; `on_message(msg)` for every message that arrived (its `ctx` is
    (sim rank, chunk, phase, step))."""

    def __init__(self, plan: CollectivePlan, sched: Scheduler, net: NetModel,
                 route: Callable[[int, int, int, int], tuple[tuple[int, ...], tuple[int, ...] | None, float, int]],
                 on_rank_done: Callable[[int, int], None], on_message: Callable[[Msg], None] | None = None, *,
                 flow: int = 0) -> None:
        self.plan = plan
        self.flow = flow
        self.n = plan.sim_ranks
        self.lane = plan.lane
        self.progs = [plan.phases, plan.odd_phases or plan.phases]
        csr = [[(ph.out_ptr.tolist(), ph.out_dst.tolist(), ph.out_bytes.tolist()) for ph in progs]
               for progs in (plan.phases, plan.odd_phases)
               if progs is not None]
        need = [[ph.in_count.tolist() for ph in progs] for progs in (plan.phases, plan.odd_phases) if progs is not None]
        self.csr = [csr[0], csr[-1]]  # by chunk parity
        self.need = [need[0], need[-1]]
        per = [[ph.stored for ph in progs] for progs in (plan.phases, plan.odd_phases) if progs is not None]
        self.period = [per[0], per[-1]]
        self.sched = sched
        self.net = net
        self.route = route
        self.on_rank_done = on_rank_done
        self.on_message = on_message
        n = plan.sim_ranks
        queues = max((p.queue for p in plan.phases), default=0) + 1
        self.running = [[0] * queues for _ in range(n)]
        self.waiting: list[list[list[tuple[int, int]]]] = [[[] for _ in range(queues)] for _ in range(n)]
        self.phase = [[0] * plan.chunks for _ in range(n)]
        self.step = [[0] * plan.chunks for _ in range(n)]
        self.sent = [[False] * plan.chunks for _ in range(n)]
        self.arrived: dict[tuple[int, int, int, int], int] = defaultdict(int)
        self.left = [plan.chunks] * n
        self.free: dict[tuple[int, int, int], int] = defaultdict(int)  # gated phases: MemBus events fired
        self.queued: dict[tuple[int, int], list[int]] = {}  # gated phases: step-1 messages not yet sent
        self.done = 0

    def start(self) -> None:
        """Start every simulated rank now."""
        for i in range(self.plan.sim_ranks):
            self.start_rank(i)

    def start_rank(self, i: int) -> None:
        """Start simulated rank i now: ASTRA-SIM starts a rank's chunks when that rank issues the
        collective; messages that reach it earlier wait for it."""
        if not self.plan.phases:
            self._rank_done(i)
            return
        for c in range(self.plan.chunks):
            self._enqueue(i, c, 0)

    def index(self, rank: int) -> int:
        """The simulated-rank index of a member."""
        return 0 if self.plan.lane else self._local(rank)

    def _enqueue(self, i: int, c: int, p: int) -> None:
        q = self.progs[c & 1][p].queue
        if self.running[i][q] < self.plan.active:
            self.running[i][q] += 1
            self._begin(i, c, p)
        else:
            self.waiting[i][q].append((c, p))

    def _begin(self, i: int, c: int, p: int) -> None:
        self.phase[i][c] = p
        self.step[i][c] = 0
        self.sent[i][c] = False
        ptr = self.csr[c & 1][p][0]
        if ptr[i] == ptr[i + 1]:
            # Nothing to send first (a tree's inner node): it waits for its children from now on.
            self._send(i, c)
            return
        s = self.sched
        s.at(s.now + self.progs[c & 1][p].delay_ns, self._send, i, c)

    def _send(self, i: int, c: int) -> None:
        p = self.phase[i][c]
        st = self.step[i][c]
        ptr, dsts, sizes = self.csr[c & 1][p]
        src = self.plan.members[i]
        k = st % self.period[c & 1][p] * self.n + i
        net, route, deliver = self.net, self.route, self._arrive
        flow = self.flow + c
        for j in range(ptr[k], ptr[k + 1]):
            dst = dsts[j]
            size = sizes[j]
            keys, mult, latency, alone = route(src, dst, size, flow)
            net.send(Msg(src, dst, size, keys, mult, latency, alone, deliver, (i, c, p, st)))
        self.sent[i][c] = True
        if st == 0 and self.progs[c & 1][p].gated:
            self._gate(i, c, p)  # its step-0 messages may all have arrived (and been reduced) already
            return
        self._check(i, c)

    def _arrive(self, msg: Msg) -> None:
        i, c, p, st = msg.ctx
        if not self.lane:
            i = self._local(msg.dst)
        self.arrived[(i, c, p, st)] += 1
        if self.on_message is not None:
            self.on_message(msg)
        ph = self.progs[c & 1][p]
        if ph.gated and st == 0:
            s = self.sched
            s.at(s.now + ph.delay_ns + ph.proc_ns[0], self._general, i, c, p)
            return
        if self.phase[i][c] == p and self.step[i][c] == st and self.sent[i][c]:
            self._check(i, c)

    def _general(self, i: int, c: int, p: int) -> None:
        """A received step-0 message of a gated phase has been reduced: one more message of step 1
        may go, once every step-0 message has arrived (ASTRA-SIM's AllToAll all-reduce)."""
        self.free[(i, c, p)] += 1  # of this phase: a later phase's may fire while the rank is still in this one
        self._gate(i, c, p)

    def _gate(self, i: int, c: int, p: int) -> None:
        """Send what a gated phase's reduced step-0 messages allow: step 1 begins once the rank has
        sent its step 0 and every step-0 message has arrived; then one step-1 message per reduced one."""
        if self.phase[i][c] != p or (not self.sent[i][c] and self.step[i][c] == 0):
            return
        key = (i, c)
        if self.step[i][c] == 0:
            if self.arrived.get((i, c, p, 0), 0) < self.need[c & 1][p][0][i]:
                return
            self.arrived.pop((i, c, p, 0), None)
            ptr = self.csr[c & 1][p][0]
            k = 1 % self.period[c & 1][p] * self.n + i
            self.queued[key] = list(range(ptr[k], ptr[k + 1]))
            self.step[i][c] = 1
            self.sent[i][c] = False
        queued = self.queued.get(key)
        if not queued or self.step[i][c] != 1:
            return
        release = min(self.free[(i, c, p)], len(queued))
        self.free[(i, c, p)] -= release
        _, dsts, sizes = self.csr[c & 1][p]
        src = self.plan.members[i]
        for j in queued[:release]:
            keys, mult, latency, alone = self.route(src, dsts[j], sizes[j], self.flow + c)
            self.net.send(Msg(src, dsts[j], sizes[j], keys, mult, latency, alone, self._arrive, (i, c, p, 1)))
        del queued[:release]
        if not queued:
            del self.queued[key]
            self.free.pop((i, c, p), None)
            self.sent[i][c] = True
            self._check(i, c)

    def _local(self, rank: int) -> int:
        lut = getattr(self, "_lut", None)
        if lut is None:
            lut = self._lut = {r: k for k, r in enumerate(self.plan.members)}
        return lut[rank]

    def _check(self, i: int, c: int) -> None:
        """Step done (sent, everything addressed to it received)? Then, if it received something,
        reduce and wait the endpoint delay, and go on to the next step this rank takes part in (a
        tree's node skips the steps of other levels) or leave; a rank whose last part was to send
        leaves at once (ASTRA-SIM's tree nodes exit when they have sent to their children)."""
        par = c & 1
        p = self.phase[i][c]
        st = self.step[i][c]
        ph = self.progs[par][p]
        if ph.gated and st == 0:
            return  # step 1 goes out as the step-0 messages are reduced (`_general`)
        needs = self.need[par][p]
        per = self.period[par][p]
        need = needs[st % per][i]
        key = (i, c, p, st)
        if self.arrived.get(key, 0) < need:
            return
        self.arrived.pop(key, None)
        s = self.sched
        wait = ph.proc_ns[st] + ph.delay_ns if need else 0
        nxt = st + 1
        ptr = self.csr[par][p][0]
        n = self.n
        while nxt < ph.steps and not needs[nxt % per][i] and ptr[nxt % per * n + i] == ptr[nxt % per * n + i + 1]:
            nxt += 1
        self.sent[i][c] = False
        if nxt < ph.steps:
            self.step[i][c] = nxt
            s.at(s.now + wait, self._send, i, c)
        elif wait:
            s.at(s.now + wait, self._leave, i, c)
        else:
            self._leave(i, c)

    def _leave(self, i: int, c: int) -> None:
        plan = self.plan
        p = self.phase[i][c]
        q = self.progs[c & 1][p].queue
        self.running[i][q] -= 1
        waiting = self.waiting[i][q]
        if waiting:
            self.running[i][q] += 1
            self._begin(i, *waiting.pop(0))
        if p + 1 < len(plan.phases):
            self._enqueue(i, c, p + 1)
            return
        self.left[i] -= 1
        if self.left[i] == 0:
            self._rank_done(i)

    def _rank_done(self, i: int) -> None:
        self.done += 1
        self.on_rank_done(self.plan.members[i], self.sched.now)


def lane_images(n: int, dims: Sequence[tuple[int, int]], dst0: IntArray, xor: NDArray[np.bool_]) -> tuple[
        IntArray, IntArray, IntArray]:
    """Every rank's copy of each of rank 0's messages to `dst0`: rank r sends where rank 0 sends,
    shifted by r dimension by dimension (`xor`: combined by XOR). Returns (index of the rank-0
    message, src, dst) over all `n` ranks; `dims` are (stride, size) per dimension."""
    ranks = np.arange(n, dtype=np.int64)
    m = len(dst0)
    idx = np.repeat(np.arange(m, dtype=np.int64), n)
    src = np.tile(ranks, m)
    d = dst0[idx]
    x = xor[idx]
    dst = np.zeros_like(src)
    for stride, size in dims:
        a = (src // stride) % size
        b = (d // stride) % size
        dst += np.where(x, a ^ b, (a + b) % size) * stride
    return idx, src, dst
