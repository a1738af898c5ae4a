"""The Python API (`import simstudy as s`): real runs on small specs, the CLI's directories read
back, validation on a committed capture, and bad input as one exception type."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

import simstudy as s
from simstudy.backends.base import Progress
from simstudy.traffic.features import analyze as analyze_table
from simstudy.traffic.sources import load_traffic
from simstudy.validation import payload_view
from tests.conftest import run_cli
from tests.sweeps.test_sweep import dask_scheduler  # noqa: F401  (a real scheduler and workers on loopback)

REPO = Path(__file__).resolve().parents[1]
#: The scenario of the golden capture tests/data/captures/ring4_allreduce (tests/data/make_golden_captures.py).
RING4 = {"name": "ring4_allreduce", "model": {"zoo": "small_cnn", "options": {"width": 8}},
         "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10},
         "system": {"peak_tflops": 0.05, "efficiency": 0.5},
         "training": {"batch_size_per_worker": 64, "iterations": 4}}
#: What is not the same between two sweeps of the same study: timings and where it ran.
TIMINGS = ("run_s", "backend_wall_s", "cached")


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository's specs, workloads and topologies, as a user's checkout has them."""
    root = tmp_path_factory.mktemp("project")
    for name in ("specs", "workloads", "topologies"):
        shutil.copytree(REPO / name, root / name)
    return root


@pytest.fixture(scope="module")
def swept(project: Path) -> tuple[Path, str]:
    """The issue's one-liner, run as written in the project directory; returns its stdout."""
    proc = _python("import simstudy as s; r = s.sweep(s.load_study('specs/cnn_vs_rnn.yaml')); "
                   "print(r.summary.shape)", project)
    assert proc.returncode == 0, proc.stderr
    return project / "results" / "cnn_vs_rnn", proc.stdout


def test_sweep_one_liner_prints_the_summary_shape(swept: tuple[Path, str]) -> None:
    out, stdout = swept
    rows, cols = (int(x) for x in stdout.strip().strip("()").split(","))
    assert rows == 15  # 5 models x 3 bandwidths
    assert cols == len(pd.read_parquet(out / "summary.parquet").columns) > 20


def test_the_api_sweep_is_the_cli_sweep(swept: tuple[Path, str], project: Path) -> None:
    out, _ = swept
    proc = run_cli("sweep", "specs/cnn_vs_rnn.yaml", "-o", "cli", "--quiet", "--no-report", cwd=project)
    assert proc.returncode == 0, proc.stderr
    api = pd.read_parquet(out / "summary.parquet").drop(columns=list(TIMINGS))
    cli = pd.read_parquet(project / "cli" / "summary.parquet").drop(columns=list(TIMINGS))
    pd.testing.assert_frame_equal(api, cli)  # same keys (same scenarios), labels and metrics


def test_open_study_reads_the_sweep_back(swept: tuple[Path, str]) -> None:
    out, _ = swept
    study = s.open_study(out)
    assert study.sweep is None and study.all_ok and study.skipped == []
    assert len(study.summary) == 15 and set(study.records) == set(study.summary["key"])
    row = study.summary.iloc[0]
    run = study.run(str(row["key"]))
    assert run.finish_ms == pytest.approx(float(row["finish_ms"]))
    assert len(run.times) == int(row["npus"]) == 8
    assert run.traffic["bytes"].sum() == run.total_bytes > 0
    assert set(study.runs) == set(study.records)


