"""Compute variability in the ET files: stragglers scale their ranks' compute nodes, jitter draws are
deterministic per (seed, rank, iteration), and a spec without variability compiles to today's bytes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simstudy import chakra
from simstudy.chakra import Node, NodeType
from simstudy.compiler import compile_cluster, compile_scenario
from simstudy.compiler.costs import whole_us
from simstudy.compiler.variability import draw, rank_factors
from simstudy.spec import Cluster, Jitter, Scenario, Variability
from simstudy.spec.system import MIN_FACTOR


def scenario(variability: dict[str, Any] | None = None, **parts: Any) -> Scenario:
    data: dict[str, Any] = {"name": "v", "model": "small_cnn", "topology": {"kind": "switch", "npus": 4},
                            "training": {"batch_size_per_worker": 32, "iterations": 3}}
    data.update(parts)
    if variability is not None:
        data["system"] = {**data.get("system", {}), "variability": variability}
    return Scenario.model_validate(data)


def traces(s: Scenario, out: Path) -> list[bytes]:
    bundle = compile_scenario(s, out).bundle
    return [bundle.et_path(r).read_bytes() for r in range(bundle.npus)]


def compute_nodes(data: bytes) -> list[Node]:
    return [n for n in chakra.decode_trace(data)[1] if n.type == NodeType.COMP_NODE]


def iteration(n: Node) -> int:
    return int(n.get("simstudy.iteration", 0))


@pytest.mark.parametrize("variability", [{}, {"jitter": {"cv": 0}}, {"jitter": {"distribution": "lognormal", "cv": 0}},
                                         {"stragglers": [{"ranks": [1], "slowdown": 1}]}])
def test_variability_that_varies_nothing_writes_todays_bytes(variability: dict[str, Any], tmp_path: Path) -> None:
    assert traces(scenario(variability), tmp_path / "v") == traces(scenario(), tmp_path / "plain")


def test_a_straggler_scales_its_ranks_compute_in_its_iterations(tmp_path: Path) -> None:
    plain = traces(scenario(), tmp_path / "plain")
    slow = traces(scenario({"stragglers": [{"ranks": [1, 3], "slowdown": 2.5, "iterations": [1, 2]}]}), tmp_path / "s")
    assert slow[0] == plain[0] and slow[2] == plain[2]
    assert slow[1] == slow[3] != plain[1]
    before, after = compute_nodes(plain[1]), compute_nodes(slow[1])
    assert [n.id for n in before] == [n.id for n in after]
    assert any(n.duration_micros > 0 for n in before)
    for b, a in zip(before, after, strict=True):
        want = b.duration_micros if iteration(b) == 0 or b.duration_micros == 0 else whole_us(b.duration_micros * 2.5)
        assert a.duration_micros == want, (b.name, b.duration_micros, a.duration_micros)
    # nothing but the durations changed: the communication nodes are byte-for-byte today's
    others = [n for n in chakra.decode_trace(plain[1])[1] if n.type != NodeType.COMP_NODE]
    assert others == [n for n in chakra.decode_trace(slow[1])[1] if n.type != NodeType.COMP_NODE]


def test_stragglers_multiply_where_they_overlap() -> None:
    v = Variability.model_validate({"stragglers": [{"ranks": [0], "slowdown": 2}, {"ranks": [0, 1], "slowdown": 1.5,
                                                                                  "iterations": [1, 1]}]})
    assert rank_factors(v, 0, 3) == (2.0, 3.0, 2.0)
    assert rank_factors(v, 1, 3) == (1.0, 1.5, 1.0)
    assert rank_factors(v, 2, 3) == (1.0, 1.0, 1.0)


def test_jitter_durations_are_the_base_times_the_seeded_draws(tmp_path: Path) -> None:
    jitter = {"distribution": "lognormal", "cv": 0.3, "seed": 7}
    plain = traces(scenario(), tmp_path / "plain")
    varied = traces(scenario({"jitter": jitter}), tmp_path / "j")
    assert len(set(varied)) == 4  # every rank its own draws: four distinct traces
    j = Jitter.model_validate(jitter)
    for r in range(4):
        for b, a in zip(compute_nodes(plain[r]), compute_nodes(varied[r]), strict=True):
            f = float(np.exp(-math.log1p(0.09) / 2 + math.sqrt(math.log1p(0.09)) *
                             np.random.default_rng([7, r, iteration(b)]).standard_normal()))
            assert f == pytest.approx(draw(j, r, iteration(b)), rel=1e-12)
            want = 0 if b.duration_micros == 0 else max(1, int(b.duration_micros * f + 0.5))
            assert a.duration_micros == want


def test_draws_do_not_depend_on_the_job_size_or_compile_order(tmp_path: Path) -> None:
    """Rank 2's jitter is the same in a 4-rank and an 8-rank job, compiled in either order."""
    v = {"jitter": {"cv": 0.2, "seed": 3}}
    big = scenario(v, topology={"kind": "switch", "npus": 8})
    small_first = traces(scenario(v), tmp_path / "a")[2]
    big_then = traces(big, tmp_path / "b")[2]
    assert [n.duration_micros for n in compute_nodes(small_first)] == \
        [n.duration_micros for n in compute_nodes(big_then)]
    assert traces(scenario(v), tmp_path / "c")[2] == small_first
    other_seed = traces(scenario({"jitter": {"cv": 0.2, "seed": 4}}), tmp_path / "d")[2]
    assert other_seed != small_first


