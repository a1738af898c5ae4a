"""The Python API of simstudy: what the `simstudy` command does, as functions returning typed results.

Every command of the CLI is a thin layer over one function here, so a notebook and the shell run the
same code and write the same directories::

    import simstudy as s

    study = s.load_study("specs/cnn_vs_rnn.yaml")
    result = s.sweep(study)                      # results/cnn_vs_rnn/, as `simstudy sweep` writes it
    result.summary                               # one row per scenario (pandas DataFrame)
    run = result.run(result.summary["key"][0])   # a finished run: times, spans, traffic, links

Bad input (a spec that does not validate, a file that is missing, a capture that cannot be read)
raises `InputError`, the errors the CLI reports with exit code 2. A simulation that does not complete
raises `simstudy.backends.BackendError` (exit code 1 in the CLI).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from simstudy import layout

if TYPE_CHECKING:
    from simstudy.backends.base import Progress
    from simstudy.capturing.run import CaptureResult
    from simstudy.compiler import Bundle, CompileResult
    from simstudy.report.chrome_trace import ChromeTrace
    from simstudy.spec import BackendSpec, Cluster, Congestion, Scenario, Study
    from simstudy.spec.capture import CaptureSpec
    from simstudy.spec.study import BackendName
    from simstudy.sweeps import Executor, SlurmOptions, SweepResult
    from simstudy.sweeps.runner import RunRecord
    from simstudy.traffic.cluster import Clustering
    from simstudy.traffic.compare import ValidationReport
    from simstudy.traffic.counter_features import CounterFeatures
    from simstudy.traffic.counters import Counters
    from simstudy.traffic.features import Features
    from simstudy.traffic.sources import TrafficSource
    from simstudy.validation import CounterValidation, Validation
    from simstudy.zoo import ZooSummary

# The public names are listed once, in the package's `__all__` (simstudy/__init__.py), which
# exports each of them from here on first use.

#: A spec given as a YAML file or as the mapping a YAML file would hold.
SpecSource = str | Path | Mapping[str, Any]


class InputError(ValueError):
    """Bad input: a spec, study, capture or directory that cannot be used.

    The message is the one line the CLI prints (it names the file, the field and what was expected);
    the original error is the exception's ``__cause__``.
    """


def input_error_types() -> tuple[type[BaseException], ...]:
    """The errors of the layers below that mean bad input (`InputError` here, exit code 2 in the CLI).

    Returns:
        The exception types, `InputError` first.
    """
    from simstudy.chakra import ChakraFormatError
    from simstudy.compiler import BundleError, CompileError
    from simstudy.report.chrome_trace import TraceError
    from simstudy.report.dashboard import DashboardError
    from simstudy.spec import SpecError
    from simstudy.sweeps import SweepError
    from simstudy.traffic.cluster import ClusterError
    from simstudy.traffic.counters import CountersError
    from simstudy.traffic.meta import MetaError
    from simstudy.traffic.pcap import PcapError
    from simstudy.traffic.sources import SourceError

    return (InputError, SpecError, CompileError, BundleError, ChakraFormatError, SweepError, PcapError, SourceError,
            MetaError, FileNotFoundError, DashboardError, TraceError, ClusterError, CountersError)


@contextlib.contextmanager
def _input_errors() -> Iterator[None]:
    """Turn the bad-input errors of the layers below into one `InputError` with the same message."""
    try:
        yield
    except InputError:
        raise
    except input_error_types() as exc:
        raise InputError(str(exc)) from exc


# -- specs ----------------------------------------------------------------------------------------


def _anchored(value: Any, base: Path) -> Any:
    """`value` with every file reference made absolute (relative to `base`).

    The spec then means the same wherever it is used from; a reference is labelled by its file's
    stem, so the labels of a sweep stay.
    """
    from simstudy.spec.load import is_reference

    if is_reference(value):
        return str((base / str(value)).resolve())
    if isinstance(value, Mapping):
        return {k: _anchored(v, base) for k, v in value.items()}
    if isinstance(value, list):
        return [_anchored(v, base) for v in value]
    return value


def load_spec(source: SpecSource, *, base_dir: str | Path | None = None) -> Scenario | Cluster:
    """Load a runnable spec: a scenario, or a cluster of several jobs (``kind: cluster``).

    Args:
        source: A YAML file, or a mapping of the same fields (as ``yaml.safe_load`` gives).
        base_dir: Where file references in a mapping are relative to (default: the current directory).
            References in a file are relative to the file.

    Returns:
        The validated spec, with every referenced file inlined.

    Raises:
        InputError: The spec does not validate or a referenced file is missing; the message names
            the file, the field and what was expected.
    """
    from simstudy.spec import Cluster, Scenario, SpecError, load_runnable, resolve_references, validate_as

    with _input_errors():
        if not isinstance(source, Mapping):
            return load_runnable(source)
        root = Path(base_dir or ".").resolve() / "<mapping>"
        try:
            data, origins = resolve_references(dict(source), root)
            cls: type[Scenario] | type[Cluster] = Cluster if data.get("kind") == "cluster" else Scenario
            return validate_as(cls, data, origins=origins)
        except SpecError as exc:  # a problem in the mapping itself names the field, not a file
            if exc.file != str(root):
                raise
            raise SpecError(None, exc.field, exc.message) from None


def load_study(source: SpecSource, *, base_dir: str | Path | None = None) -> Study:
    """Load a study: a base scenario and the axes to sweep.

    File references in the study (``../workloads/lstm_lm.yaml``) are made absolute, so the returned
    study sweeps the same scenarios from any working directory; a swept file is still labelled by its
    stem in the summary.

    Args:
        source: A study YAML file, or a mapping of the same fields.
        base_dir: Where references in a mapping are relative to (default: the current directory).

    Returns:
        The validated study.

    Raises:
        InputError: The study does not validate; the message names the file and the field.
    """
    from simstudy.spec import Study, validate_as
    from simstudy.spec import load_study as load_study_file

    with _input_errors():
        if not isinstance(source, Mapping):
            path = Path(source)
            study = load_study_file(path)
            base = path.resolve().parent
            return study.model_copy(update={"base": _anchored(study.base, base), "axes": _anchored(study.axes, base)})
        base = Path(base_dir or ".").resolve()
        return validate_as(Study, _anchored(dict(source), base))


def _runnable(spec: SpecSource | Scenario | Cluster) -> tuple[Scenario | Cluster, str | Path | None]:
    """A spec object and the file it came from (None for objects and mappings)."""
    from simstudy.spec import Cluster, Scenario

    if isinstance(spec, Scenario | Cluster):
        return spec, None
    return load_spec(spec), None if isinstance(spec, Mapping) else spec


def compile(spec: SpecSource | Scenario | Cluster, out: str | Path | None = None) -> CompileResult:
    """Compile a scenario (or cluster) into a bundle: Chakra ET files and ASTRA-SIM configs.

    Args:
        spec: A spec file, a mapping, or a loaded `Scenario` / `Cluster`.
        out: The bundle directory (default ``results/bundles/<spec file stem or scenario name>``).

    Returns:
        The bundle written, the resolved spec, the ET bytes and the seconds it took.

    Raises:
        InputError: The spec does not validate or does not fit (e.g. the model exceeds memory).
    """
    from simstudy.compiler import compile_any

    with _input_errors():
        scenario, file = _runnable(spec)
        name = Path(file).stem if file else scenario.name
        target = Path(out) if out is not None else Path("results/bundles") / name
        return compile_any(scenario, target, source=file)


# -- runs ------------------------------------------------------------------------------------------


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
        from simstudy.table import empty_table, read_table

        path = self.path / layout.TRAFFIC
        return read_table(path) if path.is_file() else empty_table()

    @cached_property
    def spans(self) -> pd.DataFrame:
        """When each ET node of each rank ran: rank, node, name, kind, start_ns, end_ns."""
        from simstudy.backends.base import empty_spans

        path = self.path / layout.SPANS
        return pd.read_parquet(path) if path.is_file() else empty_spans()

    @cached_property
    def links(self) -> pd.DataFrame | None:
        """The per-link table of a run that kept links (``traffic="links"``), else None."""
        from simstudy.linktable import read_links

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
    from simstudy.spec import SpecError

    path = Path(path)
    info = path / layout.RUN_JSON
    if not info.is_file():
        raise InputError(str(SpecError(path, "", f"not a finished run directory (no {layout.RUN_JSON})")))
    return Run(path, json.loads(info.read_text(encoding="utf-8")))


def _backend(backend: str | BackendSpec, **options: Any) -> BackendSpec:
    from simstudy.spec import BackendSpec, validate_as

    if isinstance(backend, BackendSpec):
        return backend
    with _input_errors():
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

    Returns:
        The finished run, read from its directory.

    Raises:
        InputError: The spec or the input set is not valid.
        simstudy.backends.BackendError: The simulation did not complete.
    """
    from simstudy.backends import make_backend, simulate
    from simstudy.backends.rundir import run_input_set
    from simstudy.compiler import Bundle
    from simstudy.report import render_run

    options = _backend(backend, congestion="aware" if aware else congestion, traffic=traffic,
                       traffic_bin_s=traffic_bin_s, timeout_s=timeout_s)
    draw = render_run if render else None
    with _input_errors():
        if isinstance(spec, Bundle):
            spec.check()
            target = Path(out) if out is not None else Path("results/runs") / spec.name
            run_input_set(spec, make_backend(options, astra_sim=astra_sim, progress=progress), target,
                          timeout_s=options.timeout_s, render=draw)
        else:
            scenario, file = _runnable(spec)
            name = Path(file).stem if file else scenario.name
            target = Path(out) if out is not None else Path("results/runs") / name
            simulate(scenario, target, options, astra_sim=astra_sim, source=file, render=draw, progress=progress)
    return open_run(target)


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
    from simstudy.spec import Study

    if isinstance(study, Study):
        return study, source if source is not None else Path(f"{study.name}.yaml")
    if isinstance(study, Mapping):
        loaded = load_study(study)
        return loaded, source if source is not None else Path(f"{loaded.name}.yaml")
    from simstudy.spec import load_study as load_study_file

    with _input_errors():
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

    Returns:
        The summary (``.summary``, one row per scenario) and the runs.

    Raises:
        InputError: The study, an override or the executor's options are not valid.
    """
    from simstudy.sweeps import get_executor, override, run_study

    with _input_errors():
        spec, file = _study(study, source)
        spec = override(spec, file, backend=backend, aware=True if aware else None, congestion=congestion,
                        sets=list(sets))
        target = Path(out) if out is not None else Path("results") / spec.name
        runner = executor if not isinstance(executor, str) else get_executor(
            executor, workers=workers, scheduler=scheduler, connect_timeout_s=connect_timeout_s,
            workdir=target.resolve() / "slurm", slurm=slurm)
        result = run_study(spec, file, target, executor=runner, astra_sim=astra_sim, progress=progress)
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
    from simstudy.spec import SpecError
    from simstudy.sweeps.runner import read_record

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


# -- traffic: analysis and validation ---------------------------------------------------------------


def load_traffic(path: str | Path, *, ranks: str | Path | None = None) -> TrafficSource:
    """Load the traffic of a capture directory (pcap/pcapng files), a run directory or a traffic.parquet.

    Args:
        path: The capture directory, run directory or traffic.parquet file.
        ranks: A rank map (YAML: ``ranks``, optional ``servers`` and ``control``) that names the
            capture's endpoints, instead of meta.json or what the traffic shows.

    Returns:
        The traffic table and what is known of its origin (roles, iteration marks, warnings).

    Raises:
        InputError: `path` is neither a capture nor a run, or its files cannot be read.
    """
    from simstudy.traffic.meta import load_rank_map
    from simstudy.traffic.sources import load_traffic as load

    with _input_errors():
        return load(Path(path), rank_map=load_rank_map(ranks) if ranks else None)


def analyze(
    source: str | Path | TrafficSource | Run | pd.DataFrame,
    *,
    count: Literal["payload", "ip"] = "payload",
    ranks: str | Path | None = None,
) -> Features:
    """Analyse traffic with the pipeline shared by captures and simulations.

    Args:
        source: A capture or run directory, a `TrafficSource` (from `load_traffic`), a `Run`, or a
            traffic table.
        count: For captures: analyse TCP/UDP payload bytes (what the application sent) or IP bytes.
            Tables without payload bytes (simulations) are analysed as they are.
        ranks: A rank map for a capture path (see `load_traffic`).

    Returns:
        The features: roles, period, bytes per iteration, on/off, matrix, flows, timelines; its
        ``scalars()`` are the metrics of a sweep summary.

    Raises:
        InputError: The path cannot be read as traffic.
    """
    from simstudy.traffic.features import analyze as analyze_table
    from simstudy.traffic.sources import TrafficSource
    from simstudy.validation import payload_view

    def counted(table: pd.DataFrame) -> pd.DataFrame:
        return payload_view(table) if count == "payload" else table

    if isinstance(source, pd.DataFrame):
        return analyze_table(counted(source))
    if isinstance(source, Run):
        return analyze_table(source.traffic)
    loaded = source if isinstance(source, TrafficSource) else load_traffic(source, ranks=ranks)
    return analyze_table(counted(loaded.table), boundaries=loaded.boundaries, roles=loaded.roles)


@dataclass(frozen=True)
class Verdict:
    """A validation: the simulated job compared with the captured one, metric by metric.

    Attributes:
        out: The validation directory (the simulation is in ``out/sim``).
        validation: Everything computed: the capture, the scenario, both tables and both analyses.
    """

    out: Path
    validation: Validation = field(repr=False)

    @property
    def passed(self) -> bool:
        """Every judged (job-level) metric is within its tolerance."""
        return self.report.passed

    @property
    def verdict(self) -> str:
        """``PASS`` or ``FAIL (k of n judged metrics)``."""
        return self.report.verdict

    @property
    def report(self) -> ValidationReport:
        """The comparison, with its markdown rendering (``to_markdown()``)."""
        return self.validation.report

    @property
    def table(self) -> pd.DataFrame:
        """One row per metric: metric, level, judged, real, simulated, distance, tolerance, passed..."""
        return self.report.to_frame()

    @property
    def real(self) -> Features:
        """The features of the captured traffic."""
        return self.validation.real_features

    @property
    def simulated(self) -> Features:
        """The features of the simulated traffic, seen as a capture would see it."""
        return self.validation.sim_features

    @property
    def run(self) -> Run:
        """The simulation's run directory."""
        return open_run(self.out / layout.SIM_DIR)


