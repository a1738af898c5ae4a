"""Sweeps on a SLURM cluster: one `sbatch` job array, one array task per run.

Why a job array and not dask-jobqueue's long-lived workers: a sweep's runs are independent and
take seconds to hours, so one SLURM job per run is what the scheduler is built for (fair-share,
backfill, `--array=...%N` to cap how many run at once, `scancel` of one run, requeue after
preemption), nothing has to stay connected between the login node and the compute nodes (the
driver only polls `squeue`/`scontrol`, and a sweep can be stopped and resumed: every finished run
is a directory on the shared filesystem), and there is no Dask scheduler to start, reach or lose.
The cluster's own tools show each run (`squeue -r`, `sacct` where accounting is on).

How: the driver pickles the run tasks into `<out>/slurm/<batch>/tasks.pkl`, writes a batch script
that runs `python -m simstudy.sweeps.slurm <tasks.pkl> $SLURM_ARRAY_TASK_ID`, submits it with
`sbatch --array=0-(N-1)[%jobs]`, and polls until no task of the array is pending or running. Each
task writes its run directory (record.json names the SLURM job) or, when the run fails, a
`failed-<i>.json` with the error; a task that ends with neither (killed, out of time or memory)
is reported as failed with the state SLURM gives, and the next sweep runs it again. Everything
must sit on a filesystem the login and compute nodes share (as a SLURM cluster's home does).
"""

from __future__ import annotations

import json
import pickle
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from simstudy.files import write_json
from simstudy.sweeps.errors import SweepError
from simstudy.sweeps.runner import RunRecord, RunTask, execute, read_record

TASKS = "tasks.pkl"
SCRIPT = "array.sh"
#: SLURM states in which a job still holds or waits for resources.
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "STAGE_OUT"}


def _run(cmd: list[str], *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SweepError(f"cannot run {cmd[0]}: {exc}") from None


def live_slurm_jobs() -> set[str] | None:
    """Ids of the SLURM jobs that are pending or running (array tasks by their own job id), or
    None when SLURM cannot be asked (no squeue, no controller)."""
    if shutil.which("squeue") is None:
        return None
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "-o", "%A"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return {line.strip() for line in proc.stdout.splitlines() if line.strip()}


@dataclass(frozen=True)
class SlurmOptions:
    """What each array task asks SLURM for."""

    partition: str | None = None
    account: str | None = None
    walltime: str = "01:00:00"
    cores: int = 1
    memory: str = "4G"
    jobs: int | None = None
    """At most this many array tasks run at once (`--array=...%jobs`); default: no limit."""

    def sbatch_args(self, n: int) -> list[str]:
        array = f"0-{n - 1}" + (f"%{self.jobs}" if self.jobs else "")
        args = [f"--array={array}", f"--time={self.walltime}", f"--cpus-per-task={self.cores}",
                f"--mem={self.memory}", "--job-name=simstudy"]
        if self.partition:
            args.append(f"--partition={self.partition}")
        if self.account:
            args.append(f"--account={self.account}")
        return args


class SlurmExecutor:
    """Runs each task as one task of a SLURM job array (see the module docstring)."""

    name = "slurm"

    def __init__(self, workdir: str | Path, options: SlurmOptions | None = None, *, poll_s: float = 2.0,
                 python: str | None = None) -> None:
        self.workdir = Path(workdir)
        self.options = options or SlurmOptions()
        self.poll_s = poll_s
        self.python = python or sys.executable
        self.array_id: str | None = None

    def _submit(self, batch: Path, n: int) -> str:
        for tool in ("sbatch", "squeue"):
            if shutil.which(tool) is None:
                raise SweepError(f"the slurm executor needs {tool}, which is not on PATH (is this a SLURM login node?)")
        script = batch / SCRIPT
        logs = batch / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        script.write_text(
            "#!/bin/bash\n"
            f"#SBATCH --output={logs}/%A_%a.out\n"
            f"exec {shlex.quote(self.python)} -m simstudy.sweeps.slurm {shlex.quote(str(batch / TASKS))} "
            '"$SLURM_ARRAY_TASK_ID"\n',
            encoding="utf-8",
        )
        proc = _run(["sbatch", "--parsable", *self.options.sbatch_args(n), str(script)])
        if proc.returncode != 0:
            raise SweepError(f"sbatch refused the sweep's job array: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout.strip().split(";")[0]

    def _states(self, array: str) -> dict[int, str]:
        """Array task index -> state, for the tasks SLURM still lists (pending ones as a range)."""
        proc = _run(["squeue", "-h", "-r", "-j", array, "-o", "%K %T"])
        if proc.returncode != 0:
            return {}
        out: dict[int, str] = {}
        for line in proc.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                out[int(parts[0])] = parts[1]
        return out

    def _final_state(self, array: str, index: int) -> str:
        proc = _run(["scontrol", "-o", "show", "job", f"{array}_{index}"])
        for field in proc.stdout.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
        return "UNKNOWN"

    def run(self, tasks: Sequence[RunTask]) -> Iterator[RunRecord]:
        if not tasks:
            return
        batch = self.workdir / time.strftime("%Y%m%d-%H%M%S")
        batch.mkdir(parents=True, exist_ok=True)
        with (batch / TASKS).open("wb") as f:
            pickle.dump(list(tasks), f)
        self.array_id = array = self._submit(batch, len(tasks))
        (batch / "array_id").write_text(array + "\n")
        pending = dict(enumerate(tasks))
        try:
            while pending:
                states = self._states(array)
                for i in sorted(pending):
                    record = _outcome(batch, i, pending[i])
                    if record is None:
                        if states.get(i) in ACTIVE:
                            continue
                        state = self._final_state(array, i)
                        if state in ACTIVE:
                            continue
                        # it may have finished between the two looks
                        record = _outcome(batch, i, pending[i]) or RunRecord(
                            pending[i].key, "failed",
                            error=f"SLURM job {array}_{i} ended ({state}) without finishing the run")
                    del pending[i]
                    yield record
                if pending:
                    time.sleep(self.poll_s)
        except BaseException:
            if pending:
                _run(["scancel", array])
            raise


def _outcome(batch: Path, index: int, task: RunTask) -> RunRecord | None:
    """The record of task `index`: its run directory's, or its failure file's; None while neither exists."""
    failed = batch / f"failed-{index}.json"
    if failed.is_file():
        data = json.loads(failed.read_text(encoding="utf-8"))
        return RunRecord(task.key, "failed", error=str(data.get("error")), seconds=float(data.get("seconds", 0.0)))
    done = read_record(Path(task.run_dir))
    if done is None:
        return None
    return RunRecord(done.key, "ok", metrics=done.metrics, cached=False, seconds=done.seconds, features=done.features,
                     where=done.where)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of one array task: run task `index` of the pickled list."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or not args[1].isdigit():
        print("usage: python -m simstudy.sweeps.slurm TASKS.pkl INDEX", file=sys.stderr)
        return 2
    path, index = Path(args[0]), int(args[1])
    with path.open("rb") as f:
        tasks: list[RunTask] = pickle.load(f)  # written by SlurmExecutor.run of this sweep
    record = execute(tasks[index])
    if record.status != "ok":
        write_json(path.with_name(f"failed-{index}.json"),
                   {"key": record.key, "error": record.error, "seconds": record.seconds}, indent=None)
        print(f"run {record.key} failed: {record.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
