"""Simulation backends: the `Backend` protocol, `astrasim` and the built-in `flowsim`."""

from __future__ import annotations

from pathlib import Path

from simstudy.backends.astrasim import AstraSimBackend
from simstudy.backends.base import Backend, BackendError, RankStats, RunResult
from simstudy.backends.flowsim import FlowsimBackend
from simstudy.backends.rundir import read_run, write_run
from simstudy.backends.simulate import make_backend, simulate
from simstudy.spec import BackendSpec

__all__ = [
    "BACKENDS",
    "AstraSimBackend",
    "Backend",
    "BackendError",
    "FlowsimBackend",
    "RankStats",
    "RunResult",
    "get_backend",
    "make_backend",
    "read_run",
    "simulate",
    "write_run",
]

BACKENDS = ("flowsim", "astrasim", "ns3")


def get_backend(
    name: str, *, astra_sim: str | Path | None = None, aware: bool = False, congestion: str = "fluid"
) -> Backend:
    """A backend by name: `flowsim` (built in) or `astrasim` (the external binary)."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    return make_backend(BackendSpec.model_validate({"name": name, "aware": aware, "congestion": congestion}),
                        astra_sim=astra_sim)
