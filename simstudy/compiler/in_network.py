"""In-network aggregation: data parallelism whose all-reduces the switches compute.

The graph is plain data parallelism's under DDP's buckets (`simstudy.compiler.data_parallel`:
forward, backward, one all-reduce per bucket issued when its last gradient is ready, the optimizer
step after them, `parallelism.staleness` honoured), with every all-reduce marked as one the switches
aggregate: its node carries the switches' slots and the chunk size
(`simstudy.compiler.attributes.IN_NETWORK_SLOTS`). Which switches a job's chunks climb is the
network's to say: flowsim finds the job's tree on the bundle's topology
(`simstudy.backends.flowsim.in_network`), so a job compiles the same alone and on a shared cluster.
"""

from __future__ import annotations

from simstudy.compiler.data_parallel import compile_messages, ddp_messages
from simstudy.compiler.graph import ExecutionGraph, TaskKind
from simstudy.spec import InNetwork, Scenario


def compile_in_network(scenario: Scenario) -> ExecutionGraph:
    """The execution graph of in-network aggregation (every rank runs the same graph)."""
    agg = scenario.parallelism.aggregation
    if not isinstance(agg, InNetwork):
        raise ValueError("compile_in_network needs aggregation kind in_network")
    graph = compile_messages(scenario, ddp_messages(scenario), "bucket")
    for tasks in {id(g.tasks): g.tasks for g in graph.ranks}.values():  # the ranks share one list
        for task in tasks:
            if task.kind is TaskKind.COLLECTIVE:
                task.in_network = (agg.slots, agg.chunk_bytes)
    return graph
