"""A cluster: one topology shared by several training jobs, each placed on some of its NPUs.

```yaml
kind: cluster
name: two_jobs
topology: ../topologies/leafspine_2x4.yaml
system: {peak_tflops: 120, efficiency: 0.4}      # every job's, unless the job sets its own
jobs:
  - {name: a, model: resnet50, gpus: 8, placement: packed, training: {iterations: 3}}
  - {name: b, model: bert_base, gpus: 8, placement: {policy: spread}, start_ms: 40}
  - {name: c, model: lstm_lm, parallelism: {dp: 4}, placement: {npus: [16, 17, 18, 19]}}
```

A job is a scenario without a topology: model, parallelism, system, training, plus where it runs
(`placement`) and when it starts (`start_ms`). Placement is resolved here, once, as a pure
function of the cluster (`placements`), so that an overlap or a job that does not fit is an error
in the spec file, and every backend sees the same NPUs.
"""

from __future__ import annotations

import random
import re
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from simstudy.spec.base import FieldError, Spec
from simstudy.spec.model import ModelSpec
from simstudy.spec.parallelism import Parallelism, dp_auto, fill_dp
from simstudy.spec.scenario import tag_model
from simstudy.spec.system import System, check_variability
from simstudy.spec.topology import BinaryTreeStar, FatTree, Tiered, Topology, Tree
from simstudy.spec.training import Training

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

PlacementPolicy = Literal["packed", "spread", "random"]
#: How jobs share a link in flowsim's fluid mode (`NetworkSharing.sharing`).
SharingPolicy = Literal["fair", "weighted", "priority", "mltcp"]
#: How a flow between two hosts with several equal-cost paths gets one (`Routing.policy`).
RoutingPolicy = Literal["ecmp", "intensity"]


class Placement(Spec):
    """Where a job's ranks run: explicit NPUs or hosts, or a policy over the free hosts.

    * `packed`: the lowest-numbered free hosts, so a job fills its ToRs before using the next;
    * `spread`: free hosts taken round-robin over the ToRs (one host per ToR, then the next ...);
    * `random`: free hosts in a random order drawn with `seed`.
    A job uses every GPU of the hosts it gets (the last host possibly in part), rank r on the r-th
    GPU. On topologies without hosts (ring, switch, ...), every NPU is a host.
    """

    policy: PlacementPolicy = Field(default="packed", description="packed, spread or random (over free hosts)")
    seed: int = Field(default=0, ge=0, description="random: the seed of the host order")
    npus: tuple[int, ...] | None = Field(default=None, description="explicit NPUs, rank r on npus[r]")
    hosts: tuple[int, ...] | None = Field(default=None, description="explicit hosts, their GPUs in order")

    @model_validator(mode="before")
    @classmethod
    def _short(cls, data: Any) -> Any:
        """`placement: spread` is short for `{policy: spread}`; a list is explicit NPUs."""
        if isinstance(data, str):
            return {"policy": data}
        if isinstance(data, list | tuple):
            return {"npus": list(data)}
        return data

    @model_validator(mode="after")
    def _check(self) -> Placement:
        if self.npus is not None and self.hosts is not None:
            raise ValueError("give npus or hosts, not both")
        for field, values in (("npus", self.npus), ("hosts", self.hosts)):
            if values is not None:
                if any(v < 0 for v in values):
                    raise FieldError(field, f"{field} must be >= 0")
                if len(set(values)) != len(values):
                    dup = next(v for v in values if values.count(v) > 1)
                    raise FieldError(field, f"{dup} appears twice")
        return self

    @property
    def explicit(self) -> bool:
        return self.npus is not None or self.hosts is not None


class Mltcp(Spec):
    """MLTCP's rule (Rajasekaran et al., HotNets'24): a job's flows are more aggressive the more of
    their iteration's bytes they have sent, so jobs that compete slide apart into interleaving."""

    slope: float = Field(
        default=1.0, ge=0,
        description="a job's flows weigh 1 + slope x the fraction of its current iteration's bytes already sent "
        "(MLTCP scales each flow's window increase by F(bytes ratio), a line rising with the ratio; its HotNets'24 "
        "paper could not be read here for its constants, so the default 1 is our choice: a job about to finish its "
        "iteration's communication gets at most twice the share of one that starts it)",
    )


