"""Sweeps: expand a study into scenarios, run them on an executor, keep every finished run, resume.

Output in `<out>/`: `runs/<key>/` per scenario (bundle, run.json, traffic.parquet,
features.json, record.json), `summary.parquet` (one row per scenario), `skipped.json` (the
invalid combinations and why) and `study.json` (the study as run).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from simstudy import layout
from simstudy.compiler.atomic import TempOwner, gone_on_this_host, recover_all
from simstudy.files import write_json
from simstudy.spec import Study
from simstudy.sweeps.errors import SweepError
from simstudy.sweeps.executors import (
    DaskExecutor,
    Executor,
    LocalExecutor,
    default_workers,
    get_executor,
)
from simstudy.sweeps.expand import Expansion, Point, Skipped, admit, expand, label, override, run_key
from simstudy.sweeps.runner import RunRecord, RunTask, execute, read_record
from simstudy.sweeps.slurm import SlurmExecutor, SlurmOptions, live_slurm_jobs
from simstudy.sweeps.summary import (
    BaselineReport,
    Change,
    compare_baseline,
    metric_columns,
    param_columns,
    summary_frame,
    write_summary,
)

__all__ = [
    "BaselineReport",
    "Change",
    "DaskExecutor",
    "Executor",
    "Expansion",
    "LocalExecutor",
    "Point",
    "RunRecord",
    "RunTask",
    "Skipped",
    "SlurmExecutor",
    "SlurmOptions",
    "SweepError",
    "SweepResult",
    "admit",
    "compare_baseline",
    "default_workers",
    "execute",
    "expand",
    "get_executor",
    "label",
    "metric_columns",
    "override",
    "param_columns",
    "run_key",
    "run_study",
]



@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: the expansion, every run's record and the summary table."""

    out: Path
    expansion: Expansion
    records: dict[str, RunRecord]
    summary: pd.DataFrame
    wall_s: float

    @property
    def counts(self) -> Counter[str]:
        """Unique runs by outcome: ok (computed now), cached, failed."""
        return Counter("cached" if r.cached else r.status for r in self.records.values())

    @property
    def all_ok(self) -> bool:
        return all(r.status == "ok" for r in self.records.values())

    @property
    def backend_s(self) -> float:
        """Backend time of the runs computed in this sweep."""
        return sum(r.backend_s for r in self.records.values() if not r.cached)

    def run_dir(self, key: str) -> Path:
        return self.out / layout.RUNS_DIR / key


def _remove_stale(runs: Path) -> None:
    """Recover what writers that no longer run left in `runs` (`recover_all`): a run directory one
    of them had moved aside goes back in place, temporary ones are removed. A writer no longer
    runs when it is a process of this host that ended, or a SLURM job that SLURM no longer lists;
    those of other hosts' processes, and of SLURM jobs when SLURM cannot be asked, are left alone."""
    asked = False
    jobs: set[str] | None = None

    def gone(owner: TempOwner) -> bool:
        nonlocal asked, jobs
        if owner.slurm_job is None:
            return gone_on_this_host(owner)
        if not asked:
            jobs, asked = live_slurm_jobs(), True
        return jobs is not None and owner.slurm_job not in jobs

    recover_all(runs, gone)


def run_study(
    study: Study,
    source: str | Path,
    out: str | Path,
    *,
    executor: Executor | None = None,
    astra_sim: str | Path | None = None,
    progress: bool = True,
    force: bool = False,
) -> SweepResult:
    """Run every valid point of `study` (references relative to `source`) into `out`.

    Finished runs are reused. A failing run is recorded and the sweep goes on. Ctrl-C stops the
    sweep; every run finished so far is kept and the next call resumes. On the local executor, a
    point whose memory estimate exceeds what this machine has available is skipped with the reason
    in skipped.json (`force`: run it anyway).
    """
    t0 = time.perf_counter()
    out = Path(out).resolve()
    executor = executor or LocalExecutor()
    expansion = expand(study, source)
    if not force and isinstance(executor, LocalExecutor):
        expansion = admit(expansion, study.backend_spec)
    runs = out / layout.RUNS_DIR
    runs.mkdir(parents=True, exist_ok=True)
    _remove_stale(runs)
    write_json(out / layout.STUDY_JSON, {"source": str(source), "study": study.model_dump(mode="json")},
               default=str)
    write_json(out / layout.SKIPPED_JSON, [{"index": s.index, "params": s.params, "reason": s.reason}
                                           for s in expansion.skipped], default=str)
    records: dict[str, RunRecord] = {}
    tasks: list[RunTask] = []
    first = {p.key: p for p in reversed(expansion.points)}
    for key in expansion.unique_keys:
        done = read_record(runs / key)
        if done is not None and (done.features or "features" not in study.analyses):
            records[key] = done
            continue
        tasks.append(RunTask(key, first[key].scenario, str(runs / key), study.backend_spec,
                             astra_sim=str(Path(astra_sim).absolute()) if astra_sim else None,
                             features="features" in study.analyses))
    bar = tqdm(total=len(expansion.unique_keys), initial=len(records), disable=not progress, unit="run",
               desc=study.name, dynamic_ncols=True)
    try:
        _update(bar, records)
        for record in executor.run(tasks):
            records[record.key] = record
            bar.update(1)
            _update(bar, records)
    finally:
        bar.close()
    summary = summary_frame(expansion, records)
    write_summary(summary, out / layout.SUMMARY)
    return SweepResult(out, expansion, records, summary, time.perf_counter() - t0)


def _update(bar: tqdm[Any], records: dict[str, RunRecord]) -> None:
    c = Counter("cached" if r.cached else r.status for r in records.values())
    bar.set_postfix(done=c["ok"], failed=c["failed"], cached=c["cached"], refresh=False)
