"""Gossip (decentralized parallel SGD) with point-to-point SEND/RECV.

Per iteration on every worker: forward and backward per layer; once the backward is done, one send
of the whole parameters (params x the precision's bytes) to each of its `peers` neighbours of the
iteration, one after the other in the order of `neighbours`; one receive from each worker that
sends to it, posted when the iteration's forward starts; then the update step (the optimizer step,
as data parallelism's, plus averaging its parameters with the `peers` it received: reading
peers + 1 copies and writing one at local memory bandwidth).

* sync: the update waits for the iteration's receives, and the next forward for the update;
* async: the update waits for the backward only; the receives are on no forward's path (the
  worker averages with what has arrived, as AD-PSGD does), so a slow neighbour never stalls it.

`parallelism.staleness` s (sync only): the next forward waits for the backward and for the update
of the iteration s before (`simstudy.compiler.passes.next_forward_after`).

Neighbours (`neighbours`): the ranks sit on a cycle in an `order` (the ranks in turn for `ring`
and `exponential`; a permutation drawn per iteration from `seed` for `random`), and each rank
sends to the ranks `offsets` positions ahead and receives from those as many positions behind, so
every send's receive is known when compiling. Message tags are iteration x peers + the offset's
index.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from simstudy.compiler.costs import layer_costs, optimizer_us, whole_us
from simstudy.compiler.graph import ExecutionGraph, RankGraph
from simstudy.compiler.passes import backward, forward, next_forward_after
from simstudy.spec import Gossip, Scenario


def offsets(graph: str, peers: int, workers: int, it: int) -> list[int]:
    """How many positions ahead on the cycle a rank's neighbours of iteration `it` are: for ring and
    random the `peers` nearest (+1, -1, +2, -2, ...), for exponential `peers` of the powers of two
    below `workers` in turn (iteration it takes powers it x peers, it x peers + 1, ... modulo their count)."""
    if graph == "exponential":
        powers = [1 << j for j in range((workers - 1).bit_length())]
        return [powers[(it * peers + k) % len(powers)] for k in range(peers)]
    return [(k // 2 + 1) * (1 if k % 2 == 0 else -1) for k in range(peers)]


@dataclass(frozen=True, slots=True)
class Neighbours:
    """One iteration's gossip of one rank: the ranks it sends to and receives from, by offset index."""

    to: tuple[int, ...]
    source: tuple[int, ...]


def neighbours(agg: Gossip, workers: int, iterations: int) -> list[list[Neighbours]]:
    """Every iteration's neighbours of every rank (`[iteration][rank]`)."""
    rng = random.Random(agg.seed)
    order = list(range(workers))
    out: list[list[Neighbours]] = []
    for it in range(iterations):
        if agg.graph == "random":
            rng.shuffle(order)
        at = {r: i for i, r in enumerate(order)}
        offs = offsets(agg.graph, agg.peers, workers, it)
        out.append([Neighbours(tuple(order[(at[r] + o) % workers] for o in offs),
                               tuple(order[(at[r] - o) % workers] for o in offs)) for r in range(workers)])
    return out


def compile_gossip(scenario: Scenario) -> ExecutionGraph:
    """The execution graph of gossip data parallelism."""
    agg = scenario.parallelism.aggregation
    if not isinstance(agg, Gossip):
        raise ValueError("compile_gossip needs aggregation kind gossip")
    p = scenario.parallelism
    model = scenario.resolved_model
    costs = layer_costs(scenario, model)
    dtype = scenario.training.dtype_bytes
    size = model.params * dtype
    average_us = (agg.peers + 2) * size / (scenario.system.local_mem_bw_gbps * 1e9) * 1e6
    update_us = whole_us(optimizer_us(scenario, model) + average_us)
    graphs = [RankGraph(rank=r) for r in range(p.dp)]
    plan = neighbours(agg, p.dp, scenario.training.iterations)
    for r, g in enumerate(graphs):
        after: list[int] = []
        ends: list[int] = []
        syncs: list[int] = []
        for it, ranks in enumerate(plan):
            fwd = forward(g, costs, it, after)
            bwd = backward(g, costs, it, [fwd[-1]])
            done = bwd[costs[0].index]
            mine = ranks[r]
            recvs = [g.recv(f"gossip_recv.it{it}.from{src}", src, size, it * agg.peers + k, [fwd[0]], iteration=it)
                     for k, src in enumerate(mine.source)]
            for k, dst in enumerate(mine.to):
                g.send(f"gossip_send.it{it}.to{dst}", dst, size, it * agg.peers + k, [done], iteration=it)
            waits = recvs if agg.mode == "sync" else []
            ends.append(done)
            syncs.append(g.compute(f"update.it{it}", update_us, [done, *waits], iteration=it))
            after = next_forward_after(ends, syncs, p.staleness)
    return ExecutionGraph(ranks=graphs)
