"""Data parallelism with one all-reduce per gradient message: the graph of every collective
framework preset (PyTorch DDP's buckets, Horovod's fused buffers, TensorFlow's packs).

Per iteration on every rank: forward per layer; backward per layer in reverse order; one
all-reduce per message, issued when the backward of its `ready_after` layer finishes (or after
the whole backward when `overlap` is off); an optimizer step after every all-reduce; the next
iteration's forward after the optimizer step (with `parallelism.staleness` s, after the backward
and the optimizer step of the iteration s before: `simstudy.compiler.passes.next_forward_after`).
Every rank runs the same graph.
"""

from __future__ import annotations

from simstudy.compiler.costs import Bucket, ddp_buckets, layer_costs, optimizer_us, whole_us
from simstudy.compiler.graph import Collective, ExecutionGraph, RankGraph
from simstudy.compiler.passes import backward, forward, next_forward_after
from simstudy.spec import Scenario


def ddp_messages(scenario: Scenario) -> list[Bucket]:
    """PyTorch DDP's gradient buckets of `parallelism.bucket_size_mib`, in issue order."""
    return ddp_buckets(layer_costs(scenario, scenario.resolved_model), scenario.parallelism.bucket_size_bytes)


def compile_messages(scenario: Scenario, messages: list[Bucket], prefix: str) -> ExecutionGraph:
    """The graph of pure data parallelism (tp = pp = 1) with one all-reduce per message, in the
    order given, named `allreduce.<prefix><index>.it<iteration>`."""
    template = message_template(scenario, messages, prefix)
    return ExecutionGraph(ranks=[RankGraph(rank=r, tasks=template.tasks) for r in range(scenario.parallelism.dp)])


def message_template(scenario: Scenario, messages: list[Bucket], prefix: str) -> RankGraph:
    """The one graph every rank of `compile_messages` runs."""
    p = scenario.parallelism
    model = scenario.resolved_model
    costs = layer_costs(scenario, model)
    opt_us = whole_us(optimizer_us(scenario, model))
    template = RankGraph(rank=0)
    after: list[int] = []
    ends: list[int] = []
    syncs: list[int] = []
    for it in range(scenario.training.iterations):
        fwd = forward(template, costs, it, after)
        bwd = backward(template, costs, it, [fwd[-1]])
        last_bwd = bwd[costs[0].index]
        comms = [template.collective(f"allreduce.{prefix}{m.index}.it{it}", Collective.ALL_REDUCE, m.size_bytes,
                                     [bwd[m.ready_after] if p.overlap else last_bwd], iteration=it)
                 for m in messages if p.dp > 1]
        ends.append(last_bwd)
        syncs.append(template.compute(f"optimizer.it{it}", opt_us, [last_bwd, *comms], iteration=it))
        after = next_forward_after(ends, syncs, p.staleness)
    return template


def compile_data_parallel(scenario: Scenario) -> ExecutionGraph:
    """The graph of PyTorch DDP: one all-reduce per gradient bucket."""
    return compile_messages(scenario, ddp_messages(scenario), "bucket")
