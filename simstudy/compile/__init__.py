"""Scenario -> per-rank execution graph -> Chakra ET files + ASTRA-SIM configs (a bundle)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from simstudy.compile.astra_config import write_configs, write_json
from simstudy.compile.atomic import atomic_directory
from simstudy.compile.bundle import Bundle, BundleError
from simstudy.compile.chakra_out import write_traces
from simstudy.compile.data_parallel import compile_data_parallel
from simstudy.compile.graph import Collective, ExecutionGraph, RankGraph, Task, TaskKind
from simstudy.compile.parameter_server import compile_parameter_server
from simstudy.compile.resolve import resolve
from simstudy.spec import AllReduce, Scenario

__all__ = [
    "Bundle",
    "BundleError",
    "Collective",
    "CompileError",
    "CompileResult",
    "ExecutionGraph",
    "RankGraph",
    "Task",
    "TaskKind",
    "build_graph",
    "compile_scenario",
    "resolve",
]


class CompileError(ValueError):
    """A scenario that is valid as a spec but cannot be compiled (yet)."""


@dataclass(frozen=True)
class CompileResult:
    """What `compile_scenario` wrote."""

    bundle: Bundle
    scenario: Scenario
    et_bytes: int
    seconds: float


def build_graph(scenario: Scenario) -> ExecutionGraph:
    """The per-rank execution graph of a resolved scenario."""
    p = scenario.parallelism
    if p.tp > 1 or p.pp > 1:
        raise CompileError(
            f"parallelism: tp = {p.tp}, pp = {p.pp}: tensor and pipeline parallelism are not "
            "supported by the compiler yet (only data parallel with all-reduce or a parameter server)"
        )
    if p.sharding != "none":
        raise CompileError(f"parallelism.sharding: {p.sharding!r} is not supported by the compiler yet")
    graph = compile_data_parallel(scenario) if isinstance(p.aggregation, AllReduce) else compile_parameter_server(
        scenario
    )
    graph.check()
    return graph


def _check_target(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise CompileError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / "scenario.json").is_file():
        raise CompileError(f"{out}: not empty and not a simstudy bundle; refusing to overwrite it")


def compile_scenario(scenario: Scenario, out: str | Path, *, source: str | Path | None = None) -> CompileResult:
    """Compile a scenario into a bundle directory `out` (written whole or not at all)."""
    t0 = time.perf_counter()
    resolved = resolve(scenario, source=source)
    graph = build_graph(resolved)
    out = Path(out)
    _check_target(out)
    with atomic_directory(out) as tmp:
        et_bytes = write_traces(graph, tmp / resolved.name)
        write_configs(resolved, graph.groups, tmp)
        write_json(tmp / "scenario.json", resolved.model_dump(mode="json"))
    return CompileResult(Bundle.from_dir(out), resolved, et_bytes, time.perf_counter() - t0)
