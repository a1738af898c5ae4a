"""Real-versus-simulated comparison: distances, tolerances, and reports that cannot pass vacuously."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from simstudy.traffic import make_table
from simstudy.traffic.compare import (
    DEFAULT_TOLERANCES,
    DISTRIBUTIONS,
    JOB,
    METRICS,
    TRANSPORT,
    ValidationReport,
    compare,
    ks_distance,
    matrix_distance,
    relative_error,
    wasserstein_relative,
)
from simstudy.traffic.features import Distribution, Features, TrafficMatrix, analyze


def ring(*, scale: int = 1, iterations: int = 40, period_s: float = 0.02, first_rank: int = 0) -> pd.DataFrame:
    """4 ranks in a ring; every `period_s` each sends 5 chunks of 250 kB (scaled) in 5 ms."""
    k, c, r = (g.ravel() for g in np.meshgrid(np.arange(iterations), np.arange(5), np.arange(4), indexing="ij"))
    start = k * period_s + c * 1e-3
    return make_table({"t_start_s": start, "t_end_s": start + 1e-3, "src": first_rank + r,
                       "dst": first_rank + (r + 1) % 4, "bytes": np.full(len(k), 250_000 * scale),
                       "flow": k * 10 + c, "op": np.full(len(k), "allreduce", dtype=object)})


@pytest.fixture(scope="module")
def real() -> Features:
    return analyze(ring())


def test_identical_features_pass_with_distance_zero(real: Features) -> None:
    report = compare(real, real)
    assert report.passed
    assert [r.metric for r in report.rows] == list(DEFAULT_TOLERANCES)
    for row in report.rows:
        assert row.distance == 0.0, row
        assert row.passed and row.note == ""


def test_twice_the_bytes_fails_bytes_per_iteration(real: Features) -> None:
    sim = analyze(ring(scale=2))
    report = compare(real, sim)
    assert not report.passed
    rows = {r.metric: r for r in report.rows}
    bpi = rows["bytes_per_iter_mean"]
    assert (bpi.kind, bpi.real, bpi.simulated) == ("relative", 1_250_000, 2_500_000)
    assert bpi.distance == 1.0 and not bpi.passed
    assert rows["throughput_1ms:wasserstein"].distance == pytest.approx(1.0)  # scale-free
    assert rows["burst_bytes:ks"].distance == 1.0
    for same in ("period_s", "duty_cycle", "burst_mean_s", "idle_mean_s", "traffic_matrix:jensen_shannon"):
        assert rows[same].passed and rows[same].distance == pytest.approx(0.0, abs=1e-12), same
    assert bpi in report.failures


def test_tolerances_are_overridable_and_checked(real: Features) -> None:
    sim = analyze(ring(scale=2))
    rows = {r.metric: r for r in compare(real, sim, tolerances={"bytes_per_iter_mean": 1.0}).rows}
    assert rows["bytes_per_iter_mean"].passed and rows["bytes_per_iter_mean"].tolerance == 1.0
    assert rows["period_s"].tolerance == DEFAULT_TOLERANCES["period_s"]
    extra = compare(real, real, tolerances={"flow_count": 0.0, "burst_s:ks": 0.01})
    assert extra.rows[-1].metric == "flow_count" and extra.passed
    for bad in ({"bytes_per_iteration": 0.1}, {"flow_size:energy": 0.1}, {"nope:ks": 0.1}):
        with pytest.raises(ValueError, match="unknown metric"):
            compare(real, real, tolerances=bad)
    with pytest.raises(ValueError, match=">= 0"):
        compare(real, real, tolerances={"period_s": -1.0})
    assert DEFAULT_TOLERANCES["period_s"] == 0.10  # the defaults were not touched


def test_missing_metrics_fail_with_a_reason(real: Features) -> None:
    short = analyze(ring(iterations=2))  # 25 ms: too short for a Hurst estimate
    assert math.isnan(short.hurst)
    report = compare(real, short)
    row = next(r for r in report.rows if r.metric == "hurst")
    assert not row.passed and math.isnan(row.distance)
    assert "simulated" in row.note and "real" not in row.note
    assert not report.passed
    skipped = compare(real, short, skip=["hurst"], tolerances={"bytes_per_iter_mean": 0.1})
    assert "hurst" not in [r.metric for r in skipped.rows] and skipped.skipped == ("hurst",)
    nothing = compare(real, real, skip=list(DEFAULT_TOLERANCES))
    assert nothing.rows == () and not nothing.passed  # never passes vacuously


def test_jensen_shannon_of_matrices() -> None:
    a = TrafficMatrix((0, 1), np.array([[0, 10], [0, 0]], dtype=np.int64))
    assert matrix_distance(a, a) == 0.0
    assert matrix_distance(a, TrafficMatrix((0, 1), np.array([[0, 30], [0, 0]], dtype=np.int64))) == 0.0
    disjoint = TrafficMatrix((2, 3), np.array([[0, 5], [0, 0]], dtype=np.int64))
    assert matrix_distance(a, disjoint) == pytest.approx(1.0)
    reverse = TrafficMatrix((0, 1), np.array([[0, 0], [7, 0]], dtype=np.int64))
    assert matrix_distance(a, reverse) == pytest.approx(1.0)
    assert matrix_distance(a, reverse, undirected=True) == 0.0  # the same pair, the other way round
    ring_fwd = TrafficMatrix((0, 1, 2), np.array([[0, 4, 0], [0, 0, 4], [4, 0, 0]], dtype=np.int64))
    assert matrix_distance(ring_fwd, TrafficMatrix((0, 1, 2), ring_fwd.bytes.T.copy())) == pytest.approx(1.0)
    assert matrix_distance(ring_fwd, TrafficMatrix((0, 1, 2), ring_fwd.bytes.T.copy()), undirected=True) == 0.0
    assert matrix_distance(a, disjoint, undirected=True) == pytest.approx(1.0)
    half = TrafficMatrix((0, 1, 2), np.array([[0, 5, 0], [0, 0, 5], [0, 0, 0]], dtype=np.int64))
    want = math.sqrt((np.log2(1 / 0.75) + 0.5 * np.log2(0.5 / 0.75) + 0.5 * np.log2(0.5 / 0.25)) / 2)
    assert matrix_distance(a, half) == pytest.approx(want)
    assert math.isnan(matrix_distance(a, TrafficMatrix((), np.zeros((0, 0), dtype=np.int64))))
    # whole traces on disjoint rank sets
    rows = {r.metric: r for r in compare(analyze(ring()), analyze(ring(first_rank=4))).rows}
    assert rows["traffic_matrix:jensen_shannon_undirected"].distance == pytest.approx(1.0)


def test_distribution_distances() -> None:
    x = Distribution.of(np.arange(1.0, 101.0))
    assert wasserstein_relative(x, x) == 0.0 and ks_distance(x, x) == 0.0
    assert wasserstein_relative(x, Distribution.of(np.arange(1.0, 101.0) * 1.5)) == pytest.approx(0.5)
    assert ks_distance(x, Distribution.of(np.arange(1000.0, 1100.0))) == 1.0
    nearly = Distribution.of(np.arange(1.0, 101.0) * (1 + 1e-15))  # float residue is not a difference
    assert ks_distance(x, nearly) == 0.0 and wasserstein_relative(x, nearly) == pytest.approx(0.0, abs=1e-12)
    empty = Distribution.of([])
    assert math.isnan(wasserstein_relative(x, empty)) and math.isnan(ks_distance(empty, x))
    zeros = Distribution.of(np.zeros(5))
    assert wasserstein_relative(zeros, zeros) == 0.0 and wasserstein_relative(zeros, x) == math.inf
    assert relative_error(2.0, 3.0) == 0.5 and relative_error(0.0, 0.0) == 0.0
    assert relative_error(0.0, 1.0) == math.inf and math.isnan(relative_error(math.nan, 1.0))
    assert set(DISTRIBUTIONS) == {"throughput_1ms", "burst_s", "burst_bytes", "idle_s", "flow_size"}


def test_compare_from_features_json_gives_the_same_report(real: Features) -> None:
    sim = analyze(ring(scale=3, period_s=0.025))
    back = Features.from_json(json.loads(json.dumps(real.to_json())))
    assert compare(back, sim) == compare(real, sim)


def test_report_frame_and_markdown(real: Features) -> None:
    report = compare(real, analyze(ring(scale=2)))
    frame = report.to_frame()
    assert list(frame.columns) == ["metric", "level", "judged", "real", "simulated", "distance", "kind", "tolerance",
                                   "passed", "note", "why", "fitted"]
    assert len(frame) == len(DEFAULT_TOLERANCES) and frame["passed"].dtype == bool
    md = report.to_markdown()
    assert md.splitlines()[2] == "| metric | real | simulated | distance | tolerance | pass |"
    assert "| bytes_per_iter_mean | 1.25e+06 | 2.5e+06 | 1 | 0.1 | **no** |" in md
    assert "FAIL" in md and "Reported, not judged" in md
    assert "PASS" in compare(real, real).to_markdown()
    assert ValidationReport(()).to_frame().empty
    # a fitted validation marks what the fit determines: a column of the judged table and a note
    fitted = report.with_fit({"period_s": "set by the fit"})
    assert fitted.verdict == report.verdict
    assert list(fitted.to_frame().query("fitted != ''")["metric"]) == ["period_s"]
    lines = fitted.to_markdown().splitlines()
    assert lines[2] == "| metric | real | simulated | distance | tolerance | pass | fit |"
    assert any(x.startswith("| period_s |") and x.endswith("| fitted |") for x in lines)
    assert "- period_s (fit): set by the fit" in lines


def test_the_verdict_is_on_the_job_and_the_transport_is_reported(real: Features) -> None:
    """Twice the period, same bytes per iteration: a different job, so it fails on the job. The
    same job paced differently within its 5 ms burst (its bytes in every other millisecond, as
    a token bucket sends them) only moves transport-level metrics, so it passes."""
    slow = compare(real, analyze(ring(period_s=0.04)))
    assert not slow.passed and "period_s" in {r.metric for r in slow.failures}
    real = analyze(ring(period_s=0.1))
    paced = ring(period_s=0.1)
    odd = (paced["t_start_s"] * 1e3).round().astype(int) % 100 % 2 == 1  # chunks 1 and 3 of each burst
    paced.loc[odd, "bytes"] = 1
    paced.loc[~odd, "bytes"] = (5 * 250_000 - 2) // 3
    report = compare(real, analyze(paced))
    moved = {r.metric for r in report.rows if not r.passed}
    assert report.passed, report.to_markdown()
    assert moved and all(r.level == TRANSPORT and not r.judged for r in report.rows if r.metric in moved)
    assert {"burst_mean_s", "peak_to_mean"} <= moved
    assert all(r.why for r in report.reported)
    strict = compare(real, analyze(paced), judge=(JOB, TRANSPORT))
    assert not strict.passed and {r.metric for r in strict.failures} == moved
    assert METRICS["period_s"].level == JOB and METRICS["throughput_1ms:ks"].level == TRANSPORT
