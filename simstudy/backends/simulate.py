"""The one run path: compile a scenario, run it on a backend, write the run directory.

`simstudy run`, `simstudy sweep` (each run of a sweep) and `simstudy validate` all call
`simulate`, so a backend option or a run-directory file is added in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from simstudy.backends.astrasim import AstraSimBackend
from simstudy.backends.base import Backend, BackendError, RunResult
from simstudy.backends.flowsim import FlowsimBackend
from simstudy.backends.rundir import run_to_dir
from simstudy.compile import Bundle, compile_scenario
from simstudy.spec import BackendSpec, Scenario


def make_backend(spec: BackendSpec, *, astra_sim: str | Path | None = None) -> Backend:
    """The backend a spec names; `astra_sim` is the binary for `astrasim` (a path of this machine,
    so not part of the spec or of any run key)."""
    if spec.name == "flowsim":
        return FlowsimBackend(congestion=spec.congestion)
    if spec.name == "astrasim":
        return AstraSimBackend(astra_sim, aware=spec.aware)
    raise BackendError(f"unknown backend {spec.name!r}; expected flowsim or astrasim")  # pragma: no cover


def simulate(
    scenario: Scenario,
    out: str | Path,
    backend: BackendSpec,
    *,
    astra_sim: str | Path | None = None,
    source: str | Path | None = None,
    render: Callable[[RunResult, Path], object] | None = None,
) -> RunResult:
    """Compile `scenario` (errors name `source`) and simulate it on `backend` into the run
    directory `out`: bundle/, run.json, traffic.parquet and whatever `render` adds, written whole
    or not at all."""

    def prepare(d: Path) -> Bundle:
        return compile_scenario(scenario, d, source=source).bundle

    return run_to_dir(prepare, make_backend(backend, astra_sim=astra_sim), Path(out),
                      timeout_s=backend.timeout_s, render=render)
