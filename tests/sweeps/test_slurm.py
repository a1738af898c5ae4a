"""Sweeps as SLURM job arrays on a real single-host SLURM cluster (slurmctld, slurmd and munged
started by the fixture, as root, and stopped afterwards)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from simstudy import layout
from simstudy.spec import load_study
from simstudy.sweeps import LocalExecutor, SlurmExecutor, SlurmOptions, read_record, run_study
from tests.sweeps.test_sweep import _finished

pytestmark = pytest.mark.slurm

DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scontrol", "scancel", "sinfo")

#: Two quick runs and a parameter server with 64 workers that takes seconds (long enough to kill).
STUDY = """\
name: slurm_small
base:
  model: resnet50
  parallelism: {aggregation: {kind: parameter_server, servers: 1}}
  topology: {kind: switch, npus: 5, bandwidth_gbps: 10}
  training: {iterations: 3}
analyses: []
axes:
  topology.npus: [5, 9, 65]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _memory_mb() -> int:
    """Most of this machine's memory, for the node's RealMemory (jobs ask for --mem)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(int(line.split()[1]) / 1024 * 0.8)
    return 4096


def _wait(predicate: object, timeout: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    tails = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-2000:]}" for p in logs if p.is_file())
    pytest.fail(f"SLURM test cluster: {what} within {timeout:.0f} s\n{tails}")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A one-node SLURM cluster of this machine (CPUs=2), with its own munge key, ports and state
    directory; SLURM_CONF points every client (sbatch, squeue, ...) at it."""
    if os.geteuid() != 0:
        pytest.skip("starting slurmctld, slurmd and munged needs root")
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        pytest.skip(f"SLURM is not installed ({', '.join(missing)} missing): "
                    "apt-get install slurmctld slurmd slurm-client munge")
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "munge"):
        (d / sub).mkdir()
    key = d / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = d / "munge" / "munge.socket"
    host = socket.gethostname()
    conf = d / "slurm.conf"
    conf.write_text(f"""\
ClusterName=simstudy-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket_path}
CredType=cred/munge
StateSaveLocation={d / "state"}
SlurmdSpoolDir={d / "spool"}
SlurmctldPidFile={d / "slurmctld.pid"}
SlurmdPidFile={d / "slurmd.pid"}
SlurmctldLogFile={d / "slurmctld.log"}
SlurmdLogFile={d / "slurmd.log"}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName={host} CPUs=2 RealMemory={_memory_mb()} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    logs = [d / "slurmctld.log", d / "slurmd.log", d / "munge" / "munged.log"]
    started: list[subprocess.Popen[bytes]] = []
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    try:
        started.append(subprocess.Popen(
            ["munged", "-F", "-f", "-S", str(socket_path), f"--key-file={key}", f"--pid-file={d / 'munge' / 'pid'}",
             f"--log-file={logs[2]}", f"--seed-file={d / 'munge' / 'seed'}"], env=env))
        _wait(socket_path.exists, 20, "munged did not start", logs)
        started.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env))
        started.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf)], env=env))

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env)
            return out.returncode == 0 and out.stdout.strip() == "idle"

        _wait(idle, 60, "the node did not come up idle", logs)
        yield d
    finally:
        subprocess.run(["scancel", "--user=root"], capture_output=True, env=env)
        for proc in reversed(started):
            proc.send_signal(signal.SIGTERM)
        for proc in reversed(started):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def _stable(summary: pd.DataFrame) -> pd.DataFrame:
    return summary.drop(columns=["cached", "run_s", "backend_wall_s"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def local_summary(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    d = tmp_path_factory.mktemp("local")
    path = d / "study.yaml"
    path.write_text(STUDY)
    return run_study(load_study(path), path, d / "out", executor=LocalExecutor(2), progress=False).summary


def test_a_sweep_runs_as_slurm_array_jobs(slurm: Path, tmp_path: Path, local_summary: pd.DataFrame) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(STUDY)
    executor = SlurmExecutor(tmp_path / "out" / "slurm", SlurmOptions(walltime="00:10:00", memory="2G"), poll_s=0.3)
    result = run_study(load_study(path), path, tmp_path / "out", executor=executor, progress=False)
    assert result.all_ok, {k: r.error for k, r in result.records.items()}
    assert executor.array_id is not None
    for key in result.summary["key"]:
        where = read_record(tmp_path / "out" / layout.RUNS_DIR / key).where  # type: ignore[union-attr]
        # each run was computed by a task of the sweep's job array
        assert where["slurm_array_job_id"] == executor.array_id
        assert where["slurm_job_id"].isdigit()
    pd.testing.assert_frame_equal(_stable(result.summary), _stable(local_summary))


def _sweep(study: Path, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "simstudy", "sweep", str(study), "-o", str(out), "--quiet",
                             "--no-report", "--executor", "slurm", "--jobs", "1", "--walltime", "00:10:00",
                             "--mem", "2G"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_killing_a_job_mid_run_leaves_the_sweep_resumable(slurm: Path, tmp_path: Path,
                                                          local_summary: pd.DataFrame) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(STUDY)
    out = tmp_path / "out"
    runs = out / layout.RUNS_DIR
    proc = _sweep(path, out)
    # one task at a time (--jobs 1): wait until the long last run is being written, then kill its job
    deadline = time.monotonic() + 180
    killed = None
    while time.monotonic() < deadline and killed is None:
        done = _finished(runs) if runs.is_dir() else set()
        temps = list(runs.glob(".*.tmp-slurm*")) if runs.is_dir() else []
        if len(done) == 2 and temps:
            killed = temps[0].name.split(".tmp-slurm")[1].split("-")[0]
            subprocess.run(["scancel", "--signal=KILL", killed], check=True)
        time.sleep(0.05)
    assert killed is not None, "never saw the third run in progress"
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1, stdout + stderr
    assert "without finishing the run" in stderr
    finished = _finished(runs)
    assert len(finished) == 2
    # nothing finished is lost; the same command resumes and computes only the killed run
    proc = _sweep(path, out)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout + stderr
    assert "1 done, 2 cached, 0 failed" in stdout
    assert not list(runs.glob(".*.tmp-*")), "the killed run's temporary directory was left behind"
    summary = pd.read_parquet(out / layout.SUMMARY)
    pd.testing.assert_frame_equal(_stable(summary), _stable(local_summary))
