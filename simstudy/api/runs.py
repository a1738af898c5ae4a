"""Runs and studies: simulate one spec into a run directory, sweep a study, and read both back."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from simstudy import layout
from simstudy.api.inputs import InputError, SpecSource, input_errors
from simstudy.api.specs import load_study, runnable
from simstudy.backends import make_backend, simulate
from simstudy.backends.base import Progress, empty_spans
from simstudy.backends.estimate import Estimate, check_memory
from simstudy.backends.estimate import estimate as estimate_spec
from simstudy.backends.rundir import run_input_set
from simstudy.compiler import Bundle
from simstudy.linktable import read_links
from simstudy.report import render_run
from simstudy.spec import BackendSpec, Cluster, Congestion, Scenario, SpecError, Study, validate_as
from simstudy.spec import load_study as load_study_file
from simstudy.spec.study import BackendName
from simstudy.sweeps import Executor, SlurmOptions, SweepResult, get_executor, override, run_study
from simstudy.sweeps.runner import RunRecord, read_record
from simstudy.table import empty_table, read_table


@dataclass(frozen=True)
class Run:
    """A finished run directory (``simstudy run``, or one run of a sweep), read lazily from disk.

    Attributes:
        path: The run directory.
        info: The content of its run.json (backend, times, counts, details).
    """

    path: Path
    info: dict[str, Any] = field(repr=False)

    @property
    def backend(self) -> str:
        """The backend that ran it (``flowsim``, ``astrasim`` or ``ns3``)."""
        return str(self.info["backend"])

    @property
    def backend_version(self) -> str:
        """The backend's version and options, as it reported them."""
        return str(self.info["backend_version"])

    @property
    def finish_ms(self) -> float:
        """The job's finish time (the last rank's), in milliseconds."""
        return float(self.info["finish_ns"]) / 1e6

    @property
    def wall_time_s(self) -> float:
        """Seconds the backend took."""
        return float(self.info["wall_time_s"])

    @property
    def mode(self) -> str:
        """What the run kept: ``rows`` (the traffic table), ``links`` (per-link bins) or ``none``."""
        return str(self.info["traffic"])

    @property
    def transfers(self) -> int:
        """Number of transfers simulated."""
        return int(self.info["transfers"])

    @property
    def total_bytes(self) -> int:
        """Bytes of all transfers."""
        return int(self.info["bytes"])

    @property
    def details(self) -> dict[str, Any]:
        """Backend details; for a cluster, ``details["jobs"]`` gives every job's times and slowdown."""
        details: dict[str, Any] = self.info.get("details") or {}
        return details

    @cached_property
    def times(self) -> pd.DataFrame:
        """Per-rank times in nanoseconds: rank, finish_ns, compute_ns, comm_ns, exposed_comm_ns."""
        cols = ["rank", "finish_ns", "compute_ns", "comm_ns", "exposed_comm_ns"]
        return pd.DataFrame([[r[c] for c in cols] for r in self.info["ranks"]], columns=cols)

    @cached_property
    def traffic(self) -> pd.DataFrame:
        """The traffic table (one row per transfer; empty unless the run kept rows)."""
        path = self.path / layout.TRAFFIC
        return read_table(path) if path.is_file() else empty_table()

    @cached_property
    def spans(self) -> pd.DataFrame:
        """When each ET node of each rank ran: rank, node, name, kind, start_ns, end_ns."""
        path = self.path / layout.SPANS
        return pd.read_parquet(path) if path.is_file() else empty_spans()

    @cached_property
    def links(self) -> pd.DataFrame | None:
        """The per-link table of a run that kept links (``traffic="links"``), else None."""
        path = self.path / layout.LINKS
        return read_links(path) if path.is_file() else None

    @cached_property
    def scenario(self) -> dict[str, Any] | None:
        """The resolved scenario (or cluster) the run simulated, as JSON; None for an input set."""
        path = self.path / layout.BUNDLE_DIR / layout.SCENARIO
        if not path.is_file():
            return None
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data


def open_run(path: str | Path) -> Run:
    """Open a finished run directory (one with run.json).

    Args:
        path: The run directory, e.g. ``results/runs/resnet50_dp8_ring`` or ``<study>/runs/<key>``.

    Returns:
        The run; its tables are read when first used.

    Raises:
        InputError: `path` is not a finished run directory.
    """
    path = Path(path)
    info = path / layout.RUN_JSON
    if not info.is_file():
        raise InputError(str(SpecError(path, "", f"not a finished run directory (no {layout.RUN_JSON})")))
    return Run(path, json.loads(info.read_text(encoding="utf-8")))


def backend_spec(backend: str | BackendSpec, **options: Any) -> BackendSpec:
    """The backend to run: `backend` if it is a spec, else the spec of that name with these options."""
    if isinstance(backend, BackendSpec):
        return backend
    with input_errors():
        return validate_as(BackendSpec, {"name": backend, **options})


