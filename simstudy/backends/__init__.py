"""Simulation backends: the `Backend` protocol, and the backends of `registry` (flowsim, built in;
astrasim, the ASTRA-SIM binary; ns3, the packet network)."""

from __future__ import annotations

from pathlib import Path

from simstudy.backends.astrasim import AstraSimBackend
from simstudy.backends.base import Backend, BackendError, RankStats, RunResult
from simstudy.backends.flowsim import FlowsimBackend
from simstudy.backends.registry import NAMES, make_backend
from simstudy.backends.rundir import read_run, write_run
from simstudy.backends.simulate import simulate
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

BACKENDS = NAMES


def get_backend(
    name: str, *, astra_sim: str | Path | None = None, aware: bool = False, congestion: str | None = None
) -> Backend:
    """A backend by name (one of `BACKENDS`), with its options as a `BackendSpec` takes them."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    options = {"aware": aware} if congestion is None else {"aware": aware, "congestion": congestion}
    return make_backend(BackendSpec.model_validate({"name": name, **options}), astra_sim=astra_sim)