def test_correlated_jitter_is_one_draw_per_iteration_for_every_rank(tmp_path: Path) -> None:
    t = traces(scenario({"jitter": {"cv": 0.2, "correlated": True}}), tmp_path / "c")
    assert t[0] == t[1] == t[2] == t[3]
    assert t[0] != traces(scenario(), tmp_path / "plain")[0]
    j = Jitter(cv=0.2, correlated=True)
    assert len({draw(j, 0, k) for k in range(5)}) == 5


def test_rank_jitter_multiplies_the_jobs_draw_with_each_ranks_own(tmp_path: Path) -> None:
    """A correlated jitter (the job's) times a rank jitter (each rank's): the ranks' traces differ,
    each factor is the product of the two draws, and the rank jitter's draws are a stream of their
    own (not the draws of an uncorrelated jitter of the same seed)."""
    v = Variability.model_validate({
        "jitter": {"cv": 0.2, "correlated": True, "seed": 5},
        "rank_jitter": {"distribution": "empirical", "samples": [0.5, 1.0, 1.5], "seed": 5}})
    assert v.jitter is not None and v.rank_jitter is not None
    for r in range(4):
        want = tuple(draw(v.jitter, r, k) * draw(v.rank_jitter, r, k, stream=1) for k in range(3))
        assert rank_factors(v, r, 3) == want
    own = [draw(v.rank_jitter, r, k, stream=1) for r in range(8) for k in range(8)]
    alike = [draw(v.rank_jitter, r, k) for r in range(8) for k in range(8)]
    assert own != alike and set(own) == {0.5, 1.0, 1.5}
    t = traces(scenario(v.model_dump(mode="json")), tmp_path / "rj")
    assert len(set(t)) == 4
    assert traces(scenario({"jitter": {"cv": 0.2, "correlated": True, "seed": 5}}), tmp_path / "job")[0] != t[0]
    # unset, it is not written: variability without it keeps its canonical JSON
    assert "rank_jitter" not in Variability.model_validate({"jitter": {"cv": 0.1}}).model_dump(mode="json")


@pytest.mark.parametrize(("distribution", "cv"), [("normal", 0.1), ("normal", 0.3), ("lognormal", 0.3)])
def test_draws_have_mean_one_and_the_given_cv(distribution: str, cv: float) -> None:
    j = Jitter.model_validate({"distribution": distribution, "cv": cv})
    x = np.array([draw(j, r, k) for r in range(50) for k in range(40)])
    assert abs(x.mean() - 1) < 0.03
    assert abs(x.std() / x.mean() - cv) < 0.15 * cv


