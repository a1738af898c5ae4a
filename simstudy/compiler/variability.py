"""Compute variability (`system.variability`): jitter and stragglers written into the compute nodes.

A rank's compute nodes of iteration k take their time times that rank's factor for k: its jitter
draw (`draw`), times its `rank_jitter` draw (a stream of its own), times the slowdown of every
straggler entry naming the rank and k. The scaled time
is rounded half up to whole microseconds (the ET's unit, `costs.whole_us`), and a node that had
any time keeps at least 1 us; a node of 0 us stays 0. Ranks with the same factors keep sharing
one task list (and the ET writer's encoded frames); without variability the graph is untouched.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from simstudy.compiler.costs import whole_us
from simstudy.compiler.graph import ExecutionGraph, RankGraph, Task, TaskKind
from simstudy.spec import Scenario
from simstudy.spec.system import MIN_FACTOR, Jitter, Variability

__all__ = ["apply_variability", "draw", "rank_factors"]


def draw(jitter: Jitter, rank: int, iteration: int, stream: int = 0) -> float:
    """The jitter factor of `rank` in `iteration`: numpy's Generator seeded from (seed, rank,
    iteration), or (seed, iteration) when correlated, followed by `stream` when it is not 0 (so that
    `rank_jitter`'s draws, stream 1, are independent of `jitter`'s with the same seed); mean 1 (see
    `Jitter.distribution`)."""
    key = [jitter.seed, iteration] if jitter.correlated else [jitter.seed, rank, iteration]
    if stream:
        key.append(stream)
    rng = np.random.default_rng(key)
    if jitter.distribution == "empirical":
        samples = jitter.samples
        return samples[int(rng.integers(len(samples)))] / (math.fsum(samples) / len(samples))
    cv = jitter.cv or 0.0
    if cv == 0:
        return 1.0
    z = float(rng.standard_normal())
    if jitter.distribution == "normal":
        return max(MIN_FACTOR, 1.0 + cv * z)
    s2 = math.log1p(cv * cv)  # lognormal with mean 1 and coefficient of variation cv
    return math.exp(-s2 / 2 + math.sqrt(s2) * z)


def rank_factors(variability: Variability, rank: int, iterations: int) -> tuple[float, ...]:
    """The factor on `rank`'s compute times in each of `iterations` iterations."""
    out = []
    for k in range(iterations):
        f = 1.0 if variability.jitter is None else draw(variability.jitter, rank, k)
        if variability.rank_jitter is not None:
            f *= draw(variability.rank_jitter, rank, k, stream=1)
        for s in variability.stragglers:
            first, last = s.iterations if s.iterations is not None else (0, iterations - 1)
            if rank in s.ranks and first <= k <= last:
                f *= s.slowdown
        out.append(f)
    return tuple(out)


def _scaled(task: Task, factors: tuple[float, ...]) -> Task:
    if task.kind is not TaskKind.COMPUTE or task.duration_us <= 0 or not 0 <= task.iteration < len(factors):
        return task
    f = factors[task.iteration]
    return task if f == 1.0 else replace(task, duration_us=max(1, whole_us(task.duration_us * f)))


def apply_variability(graph: ExecutionGraph, scenario: Scenario) -> ExecutionGraph:
    """The graph with every rank's compute times scaled by its factors (the graph itself when the
    scenario has no variability); ranks with equal factors and one task list share the scaled list."""
    variability = scenario.system.variability
    if variability is None:
        return graph
    iterations = scenario.training.iterations
    scaled: dict[tuple[int, tuple[float, ...]], list[Task]] = {}
    ranks = []
    for g in graph.ranks:
        factors = rank_factors(variability, g.rank, iterations)
        if all(f == 1.0 for f in factors):
            ranks.append(g)
            continue
        key = (id(g.tasks), factors)
        tasks = scaled.get(key)
        if tasks is None:
            tasks = scaled[key] = [_scaled(t, factors) for t in g.tasks]
        ranks.append(RankGraph(rank=g.rank, tasks=tasks, groups=g.groups, peers=g.peers))
    return ExecutionGraph(ranks=ranks, groups=graph.groups)
