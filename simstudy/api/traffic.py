"""Traffic: load, analyse and validate captures, runs and switch counters; capture a real job."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd

from simstudy import layout
from simstudy.api.inputs import InputError, SpecSource, input_errors
from simstudy.api.runs import Run, backend_spec, open_run
from simstudy.api.specs import load_spec
from simstudy.capturing.run import CaptureResult
from simstudy.capturing.run import capture as capture_job
from simstudy.linktable import read_links
from simstudy.spec import BackendSpec, Scenario, validate_as
from simstudy.spec.capture import CaptureSpec
from simstudy.spec.load import load_spec as load_spec_file
from simstudy.traffic.compare import JOB, TRANSPORT, ValidationReport
from simstudy.traffic.counter_features import CounterFeatures
from simstudy.traffic.counter_features import analyze_counters as analyze_series
from simstudy.traffic.counters import Counters, export_links, write_counters
from simstudy.traffic.counters import load_counters as read_counters
from simstudy.traffic.features import Features
from simstudy.traffic.features import analyze as analyze_table
from simstudy.traffic.meta import load_rank_map
from simstudy.traffic.sources import TrafficSource
from simstudy.traffic.sources import load_traffic as load_source
from simstudy.validation import CounterValidation, Validation, fit_compute, payload_view
from simstudy.validation import validate as validate_capture
from simstudy.validation import validate_counters as validate_series
from simstudy.validation.fitting import Fit


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
    with input_errors():
        return load_source(Path(path), rank_map=load_rank_map(ranks) if ranks else None)


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
    fit: bool = False,
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
        fit: Simulate with the compute fitted to the capture's logged iterations (see `fit`; its
            simulations in ``out/fit``); the table marks the metrics the fit determines
            (``fitted``) and ``validation.fit`` says what was fitted.
        progress: Called with the name of each stage.

    Returns:
        The verdict with its metric table.

    Raises:
        InputError: The capture, the spec, a tolerance or a metric name is not valid.
        simstudy.backends.BackendError: The simulation did not complete.
    """
    target = Path(out) if out is not None else Path(real) / layout.VALIDATION_DIR
    options = backend_spec(backend, timeout_s=timeout_s)
    with input_errors():
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
                                 testbed=testbed, fit=fit)
        except InputError:
            raise
        except ValueError as exc:
            if "tolerance" in str(exc) or "metric" in str(exc):
                raise InputError(str(exc)) from exc
            raise
    return Verdict(target, v)


def fit(
    capture: str | Path,
    spec: SpecSource | Scenario | None = None,
    *,
    work: str | Path | None = None,
    backend: str | BackendSpec = "flowsim",
    timeout_s: float = 3600.0,
    astra_sim: str | Path | None = None,
    ranks: str | Path | None = None,
    testbed: bool | None = None,
) -> Fit:
    """Fit the compute model to a captured job: its pace, jitter and stragglers.

    Each rank's compute per iteration, its jitter and any straggler are derived from the
    iterations and steps the capture's meta.json logged.

    The pace of the recorded compute is fitted so that the simulated job has the logged period
    (iteration time minus the communication the simulation exposes; see `simstudy.validation.fitting`), the
    jitter is the logged iterations' spread, and stragglers are ranks whose compute-only phases
    are consistently slower than the others'.

    Args:
        capture: The capture directory (with meta.json, as `simstudy capture` writes it).
        spec: The scenario to start from (file, mapping or `Scenario`); default: the capture's.
        work: Where the fit's simulations run (default: a temporary directory, removed after).
        backend: ``flowsim``, ``astrasim``, ``ns3``, or a `simstudy.spec.BackendSpec`.
        timeout_s: Seconds before a simulation is abandoned.
        astra_sim: The ASTRA-SIM binary.
        ranks: A rank map naming the capture's endpoints (see `load_traffic`).
        testbed: Start from the capture testbed's network (see `validate`).

    Returns:
        The fit: the fitted ``system`` (a `simstudy.spec.System`, as a scenario's ``system:``
        takes it) and what it was derived from (``lines()``).

    Raises:
        InputError: The capture has no meta.json or logged iterations, or the spec is not valid.
        simstudy.backends.BackendError: A simulation did not complete.
    """
    options = backend_spec(backend, timeout_s=timeout_s)
    with input_errors():
        loaded = load_spec(spec) if isinstance(spec, Mapping) else spec
        if loaded is not None and not isinstance(loaded, str | Path | Scenario):
            raise InputError("spec: a fit starts from one job: expected a scenario, not a cluster")
        scenario = loaded
        rank_map = load_rank_map(ranks) if ranks else None
        if work is not None:
            return fit_compute(capture, work, spec=scenario, backend=options, astra_sim=astra_sim,
                               rank_map=rank_map, testbed=testbed)
        with tempfile.TemporaryDirectory(prefix="simstudy-fit-") as tmp:
            return fit_compute(capture, tmp, spec=scenario, backend=options, astra_sim=astra_sim,
                               rank_map=rank_map, testbed=testbed)


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
    with input_errors():
        return read_counters(path)


def export_counters(run: str | Path | Run, out: str | Path | None = None, *, sample_s: float = 0.5) -> Path:
    """Write a run's link table as the switch port counters a cluster's switches would have read.

    One row per port and sample in the generic counter CSV (`load_counters` reads it back): link
    ``a->b`` is port ``a`` of device ``b``, its bytes that port's ``rx_bytes``, the reverse link's its
    ``tx_bytes``. A packet-network run (``--backend ns3``) counts every packet's bytes on the wire
    (headers, ACKs, resends); flowsim spreads each transfer's bytes over its time on its route.

    Args:
        run: A run directory kept with ``traffic: links`` (or a `Run`).
        out: The CSV to write (default ``<run>/counters.csv``).
        sample_s: The counters' sample interval, seconds (a multiple of the run's bin is exact).

    Returns:
        The CSV written.

    Raises:
        InputError: `run` has no link table, or `sample_s` is not positive.
    """
    path = run.path if isinstance(run, Run) else Path(run)
    with input_errors():
        if not (path / layout.LINKS).is_file():
            raise InputError(f"{path}: no {layout.LINKS}: run it with --traffic links (traffic: links) to keep "
                             "its link table")
        if not sample_s > 0:
            raise InputError(f"sample_s: expected a positive number of seconds, got {sample_s}")
        frame = export_links(read_links(path / layout.LINKS), sample_s)
        return write_counters(frame, Path(out) if out is not None else path / layout.COUNTERS_CSV)


def analyze_counters(counters: str | Path | Counters) -> CounterFeatures:
    """Analyse a switch-counter series: utilisation and period per port and per tier.

    Args:
        counters: A counters path or a series from `load_counters`.

    Returns:
        The analyses: ports, tiers, the hottest ports, the sample interval and grid.

    Raises:
        InputError: The path is not a counter series.
    """
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
    path = Path(real)
    target = Path(out) if out is not None else (path if path.is_dir() else path.parent) / layout.VALIDATION_DIR
    options = backend_spec(backend, timeout_s=timeout_s)
    with input_errors():
        return validate_series(real, target, spec=spec, backend=options, astra_sim=astra_sim, tolerances=tolerances,
                               progress=progress)


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
    with input_errors():
        file = source
        if isinstance(spec, CaptureSpec):
            loaded = spec
        elif isinstance(spec, Mapping):
            loaded = validate_as(CaptureSpec, dict(spec))
        else:
            loaded, file = load_spec_file(CaptureSpec, spec), spec
        target = Path(out) if out is not None else Path("captures") / loaded.name
        return capture_job(loaded, target, force=force, source=file, progress=progress)
