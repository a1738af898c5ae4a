"""One run of a sweep, as executed by a worker: compile, simulate, analyse, write `runs/<key>/`.

A run directory is complete when `record.json` is in it: the whole directory is written in a
temporary sibling and renamed into place at the end, so an interrupted run leaves nothing that
could be mistaken for a finished one, and a finished run is never recomputed.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simstudy import layout
from simstudy.backends import BackendError, RunResult, simulate
from simstudy.compiler import CompileError
from simstudy.compiler.topology_file import read_topology
from simstudy.files import write_json
from simstudy.spec import BackendSpec, Cluster, Scenario, SpecError
from simstudy.table import read_table
from simstudy.traffic.features import analyze
from simstudy.traffic.links import LinkSummary, link_metrics, link_summary


@dataclass(frozen=True)
class RunTask:
    """Everything a worker needs for one run (picklable, no open resources)."""

    key: str
    scenario: Scenario | Cluster
    run_dir: str
    backend: BackendSpec
    astra_sim: str | None = None
    features: bool = True


@dataclass(frozen=True)
class RunRecord:
    """The outcome of one run: `ok` with its metrics, or `failed` with the error."""

    key: str
    status: str
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    cached: bool = False
    seconds: float = 0.0
    features: bool = False
    where: dict[str, str] = field(default_factory=dict)
    """Where the run was computed: host and process, and the SLURM job when it ran as one."""

    @property
    def backend_s(self) -> float:
        """Wall time the backend spent simulating (0 for a failed run)."""
        return float(self.metrics.get("backend_wall_s", 0.0))


def run_metrics(result: RunResult, scenario: Scenario | Cluster) -> dict[str, float]:
    """Per-rank time statistics, bytes per iteration and transfer counts of one run; for a cluster
    also each job's iteration time, alone time and slowdown (`job.<name>.<metric>`) and the mean
    and largest slowdown (per-run figures of a cluster count the iterations of its longest job)."""
    if isinstance(scenario, Cluster):
        iters = max(j.training.iterations for j in scenario.jobs)
    else:
        iters = scenario.training.iterations
    finish = np.array([r.finish_ns for r in result.ranks], dtype=np.float64) / 1e6
    compute = np.array([r.compute_ns for r in result.ranks], dtype=np.float64) / 1e6
    comm = np.array([r.comm_ns for r in result.ranks], dtype=np.float64) / 1e6
    exposed = np.array([r.exposed_comm_ns for r in result.ranks], dtype=np.float64) / 1e6
    output = result.output
    per_rank = np.zeros(len(result.ranks))
    sent = output.sent[: len(per_rank)]
    per_rank[: len(sent)] = sent
    total = float(output.total_bytes)
    return {
        "npus": float(len(result.ranks)),
        "finish_ms": float(finish.max()),
        "finish_min_ms": float(finish.min()),
        "finish_mean_ms": float(finish.mean()),
        "iteration_ms": float(finish.max()) / iters,
        "samples_per_s": samples_per_s(finish, scenario),
        **iteration_tail(result),
        "compute_ms_mean": float(compute.mean()),
        "comm_ms_mean": float(comm.mean()),
        "exposed_comm_ms_mean": float(exposed.mean()),
        "exposed_comm_ms_max": float(exposed.max()),
        "exposed_comm_frac": float(exposed.mean() / finish.mean()) if finish.mean() > 0 else 0.0,
        "bytes_total": total,
        "bytes_per_iter": total / iters,
        "bytes_per_iter_rank_max": float(per_rank.max()) / iters,
        "bytes_per_iter_rank_mean": float(per_rank.mean()) / iters,
        "transfers": float(output.transfers),
        "backend_wall_s": float(result.wall_time_s),
        **job_metrics(result),
    }


def samples_per_s(finish_ms: np.ndarray, scenario: Scenario | Cluster) -> float:
    """Training throughput: samples per second, each compute rank at its own pace. A compute rank
    trains its share of an iteration's samples (dp x batch / compute ranks) every iteration, so
    the job's rate is the sum over compute ranks of share x iterations / the rank's finish. The ranks
    of a synchronous job finish together, so this is dp x batch x iterations / the finish; the
    workers of an asynchronous parameter server (dedicated servers excluded) each count at their
    own pace, so a straggler slows only its own share. NaN for a cluster (see the jobs' figures)."""
    if isinstance(scenario, Cluster):
        return math.nan
    p = scenario.parallelism
    share = p.dp * scenario.training.batch_size_per_worker * scenario.training.iterations / p.compute_ranks
    ranks = finish_ms[: p.compute_ranks]
    return float(share * np.sum(1e3 / ranks)) if len(ranks) and (ranks > 0).all() else math.nan


def iteration_tail(result: RunResult) -> dict[str, float]:
    """The 90th percentile and the longest of the job's iteration times (from when each iteration
    ends, `details.iteration_ends_ns`: flowsim and the packet network report it); NaN without."""
    ends = result.details.get("iteration_ends_ns") or []
    if not ends:
        return {"iteration_p90_ms": math.nan, "iteration_max_ms": math.nan}
    its = np.diff(np.asarray([0, *ends], dtype=np.float64)) / 1e6
    return {"iteration_p90_ms": float(np.percentile(its, 90)), "iteration_max_ms": float(its.max())}


def tier_capacities(bundle_dir: Path) -> dict[str, tuple[int, float]]:
    """Tier -> (links, total capacity in Gbit/s) of a bundle's network (topology.json)."""
    topo = read_topology(bundle_dir / layout.TOPOLOGY)
    out: dict[str, tuple[int, float]] = {}
    for link in topo.links:
        n, cap = out.get(link.tier, (0, 0.0))
        out[link.tier] = (n + 1, cap + link.gbps)
    return out


def run_link_summary(links: pd.DataFrame, bundle_dir: Path, duration_s: float, *, top: int = 10) -> LinkSummary:
    """Per tier and hottest links of a run that kept its link table (see `traffic.links`)."""
    return link_summary(links, tier_capacities(bundle_dir), top=top, duration_s=duration_s)


def job_metrics(result: RunResult) -> dict[str, float]:
    """Per-job figures of a cluster run (run.json `details.jobs`), flattened for the summary."""
    jobs = result.details.get("jobs") or []
    out: dict[str, float] = {}
    slow = []
    for j in jobs:
        for name in ("iteration_ms", "alone_iteration_ms", "slowdown", "start_ms", "bytes_per_iter"):
            v = j.get(name)
            out[f"job.{j['name']}.{name}"] = math.nan if v is None else float(v)
        if j.get("slowdown") is not None:
            slow.append(float(j["slowdown"]))
    if jobs:
        out["slowdown_mean"] = float(np.mean(slow)) if slow else math.nan
        out["slowdown_max"] = float(np.max(slow)) if slow else math.nan
    return out


def read_record(run_dir: Path) -> RunRecord | None:
    """The record of a finished run, or None when the run has not finished."""
    path = run_dir / layout.RECORD
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return RunRecord(key=data["key"], status="ok", metrics=data["metrics"], cached=True,
                     seconds=float(data.get("seconds", 0.0)), features=bool(data.get("features", False)),
                     where={str(k): str(v) for k, v in (data.get("where") or {}).items()})


def where_now() -> dict[str, str]:
    """This process: host and pid, and its SLURM job (array job and task) when it runs as one."""
    out = {"host": socket.gethostname(), "pid": str(os.getpid())}
    for name, var in (("slurm_job_id", "SLURM_JOB_ID"), ("slurm_array_job_id", "SLURM_ARRAY_JOB_ID"),
                      ("slurm_array_task_id", "SLURM_ARRAY_TASK_ID")):
        if os.environ.get(var):
            out[name] = os.environ[var]
    return out


def _add_features(metrics: dict[str, float], traffic: pd.DataFrame, out: Path) -> None:
    features = analyze(traffic)
    write_json(out / layout.FEATURES, features.to_json(), indent=None)
    for name, value in features.scalars().items():
        metrics.setdefault(name, float(value))


def _complete(record: RunRecord, run_dir: Path) -> RunRecord:
    """A finished run from a sweep without features, given the features this sweep asks for."""
    metrics = dict(record.metrics)
    _add_features(metrics, read_table(run_dir / layout.TRAFFIC), run_dir)
    data = {"key": record.key, "metrics": metrics, "seconds": record.seconds, "features": True,
            "where": record.where}
    write_json(run_dir / layout.RECORD, data)
    return RunRecord(record.key, "ok", metrics=metrics, cached=True, seconds=record.seconds, features=True,
                     where=record.where)


def execute(task: RunTask) -> RunRecord:
    """Run one scenario into `task.run_dir`, or reuse it when it already finished.

    Bad input, compile errors, simulator crashes and timeouts become a `failed` record; nothing
    is written for a failed run, so the next sweep tries it again.
    """
    t0 = time.perf_counter()
    out = Path(task.run_dir)
    done = read_record(out)
    if done is not None:
        wants = task.features and not done.features and (out / layout.TRAFFIC).is_file()
        return _complete(done, out) if wants else done
    scenario = task.scenario
    record: dict[str, Any] = {}

    def finish(result: RunResult, tmp: Path) -> None:
        metrics = run_metrics(result, scenario)
        if task.features and result.output.mode == "rows":
            _add_features(metrics, result.traffic, tmp)
        if result.links is not None and len(result.links):
            summary = run_link_summary(result.links, tmp / layout.BUNDLE_DIR, result.finish_ns * 1e-9)
            metrics.update(link_metrics(summary))
        features = task.features and result.output.mode == "rows"
        record.update(key=task.key, metrics=metrics, seconds=time.perf_counter() - t0, features=features,
                      where=where_now())
        write_json(tmp / layout.RECORD, record)

    try:
        # a cluster's jobs alone are runs of the sweep too (runs/<key>/, shared by every point)
        simulate(scenario, out, task.backend, astra_sim=task.astra_sim, render=finish, alone=out.parent)
    except (SpecError, CompileError, BackendError) as exc:
        return RunRecord(task.key, "failed", error=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - t0)
    except Exception as exc:  # a bug must not stop the sweep: record it with where it happened
        where = traceback.extract_tb(exc.__traceback__)[-1]
        error = f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})"
        return RunRecord(task.key, "failed", error=error, seconds=time.perf_counter() - t0)
    return RunRecord(task.key, "ok", metrics=record["metrics"], seconds=time.perf_counter() - t0,
                     features=bool(record["features"]), where=record["where"])
