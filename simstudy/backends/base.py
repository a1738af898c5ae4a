"""The backend contract: `run(bundle, workdir, *, timeout_s) -> RunResult`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from simstudy.compile import Bundle


class BackendError(RuntimeError):
    """A simulation that did not complete: names the backend, the cause and the log tail."""


@dataclass(frozen=True, slots=True)
class RankStats:
    """Per-rank times of one run, in nanoseconds."""

    rank: int
    finish_ns: int
    compute_ns: int
    comm_ns: int
    exposed_comm_ns: int


@dataclass
class RunResult:
    """What a backend returns: per-rank times and the TrafficTable of every transfer."""

    backend: str
    backend_version: str
    ranks: list[RankStats]
    traffic: pd.DataFrame
    wall_time_s: float
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def finish_ns(self) -> int:
        """The job's finish time: the last rank's."""
        return max(r.finish_ns for r in self.ranks)

    def summary(self) -> dict[str, Any]:
        """The JSON-ready content of run.json."""
        return {
            "backend": self.backend,
            "backend_version": self.backend_version,
            "wall_time_s": self.wall_time_s,
            "finish_ns": self.finish_ns,
            "transfers": len(self.traffic),
            "bytes": int(self.traffic["bytes"].sum()) if len(self.traffic) else 0,
            "ranks": [asdict(r) for r in self.ranks],
            "details": self.details,
        }

    def write_json(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.summary(), indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)


class Backend(Protocol):
    """A simulator that executes a bundle."""

    name: str

    def run(self, bundle: Bundle, workdir: Path, *, timeout_s: float | None = None) -> RunResult:
        """Simulate `bundle`, using `workdir` for scratch files and logs."""
        ...