def run(
    spec: SpecSource | Scenario | Cluster | Bundle,
    out: str | Path | None = None,
    *,
    backend: str | BackendSpec = "flowsim",
    congestion: Congestion | str = "fluid",
    aware: bool = False,
    traffic: Literal["rows", "links", "none"] = "rows",
    traffic_bin_s: float = 1e-3,
    timeout_s: float = 3600.0,
    astra_sim: str | Path | None = None,
    progress: Callable[[Progress], None] | None = None,
    render: bool = True,
    force: bool = False,
) -> Run:
    """Simulate one scenario (or cluster, or an existing ASTRA-SIM input set) into a run directory.

    Args:
        spec: A spec file, a mapping, a loaded `Scenario` / `Cluster`, or a `simstudy.compiler.Bundle`
            (an ASTRA-SIM input set from elsewhere).
        out: The run directory (default ``results/runs/<spec file stem or name>``). It is written
            whole or not at all.
        backend: ``flowsim`` (built in), ``astrasim`` (the ASTRA-SIM binary), ``ns3`` (flowsim's
            engine over ns-3's packet network: TCP, queues, loss), or a full
            `simstudy.spec.BackendSpec` (then the options below are not used).
        congestion: flowsim's network model: ``fluid`` (max-min fair sharing), ``unaware`` or ``aware``.
        aware: The same as ``congestion="aware"`` (astrasim: the congestion-aware binary).
        traffic: Keep the traffic table (``rows``), per-link bins (``links``) or only counts (``none``).
        traffic_bin_s: Bin width of the link table, in seconds.
        timeout_s: Seconds before the run is abandoned.
        astra_sim: The ASTRA-SIM binary (default ``$ASTRA_SIM_BIN`` or the submodule build).
        progress: Called with a `simstudy.backends.base.Progress` as the run advances (flowsim, ns3):
            the fraction of its transfers done, the simulated time, transfers and wall seconds.
        render: Also draw timeline.png into the run directory, as ``simstudy run`` does.
        force: Run even when the memory estimate (`estimate`) exceeds the memory this machine has
            available; without it such a run is refused before it allocates anything per rank.

    Returns:
        The finished run, read from its directory.

    Raises:
        InputError: The spec or the input set is not valid, or the run would not fit in memory.
        simstudy.backends.BackendError: The simulation did not complete.
    """
    options = backend_spec(backend, congestion="aware" if aware else congestion, traffic=traffic,
                           traffic_bin_s=traffic_bin_s, timeout_s=timeout_s)
    draw = render_run if render else None
    with input_errors():
        if isinstance(spec, Bundle):
            spec.check()
            target = Path(out) if out is not None else Path("results/runs") / spec.name
            run_input_set(spec, make_backend(options, astra_sim=astra_sim, progress=progress), target,
                          timeout_s=options.timeout_s, render=draw)
        else:
            scenario, file = runnable(spec)
            name = Path(file).stem if file else scenario.name
            target = Path(out) if out is not None else Path("results/runs") / name
            if not force:
                check_memory(scenario, options, file)
            simulate(scenario, target, options, astra_sim=astra_sim, source=file, render=draw, progress=progress)
    return open_run(target)


def estimate(spec: SpecSource | Scenario | Cluster, *, traffic: Literal["rows", "links", "none"] = "rows") -> Estimate:
    """What a run of `spec` would cost, estimated without simulating it.

    Ranks, distinct graphs, ET nodes, messages, flows at peak, and peak memory and wall time per
    backend and congestion mode, beside the memory this machine has available
    (``print(estimate(...))`` shows it as ``simstudy run --estimate`` does).

    Counted from the spec and from compiling each distinct graph once (one per pipeline stage):
    a spec of millions of GPUs is estimated in seconds, with nothing allocated per rank.

    Args:
        spec: A spec file, a mapping, or a loaded `Scenario` / `Cluster`.
        traffic: What the run would keep (as `run` takes it): the rows cost time and buffers.

    Returns:
        The counts (``.workload``) and each backend's and mode's cost (``.costs``).

    Raises:
        InputError: The spec does not validate or does not fit its model.
    """
    with input_errors():
        scenario, file = runnable(spec)
        return estimate_spec(scenario, file, rows=traffic == "rows")


# -- studies ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StudyResult:
    """A swept study: its summary table and its runs (from `sweep`, or read back by `open_study`).

    Attributes:
        path: The study's results directory.
        summary: One row per scenario: the swept parameters, run key, status and every metric.
        records: Each distinct run's record (status, metrics, error), by run key.
        skipped: The combinations that were not valid, with the reason.
        sweep: The sweep's own result when it ran in this process (expansion, counts), else None.
    """

    path: Path
    summary: pd.DataFrame = field(repr=False)
    records: Mapping[str, RunRecord] = field(repr=False)
    skipped: list[dict[str, Any]] = field(repr=False)
    sweep: SweepResult | None = field(default=None, repr=False)

    @property
    def all_ok(self) -> bool:
        """Every run finished."""
        return all(r.status == "ok" for r in self.records.values())

    def run(self, key: str) -> Run:
        """The finished run with run key `key` (a value of ``summary["key"]``).

        Args:
            key: The run key.

        Returns:
            The run, read from ``<path>/runs/<key>``.

        Raises:
            InputError: No finished run has that key.
        """
        return open_run(self.path / layout.RUNS_DIR / key)

    @property
    def runs(self) -> dict[str, Run]:
        """Every finished run, by run key."""
        return {k: self.run(k) for k, r in self.records.items() if r.status == "ok"}


