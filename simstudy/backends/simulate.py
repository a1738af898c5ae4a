"""The one run path: compile a scenario, run it on a backend, write the run directory.

`simstudy run`, `simstudy sweep` (each run of a sweep) and `simstudy validate` all call
`simulate`, so a backend option or a run-directory file is added in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from simstudy.backends import ns3 as packets
from simstudy.backends.astrasim import AstraSimBackend
from simstudy.backends.base import Backend, BackendError, Progress, RunResult
from simstudy.backends.flowsim import FlowsimBackend
from simstudy.backends.jobs import WithJobs, alone_times
from simstudy.backends.rundir import run_to_dir
from simstudy.compiler import Bundle, compile_any
from simstudy.spec import BackendSpec, Cluster, Scenario, SpecError


def make_backend(spec: BackendSpec, *, astra_sim: str | Path | None = None,
                 progress: Callable[[Progress], None] | None = None) -> Backend:
    """The backend a spec names; `astra_sim` is the binary for `astrasim` (a path of this machine,
    so not part of the spec or of any run key); `progress(Progress)` is fed by flowsim."""
    if spec.name == "flowsim":
        return FlowsimBackend(congestion=spec.congestion, traffic=spec.traffic, traffic_bin_s=spec.traffic_bin_s,
                              progress=progress)
    if spec.name == "astrasim":
        return AstraSimBackend(astra_sim, aware=spec.aware, traffic=spec.traffic, traffic_bin_s=spec.traffic_bin_s)
    if spec.name == "ns3":
        if not packets.available():
            raise SpecError(None, "backend", packets.MISSING)
        return packets.Ns3Backend(traffic=spec.traffic, traffic_bin_s=spec.traffic_bin_s, progress=progress)
    raise BackendError(f"unknown backend {spec.name!r}; expected flowsim, astrasim or ns3")  # pragma: no cover


def alone_root(out: str | Path) -> Path:
    """Where `simulate` keeps the alone runs of a cluster run directory `out`: `<out>.alone/`."""
    out = Path(out)
    return out.with_name(out.name + ".alone")


def simulate(
    scenario: Scenario | Cluster,
    out: str | Path,
    backend: BackendSpec,
    *,
    astra_sim: str | Path | None = None,
    source: str | Path | None = None,
    render: Callable[[RunResult, Path], object] | None = None,
    progress: Callable[[Progress], None] | None = None,
    alone: str | Path | None = None,
) -> RunResult:
    """Compile `scenario` (errors name `source`) and simulate it on `backend` into the run
    directory `out`: bundle/, run.json, traffic.parquet (or links.parquet), spans.parquet and
    whatever `render` adds, written whole or not at all. `progress(Progress)` follows a long run.

    A cluster (several jobs) also runs each job alone on its NPUs, under `alone` (default
    `<out>.alone/`, one directory per job and key, reused when finished), and run.json's
    `details.jobs` gives every job's times and slowdown (see `backends.jobs`)."""

    def prepare(d: Path) -> Bundle:
        return compile_any(scenario, d, source=source).bundle

    runner: Backend = make_backend(backend, astra_sim=astra_sim, progress=progress)
    if isinstance(scenario, Cluster):

        def run_alone(cluster: Cluster, d: Path) -> RunResult:
            return simulate(cluster, d, backend, astra_sim=astra_sim, source=source)

        root = Path(alone) if alone is not None else alone_root(out)
        runner = WithJobs(runner, alone_times(scenario, backend, root, run_alone))
    return run_to_dir(prepare, runner, Path(out), timeout_s=backend.timeout_s, render=render)
