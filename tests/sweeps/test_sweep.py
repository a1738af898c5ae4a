"""Sweeps end to end on real flowsim runs: caching, failures, resume after kill -9, Dask, baselines."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from simstudy.spec import load_study
from simstudy.sweeps import LocalExecutor, metric_columns, run_study
from tests.conftest import run_cli, sigint_default

STUDY = """\
name: tiny
base:
  model: small_cnn
  topology: {kind: ring, npus: 4, bandwidth_gbps: 10, latency_ns: 500}
  system: {peak_tflops: 10, efficiency: 0.5}
  training: {batch_size_per_worker: 16, iterations: 2}
axes:
  topology.npus: [2, 4]
  parallelism.aggregation.kind: [allreduce, parameter_server]
"""


def _write(tmp_path: Path, text: str = STUDY, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _stable(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary without what legitimately differs between two sweeps (wall times, cache hits)."""
    return summary.drop(columns=["cached", "run_s", "backend_wall_s"]).reset_index(drop=True)


def test_sweep_runs_every_point_then_reuses_them(tmp_path: Path) -> None:
    path = _write(tmp_path)
    study = load_study(path)
    first = run_study(study, path, tmp_path / "out", executor=LocalExecutor(2), progress=False)
    s = first.summary
    assert len(s) == 4 and (s["status"] == "ok").all() and not s["cached"].any()
    assert list(s.columns[:3]) == ["index", "topology.npus", "parallelism.aggregation.kind"]
    assert (s["npus"] == s["topology.npus"]).all()
    # per-rank statistics and bytes per iteration are there and plausible
    assert (s["finish_ms"] >= s["finish_min_ms"]).all() and (s["bytes_per_iter"] > 0).all()
    assert {"duty_cycle", "peak_to_mean", "hurst"} <= set(s.columns)
    for key in s["key"]:
        run = tmp_path / "out" / "runs" / key
        names = {p.name for p in run.iterdir()}
        assert {"record.json", "run.json", "traffic.parquet", "features.json", "bundle"} <= names
    on_disk = pd.read_parquet(tmp_path / "out" / "summary.parquet")
    pd.testing.assert_frame_equal(on_disk, s, check_dtype=False)

    again = run_study(study, path, tmp_path / "out", executor=LocalExecutor(2), progress=False)
    assert again.summary["cached"].all() and again.counts["cached"] == 4
    pd.testing.assert_frame_equal(_stable(again.summary), _stable(s))


def test_a_run_moved_aside_by_a_killed_writer_is_put_back_by_the_next_sweep(tmp_path: Path) -> None:
    """A writer killed between moving a finished run aside and renaming its own into place left
    `.KEY.old-HOST-PID` (whole) and `.KEY.tmp-HOST-PID`: the next sweep puts the old run back and
    reuses it, and removes everything else a dead writer left (`.del-` being deleted, `.tmp-`)."""
    import socket

    path = _write(tmp_path)
    study = load_study(path)
    first = run_study(study, path, tmp_path / "out", executor=LocalExecutor(2), progress=False)
    runs = tmp_path / "out" / "runs"
    dead = subprocess.Popen(["true"])
    dead.wait()
    owner = f"{socket.gethostname()}-{dead.pid}"
    keys = list(first.summary["key"])
    (runs / keys[0]).rename(runs / f".{keys[0]}.old-{owner}")
    (runs / f".{keys[0]}.tmp-{owner}").mkdir()
    shutil.copytree(runs / keys[1], runs / f".{keys[1]}.old-{owner}")  # killed before deleting it
    (runs / f".{keys[2]}.del-{owner}").mkdir()
    again = run_study(study, path, tmp_path / "out", executor=LocalExecutor(2), progress=False)
    assert again.summary["cached"].all()  # nothing lost, nothing redone
    assert sorted(p.name for p in runs.iterdir()) == sorted(keys)


def test_all_reduce_bytes_follow_the_ring_formula(tmp_path: Path) -> None:
    """Ring all-reduce: every rank sends 2 (N-1)/N of the gradient bytes per iteration."""
    path = _write(tmp_path)
    s = run_study(load_study(path), path, tmp_path / "out", executor=LocalExecutor(1), progress=False).summary
    from simstudy import zoo

    grad = zoo.build("small_cnn").params * 4
    for _, row in s[s["parallelism.aggregation.kind"] == "allreduce"].iterrows():
        n = int(row["npus"])
        expected = 2 * (n - 1) / n * grad
        assert row["bytes_per_iter_rank_mean"] == pytest.approx(expected, rel=0.02)


