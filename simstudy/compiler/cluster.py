"""A cluster -> one bundle in which every job runs on its own NPUs of the shared topology.

Each job is compiled as the scenario it would be alone (`job_scenario`), then moved onto the
NPUs its placement gave it: its ranks become those NPUs, its collectives get a communicator group
of their own (the job's ranks, or the job's sub-groups mapped onto NPUs: one group per job and
sub-group, so no two jobs share one), its sends and receives name NPUs, and every node carries the
job's index (`simstudy.job`). A job that starts later waits for a compute node of `start_ms`.
NPUs no job uses run one empty compute node (ASTRA-SIM needs a trace for every NPU).
`jobs.json` beside the traces says which NPUs, start and iterations each job has; `sharing.json`,
only when the cluster's `network` is not today's (max-min, ECMP), how the jobs share the network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simstudy import layout
from simstudy.compiler.graph import ExecutionGraph, RankGraph, Task, TaskKind
from simstudy.files import write_json
from simstudy.spec import Cluster, Scenario, Switch

#: Name of the node that holds a job back until its start time.
START = "job_start"
#: Name of the node of an NPU no job uses.
IDLE = "idle"


@dataclass(frozen=True)
class JobInfo:
    """One job of a cluster bundle: its name, NPUs (rank r on npus[r]), start and iterations."""

    index: int
    name: str
    npus: tuple[int, ...]
    start_ns: int
    iterations: int

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "npus": list(self.npus), "start_ns": self.start_ns,
                "iterations": self.iterations}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> JobInfo:
        return cls(int(d["index"]), str(d["name"]), tuple(int(n) for n in d["npus"]), int(d["start_ns"]),
                   int(d["iterations"]))


@dataclass(frozen=True)
class SharingInfo:
    """A cluster's `network` as a backend reads it: the policy, its parameters, and per job (in
    job order) its weight and priority."""

    sharing: str
    slope: float
    routing: str
    weights: tuple[float, ...]
    priorities: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"sharing": self.sharing, "mltcp_slope": self.slope, "routing": self.routing,
                "weights": list(self.weights), "priorities": list(self.priorities)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SharingInfo:
        return cls(str(d["sharing"]), float(d["mltcp_slope"]), str(d["routing"]),
                   tuple(float(w) for w in d["weights"]), tuple(int(p) for p in d["priorities"]))

    @classmethod
    def of(cls, cluster: Cluster) -> SharingInfo:
        net = cluster.network
        return cls(net.sharing, net.mltcp.slope, net.routing.policy, tuple(j.weight for j in cluster.jobs),
                   tuple(j.priority for j in cluster.jobs))


def job_scenario(cluster: Cluster, index: int) -> Scenario:
    """Job `index` as a scenario of its own (its ranks on a switch; the network is the cluster's)."""
    job = cluster.jobs[index]
    return Scenario(
        name=f"{cluster.name}.{job.name}",
        model=job.model,
        parallelism=job.parallelism,
        topology=Switch(npus=job.ranks),
        system=job.system or cluster.system,
        training=job.training,
    )


def jobs_info(cluster: Cluster) -> list[JobInfo]:
    return [JobInfo(i, job.name, npus, round(job.start_ms * 1e6), job.training.iterations)
            for i, (job, npus) in enumerate(zip(cluster.jobs, cluster.placed, strict=True))]


def _moved(tasks: list[Task], npus: tuple[int, ...], groups: dict[int, int], job: int, start_us: int) -> list[Task]:
    """A job's rank graph on the cluster: ranks -> NPUs, groups -> cluster groups, ids shifted
    behind a start node when the job starts late."""
    shift = 1 if start_us else 0
    out: list[Task] = []
    if shift:
        out.append(Task(0, START, TaskKind.COMPUTE, [], duration_us=start_us, job=job))
    for t in tasks:
        deps = [d + shift for d in t.deps] or ([0] if shift else [])
        peer = npus[t.peer] if t.kind in (TaskKind.SEND, TaskKind.RECV) else t.peer
        group = groups[t.group] if t.kind is TaskKind.COLLECTIVE else t.group
        out.append(Task(t.id + shift, t.name, t.kind, deps, duration_us=t.duration_us, flops=t.flops,
                        tensor_bytes=t.tensor_bytes, collective=t.collective, size_bytes=t.size_bytes, group=group,
                        peer=peer, tag=t.tag, iteration=t.iteration, op=t.op, flow=t.flow, chunk=t.chunk, job=job,
                        in_network=t.in_network))
    return out


def build_cluster_graph(cluster: Cluster, graphs: list[ExecutionGraph]) -> ExecutionGraph:
    """One execution graph of every NPU from each job's own graph (`graphs[j]` of job j)."""
    n = cluster.npus
    ranks: list[RankGraph | None] = [None] * n
    groups: dict[int, tuple[int, ...]] = {}
    for j, (info, graph) in enumerate(zip(jobs_info(cluster), graphs, strict=True)):
        npus = info.npus
        mapping = {0: len(groups) + 1}
        groups[mapping[0]] = npus
        for gid, members in sorted(graph.groups.items()):
            mapping[gid] = len(groups) + 1
            groups[mapping[gid]] = tuple(npus[m] for m in members)
        start_us = round(cluster.jobs[j].start_ms * 1000)
        moved: dict[int, list[Task]] = {}
        for r, g in enumerate(graph.ranks):
            # ranks that share one task list keep sharing it (identical traces are encoded once)
            tasks = moved.get(id(g.tasks)) if _rank_free(g.tasks) and not g.bound else None
            if tasks is None:
                tasks = _moved(g.bound_tasks(), npus, mapping, j, start_us)
                if not g.bound:
                    moved[id(g.tasks)] = tasks
            ranks[npus[r]] = RankGraph(npus[r], tasks)
    idle = [Task(0, IDLE, TaskKind.COMPUTE, [])]
    out = ExecutionGraph([g if g is not None else RankGraph(r, idle) for r, g in enumerate(ranks)], groups)
    out.check()
    return out


def _rank_free(tasks: list[Task]) -> bool:
    return all(t.kind in (TaskKind.COMPUTE, TaskKind.WAIT, TaskKind.COLLECTIVE) for t in tasks)


def write_jobs(path: Path, cluster: Cluster) -> None:
    write_json(path, [j.to_json() for j in jobs_info(cluster)])


def write_sharing(path: Path, cluster: Cluster) -> None:
    """`sharing.json`, when the cluster's network is not today's (else nothing: the bundle stays as it was)."""
    if cluster.network.default:
        return
    write_json(path, SharingInfo.of(cluster).to_json())


def read_sharing(directory: Path) -> SharingInfo | None:
    """How the jobs of a cluster bundle share the network (None: max-min and ECMP, or one scenario)."""
    path = directory / layout.SHARING
    if not path.is_file():
        return None
    return SharingInfo.from_json(json.loads(path.read_text(encoding="utf-8")))


def read_jobs(directory: Path) -> list[JobInfo] | None:
    """The jobs of a cluster bundle (None for a bundle of one scenario)."""
    path = directory / layout.JOBS
    if not path.is_file():
        return None
    return [JobInfo.from_json(d) for d in json.loads(path.read_text(encoding="utf-8"))]
