"""Gossip's compiled graph (messages, peers, bytes against the formula: every worker sends and
receives `peers` x the parameter bytes per iteration, P x the precision's bytes each) and bounded
staleness's dependencies (the forward of iteration i + s + 1 waits for iteration i's update)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from simstudy.compiler import RankGraph, TaskKind, build_graph, resolve
from simstudy.compiler.gossip import neighbours, offsets
from simstudy.spec import Gossip, Scenario

ITERATIONS = 4


def scenario(aggregation: dict[str, Any], dp: int = 8, *, staleness: int = 0, precision: str = "fp32",
             model: str = "small_cnn", framework: str = "pytorch_ddp") -> Scenario:
    return resolve(Scenario.model_validate({
        "name": "g", "model": model, "parallelism": {"dp": dp, "aggregation": aggregation, "staleness": staleness,
                                                      "framework": framework},
        "topology": {"kind": "switch", "npus": dp}, "training": {"iterations": ITERATIONS, "precision": precision}}))


def sends(g: RankGraph, it: int) -> list[tuple[int, int, int]]:
    """(peer, bytes, tag) of the rank's sends of iteration `it`, in graph order."""
    return [(g.peer_of(t), t.size_bytes, t.tag) for t in g.tasks if t.kind is TaskKind.SEND and t.iteration == it]


def recvs(g: RankGraph, it: int) -> list[tuple[int, int, int]]:
    return [(g.peer_of(t), t.size_bytes, t.tag) for t in g.tasks if t.kind is TaskKind.RECV and t.iteration == it]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(("aggregation", "dp"), [
    ({"kind": "gossip", "graph": "ring", "peers": 2}, 8), ({"kind": "gossip", "graph": "ring", "peers": 5}, 6),
    ({"kind": "gossip", "graph": "exponential", "peers": 1}, 8), ({"kind": "gossip", "graph": "exponential",
                                                                    "peers": 3}, 8),
    ({"kind": "gossip", "graph": "random", "peers": 3, "seed": 7}, 16), ({"kind": "gossip", "mode": "async"}, 2),
])
def test_bytes_per_worker_per_iteration_are_peers_times_the_parameters(aggregation: dict[str, Any], dp: int,
                                                                         precision: str) -> None:
    s = scenario(aggregation, dp, precision=precision)
    params = sum(layer.params for layer in s.resolved_model.layers)
    size = params * {"fp32": 4, "bf16": 2}[precision]
    k = aggregation.get("peers", 1)
    graph = build_graph(s)  # checks that every send has its receive (peers, tag, size)
    assert graph.npus == dp
    for g in graph.ranks:
        assert g.sent_bytes() == g.received_bytes() == ITERATIONS * k * size
        assert not [t for t in g.tasks if t.kind is TaskKind.COLLECTIVE]
        for it in range(ITERATIONS):
            out, into = sends(g, it), recvs(g, it)
            assert len(out) == len(into) == k and {b for _, b, _ in out + into} == {size}
            assert len({p for p, _, _ in out}) == k and g.rank not in {p for p, _, _ in out}  # k distinct others
            assert sorted(t for _, _, t in out) == sorted(t for _, _, t in into) == list(range(it * k, it * k + k))


def test_ring_peers_are_the_nearest_ranks() -> None:
    graph = build_graph(scenario({"kind": "gossip", "graph": "ring", "peers": 2}, 8))
    for g in graph.ranks:
        r = g.rank
        for it in range(ITERATIONS):
            assert [p for p, _, _ in sends(g, it)] == [(r + 1) % 8, (r - 1) % 8]
            assert [p for p, _, _ in recvs(g, it)] == [(r - 1) % 8, (r + 1) % 8]
    assert offsets("ring", 5, 8, 0) == [1, -1, 2, -2, 3]


def test_exponential_peers_take_the_powers_of_two_in_turn() -> None:
    """dp = 8: hops 1, 2, 4 (the powers of two below 8); one per iteration in turn, or three at once."""
    one = build_graph(scenario({"kind": "gossip", "graph": "exponential", "peers": 1}, 8))
    for g in one.ranks:
        r = g.rank
        assert [sends(g, it)[0][0] for it in range(ITERATIONS)] == [(r + 1) % 8, (r + 2) % 8, (r + 4) % 8,
                                                                    (r + 1) % 8]
        assert [recvs(g, it)[0][0] for it in range(ITERATIONS)] == [(r - 1) % 8, (r - 2) % 8, (r - 4) % 8,
                                                                    (r - 1) % 8]
    every = build_graph(scenario({"kind": "gossip", "graph": "exponential", "peers": 3}, 8))
    assert [p for p, _, _ in sends(every.ranks[3], 2)] == [4, 5, 7]
    assert offsets("exponential", 2, 9, 1) == [4, 8]  # 1, 2, 4, 8 below 9: iteration 1 takes the third and fourth


