"""KungFu's all-reduce, as KungFu (github lsds/KungFu, srcs/go) does it: point-to-point reduce
and broadcast messages along a graph.

* Every gradient tensor is all-reduced on its own (the TensorFlow optimizer's `group_all_reduce`
  makes one all-reduce op per gradient, run as soon as the gradient is computed).
* An all-reduce is cut into k = ceil(bytes / 1 MiB) chunks of near-equal element counts
  (`session.go`: `chunkSize = 1 * Mi`, `w.Split(p, k)`); chunk i uses strategy
  `strategies.choose(i)` (the default `simpleHash` is the chunk index).
* A strategy is a broadcast graph and its reverse as the reduce graph (`GenDefaultReduceGraph`):
  every rank receives its children's partial sums, adds its own and sends the sum to its parent;
  the root then sends the result to its children, and every rank forwards it to its own
  (`runGraphs`). Every edge carries the chunk once up and once down.
* Graphs (`plan/topology.go`, `session/strategy.go`; hosts are groups of `peers_per_host`
  consecutive ranks, a host's first rank its master): `star` (`GenStarBcastGraph(k, 0)`: rank 0
  to every rank), `tree` (`GenTree`: a star in every host, then masters[0] to every other
  master), `binary_tree_star` (`GenBinaryTreeStar`: a star in every host, the masters a binary
  tree, master i the parent of 2i + 1 and 2i + 2) and `clique` (one star per rank, chunk i
  rooted at rank i mod N). KungFu's default, `DefaultStrategy = BinaryTreeStar`
  (`kungfu/base/strategy.go`), is also what `autoSelect` picks for peers on several hosts; with
  one worker per host `tree` is the star rooted at rank 0.

Compiled at layer granularity (one all-reduce per zoo layer with parameters, as the zoo fuses a
layer's tensors), issued when the layer's backward is done. A rank sends one message at a time
in ASTRA-SIM's workload model, so a root's broadcast to several children is sequential (KungFu
sends them in parallel goroutines over separate connections).
"""

from __future__ import annotations

import math
from typing import Any

from simstudy.compiler.costs import Bucket, layer_costs, optimizer_us, whole_us
from simstudy.compiler.graph import ExecutionGraph, RankGraph
from simstudy.compiler.passes import backward, forward, next_forward_after
from simstudy.spec import Scenario
from simstudy.spec.framework import KungFu

#: parent -> children of a broadcast graph (the reduce graph is its reverse)
Children = dict[int, list[int]]


def _star(n: int, root: int) -> Children:
    return {root: [r for r in range(n) if r != root]}


def _masters(n: int, per_host: int) -> tuple[list[int], Children]:
    """The hosts' first ranks, and a star from each of them to the rest of its host."""
    masters = list(range(0, n, per_host))
    local = {m: [r for r in range(m + 1, min(m + per_host, n))] for m in masters}
    return masters, {m: kids for m, kids in local.items() if kids}


def bcast_graphs(fw: KungFu, n: int) -> list[Children]:
    """The strategies' broadcast graphs (chunk i uses graph i mod len)."""
    if fw.graph == "star":
        return [_star(n, 0)]
    if fw.graph == "clique":
        return [_star(n, r) for r in range(n)]
    masters, g = _masters(n, fw.peers_per_host)
    if fw.graph == "tree":
        if len(masters) > 1:
            g.setdefault(masters[0], []).extend(masters[1:])
        return [g]
    for i, m in enumerate(masters):  # binary_tree_star
        for j in (2 * i + 1, 2 * i + 2):
            if j < len(masters):
                g.setdefault(m, []).append(masters[j])
    return [g]


def parents(children: Children) -> dict[int, int]:
    return {kid: parent for parent, kids in children.items() for kid in kids}


def chunk_sizes(size_bytes: int, chunk_bytes: int, dtype: int) -> list[int]:
    """A tensor of `size_bytes` cut into ceil(size / chunk) parts of near-equal element counts."""
    k = max(1, math.ceil(size_bytes / chunk_bytes))
    count = size_bytes // dtype
    return [(count // k + (1 if i < count % k else 0)) * dtype for i in range(k)]


def kungfu_messages(scenario: Scenario) -> list[Bucket]:
    """One all-reduce per layer with gradients, in backward order (each then cut into chunks)."""
    costs = layer_costs(scenario, scenario.resolved_model)
    out: list[Bucket] = []
    for cost in reversed(costs):
        if cost.grad_bytes:
            out.append(Bucket(len(out), (cost.index,), cost.grad_bytes))
    return out


def compile_kungfu(scenario: Scenario) -> ExecutionGraph:
    """Forward, backward, and per layer (once its backward is done) every chunk reduced up and
    broadcast down its graph with sends and receives; the optimizer step after all of them
    (`parallelism.staleness`: see `simstudy.compiler.passes.next_forward_after`)."""
    p = scenario.parallelism
    fw = p.framework
    assert isinstance(fw, KungFu)
    n = p.dp
    model = scenario.resolved_model
    costs = layer_costs(scenario, model)
    opt_us = whole_us(optimizer_us(scenario, model))
    dtype = scenario.training.dtype_bytes
    graphs = bcast_graphs(fw, n)
    ups = [parents(g) for g in graphs]
    ranks = [RankGraph(rank=r) for r in range(n)]
    after: list[list[int]] = [[] for _ in range(n)]
    ends: list[list[int]] = [[] for _ in range(n)]
    syncs: list[list[int]] = [[] for _ in range(n)]
    seq = 0
    for it in range(scenario.training.iterations):
        bwd_of: list[dict[int, int]] = []
        for r in range(n):
            fwd = forward(ranks[r], costs, it, after[r])
            bwd_of.append(backward(ranks[r], costs, it, [fwd[-1]]))
        comms: list[list[int]] = [[] for _ in range(n)]
        for msg in kungfu_messages(scenario) if n > 1 else []:
            layer = msg.layers[0]
            for c, size in enumerate(chunk_sizes(msg.size_bytes, fw.chunk_kib * 1024, dtype)):
                kids, up = graphs[c % len(graphs)], ups[c % len(graphs)]
                name = f"{costs[layer].name}.c{c}.it{it}"
                attrs: dict[str, Any] = {"op": "allreduce", "iteration": it}
                for r in range(n):
                    g = ranks[r]
                    ready = bwd_of[r][layer] if p.overlap else bwd_of[r][costs[0].index]
                    got = [g.recv(f"kf_reduce_recv.{name}.from{k}", k, size, 2 * seq, [], **attrs)
                           for k in kids.get(r, [])]
                    ids = list(got)
                    if r in up:  # not the root: send the partial sum up, receive the result
                        ids.append(g.send(f"kf_reduce_send.{name}", up[r], size, 2 * seq, [ready, *got], **attrs))
                        down = g.recv(f"kf_bcast_recv.{name}", up[r], size, 2 * seq + 1, [ids[-1]], **attrs)
                        ids.append(down)
                        deps = [down]
                    else:
                        deps = [ready, *got]
                    ids += [g.send(f"kf_bcast_send.{name}.to{k}", k, size, 2 * seq + 1, deps, **attrs)
                            for k in kids.get(r, [])]
                    comms[r] += ids
                seq += 1
        for r in range(n):
            last_bwd = bwd_of[r][costs[0].index]
            ends[r].append(last_bwd)
            syncs[r].append(ranks[r].compute(f"optimizer.it{it}", opt_us, [last_bwd, *comms[r]], iteration=it))
            after[r] = next_forward_after(ends[r], syncs[r], p.staleness)
    return ExecutionGraph(ranks=ranks)
