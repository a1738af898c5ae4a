"""Findings are computed from real sweep results, and say nothing the numbers do not support."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from simstudy.report.findings import COMM_BOUND, COMPUTE_BOUND, findings
from simstudy.spec import load_study
from simstudy.sweeps import LocalExecutor, run_study

REPO = Path(__file__).resolve().parents[2]


def _sweep(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return run_study(load_study(path), path, tmp_path / "out", executor=LocalExecutor(2), progress=False)


@pytest.fixture(scope="module")
def main_study(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = REPO / "specs" / "cnn_vs_rnn.yaml"
    return run_study(load_study(path), path, tmp_path_factory.mktemp("cvr"), executor=LocalExecutor(2),
                     progress=False)


def test_the_main_study_shows_both_kinds_and_the_burstiest_model(main_study) -> None:  # type: ignore[no-untyped-def]
    s = main_study.summary
    params = main_study.expansion.param_names
    found = findings(s, params)
    kinds = [f.kind for f in found]
    bound = {k: v for f in found if f.kind == "bound" for k, v in f.values.items()}
    assert bound["communication_bound"] == int((s["exposed_comm_frac"] >= COMM_BOUND).sum()) > 0
    assert bound["compute_bound"] == int((s["exposed_comm_frac"] <= COMPUTE_BOUND).sum()) > 0
    (burst,) = [f for f in found if f.kind == "burstiness"]
    by_model = s.groupby("model")["peak_to_mean"].mean()
    assert burst.values["burstiest"] == by_model.idxmax() and burst.values["smoothest"] == by_model.idxmin()
    assert burst.values["ratio"] == pytest.approx(by_model.max() / by_model.min())
    assert f"{burst.values['ratio']:.2f}x" in burst.sentence
    axis = {f.values["axis"]: f for f in found if f.kind == "axis"}
    bw = axis["topology.bandwidth_gbps"]
    # more bandwidth, shorter iterations; the same bytes
    its = bw.values["iteration_ms"]
    assert its["25"] > its["100"] > its["400"]
    assert "leaves bytes per iteration unchanged" in bw.sentence
    assert "failed" not in kinds and "skipped" not in kinds


def test_no_sentence_claims_an_empty_class(tmp_path: Path) -> None:
    # Every scenario on a slow link: all communication-bound, none compute-bound, and nothing failed.
    result = _sweep(tmp_path, """
name: slow
base:
  model: resnet50
  topology: {kind: ring, npus: 4, bandwidth_gbps: 1, latency_ns: 500}
  system: {peak_tflops: 120, efficiency: 0.4}
  training: {batch_size_per_worker: 32, iterations: 2}
axes:
  topology.npus: [2, 4]
""")
    found = findings(result.summary, result.expansion.param_names)
    text = " ".join(f.sentence for f in found)
    assert "2 of 2 scenarios are communication-bound" in text and "None is compute-bound." in text
    assert "compute-bound (exposed" not in text
    assert not [f for f in found if f.kind in ("failed", "skipped")]


def test_failures_and_skips_are_stated(tmp_path: Path) -> None:
    result = _sweep(tmp_path, """
name: some_fail
base:
  model: {zoo: decoder, options: {layers: 1, hidden: 48, heads: 3, seq_len: 8, vocab: 64}}
  topology: {kind: ring, npus: 4, bandwidth_gbps: 10, latency_ns: 500}
  system: {peak_tflops: 10, efficiency: 0.5}
  training: {batch_size_per_worker: 16, iterations: 2}
axes:
  parallelism.tp: [1, 2]
""")
    found = findings(result.summary, result.expansion.param_names, [{"reason": "dp*tp*pp != npus"}])
    (failed,) = [f for f in found if f.kind == "failed"]
    assert failed.values["failed"] == 1 and "does not divide the 3 attention heads" in failed.sentence
    (skipped,) = [f for f in found if f.kind == "skipped"]
    assert "dp*tp*pp != npus" in skipped.sentence


def test_paths_swept_together_are_named_once(tmp_path: Path) -> None:
    """A zip group moves several paths together (the Lingjun study places four jobs at once): the
    report and the findings name each scenario by the group's first path, not by all of them."""
    from simstudy.report.study import render_study

    result = _sweep(tmp_path, """
name: zipped
base:
  model: resnet50
  topology: {kind: ring, npus: 4, bandwidth_gbps: 1, latency_ns: 500}
  system: {peak_tflops: 120, efficiency: 0.4}
  training: {batch_size_per_worker: 32, iterations: 2}
axes:
  topology.npus: [2, 4]
zip:
  - topology.bandwidth_gbps: [1, 100]
    topology.latency_ns: [500, 700]
""")
    params = result.expansion.param_names
    assert params == ["topology.npus", "topology.bandwidth_gbps", "topology.latency_ns"]
    text = " ".join(f.sentence for f in findings(result.summary, params))
    assert "topology.bandwidth_gbps=1" in text and "topology.latency_ns=500" not in text
    report = render_study(result).read_text()
    differs = report.split("## What differs")[1].split("##")[0]
    assert "**topology.bandwidth_gbps**" in differs and "**topology.latency_ns**" not in differs
    results = report.split("## Results")[1]
    assert "| topology.npus | topology.bandwidth_gbps |" in results and "topology.latency_ns" not in results
    assert "shown by its first path (`topology.bandwidth_gbps`)" in report