def test_random_peers_are_drawn_per_iteration_from_the_seed() -> None:
    agg = Gossip(graph="random", peers=2, seed=3)
    plan = neighbours(agg, 16, 6)
    assert plan == neighbours(agg, 16, 6)  # the seed decides
    assert plan != neighbours(Gossip(graph="random", peers=2, seed=4), 16, 6)
    assert len({tuple(n.to for n in ranks) for ranks in plan}) == 6  # a new draw every iteration
    for ranks in plan:  # every send's receiver receives from that sender, with the send's offset index
        for r, n in enumerate(ranks):
            assert len(set(n.to)) == 2 and r not in n.to
            for k, dst in enumerate(n.to):
                assert ranks[dst].source[k] == r
        assert Counter(d for n in ranks for d in n.to) == Counter({r: 2 for r in range(16)})


def _update_deps(g: RankGraph, it: int) -> set[TaskKind]:
    update = next(t for t in g.tasks if t.name == f"update.it{it}")
    return {g.tasks[d].kind for d in update.deps}


def test_sync_updates_wait_for_the_receives_and_async_ones_do_not() -> None:
    sync = build_graph(scenario({"kind": "gossip", "peers": 2}, 4)).ranks[0]
    async_ = build_graph(scenario({"kind": "gossip", "peers": 2, "mode": "async"}, 4)).ranks[0]
    assert _update_deps(sync, 1) == {TaskKind.COMPUTE, TaskKind.RECV}
    assert _update_deps(async_, 1) == {TaskKind.COMPUTE}
    for g in (sync, async_):  # receives are posted when the iteration's forward starts; sends after backward
        first_fwd = next(t.id for t in g.tasks if t.name.startswith("fwd.") and t.iteration == 1)
        assert all(t.deps == [first_fwd] for t in g.tasks if t.kind is TaskKind.RECV and t.iteration == 1)
        last_bwd = max(t.id for t in g.tasks if t.name.startswith("bwd.") and t.iteration == 1)
        assert all(t.deps == [last_bwd] for t in g.tasks if t.kind is TaskKind.SEND and t.iteration == 1)


def _forward_waits(g: RankGraph, it: int) -> list[str]:
    """The names of what the first forward task of iteration `it` depends on."""
    first = next(t for t in g.tasks if t.name.startswith("fwd.") and t.iteration == it)
    return sorted(g.tasks[d].name for d in first.deps)


@pytest.mark.parametrize(("aggregation", "framework", "sync"), [
    ({"kind": "allreduce"}, "pytorch_ddp", "optimizer"), ({"kind": "allreduce"}, "horovod", "optimizer"),
    ({"kind": "allreduce"}, "kungfu", "optimizer"), ({"kind": "gossip", "peers": 2}, "pytorch_ddp", "update"),
])
@pytest.mark.parametrize("staleness", [0, 1, 2])
def test_the_forward_of_iteration_i_plus_s_plus_1_waits_for_iteration_i(
        aggregation: dict[str, Any], framework: str, sync: str, staleness: int) -> None:
    g = build_graph(scenario(aggregation, 4, staleness=staleness, framework=framework)).ranks[1]
    last_layer = scenario(aggregation, 4).resolved_model.layers[0].name  # backward ends with the first layer
    assert _forward_waits(g, 0) == []
    for it in range(1, ITERATIONS):
        behind = it - 1 - staleness
        if staleness == 0:
            assert _forward_waits(g, it) == [f"{sync}.it{it - 1}"]
        else:
            assert _forward_waits(g, it) == sorted([f"bwd.{last_layer}.it{it - 1}"]
                                                   + ([f"{sync}.it{behind}"] if behind >= 0 else []))


def test_staleness_zero_is_the_graph_without_it() -> None:
    """`staleness: 0` is the default: the same tasks, and the field is left out of the scenario's JSON."""
    base = Scenario.model_validate({"name": "g", "model": "small_cnn", "parallelism": {"dp": 4},
                                    "topology": {"kind": "switch", "npus": 4}, "training": {"iterations": 3}})
    zero = Scenario.model_validate({**base.model_dump(), "parallelism": {"dp": 4, "staleness": 0}})
    assert "staleness" not in base.model_dump(mode="json")["parallelism"]
    assert zero.model_dump(mode="json") == base.model_dump(mode="json")
    a, b = build_graph(resolve(base)), build_graph(resolve(zero))
    assert [t.tasks for t in a.ranks] == [t.tasks for t in b.ranks]
