"""The one run path: compile a scenario, run it on a backend, write the run directory.

`simstudy run`, `simstudy sweep` (each run of a sweep) and `simstudy validate` all call
`simulate`, so a run-directory file is added in one place (a backend is an entry of `registry`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from simstudy.backends.base import Backend, Progress, RunResult
from simstudy.backends.jobs import WithJobs, alone_times
from simstudy.backends.registry import check_network, entry, make_backend
from simstudy.backends.rundir import run_to_dir
from simstudy.compiler import Bundle, compile_any
from simstudy.spec import BackendSpec, Cluster, Scenario


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
    directory `out`: bundle/ (the configs, and every rank's ET file where the backend reads them or
    `backend.et_files` asks), run.json, traffic.parquet (or links.parquet), spans.parquet and
    whatever `render` adds, written whole or not at all. `progress(Progress)` follows a long run.

    A cluster (several jobs) also runs each job alone on its NPUs, under `alone` (default
    `<out>.alone/`, one directory per job and key, reused when finished), and run.json's
    `details.jobs` gives every job's times and slowdown (see `backends.jobs`)."""

    # ET files only where the backend reads them or the spec asks for them; else the graphs stay in memory
    et_files = backend.et_files or entry(backend).et_files

    def prepare(d: Path) -> Bundle:
        if progress is not None:
            progress(Progress(0.0, phase="compile"))
        return compile_any(scenario, d, source=source, et_files=et_files).bundle

    check_network(scenario, backend, source)
    runner: Backend = make_backend(backend, astra_sim=astra_sim, progress=progress)
    if isinstance(scenario, Cluster):

        def run_alone(cluster: Cluster, d: Path) -> RunResult:
            return simulate(cluster, d, backend, astra_sim=astra_sim, source=source)

        root = Path(alone) if alone is not None else alone_root(out)
        runner = WithJobs(runner, alone_times(scenario, backend, root, run_alone))
    return run_to_dir(prepare, runner, Path(out), timeout_s=backend.timeout_s, render=render)
