"""Compute variability as the backends run it: a straggler's iteration is its own compute plus the
all-reduce (hand-computed), jitter's iterations end at the slowest rank's draw, flowsim's shortcuts
give the full path's result on varied ranks (and the identical-ranks one is not taken), an
asynchronous parameter server does not wait for its straggler, and both ASTRA-SIM analytical
binaries agree with flowsim to the nanosecond on the same ET files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simstudy import chakra
from simstudy.backends import AstraSimBackend, FlowsimBackend, RunResult
from simstudy.chakra import NodeType
from simstudy.compiler import Bundle, compile_scenario
from simstudy.compiler.costs import whole_us
from simstudy.compiler.variability import draw
from simstudy.spec import Jitter, Scenario
from tests.backends.fastpaths import PATHS, assert_same, run_paths

FWD_US, BWD_US = 300, 600
ITERATIONS = 3


def one_layer(variability: dict[str, Any] | None = None, *, npus: int = 2, params: int = 2**20,
              **parts: Any) -> Scenario:
    """Data parallelism over `npus` ranks of a one-layer model with measured compute: per iteration a
    forward of FWD_US, a backward of BWD_US and an optimizer step of 0 us, one all-reduce between."""
    system: dict[str, Any] = {"measured": {"forward_us": FWD_US, "backward_us": BWD_US, "optimizer_us": 0}}
    if variability is not None:
        system["variability"] = variability
    return Scenario.model_validate({
        "name": "one_layer", "system": system, "topology": {"kind": "switch", "npus": npus},
        "model": {"name": "one", "layers": [{"name": "l0", "params": params, "fwd_flops_per_sample": 1e6,
                                              "activation_bytes_per_sample": 4096}]},
        "training": {"iterations": ITERATIONS}, **parts})


def run(s: Scenario, tmp: Path, name: str, congestion: str = "unaware") -> tuple[Bundle, RunResult]:
    bundle = compile_scenario(s, tmp / name).bundle
    return bundle, FlowsimBackend(congestion=congestion).run(bundle, tmp / f"{name}-run")


def allreduce_ns(result: RunResult) -> int:
    """Rank 0's time in its first all-reduce (both ranks are ready at once without variability)."""
    spans = result.spans
    coll = spans[(spans["rank"] == 0) & (spans["kind"].astype(str) == "collective")].sort_values("start_ns")
    return int(coll["end_ns"].iloc[0] - coll["start_ns"].iloc[0])


def test_a_straggler_adds_its_extra_compute_to_every_iteration(tmp_path: Path) -> None:
    """2 ranks, rank 1 at 2x: each iteration takes rank 1's compute (2 x 900 us) plus the all-reduce,
    and rank 0 waits for it in the all-reduce (having sent its first half early, as ASTRA-SIM's ranks
    do, it ends its part sooner, by less than the all-reduce)."""
    _, plain = run(one_layer(), tmp_path, "plain")
    _, slow = run(one_layer({"stragglers": [{"ranks": [1], "slowdown": 2}]}), tmp_path, "slow")
    assert plain.details["identical_ranks"] and not slow.details["identical_ranks"]
    ar = allreduce_ns(plain)
    compute_ns = (FWD_US + BWD_US) * 1000
    # without: compute + all-reduce per iteration (+1 ns per 0-us optimizer node that has no FLOPs: none here)
    assert [r.finish_ns for r in plain.ranks] == [ITERATIONS * (compute_ns + ar)] * 2
    assert slow.ranks[1].finish_ns == ITERATIONS * (2 * compute_ns + ar)
    assert slow.ranks[1].finish_ns - ar < slow.ranks[0].finish_ns < slow.ranks[1].finish_ns
    assert slow.details["iteration_ends_ns"] == [k * (2 * compute_ns + ar) for k in range(1, ITERATIONS + 1)]
    assert [r.compute_ns for r in slow.ranks] == [ITERATIONS * compute_ns, ITERATIONS * 2 * compute_ns]


