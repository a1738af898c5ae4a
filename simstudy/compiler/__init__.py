"""Scenario -> per-rank execution graph -> Chakra ET files + ASTRA-SIM configs (a bundle)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from simstudy.compiler.aggregation import compile_aggregation
from simstudy.compiler.astra_config import system_json, write_config_files, write_configs
from simstudy.compiler.atomic import atomic_directory
from simstudy.compiler.bundle import Bundle, BundleError
from simstudy.compiler.chakra_out import graph_templates, graph_traces, write_traces
from simstudy.compiler.cluster import (
    JobInfo,
    SharingInfo,
    build_cluster_graph,
    job_scenario,
    read_jobs,
    read_sharing,
    write_jobs,
    write_sharing,
)
from simstudy.compiler.graph import Collective, ExecutionGraph, RankGraph, Task, TaskKind
from simstudy.compiler.replicas import replica_orbits
from simstudy.compiler.resolve import resolve
from simstudy.compiler.tensor import megatron
from simstudy.compiler.topology_file import scenario_topology, topology_of, write_topology
from simstudy.compiler.variability import apply_variability
from simstudy.files import write_json
from simstudy.layout import JOBS, SCENARIO, SHARING, TOPOLOGY
from simstudy.spec import Cluster, Scenario, SpecError, topology_dims
from simstudy.spec.collectives import FALLBACK

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from simstudy.chakra import Node

__all__ = [
    "Bundle",
    "BundleError",
    "Collective",
    "CompileError",
    "CompileResult",
    "ExecutionGraph",
    "JobInfo",
    "RankGraph",
    "SharingInfo",
    "Task",
    "TaskKind",
    "build_graph",
    "check_fit",
    "compile_any",
    "compile_cluster",
    "compile_scenario",
    "job_scenario",
    "read_jobs",
    "read_sharing",
    "resolve",
    "resolve_cluster",
]


class CompileError(ValueError):
    """A scenario that is valid as a spec but cannot be compiled (yet)."""


@dataclass(frozen=True)
class CompileResult:
    """What `compile_scenario` (or `compile_cluster`) wrote."""

    bundle: Bundle
    scenario: Scenario | Cluster
    et_bytes: int
    seconds: float


def check_fit(scenario: Scenario, source: str | Path | None = None) -> None:
    """The checks that need the resolved model: the parallelism must fit its layers, heads and experts.
    Errors name `source` (the spec file) and the parallelism field."""
    p = scenario.parallelism
    model = scenario.resolved_model
    n = len(model.layers)
    stages = p.pp * p.virtual_stages
    if stages > n:
        what = f"pp = {p.pp} pipeline stages" if p.virtual_stages == 1 else \
            f"pp x virtual_stages = {p.pp} x {p.virtual_stages} = {stages} stages"
        field = "parallelism.pp" if p.virtual_stages == 1 else "parallelism.virtual_stages"
        raise SpecError(source, field, f"{what} need at least {stages} layers; model {model.name!r} has {n}")
    split = megatron(model)
    for name, on in (("cp", p.cp > 1), ("sp", p.sp), ("ep", p.ep > 1), ("virtual_stages", p.virtual_stages > 1)):
        if on and not split:
            raise SpecError(source, f"parallelism.{name}",
                            f"model {model.name!r} is a {model.family} model; {name} splits transformer layers "
                            "(sequences, experts, interleaved chunks of a Megatron model)")
    if p.ep > 1:
        moe = [layer for layer in model.layers if layer.kind == "moe"]
        if not moe:
            raise SpecError(source, "parallelism.ep", f"ep = {p.ep} shards experts, and model {model.name!r} has no "
                                                      "mixture-of-experts layer (kind moe)")
        for layer in moe:
            if layer.experts is not None and layer.experts % p.ep:
                raise SpecError(source, "parallelism.ep", f"ep = {p.ep} does not divide the {layer.experts} experts "
                                                          f"of layer {layer.name!r} of model {model.name!r}")
    if p.tp == 1:
        return
    if split:
        for layer in model.layers:
            if layer.heads is not None and layer.heads % p.tp:
                raise SpecError(source, "parallelism.tp",
                                f"tp = {p.tp} does not divide the {layer.heads} attention heads of layer "
                                f"{layer.name!r} of model {model.name!r}; tensor parallelism splits heads evenly")
    elif p.tp * p.pp > n:
        raise SpecError(source, "parallelism.tp",
                        f"model {model.name!r} is a {model.family} model, so tensor parallelism splits it "
                        f"layer-wise: tp*pp = {p.tp}*{p.pp} = {p.tp * p.pp} ranks need at least that many "
                        f"layers, and it has {n}")


def build_graph(scenario: Scenario) -> ExecutionGraph:
    """The per-rank execution graph of a resolved scenario, its compute varied as `system.variability` says."""
    check_fit(scenario)
    graph = apply_variability(compile_aggregation(scenario), scenario)
    graph.check()
    return graph


def _check_target(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise CompileError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / SCENARIO).is_file():
        raise CompileError(f"{out}: not empty and not a simstudy bundle; refusing to overwrite it")


#: Every rank's nodes, its task list's number and the replicas that run alike (`Bundle.traces`,
#: `Bundle.templates`, `Bundle.replicas`)
_InMemory = tuple[list[list["Node"]], list[int], "NDArray[np.int64] | None"]


def _traces(graph: ExecutionGraph, prefix: Path, et_files: bool,
            scenario: Scenario | None = None) -> tuple[int, _InMemory | None]:
    """Every rank's trace: written as ET files (their bytes), or held in memory (`graph_traces`),
    with a scenario's replicas where they run alike (`replicas.replica_orbits`)."""
    if et_files:
        return write_traces(graph, prefix), None
    replicas = replica_orbits(graph, scenario) if scenario is not None else None
    return 0, (graph_traces(graph), graph_templates(graph), replicas)