class Routing(Spec):
    """Which of a pair's equal-cost paths its flows take."""

    policy: RoutingPolicy = Field(
        default="ecmp",
        description="ecmp: the topology's hash of each flow (today's routing); intensity: Crux's path selection "
        "(SIGCOMM'24): jobs in order of GPU intensity (compute time per iteration over bytes per iteration, "
        "highest first) pin each of their host pairs, most bytes first, to the path whose busiest link carries the "
        "fewest bytes per iteration so far (ties: the lesser sum, then ECMP's pick and the paths after it)",
    )


class NetworkSharing(Spec):
    """How the jobs of a cluster share the network (flowsim's `fluid` congestion mode only)."""

    sharing: SharingPolicy = Field(
        default="fair",
        description="fair: max-min fair rates (the default); weighted: weighted max-min, a flow's share of a "
        "bottleneck proportional to its job's weight; priority: strict priority classes (a job's priority, lower "
        "first; max-min within a class, a class gets what the classes before it leave); mltcp: weights that grow "
        "with the bytes a job has sent of its iteration (MLTCP, see mltcp.slope)",
    )
    mltcp: Mltcp = Field(default_factory=Mltcp, description="sharing: mltcp: its slope")
    routing: Routing = Field(default_factory=Routing, description="path selection: ecmp or intensity (Crux)")

    @property
    def default(self) -> bool:
        """Whether it is today's network: max-min fair, ECMP (nothing for a backend to do)."""
        return self.sharing == "fair" and self.routing.policy == "ecmp"

    def given(self) -> str | None:
        """The field that asks for more than max-min and ECMP (None: nothing does)."""
        if self.sharing != "fair":
            return "network.sharing"
        if self.routing.policy != "ecmp":
            return "network.routing.policy"
        return None


class Job(Spec):
    """One training job of a cluster: a scenario without a topology, plus placement and start time."""

    name: str = Field(description="job name (letters, digits, _ . -), unique in the cluster")
    model: ModelSpec = Field(description="a zoo model name, a zoo reference or explicit layers")
    gpus: int | None = Field(
        default=None, ge=1, description="NPUs the job uses (default: what its parallelism needs); dp left out fills it"
    )
    parallelism: Parallelism = Field(default_factory=Parallelism, description="dp/tp/pp and aggregation")
    system: System | None = Field(default=None, description="compute settings (default: the cluster's)")
    training: Training = Field(default_factory=Training, description="batch, iterations, precision")
    placement: Placement = Field(default_factory=Placement, description="where the job's ranks run")
    start_ms: float = Field(default=0.0, ge=0, description="when the job starts, ms after the cluster starts")
    weight: float = Field(
        default=1.0, gt=0,
        description="network.sharing: weighted: the job's weight (its flows' share of a bottleneck is proportional "
        "to it); read by no other policy",
    )
    priority: int = Field(
        default=0, ge=0,
        description="network.sharing: priority: the job's class (0 first: a class gets what the classes before it "
        "leave of each link); read by no other policy",
    )

    @model_serializer(mode="wrap")
    def _drop_new_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave out `weight` and `priority` at their defaults, so that clusters written before
        them keep their canonical JSON (and their sweep run keys)."""
        return _without(handler(self), _JOB_DEFAULTS)

    @model_validator(mode="before")
    @classmethod
    def _short_forms(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "model" in data:
            data = {**data, "model": tag_model(data["model"])}
        par = data.get("parallelism")
        gpus = data.get("gpus")
        if dp_auto(par) and isinstance(gpus, int):
            data = {**data, "parallelism": fill_dp(par, gpus)}
        return data

    @model_validator(mode="after")
    def _check(self) -> Job:
        if not _NAME.match(self.name):
            raise FieldError("name", f"{self.name!r} must start with a letter or digit and hold only letters, "
                                     "digits, '_', '.' and '-'")
        need = self.parallelism.total_ranks
        if self.gpus is not None and self.gpus != need:
            p = self.parallelism
            raise FieldError("gpus", f"gpus = {self.gpus} but the parallelism needs {need} ranks "
                                     f"({p.product}"
                                     f"{f' + {p.server_ranks} servers' if p.server_ranks else ''}); "
                                     "leave dp out to fill gpus")
        if self.placement.npus is not None and len(self.placement.npus) != need:
            raise FieldError("placement.npus", f"{len(self.placement.npus)} NPUs listed; the job has {need} ranks")
        if self.system is not None:
            check_variability(self.system, need, self.training.iterations, "system")
            refuse_shared_hosts(self.system, "system")
        return self

    @property
    def ranks(self) -> int:
        """Ranks (NPUs) of the job."""
        return self.parallelism.total_ranks


def refuse_shared_hosts(system: System, prefix: str) -> None:
    """Shared hosts (`host_cores`) are modelled for a single job: in a cluster, a job that starts late
    waits in a compute node, which would take its host's cores."""
    if system.host_cores is not None:
        raise FieldError(f"{prefix}.host_cores", "shared hosts are modelled for a single job (a scenario), not "
                                                 "for the jobs of a cluster; leave host_cores out")