def validate(
    real: str | Path,
    spec: SpecSource | Scenario | None = None,
    out: str | Path | None = None,
    *,
    backend: str | BackendSpec = "flowsim",
    timeout_s: float = 3600.0,
    astra_sim: str | Path | None = None,
    tolerances: Mapping[str, float] | None = None,
    skip: Collection[str] = (),
    count: Literal["payload", "ip"] = "payload",
    ranks: str | Path | None = None,
    judge_transport: bool = False,
    testbed: bool | None = None,
    progress: Callable[[str], None] | None = None,
) -> Verdict:
    """Simulate the job a capture recorded and compare both, metric by metric.

    Args:
        real: The capture directory of the real job.
        spec: The scenario to simulate (file, mapping or `Scenario`); default: the one in the
            capture's meta.json.
        out: The validation directory (default ``<real>/validation``).
        backend: ``flowsim``, ``astrasim``, ``ns3``, or a `simstudy.spec.BackendSpec`.
        timeout_s: Seconds before the simulation is abandoned.
        astra_sim: The ASTRA-SIM binary.
        tolerances: Tolerances to override, by metric (e.g. ``{"period_s": 0.05}``).
        skip: Metrics to leave out.
        count: Compare the capture's TCP/UDP payload bytes (what the simulator models) or IP bytes.
        ranks: A rank map naming the capture's endpoints (see `load_traffic`).
        judge_transport: Let transport-level metrics decide the verdict too.
        testbed: Simulate the capture testbed's network (veths to a bridge, token buckets on both
            ends, losses, from meta.json) instead of the recorded switch; default: with the
            ``ns3`` backend, whose run is then read from its pcaps like the capture.
        progress: Called with the name of each stage.

    Returns:
        The verdict with its metric table.

    Raises:
        InputError: The capture, the spec, a tolerance or a metric name is not valid.
        simstudy.backends.BackendError: The simulation did not complete.
    """
    from simstudy.spec import Scenario
    from simstudy.traffic.compare import JOB, TRANSPORT
    from simstudy.traffic.meta import load_rank_map
    from simstudy.validation import validate as validate_capture

    target = Path(out) if out is not None else Path(real) / layout.VALIDATION_DIR
    options = _backend(backend, timeout_s=timeout_s)
    with _input_errors():
        scenario: str | Path | Scenario | None = None
        if isinstance(spec, Mapping):
            loaded = load_spec(spec)
            if not isinstance(loaded, Scenario):
                raise InputError("spec: a validation simulates one job: expected a scenario, not a cluster")
            scenario = loaded
        elif spec is not None:
            scenario = spec
        rank_map = load_rank_map(ranks) if ranks else None
        try:
            v = validate_capture(real, target, spec=scenario, backend=options, astra_sim=astra_sim,
                                 tolerances=tolerances, skip=skip, count=count, rank_map=rank_map,
                                 judge=(JOB, TRANSPORT) if judge_transport else (JOB,), progress=progress,
                                 testbed=testbed)
        except InputError:
            raise
        except ValueError as exc:
            if "tolerance" in str(exc) or "metric" in str(exc):
                raise InputError(str(exc)) from exc
            raise
    return Verdict(target, v)


