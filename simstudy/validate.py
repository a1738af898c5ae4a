"""Validate a simulation against real traffic: simulate the job a capture recorded, analyse both
tables with the same pipeline, compare metric by metric.

The scenario comes from `--spec` or from the capture's meta.json (`scenario`, as written by
`simstudy capture`, with the measured compute times). Time origins are aligned: the capture at
its first training iteration (or first training packet), the simulation at the start of the
job (or, when the capture has no iteration marks, at its first transfer).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from pydantic import ValidationError

from simstudy import layout
from simstudy.backends import RunResult, simulate
from simstudy.spec import BackendSpec, Scenario, SpecError, load_scenario, spec_error
from simstudy.traffic.compare import DEFAULT_TOLERANCES, ValidationReport, compare
from simstudy.traffic.features import Features, analyze
from simstudy.traffic.sources import TrafficSource, load_traffic


@dataclass(frozen=True)
class Validation:
    """A capture, the simulation of the same job, both analyses and their comparison."""

    real: TrafficSource
    scenario: Scenario
    sim_table: pd.DataFrame
    run: RunResult
    real_features: Features
    sim_features: Features
    report: ValidationReport
    not_measurable: tuple[str, ...]


def scenario_for(source: TrafficSource, spec: str | Path | None) -> Scenario:
    """The scenario to simulate: `spec`, else the `scenario` of the capture's meta.json."""
    if spec is not None:
        return load_scenario(spec)
    meta_path = source.path / layout.META
    data = source.meta.scenario if source.meta else None
    if data is None:
        raise SpecError(meta_path if source.meta else source.path, "scenario",
                        "no scenario recorded with this capture; give one with --spec")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, data, None, meta_path) from None


def comparable_sim(sim: pd.DataFrame, real: TrafficSource) -> pd.DataFrame:
    """The simulated table as a capture would see it, so that both go through the same analysis:

    - time origin: the job's start when the capture marks iterations, else the first transfer;
    - flows: one per (src, dst) pair, as gloo and NCCL keep one TCP connection per peer pair
      (a simulated flow is one collective chunk, which a packet capture cannot see);
    - no `iteration` column unless the capture marks iterations, so that both tables get their
      period and bytes per iteration from the same estimator.
    """
    out = sim.copy()
    if not real.boundaries and len(out):
        training = out[out["op"] != "control"]
        t0 = float(training["t_start_s"].min()) if len(training) else 0.0
        out["t_start_s"] -= t0
        out["t_end_s"] -= t0
        if "iteration" in out.columns:
            out = out.drop(columns=["iteration"])
    pair = out["src"].astype("int64") * 1_000_003 + out["dst"].astype("int64")
    out["flow"] = pd.factorize(pair)[0].astype("int64")
    return out


def payload_view(table: pd.DataFrame) -> pd.DataFrame:
    """A captured table in the simulator's terms: bytes are TCP/UDP payload (what the application
    sent), and packets without payload (pure ACKs, SYN, FIN) are left out. A simulated transfer is
    application bytes; the IP and TCP headers (52 bytes per segment with timestamps) and the ACKs
    are framing the simulator does not model. Tables without `payload_bytes` are returned as they are."""
    if "payload_bytes" not in table.columns:
        return table
    out = table[table["payload_bytes"].to_numpy() > 0].copy()
    out["bytes"] = out["payload_bytes"].astype("int64")
    return out.reset_index(drop=True)


def framing_overhead(table: pd.DataFrame) -> float:
    """IP bytes / payload bytes of a captured table's training traffic, minus 1 (NaN without payload)."""
    if "payload_bytes" not in table.columns:
        return math.nan
    rows = table[table["op"] != "control"]
    payload = float(rows["payload_bytes"].sum())
    return float(rows["bytes"].sum()) / payload - 1.0 if payload else math.nan


def _unmeasurable(real: Features, sim: Features) -> tuple[str, ...]:
    """Scalar metrics that neither trace can measure (e.g. a Hurst exponent of a short trace)."""
    r, s = real.scalars(), sim.scalars()
    return tuple(m for m in DEFAULT_TOLERANCES
                 if m in r and m in s and math.isnan(r[m]) and math.isnan(s[m]))


def validate(
    real_path: str | Path,
    out: str | Path,
    *,
    spec: str | Path | None = None,
    backend: BackendSpec | None = None,
    astra_sim: str | Path | None = None,
    tolerances: Mapping[str, float] | None = None,
    skip: Collection[str] = (),
    count: str = "payload",
    progress: Callable[[str], None] | None = None,
) -> Validation:
    """Simulate the job of the capture at `real_path` into `out/sim` on `backend` (default flowsim),
    analyse and compare.

    `count`: "payload" compares the capture's TCP/UDP payload bytes with the simulated bytes (what
    the application sends; see `payload_view`); "ip" compares IP bytes as captured (for captures
    written from simulated transfers, whose IP lengths are the transfer bytes)."""
    if count not in ("payload", "ip"):
        raise ValueError(f"count must be payload or ip, not {count!r}")
    say = progress or (lambda _text: None)
    say(f"reading the capture {real_path}")
    real = load_traffic(real_path)
    scenario = scenario_for(real, spec)
    say(f"simulating {scenario.name} ({scenario.npus} ranks) on {(backend or BackendSpec()).key}")
    result = simulate(scenario, Path(out) / layout.SIM_DIR, backend or BackendSpec(), astra_sim=astra_sim,
                      source=spec)
    sim_table = comparable_sim(result.traffic, real)
    real_table = payload_view(real.table) if count == "payload" else real.table
    say("analysing the real and the simulated traffic")
    real_features = analyze(real_table, boundaries=real.boundaries)
    sim_features = analyze(sim_table)
    unmeasurable = tuple(m for m in _unmeasurable(real_features, sim_features) if m not in skip)
    report = compare(real_features, sim_features, tolerances=tolerances, skip=(*skip, *unmeasurable))
    say("compared")
    return Validation(real, scenario, sim_table, result, real_features, sim_features, report, unmeasurable)
