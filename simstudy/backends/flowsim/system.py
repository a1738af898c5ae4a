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

from simstudy.backends.flowsim.netmodels import Msg, NetModel
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.patterns import Phase, chunking, dimension_phases
from simstudy.backends.traffic_build import WorkloadInfo
from simstudy.compile.collectives import Pattern, algorithm

IntArray = NDArray[np.int64]
#: The MemBus delay of a communicator group's ring (ASTRA-SIM's `Transmition::Fast`).
GROUP_DELAY_NS = 10


@dataclass(frozen=True)
class PhaseProgram:
    """One phase of a chunk, for the simulated ranks (every member, or member 0 of a lane plan).

    Transfers are in CSR order by (step, simulated rank): those of rank index i at step s are
    `out_dst/out_bytes[out_ptr[s * R + i] : out_ptr[s * R + i + 1]]`; `in_count[s, i]` messages
    reach it in step s; `proc_ns[s]` is its reduction after receiving step s."""

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

    @property
    def sim_ranks(self) -> int:
        return 1 if self.lane else len(self.members)

    @property
    def total_steps(self) -> int:
        return sum(p.steps for p in self.phases)


def _program(pattern: Pattern, sim: IntArray, local: dict[int, int] | None, n_sim: int, *, kind: str, queue: int,
             delay: int, proc: dict[int, int], mem_bw: float, offset: int, symmetry: str | None, dim: int,
             steps: int) -> PhaseProgram:
    """The CSR program of a pattern for the simulated ranks `sim` (global ids)."""
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
    order = np.argsort(key, kind="stable")
    ptr = np.searchsorted(key[order], np.arange(steps * n_sim + 1))
    proc_ns = tuple(3 * math.floor(proc[s] / mem_bw) if s in proc else 0 for s in range(steps))
    return PhaseProgram(kind, queue, delay, steps, ptr.astype(np.int64), pattern.dst[order], pattern.nbytes[order],
                        inc.astype(np.int64), proc_ns, offset, symmetry, dim)


class Planner:
    """Builds (and caches) the plan of every collective of a bundle."""

    def __init__(self, info: WorkloadInfo, *, lanes: bool) -> None:
        self.info = info
        self.lanes = lanes
        system = info.system
        self.endpoint_delay = int(float(system.get("endpoint-delay", 10)))
        self.mem_bw = float(system.get("local-mem-bw", 1600)) or 1600.0
        self.active = max(1, int(system.get("active-chunks-per-dimension", 1)))
        self.native = info.topology.routing.kind == "dimension_order"
        self.cache: dict[tuple[object, ...], CollectivePlan] = {}

    def plan(self, kind: str, members: tuple[int, ...], size: int, group: bool) -> CollectivePlan:
        """The plan of a collective of `size` bytes over `members` (`group`: a communicator group
        smaller than the job, which ASTRA-SIM runs as one ring in the group file's order)."""
        key = (kind, members, size, group)
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = self._plan(kind, members, size, group)
        return found

    def _phases(self, kind: str, members: tuple[int, ...], chunk: int, group: bool) -> list[tuple[Phase, str, int,
                                                                                                 bool, int]]:
        """(phase, algorithm, queue, ring backwards, delay) of one chunk."""
        info = self.info
        if group:
            return [(Phase(kind, -1, chunk), "ring", 0, False, GROUP_DELAY_NS)]
        if not info.by_dimension(kind, list(members)):
            return [(Phase(kind, -1, chunk), info.algorithm(kind), 0, False, self.endpoint_delay)]
        algos = info.algorithms(kind)
        out = []
        lba = kind == "all_reduce" and info.optimization != "baseline"
        for ph in dimension_phases(kind, info.dim_sizes(), chunk, info.optimization):
            algo = algos[ph.dim] if ph.dim < len(algos) else algos[-1]
            # localBWAware: a dimension's all-gather shares the queue of its reduce-scatter and, as
            # ASTRA-SIM allocates it (`get_next_queue_id_last`), runs its ring anticlockwise.
            backwards = lba and ph.kind == "all_gather"
            out.append((ph, algo, ph.dim, backwards, self.endpoint_delay))
        return out

    def _plan(self, kind: str, members: tuple[int, ...], size: int, group: bool) -> CollectivePlan:
        info = self.info
        chunk_bytes, chunks = chunking(size, info.chunks, kind, info.npus)
        spec = self._phases(kind, members, chunk_bytes, group)
        dim_sizes = info.dim_sizes()
        lane = self.lanes and self.native and not group and members == tuple(range(info.npus)) and all(
            self._symmetric(ph, algo) for ph, algo, *_ in spec)
        phases: list[PhaseProgram] = []
        offset = 0
        m = np.asarray(members, dtype=np.int64)
        sim = m[:1] if lane else m
        local: dict[int, int] | None = None if lane else {}
        for ph, algo_name, queue, backwards, delay in spec:
            algo = algorithm(algo_name)
            if ph.dim < 0:
                line = m
                n = len(members)
            else:
                stride = int(np.prod(dim_sizes[: ph.dim], dtype=np.int64))
                n = dim_sizes[ph.dim]
                line = np.arange(n, dtype=np.int64) * stride
            if lane:
                pattern = algo.pattern(ph.kind, line, ph.size, only=0, reverse=backwards)
            elif ph.dim < 0:
                pattern = algo.pattern(ph.kind, line, ph.size, reverse=backwards)
            else:
                pattern = _all_lines(algo_name, ph, dim_sizes, backwards)
            steps = pattern.steps
            if steps == 0:
                continue
            symmetry = algo.symmetry_of(ph.kind) if lane else None
            phases.append(_program(pattern, sim, local, len(sim), kind=ph.kind, queue=queue, delay=delay,
                                   proc=algo.processing(ph.kind, n, ph.size), mem_bw=self.mem_bw, offset=offset,
                                   symmetry=symmetry, dim=ph.dim, steps=steps))
            offset += steps
        return CollectivePlan(kind, members, chunks, chunk_bytes, self.active, phases, lane, size, group)

    def _symmetric(self, ph: Phase, algo_name: str) -> bool:
        """Whether every rank of a phase does what rank 0 does, mapped by a symmetry of the network."""
        sym = algorithm(algo_name).symmetry_of(ph.kind)
        dims = self.info.topology.routing.dims
        if ph.dim < 0 and sum(1 for d in dims if d.npus > 1) > 1:
            # One ring or tree over every rank of a multi-dimensional network: only a pattern in
            # which every rank sends to every other one maps onto itself dimension by dimension.
            return algo_name != "ring" and ph.kind == "all_to_all"
        if sym == "rotate":
            return True
        if sym == "xor":
            used = [d for d in dims if d.npus > 1] if ph.dim < 0 else [dims[ph.dim]]
            return all(d.topology != "Ring" and d.npus & (d.npus - 1) == 0 for d in used) and (
                ph.dim >= 0 or len(used) == 1)
        return False


