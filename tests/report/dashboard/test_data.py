"""The numbers behind the dashboard, asserted on the typed results (compute first, render second)."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simstudy.report.dashboard import DashboardError, detect, load
from simstudy.report.dashboard.data import COARSEST_BINS, FINEST_BIN_S, RunData, StudyData, TraceData, pyramid
from simstudy.report.findings import study_findings
from simstudy.table import read_table
from tests.conftest import run_cli


def test_each_directory_is_recognised(dirs: dict[str, Path], tmp_path: Path) -> None:
    for kind in ("study", "run", "capture", "validation"):
        assert detect(dirs[kind])[0] == kind
    # pcaps and meta.json, validated into another directory (-o val): a capture
    assert detect(dirs["root"] / "cap") == ("capture", dirs["root"] / "cap")
    # validated into its own validation/ (validate's default): the validation
    shutil.copytree(dirs["root"] / "cap", tmp_path / "cap")
    shutil.copytree(dirs["validation"], tmp_path / "cap" / "validation")
    assert detect(tmp_path / "cap") == ("validation", tmp_path / "cap" / "validation")
    with pytest.raises(DashboardError, match="none of the four kinds"):
        detect(dirs["root"])
    with pytest.raises(DashboardError, match="not a directory"):
        detect(dirs["root"] / "study.yaml")


def test_every_level_of_the_timeline_holds_the_table_bytes(dirs: dict[str, Path]) -> None:
    table = read_table(dirs["run"] / "traffic.parquet")
    p = pyramid(table)
    assert p.finest.bin_s == FINEST_BIN_S
    assert len(next(iter(p.levels[-1].rates.values()))) <= COARSEST_BINS < len(next(iter(p.levels[0].rates.values())))
    for lv in p.levels:
        total = sum(float(v.sum()) for v in lv.rates.values()) * lv.bin_s
        assert total == pytest.approx(float(table["bytes"].sum()), rel=1e-9)
        assert len(lv.hover) == len(next(iter(lv.rates.values())))
    # each level's bins are twice the previous one's
    assert [lv.bin_s / p.levels[0].bin_s for lv in p.levels] == [2.0**k for k in range(len(p.levels))]
    # a capped pyramid has coarser finest bins and says so
    capped = pyramid(table, cap=500)
    assert capped.finest.bin_s > FINEST_BIN_S and "capped" in capped.note


def test_run_page_data(dirs: dict[str, Path]) -> None:
    kind, d = load(dirs["run"])
    assert kind == "run" and isinstance(d, RunData)
    table = read_table(dirs["run"] / "traffic.parquet")
    assert d.matrix is not None and d.matrix.bytes.sum() == pytest.approx(float(table["bytes"].sum()))
    assert d.matrix.bytes.shape == (4, 4) and np.trace(d.matrix.bytes) == 0
    assert d.timeline is not None and set(d.timeline.finest.rates) == set(table["op"].astype(str))
    g = d.gantt
    assert g is not None and g.iteration == 1 and g.ranks_shown == 4
    assert set(g.kind) >= {"compute", "collective"}
    assert all(e > g.window_s[0] and s < g.window_s[1] for s, e in zip(g.start_s, g.end_s, strict=True))
    assert any("collective" in h and "iteration" in h for h in d.timeline.finest.hover)


def test_jobs_are_their_own_series(dirs: dict[str, Path]) -> None:
    _, d = load(dirs["jobs"])
    assert isinstance(d, RunData) and d.timeline is not None
    assert {s.split(" ")[0] + " " + s.split(" ")[1] for s in d.timeline.finest.rates} == {"job 0", "job 1"}
    assert [j["name"] for j in d.jobs] == ["cnn", "lstm"]


def test_study_page_data_keeps_failed_runs(dirs: dict[str, Path]) -> None:
    kind, d = load(dirs["study"], findings_for=study_findings)
    assert kind == "study" and isinstance(d, StudyData)
    assert d.params == ("parallelism.tp", "topology.bandwidth_gbps")
    assert (d.table["status"] == "failed").sum() == 3 and (d.table["status"] == "ok").sum() == 3
    assert len(d.timelines) == 3
    assert any("3 of 6 scenarios failed" in f for f in d.findings)


def test_validation_page_data_recomputes_the_verdict(dirs: dict[str, Path]) -> None:
    kind, d = load(dirs["validation"])
    assert kind == "validation" and isinstance(d, TraceData) and d.report is not None
    assert set(d.timelines) == {"real", "simulated"}
    assert d.overlay is not None and set(d.overlay.mean) == {"real", "simulated"}
    md = (dirs["validation"] / "validation.md").read_text()
    assert d.report.verdict in md


def test_capture_without_metadata(dirs: dict[str, Path]) -> None:
    kind, d = load(dirs["capture"])
    assert kind == "capture" and isinstance(d, TraceData) and d.report is None
    truth = json.loads((dirs["capture"] / "truth.json").read_text())
    assert d.facts["workers"] == str(truth["workers"])
    assert d.overlay is not None and d.overlay.offsets_s[-1] == pytest.approx(truth["period_s"], rel=0.1)


def test_chrome_trace_matches_the_run(dirs: dict[str, Path]) -> None:
    out = dirs["root"] / "trace.json"
    proc = run_cli("trace", str(dirs["run"]), "-o", str(out), "--iterations", "0", cwd=dirs["root"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    for e in events:
        assert {"ph", "pid", "tid", "name"} <= set(e)
        if e["ph"] == "X":
            assert e["ts"] >= 0 and e["dur"] >= 0
    spans = pd.read_parquet(dirs["run"] / "spans.parquet")
    spans = spans[spans["kind"] != "other"]
    xs = [e for e in events if e["ph"] == "X" and e["cat"] in ("compute", "collective")]
    assert len(xs) == len(spans)
    assert sum(e["dur"] for e in xs) == pytest.approx(float((spans["end_ns"] - spans["start_ns"]).sum()) / 1e3)
    table = read_table(dirs["run"] / "traffic.parquet")
    sends = [e for e in events if e["ph"] == "X" and e["cat"] == "send"]
    assert sum(e["args"]["bytes"] for e in sends) == int(table["bytes"].sum())
    starts = {e["id"] for e in events if e["ph"] == "s"}
    ends = {e["id"] for e in events if e["ph"] == "f"}
    assert starts == ends and len(starts) == len(sends)
    # slices of one thread nest (here: never overlap), as the format requires
    by: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in events:
        if e["ph"] == "X":
            by.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for ivs in by.values():
        ivs.sort()
        assert all(b[0] >= a[1] - 1e-6 for a, b in itertools.pairwise(ivs))
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {f"rank {r}" for r in range(4)}


@pytest.mark.parametrize("cmd", ["dashboard", "trace"])
def test_bad_paths_are_one_clear_error(dirs: dict[str, Path], cmd: str) -> None:
    for bad in (dirs["root"], dirs["root"] / "nothing", Path("/dev/null")):
        proc = run_cli(cmd, str(bad), "-o", str(dirs["root"] / "x.out"), cwd=dirs["root"])
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and str(bad) in proc.stderr, proc.stderr
    assert not (dirs["root"] / "x.out").exists()


def test_empty_study_says_so(tmp_path: Path) -> None:
    (tmp_path / "study.json").write_text("{}")
    proc = run_cli("dashboard", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "wrote nothing yet" in proc.stderr


def test_link_utilisation_says_how_to_read_it_under_each_congestion_model(tmp_path: Path) -> None:
    """Two jobs share a leaf-spine uplink. The congestion-unaware model gives each transfer the
    link's full bandwidth, so the uplink reads about 2x (its demand); fluid shares it and stays
    at 1 or under. The page says which it is, next to the plot."""
    spec = Path(__file__).resolve().parents[3] / "specs" / "multijob_interleave.yaml"
    import yaml

    cluster = yaml.safe_load(spec.read_text())["base"]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({**cluster, "name": "shared"}))
    peaks, notes = {}, {}
    for mode in ("unaware", "fluid", "aware"):
        proc = run_cli("run", "c.yaml", "-o", mode, "--congestion", mode, "--traffic", "links", "--quiet", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        _, d = load(tmp_path / mode)
        assert isinstance(d, RunData) and d.links is not None
        assert d.facts["backend"] == f"flowsim ({mode})"
        peaks[mode], notes[mode] = max(d.links.peak_utilization), d.links.note
    assert peaks["unaware"] > 1.5 and "can exceed 1" in notes["unaware"]
    assert peaks["fluid"] <= 1.0 + 1e-6 and "max-min" in notes["fluid"]
    assert "understated" in notes["aware"]
    page = run_cli("dashboard", "unaware", "-o", "u.html", cwd=tmp_path)
    assert page.returncode == 0, page.stderr
    assert 'id="links-note"' in (tmp_path / "u.html").read_text()
