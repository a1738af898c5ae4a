"""The interleave study (CASSINI's question) end to end: two jobs share one uplink, the second
starts later and later; the report states the best offset and its slowdown from the typed results."""

from __future__ import annotations

from pathlib import Path

import pytest

from simstudy.report.study import render_study
from simstudy.spec import load_study
from simstudy.sweeps import LocalExecutor, run_study
from simstudy.sweeps.clusters import job_rows, slowdown_by_axis


@pytest.fixture(scope="module")
def interleave(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = Path(__file__).resolve().parents[2] / "specs" / "multijob_interleave.yaml"
    out = tmp_path_factory.mktemp("interleave")
    result = run_study(load_study(path), path, out, executor=LocalExecutor(2), progress=False)
    return result, render_study(result).parent


def test_slowdown_follows_the_offset_and_the_best_offset_is_stated(interleave) -> None:  # type: ignore[no-untyped-def]
    result, out = interleave
    summary = result.summary
    assert (summary["status"] == "ok").all(), summary["error"].dropna().tolist()
    axis = "jobs.1.start_ms"
    by = {row[axis]: row["slowdown_mean"] for _, row in summary.iterrows()}
    # At offset 0 the two identical jobs' all-reduces start together on the shared uplink: both
    # take the same (largest) slowdown; half an iteration later they interleave.
    rows = [r for r in job_rows(summary, [axis]) if r.params[axis] == 0]
    assert len(rows) == 2 and rows[0].slowdown == pytest.approx(rows[1].slowdown, rel=1e-9)
    assert by[0] == max(by.values()) and by[0] > 1.15
    (found,) = slowdown_by_axis(summary, [axis])
    assert found.best == min(by, key=lambda k: by[k]) and 0 < found.best < 16
    assert found.best_slowdown == pytest.approx(min(by.values())) and found.best_slowdown < 1.06
    # Iterations take ~17.5 ms alone: at 16 ms the second job's all-reduces meet the first's again.
    assert by[16] > found.best_slowdown + 0.1
    report = (out / "report.md").read_text()
    assert "## Jobs sharing the network" in report
    assert f"`{axis}` = {found.best}: {found.best_slowdown:.3f}x" in report