def test_a_straggler_in_some_iterations_slows_only_those(tmp_path: Path) -> None:
    _, plain = run(one_layer(), tmp_path, "plain")
    _, slow = run(one_layer({"stragglers": [{"ranks": [0], "slowdown": 1.5, "iterations": [1, 1]}]}), tmp_path, "s")
    ar, compute_ns = allreduce_ns(plain), (FWD_US + BWD_US) * 1000
    fast, slow_it = compute_ns + ar, int(1.5 * compute_ns) + ar
    assert slow.details["iteration_ends_ns"] == [fast, fast + slow_it, 2 * fast + slow_it]


def compute_us(bundle: Bundle, rank: int) -> list[int]:
    """A rank's compute time in each iteration, from its ET file."""
    us = [0] * ITERATIONS
    for n in chakra.decode_trace(bundle.et_path(rank).read_bytes())[1]:
        if n.type == NodeType.COMP_NODE:
            us[int(n.get("simstudy.iteration", 0))] += n.duration_micros
    return us


def test_correlated_jitter_stretches_every_ranks_iteration_alike(tmp_path: Path) -> None:
    """One draw per iteration for every rank: iteration k takes (300 f_k + 600 f_k, each rounded to
    whole us) plus the all-reduce, and the ranks stay identical (the shortcut holds)."""
    _, plain = run(one_layer(npus=4), tmp_path, "plain")
    jitter = {"distribution": "lognormal", "cv": 0.3, "seed": 11, "correlated": True}
    _, varied = run(one_layer({"jitter": jitter}, npus=4), tmp_path, "jitter")
    j = Jitter.model_validate(jitter)
    ar, t, ends = allreduce_ns(plain), 0, []
    for k in range(ITERATIONS):
        f = draw(j, 0, k)
        t += (whole_us(FWD_US * f) + whole_us(BWD_US * f)) * 1000 + ar
        ends.append(t)
    assert varied.details["iteration_ends_ns"] == ends
    assert varied.details["identical_ranks"]


def test_independent_jitter_waits_for_the_slowest_draw(tmp_path: Path) -> None:
    """Each rank its own draws: every iteration waits for its slowest rank's compute (read back from
    the ET files), so the run lasts at least the sum of those plus one all-reduce, and at most that
    plus an all-reduce per iteration."""
    _, plain = run(one_layer(npus=4), tmp_path, "plain")
    bundle, varied = run(one_layer({"jitter": {"distribution": "lognormal", "cv": 0.3, "seed": 11}}, npus=4),
                         tmp_path, "jitter")
    per_rank = [compute_us(bundle, r) for r in range(4)]
    assert len({tuple(u) for u in per_rank}) == 4
    slowest = sum(max(u[k] for u in per_rank) for k in range(ITERATIONS)) * 1000
    ar = allreduce_ns(plain)
    assert slowest + ar <= varied.finish_ns <= slowest + ITERATIONS * ar
    assert not varied.details["identical_ranks"]


@pytest.mark.parametrize("congestion", ["fluid", "unaware", "aware"])
@pytest.mark.parametrize("variability", [{"stragglers": [{"ranks": [2], "slowdown": 3}]},
                                         {"jitter": {"cv": 0.3}}], ids=["straggler", "jitter"])
def test_shortcuts_give_the_full_path_on_varied_ranks(variability: dict[str, Any], congestion: str,
                                                      tmp_path: Path) -> None:
    s = Scenario.model_validate({"name": "r", "model": "small_cnn", "topology": {"kind": "ring", "npus": 4},
                                 "system": {"collective_chunks": 2, "variability": variability},
                                 "training": {"iterations": 2, "batch_size_per_worker": 16}})
    bundle = compile_scenario(s, tmp_path / "b").bundle
    assert_same(run_paths(bundle, tmp_path, congestion, PATHS))


