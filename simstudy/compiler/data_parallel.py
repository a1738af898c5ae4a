"""Data parallelism with all-reduce of gradient buckets (PyTorch DDP style).

Per iteration on every rank: forward per layer; backward per layer in reverse order; one
all-reduce per gradient bucket, issued when the backward of the bucket's last layer finishes
(or after the whole backward when `overlap` is off); an optimizer step after every all-reduce;
the next iteration's forward after the optimizer step. Every rank runs the same graph.
"""

from __future__ import annotations

from simstudy.compiler.costs import ddp_buckets, layer_costs, optimizer_us, whole_us
from simstudy.compiler.graph import Collective, ExecutionGraph, RankGraph
from simstudy.compiler.passes import backward, forward
from simstudy.spec import AllReduce, Scenario


def compile_data_parallel(scenario: Scenario) -> ExecutionGraph:
    """The execution graph of pure data parallelism with all-reduce (tp = pp = 1)."""
    p = scenario.parallelism
    if not isinstance(p.aggregation, AllReduce):
        raise ValueError("compile_data_parallel needs aggregation kind allreduce")
    model = scenario.resolved_model
    costs = layer_costs(scenario, model)
    buckets = ddp_buckets(costs, p.bucket_size_bytes)
    opt_us = whole_us(optimizer_us(scenario, model))
    template = RankGraph(rank=0)
    after: list[int] = []
    for it in range(scenario.training.iterations):
        fwd = forward(template, costs, it, after)
        bwd = backward(template, costs, it, [fwd[-1]])
        last_bwd = bwd[costs[0].index]
        comms = [
            template.collective(
                f"allreduce.bucket{b.index}.it{it}",
                Collective.ALL_REDUCE,
                b.size_bytes,
                [bwd[b.ready_after] if p.overlap else last_bwd],
                iteration=it,
            )
            for b in buckets
            if p.dp > 1
        ]
        step = template.compute(f"optimizer.it{it}", opt_us, [last_bwd, *comms], iteration=it)
        after = [step]
    ranks = [RankGraph(rank=r, tasks=template.tasks) for r in range(p.dp)]
    return ExecutionGraph(ranks=ranks)
