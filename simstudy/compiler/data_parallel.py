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

from collections.abc import Sequence
from dataclasses import dataclass

from simstudy.compiler.costs import Bucket, ddp_buckets, layer_costs, optimizer_us, whole_us
from simstudy.compiler.graph import Collective, ExecutionGraph, RankGraph
from simstudy.compiler.passes import backward, forward, next_forward_after
from simstudy.spec import Scenario


def ddp_messages(scenario: Scenario) -> list[Bucket]:
    """PyTorch DDP's gradient buckets of `parallelism.bucket_size_mib`, in issue order."""
    return ddp_buckets(layer_costs(scenario, scenario.resolved_model), scenario.parallelism.bucket_size_bytes)


@dataclass(frozen=True)
class Wait:
    """A framework's wait before some messages leave (Horovod's cycle): a CPU wait of `wait_us`
    after the backward of layer `after`, named `<name>.it<iteration>`, that the all-reduces of
    `messages` (their indices) are issued after (at once after that backward when `wait_us` is 0)."""

    name: str
    after: int
    wait_us: int
    messages: tuple[int, ...]


def compile_messages(scenario: Scenario, messages: list[Bucket], prefix: str,
                     waits: Sequence[Wait] = ()) -> ExecutionGraph:
    """The graph of pure data parallelism (tp = pp = 1) with one all-reduce per message, in the
    order given, named `allreduce.<prefix><index>.it<iteration>`; with `overlap`, a message of
    one of the `waits` is issued after its wait, any other once its last gradient is ready."""
    template = message_template(scenario, messages, prefix, waits)
    return ExecutionGraph(ranks=[RankGraph(rank=r, tasks=template.tasks) for r in range(scenario.parallelism.dp)])


def message_template(scenario: Scenario, messages: list[Bucket], prefix: str,
                     waits: Sequence[Wait] = ()) -> RankGraph:
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
        gate: dict[int, int] = {}  # message index -> the task its all-reduce waits for
        for w in waits if p.overlap and p.dp > 1 else ():
            tid = bwd[w.after] if w.wait_us <= 0 else template.wait(f"{w.name}.it{it}", w.wait_us, [bwd[w.after]],
                                                                     iteration=it)
            gate.update(dict.fromkeys(w.messages, tid))
        comms = [template.collective(f"allreduce.{prefix}{m.index}.it{it}", Collective.ALL_REDUCE, m.size_bytes,
                                     [gate.get(m.index, bwd[m.ready_after]) if p.overlap else last_bwd], iteration=it)
                 for m in messages if p.dp > 1]
        ends.append(last_bwd)
        syncs.append(template.compute(f"optimizer.it{it}", opt_us, [last_bwd, *comms], iteration=it))
        after = next_forward_after(ends, syncs, p.staleness)
    return template


def compile_data_parallel(scenario: Scenario) -> ExecutionGraph:
    """The graph of PyTorch DDP: one all-reduce per gradient bucket."""
    return compile_messages(scenario, ddp_messages(scenario), "bucket")