def npu_hosts(topology: Topology) -> tuple[int, ...]:
    """The host of every NPU (NPUs of one host are numbered together)."""
    if isinstance(topology, Tiered):
        return topology.npu_hosts
    return tuple(range(topology.total_npus))


def host_tors(topology: Topology) -> tuple[int, ...]:
    """The ToR (leaf, edge) switch of every host: what `spread` spreads over."""
    if isinstance(topology, Tiered):
        return topology.host_tors[: max(npu_hosts(topology), default=-1) + 1]
    n = topology.total_npus
    if isinstance(topology, Tree):
        return tuple(i // topology.fanout for i in range(n))
    if isinstance(topology, BinaryTreeStar):
        return tuple(i // topology.hosts_per_leaf for i in range(n))
    if isinstance(topology, FatTree):
        half = topology.k // 2
        return tuple(i // half for i in range(n))
    return (0,) * n


def _host_npus(topology: Topology) -> list[list[int]]:
    hosts: list[list[int]] = []
    for npu, host in enumerate(npu_hosts(topology)):
        while len(hosts) <= host:
            hosts.append([])
        hosts[host].append(npu)
    return hosts


def _order(policy: PlacementPolicy, seed: int, free: list[int], tors: tuple[int, ...]) -> list[int]:
    if policy == "packed":
        return sorted(free)
    if policy == "random":
        order = sorted(free)
        random.Random(seed).shuffle(order)
        return order
    by_tor: dict[int, list[int]] = {}
    for h in sorted(free):
        by_tor.setdefault(tors[h], []).append(h)
    out: list[int] = []
    queues = [q for _, q in sorted(by_tor.items())]
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def placements(topology: Topology, jobs: tuple[Job, ...]) -> list[tuple[int, ...]]:
    """The NPUs of every job's ranks (rank r of job j on `placements(...)[j][r]`).

    Explicit placements are taken first, then the policies, in job order, over the hosts no job
    has used yet. Raises FieldError naming the job's field when NPUs overlap or a job does not fit.
    """
    total = topology.total_npus
    hosts = _host_npus(topology)
    tors = host_tors(topology)
    used: dict[int, str] = {}
    out: list[tuple[int, ...] | None] = [None] * len(jobs)

    def take(i: int, npus: list[int], field: str) -> None:
        job = jobs[i]
        for n in npus:
            if not 0 <= n < total:
                raise FieldError(f"jobs.{i}.{field}", f"NPU {n} is not in the topology (it has {total} NPUs: "
                                                      f"0..{total - 1})")
            if n in used:
                raise FieldError(f"jobs.{i}.{field}", f"job {job.name!r} is placed on NPU {n}, which job "
                                                      f"{used[n]!r} already uses; placements must not overlap")
        for n in npus:
            used[n] = job.name
        out[i] = tuple(npus)

    for i, job in enumerate(jobs):
        p = job.placement
        if p.npus is not None:
            take(i, list(p.npus), "placement.npus")
        elif p.hosts is not None:
            bad = [h for h in p.hosts if not 0 <= h < len(hosts)]
            if bad:
                raise FieldError(f"jobs.{i}.placement.hosts", f"host {bad[0]} is not in the topology (it has "
                                                              f"{len(hosts)} hosts)")
            npus = [n for h in p.hosts for n in hosts[h]]
            if len(npus) < job.ranks:
                raise FieldError(f"jobs.{i}.placement.hosts", f"hosts {list(p.hosts)} have {len(npus)} NPUs; "
                                                              f"job {job.name!r} needs {job.ranks}")
            take(i, npus[: job.ranks], "placement.hosts")
    for i, job in enumerate(jobs):
        p = job.placement
        if p.explicit:
            continue
        free_hosts = [h for h, npus in enumerate(hosts) if not any(n in used for n in npus)]
        npus = [n for h in _order(p.policy, p.seed, free_hosts, tors) for n in hosts[h]]
        if len(npus) < job.ranks:
            free = total - len(used)
            raise FieldError(f"jobs.{i}.gpus", f"job {job.name!r} needs {job.ranks} NPUs, but only {len(npus)} "
                                               f"on wholly free hosts are left ({free} free NPUs of {total}) after "
                                               "the jobs placed before it")
        take(i, npus[: job.ranks], "placement")
    return [p for p in out if p is not None]


class Cluster(Spec):
    """One topology and the jobs that share it."""

    kind: Literal["cluster"] = "cluster"
    name: str = Field(default="cluster", description="cluster name (letters, digits, _ . -)")
    topology: Topology = Field(description="the network every job runs on")
    system: System = Field(default_factory=System, description="compute settings of jobs that set none")
    jobs: tuple[Job, ...] = Field(min_length=1, description="the jobs, each with placement and start time")
    network: NetworkSharing = Field(
        default_factory=NetworkSharing,
        description="how the jobs share links and pick paths (flowsim's fluid mode; default: max-min, ECMP)",
    )

    @model_serializer(mode="wrap")
    def _drop_new_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave out `network` at its default (see `Job`'s)."""
        return _without(handler(self), {"network": NetworkSharing().model_dump(mode="json")})

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        if not _NAME.match(self.name):
            raise FieldError("name", f"{self.name!r} must start with a letter or digit and hold only letters, "
                                     "digits, '_', '.' and '-'")
        refuse_shared_hosts(self.system, "system")
        seen: dict[str, int] = {}
        for i, job in enumerate(self.jobs):
            if job.name in seen:
                raise FieldError(f"jobs.{i}.name", f"job name {job.name!r} is used by jobs {seen[job.name]} and {i}")
            seen[job.name] = i
            if job.system is None:  # the cluster's system: its stragglers must be ranks of every such job
                try:
                    check_variability(self.system, job.ranks, job.training.iterations, "system")
                except FieldError as exc:
                    raise FieldError(exc.field, f"job {job.name!r} (jobs.{i}) runs on the cluster's system: "
                                                f"{exc.message}") from None
        self._check_aggregations()
        placements(self.topology, self.jobs)
        return self

    def _check_aggregations(self) -> None:
        """Every job's aggregation runs on the topology, and jobs of one kind give its network settings alike."""
        first: dict[str, int] = {}
        for i, job in enumerate(self.jobs):
            agg = job.parallelism.aggregation
            try:
                agg.check_topology(self.topology.kind)
            except FieldError as exc:
                raise FieldError(f"jobs.{i}.parallelism.{exc.field}", exc.message) from None
            j = first.setdefault(agg.kind, i)
            other = self.jobs[j].parallelism.aggregation.network_settings
            for key, value in agg.network_settings.items():
                if other[key] != value:
                    raise FieldError(f"jobs.{i}.parallelism.aggregation.{key}",
                                     f"{key} = {value}, but job {self.jobs[j].name!r} gives {other[key]}: the jobs "
                                     f"of {agg.noun} share the switches, so they must give the same {key}")

    @property
    def npus(self) -> int:
        return self.topology.total_npus

    @property
    def placed(self) -> list[tuple[int, ...]]:
        """Every job's NPUs (see `placements`)."""
        return placements(self.topology, self.jobs)

    def alone(self, index: int) -> Cluster:
        """The cluster with only job `index`, on the NPUs it has here: the reference of its slowdown,
        on today's network (max-min, ECMP: the same reference whatever the cluster's `network`)."""
        job = self.jobs[index]
        pinned = job.model_copy(update={"placement": Placement(npus=self.placed[index]), **_JOB_DEFAULTS})
        return self.model_copy(update={"jobs": (pinned,), "name": f"{self.name}.{job.name}.alone",
                                       "network": NetworkSharing()})


#: Job fields added after run keys were first written, at their defaults (left out of the canonical JSON).
_JOB_DEFAULTS: dict[str, Any] = {"weight": 1.0, "priority": 0}


def _without(data: Any, defaults: dict[str, Any]) -> Any:
    if isinstance(data, dict):
        for key, default in defaults.items():
            if key in data and data[key] == default:
                del data[key]
    return data
