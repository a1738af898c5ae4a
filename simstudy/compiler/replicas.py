"""Data-parallel replicas that run alike: which ranks stand for which (`Bundle.replicas`).

Ranks are numbered `t + tp * (c + cp * (d + dp * s))` (`simstudy.compiler.layout`). Moving every
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

from typing import TYPE_CHECKING

import numpy as np

from simstudy.compiler.graph import ExecutionGraph, RankGraph, TaskKind

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from simstudy.spec import Scenario


def replica_orbits(graph: ExecutionGraph, scenario: Scenario) -> NDArray[np.int64] | None:
    """The replicas of `graph` (dp x npus / dp ranks, see the module docstring), or None where its
    replicas do not run alike (or it has one)."""
    p = scenario.parallelism
    inner = p.tp * p.cp
    npus = graph.npus
    if p.dp < 2 or npus != inner * p.dp * p.pp or any(g.rank != r for r, g in enumerate(graph.ranks)):
        return None
    ranks = np.arange(npus, dtype=np.int64)
    d = (ranks // inner) % p.dp
    sigma = ranks + inner * ((d + 1) % p.dp - d)
    if not same_under(graph, sigma):
        return None
    first = ranks[d == 0]
    out: NDArray[np.int64] = first[None, :] + inner * np.arange(p.dp, dtype=np.int64)[:, None]
    return out


def same_under(graph: ExecutionGraph, sigma: NDArray[np.int64]) -> bool:
    """Whether `graph` is the same under the rank permutation `sigma` (the module docstring's
    three conditions), every rank checked against its image."""
    image = sigma.tolist()
    groups = graph.groups
    everyone = tuple(range(graph.npus))
    moved: dict[int, tuple[int, ...]] = {}  # a group's members, each moved by sigma
    closed: dict[int, bool] = {}  # whether a group holds the images of its members
    keys: dict[int, tuple[list[int], list[int]]] = {}  # a task list's group ids and peers

    def members(g: int) -> tuple[int, ...]:
        return groups.get(g) or everyone

    for g in graph.ranks:
        h = graph.ranks[image[g.rank]]
        if h.tasks is not g.tasks:
            return False
        used = keys.get(id(g.tasks))
        if used is None:
            used = keys[id(g.tasks)] = _keys(g)
        for k in used[0]:
            a, b = _group(g, k), _group(h, k)
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
        for peer in used[1]:
            if _peer(h, peer) != image[_peer(g, peer)]:
                return False
    return True


def _keys(g: RankGraph) -> tuple[list[int], list[int]]:
    """The group ids and the peers a rank's task list names (before the rank binds them)."""
    groups = sorted({t.group for t in g.tasks if t.kind is TaskKind.COLLECTIVE})
    peers = sorted({t.peer for t in g.tasks if t.kind is TaskKind.SEND or t.kind is TaskKind.RECV})
    return groups, peers


def _group(g: RankGraph, key: int) -> int:
    return key if g.groups is None else g.groups.get(key, key)


def _peer(g: RankGraph, peer: int) -> int:
    return peer if g.peers is None else g.peers.get(peer, peer)