def test_normal_draws_are_clipped_so_no_time_reaches_zero(tmp_path: Path) -> None:
    j = Jitter(cv=3.0)
    x = [draw(j, r, k) for r in range(20) for k in range(20)]
    assert min(x) == MIN_FACTOR and all(f >= MIN_FACTOR for f in x)
    t = traces(scenario({"jitter": {"cv": 3.0}}), tmp_path / "wild")
    plain = compute_nodes(traces(scenario(), tmp_path / "plain")[0])
    for data in t:
        for b, a in zip(plain, compute_nodes(data), strict=True):
            assert (a.duration_micros >= 1) == (b.duration_micros >= 1)


def test_empirical_draws_are_the_samples_over_their_mean() -> None:
    j = Jitter.model_validate({"distribution": "empirical", "samples": [8, 10, 12, 30]})
    x = {draw(j, r, k) for r in range(20) for k in range(20)}
    assert x == {8 / 15, 10 / 15, 12 / 15, 30 / 15}  # the mean is 15


@pytest.mark.parametrize("parts", [
    {"parallelism": {"aggregation": {"kind": "parameter_server", "servers": 2, "mode": "async"}},
     "topology": {"kind": "switch", "npus": 6}},
    {"model": "gpt2", "parallelism": {"dp": 2, "tp": 2, "pp": 2, "microbatches": 2},
     "topology": {"kind": "switch", "npus": 8}},
], ids=["ps_dedicated", "hybrid_dp2_tp2_pp2"])
def test_stragglers_in_other_strategies_scale_only_their_ranks(parts: dict[str, Any], tmp_path: Path) -> None:
    """A parameter server's dedicated server (the last rank) and a hybrid job's ranks bound to shared
    task lists: the straggler's compute changes, every other rank's trace stays today's."""
    plain = traces(scenario(**parts), tmp_path / "plain")
    last = len(plain) - 1
    slow = traces(scenario({"stragglers": [{"ranks": [1, last], "slowdown": 3}]}, **parts), tmp_path / "s")
    for r, (p, s) in enumerate(zip(plain, slow, strict=True)):
        if r in (1, last):
            pairs = list(zip(compute_nodes(p), compute_nodes(s), strict=True))
            assert any(b.duration_micros for b, _ in pairs)
            assert all(a.duration_micros == whole_us(b.duration_micros * 3) for b, a in pairs)
        else:
            assert s == p, r


def test_a_cluster_jobs_stragglers_are_its_own_ranks(tmp_path: Path) -> None:
    """Job b's rank 1 sits on NPU 5 (b has NPUs 4-7): that NPU's compute is scaled, job a's are not."""
    def cluster(system: dict[str, Any] | None) -> Cluster:
        b: dict[str, Any] = {"name": "b", "model": "small_cnn", "gpus": 4}
        if system is not None:
            b["system"] = system
        return Cluster.model_validate({"kind": "cluster", "topology": {"kind": "switch", "npus": 8},
                                       "jobs": [{"name": "a", "model": "small_cnn", "gpus": 4}, b]})

    def ets(c: Cluster, out: Path) -> list[bytes]:
        bundle = compile_cluster(c, out).bundle
        return [bundle.et_path(r).read_bytes() for r in range(8)]

    plain = ets(cluster(None), tmp_path / "plain")
    slow = ets(cluster({"variability": {"stragglers": [{"ranks": [1], "slowdown": 2}]}}), tmp_path / "slow")
    assert [r for r in range(8) if plain[r] != slow[r]] == [5]
    for b, a in zip(compute_nodes(plain[5]), compute_nodes(slow[5]), strict=True):
        assert a.duration_micros == whole_us(b.duration_micros * 2)
