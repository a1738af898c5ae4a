"""The compile step of every aggregation kind (`parallelism.aggregation.kind`): one table, `COMPILE`,
checked complete against the spec's kinds (`simstudy.spec.aggregation.AGGREGATIONS`) on import.

* `allreduce`: plain data parallelism as its framework preset sends it (`simstudy.compiler.frameworks`),
  anything with tensor, pipeline, context or expert parallelism or sharding as Megatron-LM and
  DeepSpeed do (`simstudy.compiler.hybrid`);
* `parameter_server`: pushes and pulls to server shards (`simstudy.compiler.parameter_server`);
* `gossip`: parameters sent to neighbours of a graph (`simstudy.compiler.gossip`);
* `in_network`: DDP's buckets summed by the switches (`simstudy.compiler.in_network`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simstudy.compiler.bundle import Bundle
from simstudy.compiler.frameworks import compile_framework, framework_template
from simstudy.compiler.gossip import compile_gossip
from simstudy.compiler.graph import ExecutionGraph, RankGraph
from simstudy.compiler.hybrid import compile_hybrid, distinct_hybrid
from simstudy.compiler.in_network import compile_in_network
from simstudy.compiler.parameter_server import compile_parameter_server
from simstudy.compiler.registry import require_complete
from simstudy.spec import Scenario
from simstudy.spec.aggregation import AGGREGATIONS

__all__ = ["COMPILE", "WHOLE_LIMIT", "Distinct", "astra_sim_refusal", "compile_aggregation", "distinct_graphs"]

CompileStep = Callable[[Scenario], ExecutionGraph]


def _all_reduce(scenario: Scenario) -> ExecutionGraph:
    if scenario.parallelism.is_plain_data_parallel:
        return compile_framework(scenario)
    return compile_hybrid(scenario)


#: aggregation kind -> its compile step (a resolved scenario -> its per-rank execution graph).
COMPILE: dict[str, CompileStep] = {
    "allreduce": _all_reduce,
    "parameter_server": compile_parameter_server,
    "gossip": compile_gossip,
    "in_network": compile_in_network,
}


require_complete(COMPILE, AGGREGATIONS, "simstudy.compiler.aggregation.COMPILE")


def compile_aggregation(scenario: Scenario) -> ExecutionGraph:
    """The execution graph of a resolved scenario, by its aggregation kind's compile step."""
    return COMPILE[scenario.parallelism.aggregation.kind](scenario)


#: Ranks up to which a job whose ranks run graphs of their own (parameter servers, KungFu) is compiled
#: whole for `distinct_graphs`; a larger one is compiled at this many compute ranks and scaled.
WHOLE_LIMIT = 1024


@dataclass(frozen=True)
class Distinct:
    """The graphs a job's ranks run, each once, with how many ranks run it (`graphs`), the
    communicator groups they use (id -> members) and how they were found (`method`)."""

    graphs: list[tuple[RankGraph, int]]
    groups: dict[int, tuple[int, ...]]
    method: str

    @property
    def ranks(self) -> int:
        return sum(n for _, n in self.graphs)


def distinct_graphs(scenario: Scenario) -> Distinct:
    """The distinct graphs of a resolved scenario without a structure per rank where the compile step
    shares one graph between ranks (hybrid parallelism: one per pipeline stage; plain data
    parallelism under a collective preset: one for every rank). Kinds whose ranks run graphs of their
    own are compiled whole up to `WHOLE_LIMIT` ranks, beyond that at `WHOLE_LIMIT` compute ranks with
    every count scaled (`method` says so)."""
    p = scenario.parallelism
    if p.aggregation.kind == "allreduce" and not p.is_plain_data_parallel:
        graphs, groups = distinct_hybrid(scenario)
        return Distinct(graphs, groups, "one graph per pipeline stage, built for its first rank")
    if p.aggregation.kind == "allreduce":
        template = framework_template(scenario)
        if template is not None:
            return Distinct([(template, p.total_ranks)], {}, "one graph for every rank")
    if p.total_ranks <= WHOLE_LIMIT:
        return _by_tasks(compile_aggregation(scenario), "compiled whole")
    small = scenario.model_copy(update={"parallelism": p.model_copy(update={"dp": WHOLE_LIMIT})})
    found = _by_tasks(compile_aggregation(small), f"compiled at dp = {WHOLE_LIMIT} and scaled")
    scale = p.total_ranks / small.parallelism.total_ranks
    return Distinct([(g, round(n * scale)) for g, n in found.graphs], found.groups, found.method)


def _by_tasks(graph: ExecutionGraph, method: str) -> Distinct:
    """The graph's ranks grouped by the task list they share (a bound template, or their own)."""
    found: dict[int, tuple[RankGraph, int]] = {}
    for g in graph.ranks:
        first, n = found.get(id(g.tasks), (g, 0))
        found[id(g.tasks)] = (first, n + 1)
    return Distinct(list(found.values()), graph.groups, method)


def astra_sim_refusal(bundle: Bundle) -> str | None:
    """Why ASTRA-SIM cannot run this bundle's graph: an aggregation kind of its scenario (or of one
    of its cluster's jobs) that says so (`AggregationKind.astra_sim`); None when it can."""
    if bundle.scenario is None:
        return None
    try:
        spec: Any = json.loads(bundle.scenario.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # the bundle's own check reports what is wrong with it
    jobs = spec.get("jobs", [spec]) if isinstance(spec, dict) else []
    for job in jobs:
        agg = (job.get("parallelism") or {}).get("aggregation") if isinstance(job, dict) else None
        kind = str(agg.get("kind")) if isinstance(agg, dict) else ""
        model = AGGREGATIONS.get(kind)
        if model is not None and not model.astra_sim:
            return f"aggregation kind {kind} ({model.noun}) runs on flowsim only; use backend flowsim"
    return None