# -- switch counters ---------------------------------------------------------------------------------


def load_counters(path: str | Path) -> Counters:
    """Read a switch-counter series: Zhejiang Lab's per-port CSVs, or a CSV of time, device, port, bytes.

    Args:
        path: The counters directory or CSV file.

    Returns:
        The series (one row per port and sample), its format and what was noticed reading it.

    Raises:
        InputError: `path` is not a counter series.
    """
    from simstudy.traffic.counters import load_counters as load

    with _input_errors():
        return load(path)


def analyze_counters(counters: str | Path | Counters) -> CounterFeatures:
    """Analyse a switch-counter series: utilisation and period per port and per tier.

    Args:
        counters: A counters path or a series from `load_counters`.

    Returns:
        The analyses: ports, tiers, the hottest ports, the sample interval and grid.

    Raises:
        InputError: The path is not a counter series.
    """
    from simstudy.traffic.counter_features import analyze_counters as analyze_series
    from simstudy.traffic.counters import Counters

    return analyze_series(counters if isinstance(counters, Counters) else load_counters(counters))


def validate_counters(
    real: str | Path,
    spec: str | Path,
    out: str | Path | None = None,
    *,
    backend: str | BackendSpec = "flowsim",
    timeout_s: float = 3600.0,
    astra_sim: str | Path | None = None,
    tolerances: Mapping[str, float] | None = None,
    progress: Callable[[str], None] | None = None,
) -> CounterValidation:
    """Simulate a scenario keeping its link table and compare it with a switch-counter series.

    Args:
        real: The counters directory or CSV file.
        spec: The scenario file to simulate (counters record no scenario).
        out: The validation directory (default ``validation/`` beside or inside `real`).
        backend: ``flowsim``, ``astrasim``, ``ns3``, or a `simstudy.spec.BackendSpec`.
        timeout_s: Seconds before the simulation is abandoned.
        astra_sim: The ASTRA-SIM binary.
        tolerances: Tolerances to override, by metric.
        progress: Called with the name of each stage.

    Returns:
        Both series, their analyses and the comparison (``report``: verdict and ``to_frame()``).

    Raises:
        InputError: The counters, the spec or a tolerance is not valid.
        simstudy.backends.BackendError: The simulation did not complete.
    """
    from simstudy.validation import validate_counters as validate_series

    path = Path(real)
    target = Path(out) if out is not None else (path if path.is_dir() else path.parent) / layout.VALIDATION_DIR
    options = _backend(backend, timeout_s=timeout_s)
    with _input_errors():
        return validate_series(real, target, spec=spec, backend=options, astra_sim=astra_sim, tolerances=tolerances,
                               progress=progress)