def _all_lines(algo_name: str, phase: Phase, dim_sizes: list[int], backwards: bool) -> Pattern:
    """A phase's transfers on every line of its dimension."""
    stride = int(np.prod(dim_sizes[: phase.dim], dtype=np.int64))
    n = dim_sizes[phase.dim]
    total = int(np.prod(dim_sizes, dtype=np.int64))
    algo = algorithm(algo_name)
    parts = [algo.pattern(phase.kind, [s + j * stride for j in range(n)], phase.size, reverse=backwards)
             for s in range(total) if (s // stride) % n == 0]
    cols = [np.concatenate([getattr(p, f) for p in parts]) for f in ("step", "src", "dst", "nbytes")]
    return Pattern(*cols)


# -- running a plan ----------------------------------------------------------------------------

#: A message record: (t_send, t_arrive, src, dst, bytes, chunk, step).
Record = tuple[int, int, int, int, int, int, int]


class CollectiveRun:
    """One collective executed rank by rank on a network model.

    `route(src, dst, size)` gives a message's (keys, multiplicities, latency, uncontended ns);
    `on_rank_done(rank, t)` is called when a member has finished every chunk; `on_message(msg)`
    for every message that arrived (its `ctx` is (sim rank, chunk, phase, step))."""

    def __init__(self, plan: CollectivePlan, sched: Scheduler, net: NetModel,
                 route: Callable[[int, int, int], tuple[tuple[int, ...], tuple[int, ...] | None, float, int]],
                 on_rank_done: Callable[[int, int], None], on_message: Callable[[Msg], None] | None = None) -> None:
        self.plan = plan
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
        q = self.plan.phases[p].queue
        if self.running[i][q] < self.plan.active:
            self.running[i][q] += 1
            self._begin(i, c, p)
        else:
            self.waiting[i][q].append((c, p))

    def _begin(self, i: int, c: int, p: int) -> None:
        self.phase[i][c] = p
        self.step[i][c] = 0
        self.sent[i][c] = False
        s = self.sched
        s.at(s.now + self.plan.phases[p].delay_ns, self._send, i, c)

    def _send(self, i: int, c: int) -> None:
        plan = self.plan
        p = self.phase[i][c]
        st = self.step[i][c]
        ph = plan.phases[p]
        src = plan.members[i]
        lo, hi = ph.out_ptr[st * plan.sim_ranks + i], ph.out_ptr[st * plan.sim_ranks + i + 1]
        net, route, deliver = self.net, self.route, self._arrive
        for k in range(lo, hi):
            dst = int(ph.out_dst[k])
            size = int(ph.out_bytes[k])
            keys, mult, latency, alone = route(src, dst, size)
            net.send(Msg(src, dst, size, keys, mult, latency, alone, deliver, (i, c, p, st)))
        self.sent[i][c] = True
        self._check(i, c)

    def _arrive(self, msg: Msg) -> None:
        i, c, p, st = msg.ctx
        if not self.plan.lane:
            i = self._local(msg.dst)
        self.arrived[(i, c, p, st)] += 1
        if self.on_message is not None:
            self.on_message(msg)
        if self.phase[i][c] == p and self.step[i][c] == st and self.sent[i][c]:
            self._check(i, c)

    def _local(self, rank: int) -> int:
        lut = getattr(self, "_lut", None)
        if lut is None:
            lut = self._lut = {r: k for k, r in enumerate(self.plan.members)}
        return lut[rank]

    def _check(self, i: int, c: int) -> None:
        p = self.phase[i][c]
        st = self.step[i][c]
        ph = self.plan.phases[p]
        need = int(ph.in_count[st, i])
        key = (i, c, p, st)
        if self.arrived.get(key, 0) < need:
            return
        self.arrived.pop(key, None)
        s = self.sched
        wait = ph.proc_ns[st] + ph.delay_ns
        if st + 1 < ph.steps:
            self.step[i][c] = st + 1
            self.sent[i][c] = False
            s.at(s.now + wait, self._send, i, c)
        else:
            self.sent[i][c] = False
            s.at(s.now + wait, self._leave, i, c)

    def _leave(self, i: int, c: int) -> None:
        plan = self.plan
        p = self.phase[i][c]
        q = plan.phases[p].queue
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