def test_sweep_reuses_a_finished_directory_and_takes_overrides(swept: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = swept
    again = s.sweep(REPO / "specs" / "cnn_vs_rnn.yaml", out)
    assert again.sweep is not None and again.sweep.counts["cached"] == 15 and again.all_ok
    # a study from a mapping, with a base override: one model at two bandwidths
    two = s.sweep(TWO, tmp_path / "two", sets=["training.iterations=3"], workers=1)
    assert list(two.summary["topology.bandwidth_gbps"]) == [10, 40]
    finish = two.summary["finish_ms"].to_numpy()
    assert finish[0] > finish[1] > 0  # more bandwidth, earlier finish
    assert json.loads((two.run(str(two.summary["key"][0])).path / "bundle" / "scenario.json").read_text()
                      )["training"]["iterations"] == 3


TWO = {"name": "two", "base": {"model": "small_cnn", "topology": {"kind": "switch", "npus": 4, "bandwidth_gbps": 10},
                               "training": {"batch_size_per_worker": 16, "iterations": 2}},
       "axes": {"topology.bandwidth_gbps": [10, 40]}}


@pytest.mark.slow
def test_sweep_on_dask_is_the_local_sweep(tmp_path: Path, dask_scheduler: str) -> None:  # noqa: F811
    dask = s.sweep(TWO, tmp_path / "dask", executor="dask", scheduler=dask_scheduler)
    local = s.sweep(TWO, tmp_path / "local", workers=1)
    assert dask.all_ok and len(dask.records) == 2
    pd.testing.assert_frame_equal(dask.summary.drop(columns=list(TIMINGS)), local.summary.drop(columns=list(TIMINGS)))


def test_run_a_mapping_and_open_it_again(tmp_path: Path) -> None:
    spec = s.load_spec(RING4)
    run = s.run(spec, tmp_path / "run")
    assert run.backend == "flowsim" and run.mode == "rows"
    assert list(run.times["rank"]) == [0, 1, 2, 3]
    assert run.finish_ms == pytest.approx(run.times["finish_ns"].max() / 1e6) and run.finish_ms > 0
    assert len(run.spans) and set(run.spans["rank"]) == {0, 1, 2, 3}
    assert run.traffic["bytes"].sum() == run.total_bytes and len(run.traffic) == run.transfers
    assert run.links is None and run.scenario is not None and run.scenario["name"] == "ring4_allreduce"
    assert (run.path / "timeline.png").is_file()
    again = s.open_run(run.path)
    assert again.info == run.info
    pd.testing.assert_frame_equal(again.traffic, run.traffic)
    # the same scenario from the mapping directly, keeping the link table instead of rows
    links = s.run(RING4, tmp_path / "links", traffic="links", render=False)
    assert links.mode == "links" and links.links is not None and len(links.links) > 0
    assert links.finish_ms == pytest.approx(run.finish_ms)
    assert len(links.traffic) == 0


def test_a_run_reports_its_phases_in_order(tmp_path: Path) -> None:
    """`progress` hears the run's phases: compiling, routing, simulating, writing (the last with
    the run's whole)."""
    seen: list[Progress] = []
    run = s.run(RING4, tmp_path / "run", progress=seen.append, render=False)
    phases = [p.phase for i, p in enumerate(seen) if i == 0 or p.phase != seen[i - 1].phase]
    assert phases == ["compile", "route", "simulate", "write"]
    assert seen[-1].fraction == 1.0 and seen[-1].transfers == run.transfers


def test_compile_a_spec_file(tmp_path: Path) -> None:
    spec = tmp_path / "ring4.yaml"
    spec.write_text(yaml.safe_dump(RING4))
    result = s.compile(str(spec), tmp_path / "bundle")
    assert result.scenario.npus == 4 and result.et_bytes > 0
    assert sorted(p.name for p in (tmp_path / "bundle").glob("*.et")) == [f"ring4_allreduce.{r}.et" for r in range(4)]


@pytest.mark.astrasim
def test_run_on_astrasim(tmp_path: Path, astra_sim_bin: Path) -> None:
    run = s.run(RING4, tmp_path / "run", backend="astrasim", astra_sim=astra_sim_bin, render=False)
    flow = s.run(RING4, tmp_path / "flow", render=False)
    assert run.backend == "astrasim" and len(run.times) == 4 and run.total_bytes == flow.total_bytes
    assert run.finish_ms > 0 and len(run.traffic) > 0


def test_analyze_a_real_capture_as_the_pipeline_does() -> None:
    path = REPO / "tests" / "data" / "real" / "ddp_w2"
    truth = json.loads((path / "truth.json").read_text())
    features = s.analyze(path)
    source = load_traffic(path)
    assert features == analyze_table(payload_view(source.table), boundaries=source.boundaries, roles=source.roles)
    assert len(features.roles.workers) == truth["workers"]
    assert features.period.period_s == pytest.approx(truth["period_s"], rel=0.15)
    # a traffic table and a loaded source give the same features
    assert s.analyze(s.load_traffic(path)) == features
    assert s.analyze(source.table, count="ip") == analyze_table(source.table)


def test_validate_a_committed_capture(tmp_path: Path) -> None:
    cap = tmp_path / "ring4"
    shutil.copytree(REPO / "tests" / "data" / "captures" / "ring4_allreduce", cap)
    verdict = s.validate(cap, RING4, count="ip")
    assert verdict.out == cap / "validation" and verdict.passed and verdict.verdict == "PASS"
    table = verdict.table
    assert {"metric", "real", "simulated", "passed", "judged"} <= set(table.columns)
    assert table.loc[table["judged"], "passed"].all() and len(table) > 5
    assert verdict.real.total_bytes == verdict.simulated.total_bytes
    assert verdict.run.finish_ms > 0
    # the same capture against a job on a 10x slower ring: the verdict can fail
    slow = {**RING4, "topology": {**RING4["topology"], "bandwidth_gbps": 1}}
    failed = s.validate(cap, slow, tmp_path / "slow", count="ip")
    assert not failed.passed and failed.verdict.startswith("FAIL")
    assert "period_s" in set(failed.table.loc[~failed.table["passed"], "metric"])


def test_dashboard_of_a_run(tmp_path: Path) -> None:
    run = s.run(RING4, tmp_path / "run", render=False)
    page = s.dashboard(run.path)
    assert page == run.path / "dashboard.html" and "<html" in page.read_text()[:2000].lower()


def _cli_error(*args: str, cwd: Path) -> str:
    proc = run_cli(*args, cwd=cwd)
    assert proc.returncode == 2, proc.stderr
    return proc.stderr.strip().removeprefix("simstudy: error: ")


def test_bad_input_is_one_error_type_with_the_cli_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**{k: v for k, v in RING4.items() if k != "topology"},
                                   "topolgy": RING4["topology"]}))
    with pytest.raises(s.InputError) as caught:
        s.load_spec(str(bad))
    assert "topolgy" in str(caught.value) and str(bad) in str(caught.value)
    assert str(caught.value) == _cli_error("compile", str(bad), "-o", str(tmp_path / "b"), cwd=tmp_path)
    with pytest.raises(s.InputError) as run_caught:
        s.run(str(bad), tmp_path / "r")
    assert str(run_caught.value) == str(caught.value)
    missing = str(tmp_path / "missing.yaml")
    with pytest.raises(s.InputError) as caught:
        s.sweep(missing)
    assert str(caught.value) == _cli_error("sweep", missing, cwd=tmp_path)
    with pytest.raises(s.InputError) as caught:
        s.analyze(tmp_path)
    assert str(caught.value) == _cli_error("analyze", str(tmp_path), cwd=tmp_path)
    # a mapping names the field; so do a run directory that is not one, and an unknown tolerance
    with pytest.raises(s.InputError, match="topolgy"):
        s.load_spec({**RING4, "topolgy": {}})
    with pytest.raises(s.InputError, match="axes"):
        s.load_study({"name": "x", "base": RING4, "axes": {"model": "not a list"}})
    with pytest.raises(s.InputError, match=r"run\.json"):
        s.open_run(tmp_path)
    with pytest.raises(s.InputError, match=r"summary\.parquet"):
        s.open_study(tmp_path)
    cap = REPO / "tests" / "data" / "captures" / "ring4_allreduce"
    with pytest.raises(s.InputError, match="nope"):
        s.validate(cap, RING4, tmp_path / "v", tolerances={"nope": 0.1})