# -- pages -------------------------------------------------------------------------------------------


def dashboard(path: str | Path, out: str | Path | None = None) -> Path:
    """Write the self-contained HTML dashboard of a study, run, capture or validation directory.

    Args:
        path: The directory to show.
        out: The HTML file (default ``<path>/dashboard.html``).

    Returns:
        The page written.

    Raises:
        InputError: `path` is none of the directories a dashboard shows.
    """
    from simstudy.report.dashboard import load, write
    from simstudy.report.findings import study_findings

    path = Path(path)
    target = Path(out) if out is not None else path / layout.DASHBOARD_HTML
    with _input_errors():
        kind, data = load(path, findings_for=study_findings)
        return write(kind, data, target)


def trace(
    run: str | Path | Run,
    out: str | Path | None = None,
    *,
    iterations: int = 2,
    ranks: int = 64,
    transfers: int = 20_000,
) -> ChromeTrace:
    """Export a run's per-rank timeline as a Chrome trace (for Perfetto or chrome://tracing).

    Args:
        run: The run directory (or a `Run`).
        out: The JSON file to write (default ``<run>/trace.json``).
        iterations: The first N iterations' time slots (0: all).
        ranks: At most this many ranks, the first ones (0: all).
        transfers: At most this many transfers drawn as flow arrows (0: none).

    Returns:
        The trace written, with its counts (``counts()``).

    Raises:
        InputError: `run` is not a run directory with spans.
    """
    from simstudy.report.chrome_trace import chrome_trace, write_trace

    path = run.path if isinstance(run, Run) else Path(run)
    with _input_errors():
        result = chrome_trace(path, iterations=iterations, ranks=ranks, transfers=transfers)
    write_trace(result, Path(out) if out is not None else path / "trace.json")
    return result


