"""Runs of a cluster: per-job times, and each job's slowdown against running alone.

A cluster run is one simulation of every job on the shared network. Each job also runs alone, on
the NPUs it has in the cluster and from time 0 (a run of its own, cached under its own key, so a
sweep over start offsets simulates each job alone once). A job's slowdown is its iteration time
shared over its iteration time alone. run.json's `details.jobs` holds, per job: NPUs, start,
finish, iteration time, bytes, and when the cluster has several jobs, the alone iteration time
and the slowdown.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from simstudy import layout
from simstudy.backends.base import Backend, RunResult
from simstudy.backends.registry import backend_key
from simstudy.backends.traffic_out import TrafficOutput
from simstudy.compiler import Bundle, JobInfo, read_jobs
from simstudy.files import replacing
from simstudy.spec import BackendSpec, Cluster, canonical_json
from simstudy.table import check_table, write_table
from simstudy.version import __version__


@dataclass(frozen=True)
class JobResult:
    """One job of a cluster run (times in ms)."""

    index: int
    name: str
    npus: tuple[int, ...]
    start_ms: float
    iterations: int
    finish_ms: float
    iteration_ms: float
    bytes_per_iter: float
    alone_iteration_ms: float = math.nan
    slowdown: float = math.nan

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["npus"] = list(self.npus)
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> JobResult:
        def num(key: str) -> float:
            v = d.get(key)
            return math.nan if v is None else float(v)

        return cls(int(d["index"]), str(d["name"]), tuple(int(n) for n in d["npus"]), num("start_ms"),
                   int(d["iterations"]), num("finish_ms"), num("iteration_ms"), num("bytes_per_iter"),
                   num("alone_iteration_ms"), num("slowdown"))


def job_results(result: RunResult, jobs: list[JobInfo]) -> list[JobResult]:
    """Per-job finish and iteration times from the ranks' finish times, and bytes per iteration
    from the transfers its NPUs sent."""
    finish = {r.rank: r.finish_ns for r in result.ranks}
    sent = result.output.sent
    out = []
    for j in jobs:
        end = max(finish[n] for n in j.npus)
        sent_bytes = float(sum(float(sent[n]) for n in j.npus if n < len(sent)))
        out.append(JobResult(j.index, j.name, j.npus, j.start_ns / 1e6, j.iterations, end / 1e6,
                             (end - j.start_ns) / 1e6 / j.iterations, sent_bytes / j.iterations))
    return out


def job_owner(jobs: list[JobInfo]) -> NDArray[np.int32]:
    """The job of every NPU (-1 where no job runs)."""
    owner = np.full(max((max(j.npus) for j in jobs), default=-1) + 1, -1, dtype=np.int32)
    for j in jobs:
        owner[list(j.npus)] = j.index
    return owner


def with_job_column(traffic: pd.DataFrame, owner: NDArray[np.int32]) -> pd.DataFrame:
    """The traffic table with a `job` column: the job whose NPU sent each transfer (jobs never
    share an NPU, and every transfer stays inside its job; see `row_jobs` for switches)."""
    out = traffic.copy()
    out["job"] = row_jobs(owner, traffic["src"].to_numpy(), traffic["dst"].to_numpy())
    check_table(out)
    return out


def row_jobs(owner: NDArray[np.int32], src: NDArray[Any], dst: NDArray[Any]) -> NDArray[np.int32]:
    """The job of each transfer: its source NPU's; a switch's transfer (an endpoint beyond the NPUs,
    in-network aggregation) its destination NPU's, and -1 between two switches, which any job's
    partial sums may cross."""
    if not len(src):
        return np.empty(0, dtype=np.int32)
    n = len(owner)
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if int(src.max()) < n:
        return np.asarray(owner[src], dtype=np.int32)
    of_dst = np.where(dst < n, owner[np.minimum(dst, n - 1)], -1)
    return np.where(src < n, owner[np.minimum(src, n - 1)], of_dst).astype(np.int32)


def add_job_column(output: TrafficOutput, jobs: list[JobInfo]) -> None:
    """Give a run's transfers their `job` column, in memory or in the Parquet file they were
    streamed to (rewritten row group by row group, so memory stays bounded)."""
    if output.mode != "rows":
        return
    owner = job_owner(jobs)
    if output._table is not None or output.path is None or not output.path.is_file():
        output._table = with_job_column(output.table(), owner)
        if output.path is not None and output.path.is_file():
            write_table(output._table, output.path)
        return
    src = pq.ParquetFile(output.path)
    with replacing(output.path) as tmp:
        writer: pq.ParquetWriter | None = None
        try:
            for i in range(src.num_row_groups):
                group = src.read_row_group(i)
                of_rows = row_jobs(owner, group.column("src").to_numpy(), group.column("dst").to_numpy())
                group = group.append_column("job", pa.array(of_rows, type=pa.int32()))
                if writer is None:
                    writer = pq.ParquetWriter(tmp, group.schema)
                writer.write_table(group, row_group_size=max(group.num_rows, 1))
        finally:
            if writer is not None:
                writer.close()


def read_job_results(run_dir: Path) -> list[JobResult] | None:
    """The jobs of a finished cluster run directory (None for a run of one scenario)."""
    try:  # absent, or moved aside for a moment by a process replacing the directory
        text = (run_dir / layout.RUN_JSON).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    jobs = json.loads(text).get("details", {}).get("jobs")
    return None if jobs is None else [JobResult.from_json(j) for j in jobs]


class WithJobs:
    """A backend wrapper that adds `details.jobs` (and slowdowns, given alone times) to a cluster run."""

    def __init__(self, backend: Backend, alone_ms: dict[str, float]) -> None:
        self.backend = backend
        self.name = backend.name
        self.alone_ms = alone_ms

    def run(self, bundle: Bundle, workdir: Path, *, timeout_s: float | None = None) -> RunResult:
        result = self.backend.run(bundle, workdir, timeout_s=timeout_s)
        jobs = read_jobs(bundle.directory)
        if jobs is not None:
            add_job_column(result.output, jobs)
            rows = []
            for j in job_results(result, jobs):
                alone = self.alone_ms.get(j.name, math.nan)
                slowdown = j.iteration_ms / alone if alone > 0 else math.nan
                rows.append(replace(j, alone_iteration_ms=alone, slowdown=slowdown).to_json())
            result.details["jobs"] = rows
        return result


def alone_key(cluster: Cluster, backend: BackendSpec) -> str:
    """The key of a job's alone run: a hash of the one-job cluster, the backend and simstudy's version."""
    text = "\n".join([canonical_json(cluster), backend_key(backend), f"simstudy {__version__}"])
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def alone_times(
    cluster: Cluster,
    backend: BackendSpec,
    root: Path,
    run: Callable[[Cluster, Path], RunResult],
) -> dict[str, float]:
    """Each job's iteration time alone, from its alone run under `root/<key>/` (run now unless a
    finished one is there). A cluster of one job is its own reference: nothing is run."""
    if len(cluster.jobs) < 2:
        return {}
    out: dict[str, float] = {}
    for i, job in enumerate(cluster.jobs):
        alone = cluster.alone(i)
        alone = alone.model_copy(update={"jobs": (alone.jobs[0].model_copy(update={"start_ms": 0.0}),)})
        d = root / alone_key(alone, backend)
        done = read_job_results(d)
        if done is None:  # read from the result: another process may be replacing `d` meanwhile
            done = [JobResult.from_json(j) for j in run(alone, d).details["jobs"]]
        out[job.name] = done[0].iteration_ms
    return out


def slowdowns(result: RunResult) -> dict[str, float]:
    """Job name -> slowdown of a cluster run (empty for a scenario run)."""
    return {j["name"]: (math.nan if j.get("slowdown") is None else float(j["slowdown"]))
            for j in result.details.get("jobs", [])}