def _result(out: Path, resolved: Scenario | Cluster, et_bytes: int, traces: _InMemory | None,
            t0: float) -> CompileResult:
    bundle = Bundle.from_dir(out)
    if traces is not None:
        bundle = replace(bundle, traces=traces[0], templates=traces[1], replicas=traces[2])
    return CompileResult(bundle, resolved, et_bytes, time.perf_counter() - t0)


def compile_scenario(scenario: Scenario, out: str | Path, *, source: str | Path | None = None,
                     et_files: bool = True) -> CompileResult:
    """Compile a scenario into a bundle directory `out` (written whole or not at all). Without
    `et_files`, the ranks' traces stay in memory (`Bundle.traces`: what flowsim runs from) and the
    directory holds the configs only."""
    t0 = time.perf_counter()
    resolved = resolve(scenario, source=source)
    check_fit(resolved, source)
    graph = build_graph(resolved)
    out = Path(out)
    _check_target(out)
    with atomic_directory(out) as tmp:
        et_bytes, traces = _traces(graph, tmp / resolved.name, et_files, resolved)
        write_configs(resolved, graph.groups, tmp)
        write_topology(tmp / TOPOLOGY, scenario_topology(resolved))
        write_json(tmp / SCENARIO, resolved.model_dump(mode="json"), indent=2)
    return _result(out, resolved, et_bytes, traces, t0)


def resolve_cluster(cluster: Cluster, *, source: str | Path | None = None) -> Cluster:
    """The cluster with every job's model explicit; errors name `source` and the job's field."""
    jobs = []
    for i, job in enumerate(cluster.jobs):
        try:
            scenario = resolve(job_scenario(cluster, i), source=source)
            check_fit(scenario, source)
        except SpecError as exc:
            raise SpecError(exc.file, f"jobs.{i}.{exc.field}", exc.message) from None
        jobs.append(job.model_copy(update={"model": scenario.model}))
    return cluster.model_copy(update={"jobs": tuple(jobs)})


def compile_cluster(cluster: Cluster, out: str | Path, *, source: str | Path | None = None,
                    et_files: bool = True) -> CompileResult:
    """Compile a cluster (several jobs on one topology) into one bundle `out` (written whole or not
    at all): see `compile.cluster`; `et_files` as `compile_scenario`'s."""
    t0 = time.perf_counter()
    resolved = resolve_cluster(cluster, source=source)
    graphs = [build_graph(job_scenario(resolved, i)) for i in range(len(resolved.jobs))]
    graph = build_cluster_graph(resolved, graphs)
    algorithms = {a for j in resolved.jobs if (a := j.parallelism.aggregation.all_reduce_algorithm) is not None}
    out = Path(out)
    _check_target(out)
    with atomic_directory(out) as tmp:
        et_bytes, traces = _traces(graph, tmp / resolved.name, et_files)
        system = system_json(resolved.system, len(topology_dims(resolved.topology)),
                             algorithms.pop() if len(algorithms) == 1 else FALLBACK.name)
        write_config_files(topology_dims(resolved.topology), system, graph.groups, tmp)
        write_topology(tmp / TOPOLOGY, topology_of(resolved.topology))
        write_jobs(tmp / JOBS, resolved)
        write_sharing(tmp / SHARING, resolved)
        write_json(tmp / SCENARIO, resolved.model_dump(mode="json"), indent=2)
    return _result(out, resolved, et_bytes, traces, t0)


def compile_any(spec: Scenario | Cluster, out: str | Path, *, source: str | Path | None = None,
                et_files: bool = True) -> CompileResult:
    """Compile a scenario or a cluster (`et_files`: as `compile_scenario`'s)."""
    if isinstance(spec, Cluster):
        return compile_cluster(spec, out, source=source, et_files=et_files)
    return compile_scenario(spec, out, source=source, et_files=et_files)