def _study(study: SpecSource | Study, source: str | Path | None) -> tuple[Study, str | Path]:
    """The study and the file its errors name (and its references are relative to)."""
    if isinstance(study, Study):
        return study, source if source is not None else Path(f"{study.name}.yaml")
    if isinstance(study, Mapping):
        loaded = load_study(study)
        return loaded, source if source is not None else Path(f"{loaded.name}.yaml")
    with input_errors():
        return load_study_file(study), study


def sweep(
    study: SpecSource | Study,
    out: str | Path | None = None,
    *,
    executor: Literal["local", "dask", "slurm"] | Executor = "local",
    workers: int | None = None,
    scheduler: str | None = None,
    connect_timeout_s: float = 30.0,
    slurm: SlurmOptions | None = None,
    backend: BackendName | None = None,
    congestion: Congestion | str | None = None,
    aware: bool = False,
    sets: Collection[str] = (),
    astra_sim: str | Path | None = None,
    source: str | Path | None = None,
    progress: bool = False,
    force: bool = False,
) -> StudyResult:
    """Run every valid scenario of a study (finished runs are reused) and summarise them.

    Args:
        study: A study file, a mapping, or a `Study` (from `load_study`).
        out: The results directory (default ``results/<study name>``); a second sweep into the same
            directory reuses every finished run.
        executor: Where runs execute: ``local`` processes, a ``dask`` scheduler, ``slurm`` (one job
            array), or an executor object from `simstudy.sweeps`.
        workers: local: processes (default one per core).
        scheduler: dask: the scheduler's address, e.g. ``tcp://127.0.0.1:8786``.
        connect_timeout_s: dask: seconds to wait for the scheduler.
        slurm: slurm: partition, account, walltime and limits.
        backend: Override the study's backend.
        congestion: Override the study's network model.
        aware: astrasim: the congestion-aware binary.
        sets: Base scenario overrides ``PATH=VALUE`` (VALUE is YAML), e.g. ``topology.bandwidth_gbps=100``.
        astra_sim: The ASTRA-SIM binary, for studies on astrasim.
        source: The file a `Study` object came from (named in errors; its references are relative
            to it). Not needed for studies from `load_study`, whose references are absolute.
        progress: Show a progress bar.
        force: Run every scenario, also those whose memory estimate exceeds the memory this machine
            has available (by default, on the local executor, they are skipped with the reason).

    Returns:
        The summary (``.summary``, one row per scenario) and the runs.

    Raises:
        InputError: The study, an override or the executor's options are not valid.
    """
    with input_errors():
        spec, file = _study(study, source)
        spec = override(spec, file, backend=backend, aware=True if aware else None, congestion=congestion,
                        sets=list(sets))
        target = Path(out) if out is not None else Path("results") / spec.name
        runner = executor if not isinstance(executor, str) else get_executor(
            executor, workers=workers, scheduler=scheduler, connect_timeout_s=connect_timeout_s,
            workdir=target.resolve() / "slurm", slurm=slurm)
        result = run_study(spec, file, target, executor=runner, astra_sim=astra_sim, progress=progress, force=force)
    skipped = [{"index": s.index, "params": s.params, "reason": s.reason} for s in result.expansion.skipped]
    return StudyResult(result.out, result.summary, result.records, skipped, result)


def open_study(path: str | Path) -> StudyResult:
    """Open a swept study's results directory (one with summary.parquet).

    Args:
        path: The directory ``simstudy sweep`` (or `sweep`) wrote, e.g. ``results/cnn_vs_rnn``.

    Returns:
        Its summary, the records of its finished runs and the skipped combinations.

    Raises:
        InputError: `path` holds no summary.parquet.
    """
    path = Path(path)
    if not (path / layout.SUMMARY).is_file():
        raise InputError(str(SpecError(path, "", f"not a swept study's directory (no {layout.SUMMARY})")))
    summary = pd.read_parquet(path / layout.SUMMARY)
    records = {}
    for key in dict.fromkeys(str(k) for k in summary["key"]):
        record = read_record(path / layout.RUNS_DIR / key)
        if record is not None:
            records[key] = record
    skipped_file = path / layout.SKIPPED_JSON
    skipped = json.loads(skipped_file.read_text(encoding="utf-8")) if skipped_file.is_file() else []
    return StudyResult(path, summary, records, skipped)