@pytest.fixture(scope="module")
def loss_study(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = REPO / "specs" / "loss_sweep.yaml"
    return run_study(load_study(path), path, tmp_path_factory.mktemp("loss"), executor=LocalExecutor(2),
                     progress=False)


def test_the_loss_study_states_slowdown_tail_and_bursts(loss_study) -> None:  # type: ignore[no-untyped-def]
    """specs/loss_sweep.yaml on flowsim (TCP under loss): every model slows down as loss grows, the
    lossless iterations are all alike and lossy ones are not, and each sentence carries the summary's
    numbers."""
    s = loss_study.summary
    assert (s["status"] == "ok").all() and len(s) == 21
    found = [f for f in findings(s, loss_study.expansion.param_names) if f.kind == "loss"]
    slow, tail, *bursts = found
    for model, ratios in slow.values["slowdown"].items():
        rows = s[s["model"] == model].sort_values("topology.loss")
        base = float(rows["iteration_ms"].iloc[0])
        r = list(ratios.values())
        assert r == pytest.approx(list(rows["iteration_ms"].iloc[1:] / base))
        assert r[0] > 1 and all(b > a for a, b in itertools.pairwise(r))
    p90 = tail.values["p90_over_mean"]
    assert p90["0%"] == pytest.approx(1.0) and max(p90.values()) > 1.1
    assert {b.values.get("axis") for b in bursts} == {"topology.loss"}
    ptm = next(b for b in bursts if "peak_to_mean" in b.values).values["peak_to_mean"]
    assert ptm == pytest.approx({f"{k * 100:g}%": v for k, v in
                                 s.groupby("topology.loss")["peak_to_mean"].mean().items()})
    from simstudy.report.study import render_study

    assert "Burst structure" in render_study(loss_study).read_text()


def test_reports_leave_the_matplotlib_backend_alone(tmp_path: Path) -> None:
    """A notebook's inline backend survives importing the API and saving a report's figure."""
    import subprocess
    import sys

    code = (
        "import matplotlib, pathlib, sys\n"
        "import simstudy.api, simstudy.report.study, simstudy.report.traffic, simstudy.report.plots\n"
        "from simstudy.report.files import figure, save_figure\n"
        "fig, ax = figure(figsize=(2, 2)); ax.plot([0, 1]); save_figure(fig, pathlib.Path(sys.argv[1]))\n"
        "print(matplotlib.get_backend())\n"
    )
    out = tmp_path / "f.png"
    env = {**os.environ, "MPLBACKEND": "svg"}
    proc = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, env=env,
                          check=True, cwd=REPO)
    assert proc.stdout.strip() == "svg"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def gossip_study(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("gossip")
    return _sweep(tmp, """
name: gossip_small
base: {model: small_cnn, training: {batch_size_per_worker: 16, iterations: 2},
       topology: {kind: switch, npus: 4, bandwidth_gbps: 10, latency_ns: 500}}
axes:
  parallelism.aggregation:
    - {kind: allreduce, algorithm: ring}
    - {kind: gossip, graph: exponential, peers: 1}
    - {kind: gossip, graph: ring, peers: 2}
  topology.npus: [4, 8, 16]
""")


def test_each_value_of_the_first_axis_is_stated_against_its_first(gossip_study) -> None:  # type: ignore[no-untyped-def]
    """Gossip against ring all-reduce, scenario by scenario: a worker of the exponential graph sends the
    parameters once, a ring all-reduce 2(n-1)/n x the gradient, so the busiest rank's bytes are
    n / (2(n-1)) of all-reduce's (0.67x at 4 workers, 0.53x at 16); with 2 peers, n / (n-1)."""
    params = gossip_study.expansion.param_names
    against = [f for f in findings(gossip_study.summary, params) if f.kind == "against"]
    assert [f.values["value"] for f in against] == ["gossip(graph=exponential,peers=1)", "gossip(graph=ring,peers=2)"]
    for f, per_worker in zip(against, (lambda n: n / (2 * (n - 1)), lambda n: n / (n - 1)), strict=True):
        assert f.values["pairs"] == 3 and f.values["baseline"] == "allreduce(algorithm=ring)"
        ratios = f.values["bytes_per_iter_rank_max"]
        for n in (4, 8, 16):
            assert ratios[f"topology.npus={n}"] == pytest.approx(per_worker(n), rel=1e-3)
        low, high = min(ratios.values()), max(ratios.values())
        assert f"bytes sent by the busiest rank {low:.2f}x-{high:.2f}x" in f.sentence
        its = f.values["iteration_ms"]
        assert f"lowest at {min(its, key=its.__getitem__)}, highest at {max(its, key=its.__getitem__)}" in f.sentence


def test_one_axis_has_no_comparison_scenario_by_scenario(gossip_study) -> None:  # type: ignore[no-untyped-def]
    one = gossip_study.summary[gossip_study.summary["topology.npus"] == 8]
    assert not [f for f in findings(one, ["parallelism.aggregation"]) if f.kind == "against"]


def test_timelines_show_the_first_axis_side_by_side(gossip_study) -> None:  # type: ignore[no-untyped-def]
    """Up to 12 scenarios are drawn; of more, every value of the first axis for the first settings of the
    others (here 9 scenarios: all drawn in sweep order; cut to 4 panels: 3 aggregations at 4 workers)."""
    from simstudy.report import study

    params = gossip_study.expansion.param_names
    summary = gossip_study.summary
    assert list(study.timeline_rows(summary, params)["key"]) == list(summary["key"])
    limit = study.TIMELINES_MAX
    try:
        study.TIMELINES_MAX = 4
        rows = study.timeline_rows(summary, params)
    finally:
        study.TIMELINES_MAX = limit
    assert list(rows["topology.npus"]) == [4, 4, 4]
    assert list(rows["parallelism.aggregation"].astype(str)) == list(dict.fromkeys(
        summary["parallelism.aggregation"].astype(str)))
