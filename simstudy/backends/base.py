"""The backend contract: `run(bundle, workdir, *, timeout_s) -> RunResult`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from simstudy.backends.traffic_out import TrafficOutput
from simstudy.compiler import Bundle
from simstudy.files import write_json


class BackendError(RuntimeError):
    """A simulation that did not complete: names the backend, the cause and the log tail."""


#: The phases of a run, in order: compiling the spec into a bundle, reading its traces and routing
#: its network, simulating, writing the run directory.
PHASES = ("compile", "route", "simulate", "write")


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a run has got: its `phase` (one of `PHASES`), the `fraction` of its expected
    transfers simulated (of its ET nodes done, when it expects none), the simulated time reached,
    the transfers simulated so far and the wall seconds spent: what a progress bar shows as rates
    and an ETA."""

    fraction: float
    sim_ns: int = 0
    transfers: int = 0
    wall_s: float = 0.0
    phase: str = "simulate"

    @property
    def transfers_per_s(self) -> float:
        return self.transfers / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def sim_ns_per_s(self) -> float:
        """Simulated ns per wall second."""
        return self.sim_ns / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class RankStats:
    """Per-rank times of one run, in nanoseconds."""

    rank: int
    finish_ns: int
    compute_ns: int
    comm_ns: int
    exposed_comm_ns: int


#: Columns of a run's node spans (spans.parquet): when each ET node of each rank ran.
SPAN_COLUMNS = {"rank": "int32", "node": "int64", "name": "category", "kind": "category",
                "start_ns": "int64", "end_ns": "int64"}
#: The `kind` of a span, from its Chakra node type.
SPAN_KINDS = ("compute", "collective", "send", "recv", "other")
#: What each span column means (the documentation's table reference is built from it).
SPAN_MEANINGS = {"rank": "rank that ran the node", "node": "Chakra ET node id in the rank's trace",
                 "name": "node name", "kind": "what the node is: " + ", ".join(SPAN_KINDS),
                 "start_ns": "when the node started, ns from the start of the run",
                 "end_ns": "when it finished, ns"}


def make_spans(rank: Any, node: Any, name: Any, kind: Any, start_ns: Any, end_ns: Any) -> pd.DataFrame:
    """A spans table (see `SPAN_COLUMNS`), sorted by start time then rank."""
    table = pd.DataFrame({
        "rank": np.asarray(rank, dtype=np.int32), "node": np.asarray(node, dtype=np.int64),
        "name": pd.Categorical(np.asarray(name, dtype=object)),
        "kind": pd.Categorical(np.asarray(kind, dtype=object), categories=list(SPAN_KINDS)),
        "start_ns": np.asarray(start_ns, dtype=np.int64), "end_ns": np.asarray(end_ns, dtype=np.int64),
    })
    return table.sort_values(["start_ns", "rank", "node"], kind="stable").reset_index(drop=True)


def empty_spans() -> pd.DataFrame:
    return make_spans([], [], [], [], [], [])


@dataclass
class RunResult:
    """What a backend returns: per-rank times, the transfers (`output`: the TrafficTable, in
    memory or streamed to Parquet, or per-link bins, or only counts) and the span of every ET node
    on every rank (issue to completion; for a collective, from the rank's issue until its part
    of the collective ends)."""

    backend: str
    backend_version: str
    ranks: list[RankStats]
    output: TrafficOutput
    wall_time_s: float
    details: dict[str, Any] = field(default_factory=dict)
    spans: pd.DataFrame = field(default_factory=empty_spans)

    @property
    def traffic(self) -> pd.DataFrame:
        """The TrafficTable (empty unless the run kept rows; read from disk when streamed there)."""
        return self.output.table()

    @property
    def links(self) -> pd.DataFrame | None:
        """The per-link table when the run kept links."""
        return self.output.links

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
            "traffic": self.output.mode,
            "transfers": self.output.transfers,
            "bytes": self.output.total_bytes,
            "ranks": [asdict(r) for r in self.ranks],
            "details": self.details,
        }

    def write_json(self, path: Path) -> None:
        write_json(path, self.summary(), indent=2)


class Backend(Protocol):
    """A simulator that executes a bundle."""

    name: str

    def run(self, bundle: Bundle, workdir: Path, *, timeout_s: float | None = None) -> RunResult:
        """Simulate `bundle`, using `workdir` for scratch files and logs."""
        ...
