"""The baseline check on summaries as a sweep writes them: a metric that disappears fails it."""

from __future__ import annotations

import pandas as pd
import pytest

from simstudy.spec import Baseline
from simstudy.sweeps import SweepError, compare_baseline


def _summary(**metrics: list[float]) -> pd.DataFrame:
    frame = pd.DataFrame({"index": [0, 1], "topology.npus": [2, 4], "key": ["a", "b"], "status": ["ok", "ok"],
                          "error": [None, None], "cached": [False, False], "run_s": [0.1, 0.2]})
    for name, values in metrics.items():
        frame[name] = values
    return frame


def test_a_metric_the_current_summary_no_longer_has_fails_the_check_by_name() -> None:
    baseline = _summary(iteration_ms=[1.0, 2.0], hurst=[0.5, 0.6])
    current = _summary(iteration_ms=[1.0, 2.0])
    report = compare_baseline(current, baseline, Baseline())
    assert not report.passed
    assert report.lost_metrics == ["hurst"] and report.metrics == ["iteration_ms"]
    lines = report.lines()
    assert "  MISSING metric (in the baseline, not in this sweep's summary): hurst" in lines
    assert lines[-1].startswith("baseline: FAILED (0 metrics moved, 1 metrics missing")


def test_a_metric_named_in_the_study_and_gone_from_the_current_summary_fails_the_check() -> None:
    baseline = _summary(iteration_ms=[1.0, 2.0], hurst=[0.5, 0.6])
    report = compare_baseline(_summary(iteration_ms=[1.0, 2.0]), baseline, Baseline(metrics=["hurst"]))
    assert not report.passed and report.lost_metrics == ["hurst"]


def test_same_metrics_pass_and_a_new_metric_is_no_failure() -> None:
    baseline = _summary(iteration_ms=[1.0, 2.0])
    assert compare_baseline(_summary(iteration_ms=[1.0, 2.0], hurst=[0.5, 0.6]), baseline, Baseline()).passed


def test_a_named_metric_the_baseline_lacks_is_bad_input_naming_it() -> None:
    baseline = _summary(iteration_ms=[1.0, 2.0])
    with pytest.raises(SweepError, match=r"baseline\.metrics: not in the baseline summary: hurst"):
        compare_baseline(_summary(iteration_ms=[1.0, 2.0]), baseline, Baseline(metrics=["hurst"]))
