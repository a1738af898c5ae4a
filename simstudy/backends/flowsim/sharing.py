"""How the jobs of a cluster share flowsim's fluid network (a cluster's `network`, `sharing.json`).

A flow belongs to the job whose NPU sent it (jobs never share an NPU; a flow from no job's NPU to
one belongs to the receiver's job, else to none: weight 1, class 0). One entry of `POLICIES` per
`network.sharing` value builds what the fluid model asks (`netmodels.Shares`):

* `weighted`: each flow weighs its job's `weight` (weighted max-min);
* `priority`: each flow's class is its job's `priority` (strict classes, lower first, max-min in one);
* `mltcp`: each flow weighs 1 + slope x the fraction of its job's current iteration's bytes that the
  job has sent (MLTCP): bytes sent so far modulo the job's bytes per iteration, over them. The
  weights are those of the instant the rates of a flow's component are solved (a flow of it starts
  or ends); every message then goes through the shared model (no collective is timed alone), so
  that every byte a job sends is counted.

`fair` (max-min) has no entry: the model runs as it always has.

Crux's path selection (`routing: intensity`) pins host pairs to paths before the run
(`intensity_paths`); ECMP's hash routes every pair left unpinned.

Both need what each job sends and computes per iteration (`job_traffic`), read from the compiled
traces as the engine runs them: a collective's messages from its pattern (`chunk_messages`, chunk by
chunk), a send's bytes, a compute node's duration.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from simstudy import layout
from simstudy.backends.base import BackendError
from simstudy.backends.flowsim.netmodels import Flow, Msg, Shares
from simstudy.backends.network import Network
from simstudy.backends.patterns import chunk_messages, chunking, uses_trees
from simstudy.backends.traffic_build import COLLECTIVE_KIND, WorkloadInfo
from simstudy.chakra import CollectiveType, Node, NodeType
from simstudy.compiler import JobInfo, SharingInfo, read_jobs, read_sharing
from simstudy.compiler.cluster import START
from simstudy.spec import Congestion


@dataclass
class JobTraffic:
    """What one job sends and computes per iteration (every rank's, over its iterations)."""

    bytes_per_iter: float = 0.0
    compute_ns_per_iter: float = 0.0
    #: bytes per iteration from each NPU to each other
    pairs: dict[tuple[int, int], float] = field(default_factory=dict)

    @property
    def intensity(self) -> float:
        """Crux's GPU intensity: compute time per iteration over bytes per iteration (ns per byte;
        infinite for a job that sends nothing)."""
        return self.compute_ns_per_iter / self.bytes_per_iter if self.bytes_per_iter > 0 else math.inf


def job_traffic(info: WorkloadInfo, jobs: list[JobInfo]) -> list[JobTraffic]:
    """Every job's bytes (in all, and per pair of NPUs) and GPU compute time per iteration."""
    out = []
    cache: dict[tuple[str, tuple[int, ...], int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for job in jobs:
        pairs: dict[tuple[int, int], float] = defaultdict(float)
        compute = 0
        for rank in job.npus:
            for node in info.nodes[rank]:
                if node.type == NodeType.COMP_NODE and not node.get("is_cpu_op", False) and node.name != START:
                    compute += node.duration_micros * 1000
                elif node.type == NodeType.COMM_SEND_NODE:
                    pairs[(rank, int(node.get("comm_dst", -1)))] += int(node.get("comm_size", 0))
                elif node.type == NodeType.COMM_COLL_NODE:
                    _collective(info, node, rank, pairs, cache)
        its = max(job.iterations, 1)
        per = {p: b / its for p, b in pairs.items() if b > 0}
        out.append(JobTraffic(sum(per.values()), compute / its, per))
    return out


def _collective(info: WorkloadInfo, node: Node, rank: int, pairs: dict[tuple[int, int], float],
                cache: dict[tuple[str, tuple[int, ...], int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
    """Add the messages `rank` sends in one collective node (all its chunks) to `pairs`."""
    kind = COLLECTIVE_KIND.get(CollectiveType(int(node.get("comm_type", 0))))
    if kind is None:  # broadcasts take their duration, not the network
        return
    members = tuple(info.members(node, rank))
    group = len(members) < info.npus
    chunk_bytes, chunks = chunking(int(node.get("comm_size", 0)), info.chunks, kind, info.npus)
    turns = 2 if uses_trees(info.collectives, kind, members, group) else 1
    for t in range(turns):
        key = (kind, members, chunk_bytes, t)
        found = cache.get(key)
        if found is None:
            p = chunk_messages(info.collectives, kind, members, chunk_bytes, group, t)
            found = cache[key] = (p.src, p.dst, p.nbytes)
        src, dst, nbytes = found
        mine = src == rank
        share = (chunks + turns - 1 - t) // turns  # the chunks that take this turn's pattern
        for d, b in zip(dst[mine].tolist(), nbytes[mine].tolist(), strict=True):
            pairs[(rank, d)] += b * share


def intensity_paths(net: Network, traffic: list[JobTraffic]) -> dict[tuple[int, int], int]:
    """Crux's path selection: jobs in order of GPU intensity (highest first; ties: job order), each
    job's pairs of NPUs with a choice of paths in order of bytes (most first; ties: the pair), each
    pinned to the path whose busiest link carries the fewest bytes per iteration of the pairs placed
    before it (ties: the least bytes over the path's links, then ECMP's pick of the pair's first flow
    and the paths after it). Every pair's bytes then load its path's links."""
    load: dict[int, float] = defaultdict(float)
    pins: dict[tuple[int, int], int] = {}
    order = sorted(range(len(traffic)), key=lambda j: (-traffic[j].intensity, j))
    for j in order:
        for (s, d), b in sorted(traffic[j].pairs.items(), key=lambda kv: (-kv[1], kv[0])):
            paths = net.paths(s, d)
            best = 0
            if len(paths) > 1:
                first = net.pick(s, d, 0, len(paths))
                turn = [(first + i) % len(paths) for i in range(len(paths))]
                best = min(turn, key=lambda p: (max(load[k] for k in paths[p]), sum(load[k] for k in paths[p])))
                pins[(s, d)] = best
            for k in paths[best]:
                load[k] += b
    return pins


class _ByJob:
    """A flow's job: the job of its sender's NPU (of its receiver's when the sender is no job's)."""

    def __init__(self, jobs: list[JobInfo]) -> None:
        npus = max((max(j.npus) for j in jobs if j.npus), default=-1) + 1
        self.owner = [-1] * npus
        for j in jobs:
            for n in j.npus:
                self.owner[n] = j.index

    def job(self, msg: Msg) -> int:
        o = self.owner
        j = o[msg.src] if 0 <= msg.src < len(o) else -1
        if j < 0 and 0 <= msg.dst < len(o):
            j = o[msg.dst]
        return j


class WeightedShares(_ByJob):
    """Weighted max-min: a flow weighs its job's weight."""

    dynamic = False

    def __init__(self, jobs: list[JobInfo], weights: tuple[float, ...]) -> None:
        super().__init__(jobs)
        self.weights = weights

    def of(self, flows: list[Flow], now: int) -> tuple[list[float] | None, list[int] | None]:
        w = self.weights
        return [w[j] if j >= 0 else 1.0 for j in map(self.job, (f.msg for f in flows))], None

    def moved(self, f: Flow, rate: float, now: int) -> None:
        pass

    def drained(self, f: Flow, now: int) -> None:
        pass


class PriorityShares(WeightedShares):
    """Strict priority: a flow's class is its job's priority (max-min within a class)."""

    def __init__(self, jobs: list[JobInfo], priorities: tuple[int, ...]) -> None:
        super().__init__(jobs, ())
        self.priorities = priorities

    def of(self, flows: list[Flow], now: int) -> tuple[list[float] | None, list[int] | None]:
        p = self.priorities
        return None, [p[j] if j >= 0 else 0 for j in map(self.job, (f.msg for f in flows))]


class MltcpShares(_ByJob):
    """MLTCP: a flow weighs 1 + slope x the fraction of its job's iteration bytes the job has sent.

    A job's bytes sent at time t are those of its drained flows plus, for each flow in flight, a
    line c + rate x t (its bytes sent at its last change of rate, carried on at its rate): per job,
    the sum of its flows' c and of their rates, updated as rates change."""

    dynamic = True

    def __init__(self, jobs: list[JobInfo], slope: float, per_iter: list[float]) -> None:
        super().__init__(jobs)
        self.slope = slope
        self.per_iter = per_iter
        n = len(per_iter)
        self.done = [0.0] * n
        self.c = [0.0] * n
        self.rate = [0.0] * n
        self.line: dict[Flow, float] = {}

    def sent(self, job: int, now: int) -> float:
        """Bytes the job has sent by `now`."""
        return self.done[job] + self.c[job] + self.rate[job] * now

    def weight(self, job: int, now: int) -> float:
        b = self.per_iter[job] if job >= 0 else 0.0
        if b <= 0:
            return 1.0
        return 1.0 + self.slope * (math.fmod(max(self.sent(job, now), 0.0), b) / b)

    def of(self, flows: list[Flow], now: int) -> tuple[list[float] | None, list[int] | None]:
        found: dict[int, float] = {}
        out = []
        for f in flows:
            j = self.job(f.msg)
            w = found.get(j)
            if w is None:
                w = found[j] = self.weight(j, now)
            out.append(w)
        return out, None

    def moved(self, f: Flow, rate: float, now: int) -> None:
        j = self.job(f.msg)
        if j < 0:
            return
        delta = rate - f.rate
        self.line[f] = self.line.get(f, 0.0) - delta * now
        self.c[j] -= delta * now
        self.rate[j] += delta

    def drained(self, f: Flow, now: int) -> None:
        j = self.job(f.msg)
        if j < 0:
            return
        self.c[j] -= self.line.pop(f, 0.0)
        self.rate[j] -= f.rate
        self.done[j] += f.msg.size


#: network.sharing -> the shares of its flows (from the bundle's jobs, their sharing and traffic)
POLICIES: dict[str, Callable[[list[JobInfo], SharingInfo, Callable[[], list[JobTraffic]]], Shares]] = {
    "weighted": lambda jobs, s, traffic: WeightedShares(jobs, s.weights),
    "priority": lambda jobs, s, traffic: PriorityShares(jobs, s.priorities),
    "mltcp": lambda jobs, s, traffic: MltcpShares(jobs, s.slope, [t.bytes_per_iter for t in traffic()]),
}


def prepare(info: WorkloadInfo, net: Network, mode: Congestion) -> Shares | None:
    """The shares of a cluster bundle whose `network` is not max-min and ECMP (None: it is), with
    Crux's paths pinned on `net` when it asks for them. Only the fluid mode shares links by rates:
    any other is a BackendError naming `sharing.json`."""
    directory = info.bundle.directory
    sharing = read_sharing(directory)
    if sharing is None:
        return None
    jobs = read_jobs(directory) or []
    if not mode.fluid:
        field = "network.sharing" if sharing.sharing != "fair" else "network.routing.policy"
        raise BackendError(f"{directory / layout.SHARING}: {field}: {refusal(mode)}")
    found: list[list[JobTraffic]] = []

    def traffic() -> list[JobTraffic]:
        if not found:
            found.append(job_traffic(info, jobs))
        return found[0]

    if sharing.routing == "intensity":
        net.pinned.update(intensity_paths(net, traffic()))
    make = POLICIES.get(sharing.sharing)
    return None if make is None else make(jobs, sharing, traffic)


def refusal(mode: Congestion, backend: str = "flowsim") -> str:
    """Why a cluster's `network` options are refused in a mode that does not share links by rates."""
    return (f"how jobs share the network is modelled by flowsim's fluid congestion mode only, not by {backend}'s "
            f"{mode.value} mode (use backend flowsim with congestion fluid, or leave network out)")
