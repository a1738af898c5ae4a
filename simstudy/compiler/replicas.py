"""Data-parallel replicas that run alike: which ranks stand for which (`Bundle.replicas`).

Ranks are numbered `t + tp * (c + cp * (d + dp * s))` (`simstudy.compiler.layout.Layout`). Moving every
rank one replica on (d to d + 1, dp - 1 back to 0) is the permutation sigma. Where the graph is
the same under sigma, every replica runs what replica 0 runs, with its groups and peers moved:

* each rank runs the same task list as its image (no variability drawn per rank);
* a group it runs a collective on maps to the group of its image's collective, member for member
  in order (a tensor- or pipeline-parallel group of one replica: the same group one replica on),
  or is its image's own group and holds the images of its members (a data-parallel group: one
  rank of every replica, which all replicas run together);
* its image sends to and receives from the images of its peers.

Then a simulation whose network is the same under sigma too (the simulator checks that) may run
replica 0 alone and take every other replica's times from it. `replica_orbits` checks the graph
and gives the replicas: `out[k, i]` is the i-th rank of replica k, `out[0]` the ranks of replica 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from simstudy.compiler.graph import ExecutionGraph, Task, TaskKind
from simstudy.compiler.layout import Layout

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from simstudy.spec import Scenario


def replica_orbits(graph: ExecutionGraph, scenario: Scenario) -> NDArray[np.int64] | None:
    """The replicas of `graph` (dp x npus / dp ranks, see the module docstring), or None where its
    replicas do not run alike (or it has one)."""
    p = scenario.parallelism
    layout = Layout(p.dp, p.tp, p.pp, p.cp)
    if p.dp < 2 or graph.npus != layout.npus or any(g.rank != r for r, g in enumerate(graph.ranks)):
        return None
    coords = [layout.coord(r) for r in range(graph.npus)]
    sigma = [layout.rank(c.t, (c.d + 1) % p.dp, c.s, c.c) for c in coords]
    if not same_under(graph, sigma):
        return None
    first = [c for c in coords if c.d == 0]  # replica 0, rank by rank
    return np.array([[layout.rank(c.t, k, c.s, c.c) for c in first] for k in range(p.dp)], dtype=np.int64)


def same_under(graph: ExecutionGraph, image: Sequence[int]) -> bool:
    """Whether `graph` is the same under the rank permutation `image` (rank r to image[r]; the module
    docstring's three conditions), every rank checked against its image."""
    groups = graph.groups
    everyone = tuple(range(graph.npus))
    moved: dict[int, tuple[int, ...]] = {}  # a group's members, each moved
    closed: dict[int, bool] = {}  # whether a group holds the images of its members
    bound: dict[int, tuple[list[Task], list[Task]]] = {}  # a task list's first task of each group and peer

    def members(g: int) -> tuple[int, ...]:
        return groups.get(g) or everyone

    for g in graph.ranks:
        h = graph.ranks[image[g.rank]]
        if h.tasks is not g.tasks:
            return False
        named = bound.get(id(g.tasks))
        if named is None:
            named = bound[id(g.tasks)] = _named(g.tasks)
        for t in named[0]:
            a, b = g.group_of(t), h.group_of(t)
            if a == b:
                ok = closed.get(a)
                if ok is None:
                    m = members(a)
                    ok = closed[a] = set(m) == {image[r] for r in m}
                if not ok:
                    return False
                continue
            found = moved.get(a)
            if found is None:
                found = moved[a] = tuple(image[r] for r in members(a))
            if found != members(b):
                return False
        if any(h.peer_of(t) != image[g.peer_of(t)] for t in named[1]):
            return False
    return True


def _named(tasks: list[Task]) -> tuple[list[Task], list[Task]]:
    """A task list's first collective on each group it names and first send or receive to each peer
    it names (a rank binds them all alike: `RankGraph.group_of`, `peer_of`)."""
    groups: dict[int, Task] = {}
    peers: dict[int, Task] = {}
    for t in tasks:
        if t.kind is TaskKind.COLLECTIVE:
            groups.setdefault(t.group, t)
        elif t.kind is TaskKind.SEND or t.kind is TaskKind.RECV:
            peers.setdefault(t.peer, t)
    return list(groups.values()), list(peers.values())