def test_a_failing_scenario_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    # A Transformer with 3 attention heads: tp = 2 cannot split them, which only compiling finds out.
    text = STUDY.replace("parallelism.aggregation.kind: [allreduce, parameter_server]", "parallelism.tp: [1, 2]")
    text = text.replace("model: small_cnn", "model: {zoo: decoder, options: {layers: 1, hidden: 48, heads: 3, "
                                            "seq_len: 8, vocab: 64}}")
    path = _write(tmp_path, text)
    result = run_study(load_study(path), path, tmp_path / "out", executor=LocalExecutor(2), progress=False)
    s = result.summary
    assert len(s) == 4 and not result.all_ok
    bad = s[s["status"] == "failed"]
    assert set(bad["parallelism.tp"]) == {2}
    assert bad["error"].str.contains("does not divide the 3 attention heads").all()
    assert (s[s["status"] == "ok"]["finish_ms"] > 0).all()
    for key in bad["key"]:
        assert not (tmp_path / "out" / "runs" / key).exists()
    proc = run_cli("sweep", str(path), "-o", str(tmp_path / "out"), "--quiet", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "FAILED run" in proc.stderr and "attention heads" in proc.stderr


SLOW_STUDY = """\
name: killme
base:
  model: small_cnn
  topology: {kind: ring, npus: 8, bandwidth_gbps: 10, latency_ns: 500}
  system: {peak_tflops: 10, efficiency: 0.5}
  training: {batch_size_per_worker: 16, iterations: 12}
axes:
  topology.npus: [4, 6, 8]
  parallelism.aggregation.algorithm: [ring, direct, halving_doubling]
"""


def _finished(runs: Path) -> set[str]:
    """Keys of the finished runs: their record is written into a temporary directory
    (`.KEY.tmp-...`) first, which only becomes `KEY/` when the run is whole."""
    return {p.parent.name for p in runs.glob("*/record.json") if not p.parent.name.startswith(".")}


def _wait_for_records(runs: Path, n: int, proc: subprocess.Popen[str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if runs.is_dir() and len(_finished(runs)) >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"sweep ended before it could be interrupted: {proc.communicate()}")
        time.sleep(0.05)
    pytest.fail("no run finished in time")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_interrupted_sweep_resumes_to_the_same_summary(tmp_path: Path, sig: signal.Signals) -> None:
    path = _write(tmp_path, SLOW_STUDY)
    out = tmp_path / "interrupted"
    proc = subprocess.Popen([sys.executable, "-m", "simstudy", "sweep", str(path), "-o", str(out), "--workers", "2",
                             "--quiet", "--no-report"], cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                            preexec_fn=sigint_default,
                            stderr=subprocess.PIPE, start_new_session=True)
    _wait_for_records(out / "runs", 2, proc)
    os.killpg(proc.pid, sig)  # the sweep and its pool workers, mid-run
    proc.communicate(timeout=60)
    if sig == signal.SIGINT:
        assert proc.returncode == 130
    finished = _finished(out / "runs")  # a run killed inside its temporary directory did not finish
    assert 2 <= len(finished) < 8 and not (out / "summary.parquet").exists()

    resumed = run_cli("sweep", str(path), "-o", str(out), "--quiet", "--no-report", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    clean = run_cli("sweep", str(path), "-o", str(tmp_path / "clean"), "--quiet", "--no-report", cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr
    a = pd.read_parquet(out / "summary.parquet")
    b = pd.read_parquet(tmp_path / "clean" / "summary.parquet")
    pd.testing.assert_frame_equal(_stable(a), _stable(b))
    assert set(a[a["cached"]]["key"]) >= finished  # what finished before the kill was reused, not redone
    assert not [p for p in (out / "runs").iterdir() if p.name.startswith(".")]  # no temporary leftovers


@pytest.fixture
def dask_scheduler(tmp_path: Path) -> object:
    """A real dask scheduler and two single-threaded worker processes on loopback."""
    pytest.importorskip("distributed")
    dask = shutil.which("dask") or pytest.skip("no `dask` command (pip install -e '.[dask]')")
    sched_file = tmp_path / "scheduler.json"
    logs = (tmp_path / "scheduler.log").open("w")
    common = ["--no-dashboard"]
    sched = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--scheduler-file",
                              str(sched_file), *common], stdout=logs, stderr=logs, start_new_session=True)
    workers = subprocess.Popen([dask, "worker", "--scheduler-file", str(sched_file), "--nworkers", "2",
                                "--nthreads", "1", "--host", "127.0.0.1", *common], stdout=logs, stderr=logs,
                               start_new_session=True)
    try:
        import json

        # the scheduler creates its file before it writes it: wait for a whole one
        deadline = time.monotonic() + 60
        address = None
        while address is None:
            try:
                address = json.loads(sched_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                if time.monotonic() > deadline or sched.poll() is not None:
                    pytest.fail(f"the dask scheduler wrote no address: {(tmp_path / 'scheduler.log').read_text()}")
                time.sleep(0.1)
        from distributed import Client

        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for p in (workers, sched):
            os.killpg(p.pid, signal.SIGTERM)
        for p in (workers, sched):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        logs.close()


@pytest.mark.slow
def test_dask_executor_matches_the_local_pool(tmp_path: Path, dask_scheduler: str) -> None:
    path = _write(tmp_path)
    proc = run_cli("sweep", str(path), "-o", str(tmp_path / "dask"), "--executor", "dask", "--scheduler",
                   dask_scheduler, "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    local = run_cli("sweep", str(path), "-o", str(tmp_path / "local"), "--quiet", "--no-report", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    a = pd.read_parquet(tmp_path / "dask" / "summary.parquet")
    b = pd.read_parquet(tmp_path / "local" / "summary.parquet")
    pd.testing.assert_frame_equal(_stable(a), _stable(b))
    assert (tmp_path / "dask" / "report.md").is_file()


def test_unreachable_scheduler_is_bad_input(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    path = _write(tmp_path)
    proc = run_cli("sweep", str(path), "-o", str(tmp_path / "o"), "--executor", "dask", "--scheduler",
                   "tcp://127.0.0.1:9", "--connect-timeout", "2", "--quiet", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "cannot reach the Dask scheduler" in proc.stderr


def test_dry_run_lists_scenarios_and_skips(tmp_path: Path) -> None:
    text = STUDY.replace("topology.npus: [2, 4]", "topology.npus: [2, 4]\n  parallelism.dp: [2]")
    path = _write(tmp_path, text)
    proc = run_cli("sweep", str(path), "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "4 combinations: 1 scenarios (1 distinct runs), 3 skipped" in proc.stdout
    assert "needs 3 (dp*tp*pp = 2*1*1 = 2 + 1 dedicated servers)" in proc.stdout
    assert "topology has 4 NPUs but the parallelism needs 2" in proc.stdout
    assert "model:" in proc.stdout and not (tmp_path / "results").exists()


def test_report_and_plots_are_written(tmp_path: Path) -> None:
    path = _write(tmp_path)
    proc = run_cli("sweep", str(path), "-o", str(tmp_path / "out"), "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## What was swept" in report and "`topology.npus`: 2, 4" in report
    assert "![iteration_ms](plots/iteration_ms.png)" in report
    for png in ("iteration_ms.png", "timelines.png"):
        assert (tmp_path / "out" / "plots" / png).stat().st_size > 1000


def test_regression_study_matches_the_committed_baseline(repo: Path, tmp_path: Path) -> None:
    baseline = repo / "tests" / "data" / "regression_small.parquet"
    proc = run_cli("sweep", str(repo / "specs" / "regression_small.yaml"), "-o", str(tmp_path / "reg"), "--quiet",
                   "--baseline", str(baseline), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "baseline: PASSED" in proc.stdout

    # a baseline in which one metric of one scenario differs by 1% must fail, naming it
    moved = pd.read_parquet(baseline)
    assert set(metric_columns(moved)) >= {"iteration_ms", "bytes_per_iter"}
    moved.loc[3, "iteration_ms"] *= 1.01
    moved = moved.drop(index=5)
    moved["gone_ms"] = 1.0  # a metric this sweep no longer measures
    moved.to_parquet(tmp_path / "moved.parquet")
    proc = run_cli("sweep", str(repo / "specs" / "regression_small.yaml"), "-o", str(tmp_path / "reg"), "--quiet",
                   "--baseline", str(tmp_path / "moved.parquet"), "--no-report", cwd=tmp_path)
    assert proc.returncode == 1
    assert "MOVED" in proc.stdout and "iteration_ms" in proc.stdout and "changed 0.990%" in proc.stdout
    assert "new (not in the baseline)" in proc.stdout
    assert "MISSING metric (in the baseline, not in this sweep's summary): gone_ms" in proc.stdout


def test_features_are_added_to_runs_finished_without_them(tmp_path: Path) -> None:
    lean = _write(tmp_path, STUDY + "analyses: []\n", "lean.yaml")
    first = run_study(load_study(lean), lean, tmp_path / "out", executor=LocalExecutor(1), progress=False)
    assert "duty_cycle" not in first.summary.columns and "finish_ms" in first.summary.columns
    full = _write(tmp_path)
    second = run_study(load_study(full), full, tmp_path / "out", executor=LocalExecutor(1), progress=False)
    assert second.summary["cached"].all()  # not simulated again...
    assert second.summary["duty_cycle"].notna().all()  # ...but analysed
    for key in second.summary["key"]:
        assert (tmp_path / "out" / "runs" / key / "features.json").is_file()
    pd.testing.assert_series_equal(first.summary["finish_ms"], second.summary["finish_ms"])


def test_a_killed_process_left_unreaped_does_not_hold_its_temporary_run() -> None:
    """After kill -9 of a sweep, its pool workers can linger as zombies until reaped; their
    temporary run directories are stale all the same."""
    from simstudy.compiler.atomic import pid_running as _running

    live = subprocess.Popen(["sleep", "30"])
    dead = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        stat = Path(f"/proc/{dead.pid}/stat")
        while time.monotonic() < deadline and stat.read_text().rpartition(")")[2].split()[0] != "Z":
            time.sleep(0.01)
        assert _running(live.pid)
        assert not _running(dead.pid)  # a zombie: exited, not yet waited for
    finally:
        live.kill()
        live.wait()
        dead.wait()
    assert not _running(dead.pid)
