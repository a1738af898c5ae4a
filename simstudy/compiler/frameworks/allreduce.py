"""The graph builder of the collective presets: one all-reduce per gradient message."""

from __future__ import annotations

from simstudy.compiler.costs import Bucket, layer_costs, optimizer_us, whole_us
from simstudy.compiler.graph import Collective, ExecutionGraph, RankGraph
from simstudy.compiler.passes import backward, forward
from simstudy.spec import Scenario


def compile_messages(scenario: Scenario, messages: list[Bucket], prefix: str) -> ExecutionGraph:
    """Per iteration on every rank: forward, backward, one all-reduce per message (in the order
    given) once the backward of its `ready_after` layer is done (after the whole backward without
    `overlap`), then the optimizer step after every all-reduce. Every rank runs the same graph."""
    p = scenario.parallelism
    model = scenario.resolved_model
    costs = layer_costs(scenario, model)
    opt_us = whole_us(optimizer_us(scenario, model))
    template = RankGraph(rank=0)
    after: list[int] = []
    for it in range(scenario.training.iterations):
        fwd = forward(template, costs, it, after)
        bwd = backward(template, costs, it, [fwd[-1]])
        last_bwd = bwd[costs[0].index]
        comms = [template.collective(f"allreduce.{prefix}{m.index}.it{it}", Collective.ALL_REDUCE, m.size_bytes,
                                     [bwd[m.ready_after] if p.overlap else last_bwd], iteration=it)
                 for m in messages if p.dp > 1]
        after = [template.compute(f"optimizer.it{it}", opt_us, [last_bwd, *comms], iteration=it)]
    return ExecutionGraph(ranks=[RankGraph(rank=r, tasks=template.tasks) for r in range(p.dp)])