def cluster(paths: Collection[str | Path], *, k: int | None = None) -> Clustering:
    """Group runs and captures by traffic pattern (k-means on their features).

    Args:
        paths: Sweep directories, run directories and analysed capture directories.
        k: The number of clusters (default: the best silhouette).

    Returns:
        Which items fall together, in which feature space, and why (``lines()`` describes it).

    Raises:
        InputError: A path holds nothing to cluster, or there are too few items.
    """
    from simstudy.traffic.cluster import cluster as cluster_items
    from simstudy.traffic.cluster import load_items

    with _input_errors():
        return cluster_items(load_items([Path(p) for p in paths]), k=k)


def models() -> list[ZooSummary]:
    """The built-in models (what a spec's ``model: NAME`` can name).

    Returns:
        Each model's name, family, parameter count, forward GFLOPs per sample and description.
    """
    from simstudy import zoo

    return zoo.list_models()


def capture(
    spec: SpecSource | CaptureSpec,
    out: str | Path | None = None,
    *,
    force: bool = False,
    source: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> CaptureResult:
    """Run a real training job (torch.distributed, TensorFlow or Horovod) and record its packets.

    Needs root, tcpdump and the job's framework (see the ``capture`` extras).

    Args:
        spec: A capture spec (a scenario without topology, plus a ``capture`` section): a file, a
            mapping or a `simstudy.spec.capture.CaptureSpec`.
        out: The capture directory (default ``captures/<name>``).
        force: Replace an existing capture in `out`.
        source: The file a `CaptureSpec` object came from (named in errors).
        progress: Called with the name of each stage.

    Returns:
        The capture directory, its meta.json (ranks, iterations) and the wall time.

    Raises:
        InputError: The spec is not valid.
        simstudy.capturing.testbed.CaptureError: The machine cannot run or record the job.
    """
    from simstudy.capturing.run import capture as capture_job
    from simstudy.spec import validate_as
    from simstudy.spec.capture import CaptureSpec
    from simstudy.spec.load import load_spec as load_spec_file

    with _input_errors():
        file = source
        if isinstance(spec, CaptureSpec):
            loaded = spec
        elif isinstance(spec, Mapping):
            loaded = validate_as(CaptureSpec, dict(spec))
        else:
            loaded, file = load_spec_file(CaptureSpec, spec), spec
        target = Path(out) if out is not None else Path("captures") / loaded.name
        return capture_job(loaded, target, force=force, source=file, progress=progress)
