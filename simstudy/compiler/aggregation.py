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
from typing import Any

from simstudy.compiler.bundle import Bundle
from simstudy.compiler.frameworks import compile_framework
from simstudy.compiler.gossip import compile_gossip
from simstudy.compiler.graph import ExecutionGraph
from simstudy.compiler.hybrid import compile_hybrid
from simstudy.compiler.in_network import compile_in_network
from simstudy.compiler.parameter_server import compile_parameter_server
from simstudy.compiler.registry import require_complete
from simstudy.spec import Scenario
from simstudy.spec.aggregation import AGGREGATIONS

__all__ = ["COMPILE", "astra_sim_refusal", "compile_aggregation"]

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
