"""Several jobs on one network: per-job times and slowdowns against running alone."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from simstudy import layout
from simstudy.backends import simulate
from simstudy.backends.jobs import read_job_results
from simstudy.backends.locate import find_astra_sim
from simstudy.spec import BackendSpec, Cluster
from simstudy.sweeps.runner import run_link_summary
from simstudy.traffic.links import link_metrics

MB = 2**20
#: One layer whose gradient is 64 MiB and whose compute is one microsecond: the iteration is the all-reduce.
COMM_ONLY = {"name": "comm_only", "layers": [{"name": "w", "params": 16 * MB, "fwd_flops_per_sample": 1,
                                              "activation_bytes_per_sample": 4}]}


def _cluster(a: list[int], b: list[int], **job: object) -> Cluster:
    """Two identical all-reduce jobs on a leaf-spine of 2 leaves x 2 hosts, 100 Gbit/s NICs and one
    100 Gbit/s uplink per leaf (2:1 oversubscribed), at NPUs `a` and `b`."""
    jobs = [{"name": name, "model": COMM_ONLY, "gpus": 2, "placement": npus, "training": {"iterations": 2},
             "system": {"peak_tflops": 100}, "parallelism": {"bucket_size_mib": 64}, **job}
            for name, npus in (("a", a), ("b", b))]
    return Cluster.model_validate({
        "kind": "cluster", "name": "pair",
        "topology": {"kind": "leaf_spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2, "bandwidth_gbps": 100,
                     "uplink_bandwidth_gbps": 100, "latency_ns": 0},
        "jobs": jobs})


def test_disjoint_jobs_are_not_slowed_down(tmp_path: Path) -> None:
    # job a on leaf 0 (NPUs 0, 1), job b on leaf 1 (NPUs 2, 3): no link carries both
    result = simulate(_cluster([0, 1], [2, 3]), tmp_path / "run", BackendSpec())
    jobs = {j["name"]: j for j in result.details["jobs"]}
    assert jobs["a"]["slowdown"] == pytest.approx(1.0, abs=1e-9)
    assert jobs["b"]["slowdown"] == pytest.approx(1.0, abs=1e-9)
    assert set(result.traffic["job"]) == {0, 1}


def test_a_shared_uplink_slows_both_jobs_by_the_fair_share(tmp_path: Path) -> None:
    # Each job has one NPU on each leaf, so both jobs' all-reduce crosses the same 100 Gbit/s
    # uplinks at the same time, while alone a job has them to itself. Max-min fair sharing gives
    # each job half an uplink, so the part of an iteration spent moving bytes doubles and the rest
    # (the reduction of received data, the optimizer step: ~0.27 ms) does not:
    #     shared = alone + T,  T = bytes each rank sends per iteration / uplink rate
    # with T = 2 ring steps x 32 MiB at 12.5 bytes/ns = 5.369 ms, so the slowdown the fair share
    # implies is 1 + T / alone (1.95 here: alone is 5.64 ms).
    result = simulate(_cluster([0, 2], [1, 3]), tmp_path / "run", BackendSpec())
    t_bytes_ms = 2 * 32 * MB / 12.5 / 1e6
    for job in result.details["jobs"]:
        expected = 1 + t_bytes_ms / job["alone_iteration_ms"]
        assert job["slowdown"] == pytest.approx(expected, rel=1e-3)
        assert 1.9 < job["slowdown"] < 2.0
    # the alone runs are cached beside the run directory and reused
    alone = sorted(p.name for p in (tmp_path / "run.alone").iterdir())
    assert len(alone) == 2
    again = simulate(_cluster([0, 2], [1, 3]), tmp_path / "run2", BackendSpec(), alone=tmp_path / "run.alone")
    assert [j["alone_iteration_ms"] for j in again.details["jobs"]] == \
        [j["alone_iteration_ms"] for j in result.details["jobs"]]


def test_late_start_is_not_counted_as_iteration_time(tmp_path: Path) -> None:
    c = _cluster([0, 1], [2, 3])
    late = c.model_copy(update={"jobs": (c.jobs[0], c.jobs[1].model_copy(update={"start_ms": 7.0}))})
    simulate(late, tmp_path / "run", BackendSpec())
    jobs = read_job_results(tmp_path / "run")
    assert jobs is not None
    assert jobs[1].start_ms == pytest.approx(7.0)
    assert jobs[1].finish_ms > 7.0
    assert jobs[1].slowdown == pytest.approx(1.0, abs=1e-9)
    assert json.loads((tmp_path / "run" / layout.RUN_JSON).read_text())["details"]["jobs"][1]["name"] == "b"


@pytest.mark.astrasim
def test_two_jobs_aware_agree_with_the_aware_binary(tmp_path: Path) -> None:
    """The same 2-job cluster on flowsim `aware` and on ASTRA-SIM's aware binary, one communicator
    group per job: per-job finish within 1%."""
    binary = find_astra_sim(aware=True)
    if binary is None:
        pytest.skip("no ASTRA-SIM aware binary (set ASTRA_SIM_BIN)")
    c = Cluster.model_validate({
        "kind": "cluster", "name": "pair_switch",
        "topology": {"kind": "switch", "npus": 8, "bandwidth_gbps": 100},
        "jobs": [{"name": "a", "model": "small_cnn", "gpus": 4, "placement": [0, 2, 4, 6],
                  "training": {"iterations": 2}},
                 {"name": "b", "model": "lstm_lm", "gpus": 4, "placement": [1, 3, 5, 7], "start_ms": 1,
                  "training": {"iterations": 2}}]})
    sim = simulate(c, tmp_path / "flowsim", BackendSpec(congestion="aware"))  # type: ignore[call-arg]
    real = simulate(c, tmp_path / "astrasim", BackendSpec(name="astrasim", aware=True),
                    astra_sim=os.environ.get("ASTRA_SIM_BIN"))
    for s, r in zip(sim.details["jobs"], real.details["jobs"], strict=True):
        assert s["finish_ms"] == pytest.approx(r["finish_ms"], rel=0.01), (s["name"], s, r)
        assert not math.isnan(s["iteration_ms"])


def test_link_results_per_tier_and_hottest_links(tmp_path: Path) -> None:
    """With `traffic: links`: the bytes through each tier and the most loaded links. A transfer
    from a host under one leaf to a host under the other crosses two spine links (up, down),
    so the spine tier carries twice what the NPUs sent; jobs that stay under their leaf send
    nothing through it."""
    spec = BackendSpec(traffic="links", traffic_bin_s=1e-4)
    shared = simulate(_cluster([0, 2], [1, 3]), tmp_path / "shared", spec)
    summary = run_link_summary(shared.links, tmp_path / "shared" / layout.BUNDLE_DIR, shared.finish_ns * 1e-9)
    sent = float(shared.output.sent.sum())
    spine = summary.tier("spine")
    assert spine is not None and spine.links == 4
    assert spine.bytes == pytest.approx(2 * sent, rel=1e-9)
    # the hottest links are the spine links, busy for (almost) the whole run: 4 x 64 MiB per uplink
    # direction in 22 ms at 100 Gbit/s
    assert summary.hottest[0].tier == "spine"
    assert summary.hottest[0].mean_utilization == pytest.approx(4 * 64 * MB * 8 / (100e9 * shared.finish_ns * 1e-9),
                                                                rel=1e-6)
    assert 0.9 < summary.hottest[0].mean_utilization <= 1.0
    assert spine.utilization.max() <= 1.0 + 1e-6  # integer-ns transfer times round up by < 1e-7
    metrics = link_metrics(summary)
    assert metrics["tier.spine.bytes"] == spine.bytes
    disjoint = simulate(_cluster([0, 1], [2, 3]), tmp_path / "disjoint", spec)
    apart = run_link_summary(disjoint.links, tmp_path / "disjoint" / layout.BUNDLE_DIR, disjoint.finish_ns * 1e-9)
    assert apart.tier("spine").bytes == 0  # type: ignore[union-attr]