def test_api_names_are_the_api_s_and_no_subpackage_shares_one() -> None:
    import pkgutil

    from simstudy.sweeps import run_study

    assert callable(run_study)
    subpackages = {m.name for m in pkgutil.iter_modules(s.__path__)}
    assert not subpackages & set(s.__all__), "a subpackage named like an API function hides it or is hidden"
    for name in ("compile", "sweep", "validate", "capture", "dashboard"):
        assert getattr(s, name).__module__.startswith("simstudy.api.")  # the api package's theme modules
    assert set(s.__all__) <= set(dir(s))
    for name in s.__all__:
        assert name == "__version__" or getattr(s, name).__doc__, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = s.nope


def test_trace_cluster_models_and_a_bad_capture_spec(swept: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = swept
    study = s.open_study(out)
    run = study.run(str(study.summary["key"][0]))
    trace = s.trace(run, tmp_path / "trace.json", iterations=0)
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert len(events) == len(trace.events) and trace.spans == len(run.spans)
    grouped = s.cluster([out], k=2)
    assert len(grouped.items) == 15 and set(grouped.labels) == {0, 1}
    assert {"resnet50", "vgg16", "bert_base", "small_cnn"} <= {m.name for m in s.models()}
    with pytest.raises(s.InputError, match="did you mean 'capture'"):  # refused before anything runs
        s.capture({"name": "x", "model": "small_cnn", "captur": {}}, tmp_path / "cap")
    assert not (tmp_path / "cap").exists()


def test_switch_counters_through_the_api() -> None:
    from simstudy.traffic.counter_features import analyze_counters
    from simstudy.traffic.counters import load_counters

    path = REPO / "tests" / "data" / "zhejiang"
    series = s.load_counters(path)
    assert series.format == "zhejiang" and len(series.ports) == 6
    features = s.analyze_counters(path)
    direct = analyze_counters(load_counters(path))
    assert len(features.ports) == 6 and features.hottest == direct.hottest
    assert [(t.tier, t.bytes, t.mean_utilization) for t in features.tiers] == [
        (t.tier, t.bytes, t.mean_utilization) for t in direct.tiers]
    with pytest.raises(s.InputError, match="no such file"):
        s.load_counters(path / "missing.csv")