@pytest.mark.parametrize(("mode", "waits"), [("sync", True), ("async", False)])
def test_an_async_parameter_server_does_not_wait_for_its_straggler(mode: str, waits: bool, tmp_path: Path) -> None:
    """4 workers and a dedicated server, worker 3 at 3x: synchronous workers all end with the
    straggler; asynchronous ones end as they would without it (within 2%), long before it."""
    ps = {"parallelism": {"aggregation": {"kind": "parameter_server", "servers": 1, "mode": mode}}}
    _, plain = run(one_layer(npus=5, params=2**14, **ps), tmp_path, "plain", "fluid")
    _, slow = run(one_layer({"stragglers": [{"ranks": [3], "slowdown": 3}]}, npus=5, params=2**14, **ps), tmp_path,
                  "s", "fluid")
    straggler = slow.ranks[3].finish_ns
    assert straggler > 2.5 * plain.ranks[3].finish_ns
    for w in range(3):
        if waits:
            assert slow.ranks[w].finish_ns >= straggler - (FWD_US + BWD_US) * 1000
        else:
            assert abs(slow.ranks[w].finish_ns - plain.ranks[w].finish_ns) <= 0.02 * plain.ranks[w].finish_ns
            assert slow.ranks[w].finish_ns < 0.5 * straggler


AGREEMENT: dict[str, dict[str, Any]] = {
    "ring8_straggler": {"model": "small_cnn", "topology": {"kind": "ring", "npus": 8},
                        "system": {"collective_chunks": 2, "variability": {
                            "stragglers": [{"ranks": [5], "slowdown": 3}, {"ranks": [0, 1], "slowdown": 1.5,
                                                                          "iterations": [1, 1]}]}}},
    "switch4_lognormal": {"model": "resnet50", "topology": {"kind": "switch", "npus": 4},
                          "training": {"batch_size_per_worker": 8},
                          "system": {"variability": {"jitter": {"distribution": "lognormal", "cv": 0.3}}}},
    "ring4_normal_correlated_and_straggler": {
        "model": "small_cnn", "topology": {"kind": "ring", "npus": 4},
        "system": {"variability": {"jitter": {"cv": 0.2, "seed": 5, "correlated": True},
                                   "stragglers": [{"ranks": [2], "slowdown": 2}]}}},
    "ps_sync_switch_straggler": {
        "model": "small_cnn", "parallelism": {"dp": 4, "bucket_size_mib": 0.25, "aggregation": {
            "kind": "parameter_server", "servers": 2}}, "topology": {"kind": "switch", "npus": 6},
        "system": {"variability": {"stragglers": [{"ranks": [1], "slowdown": 2}], "jitter": {"cv": 0.1}}}},
    "hybrid_dp2_tp2_pp2_jitter": {"model": "gpt2", "parallelism": {"dp": 2, "tp": 2, "pp": 2, "microbatches": 2},
                                  "training": {"batch_size_per_worker": 4}, "topology": {"kind": "switch", "npus": 8},
                                  "system": {"variability": {"jitter": {"cv": 0.2}}}},
}


@pytest.mark.astrasim
@pytest.mark.parametrize("aware", [False, True], ids=["unaware", "aware"])
@pytest.mark.parametrize("case", sorted(AGREEMENT))
def test_both_astra_sim_binaries_agree_with_flowsim_to_the_nanosecond(case: str, aware: bool, astra_sim_bin: Path,
                                                                       aware_bin: Path, tmp_path: Path) -> None:
    spec = {"name": case, "training": {"iterations": 2, **AGREEMENT[case].get("training", {})},
            **{k: v for k, v in AGREEMENT[case].items() if k != "training"}}
    bundle = compile_scenario(Scenario.model_validate(spec), tmp_path / "bundle").bundle
    a = AstraSimBackend(aware_bin if aware else astra_sim_bin, aware=aware).run(bundle, tmp_path / "a", timeout_s=600)
    f = FlowsimBackend(congestion="aware" if aware else "unaware").run(bundle, tmp_path / "f", timeout_s=600)
    assert [r.finish_ns for r in f.ranks] == [r.finish_ns for r in a.ranks]
    assert len({r.finish_ns for r in f.ranks}) > 1 or case.startswith("ring4_normal")  # the ranks do differ
