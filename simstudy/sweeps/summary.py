"""The summary table of a sweep (one row per scenario) and regression checks against a baseline."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from simstudy.files import replacing
from simstudy.spec import Baseline
from simstudy.sweeps.errors import SweepError
from simstudy.sweeps.expand import Expansion
from simstudy.sweeps.runner import RunRecord

#: Columns that describe a row rather than measure it.
ID_COLUMNS = ("index", "key", "status", "error", "cached")
#: Measurements that change from run to run of the same scenario (never compared).
VOLATILE = ("backend_wall_s", "run_s")


def summary_frame(expansion: Expansion, records: Mapping[str, RunRecord]) -> pd.DataFrame:
    """One row per valid point, in expansion order: swept values, status, metrics."""
    rows: list[dict[str, Any]] = []
    metric_names: dict[str, None] = {}
    for done in records.values():
        metric_names.update(dict.fromkeys(done.metrics))
    for point in expansion.points:
        rec = records.get(point.key)
        row: dict[str, Any] = {"index": point.index, **point.params, "key": point.key}
        row["status"] = rec.status if rec is not None else "not run"
        row["error"] = rec.error if rec is not None else None
        row["cached"] = rec.cached if rec is not None else False
        row["run_s"] = rec.seconds if rec is not None else math.nan
        metrics = rec.metrics if rec is not None else {}
        for name in metric_names:
            row[name] = metrics.get(name, math.nan)
        rows.append(row)
    columns = ["index", *expansion.param_names, "key", "status", "error", "cached", "run_s", *metric_names]
    frame = pd.DataFrame(rows, columns=columns)
    for name in expansion.param_names:
        frame[name] = _uniform(frame[name])
    frame["error"] = frame["error"].astype("string")
    return frame


def _uniform(column: pd.Series) -> pd.Series:
    """A parameter column Parquet can store: numbers stay numbers, anything mixed becomes text."""
    values = [v for v in column if v is not None]
    if values and all(isinstance(v, bool) for v in values):
        return column.astype("boolean")
    if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return pd.to_numeric(column)
    return column.map(lambda v: None if v is None else str(v)).astype("string")


def write_summary(frame: pd.DataFrame, path: Path) -> None:
    """Write summary.parquet whole or not at all."""
    with replacing(path) as tmp:
        frame.to_parquet(tmp, index=False)


def param_columns(frame: pd.DataFrame) -> list[str]:
    """The swept-parameter columns of a summary (between `index` and `key`)."""
    cols = list(frame.columns)
    return cols[cols.index("index") + 1 : cols.index("key")]


def metric_columns(frame: pd.DataFrame) -> list[str]:
    """The numeric result columns of a summary (what a baseline check compares)."""
    params = set(param_columns(frame))
    return [c for c in frame.columns if c not in params and c not in ID_COLUMNS and c not in VOLATILE
            and pd.api.types.is_numeric_dtype(frame[c])]


@dataclass(frozen=True)
class Change:
    """One metric of one scenario that differs from the baseline."""

    params: dict[str, Any]
    metric: str
    baseline: float
    current: float
    relative: float
    tolerance: float

    @property
    def moved(self) -> bool:
        """Beyond tolerance."""
        return self.relative > self.tolerance


@dataclass(frozen=True)
class BaselineReport:
    """What moved between a baseline summary and the current one."""

    changes: list[Change] = field(default_factory=list)
    missing: list[dict[str, Any]] = field(default_factory=list)
    added: list[dict[str, Any]] = field(default_factory=list)
    newly_failed: list[dict[str, Any]] = field(default_factory=list)
    compared: int = 0
    metrics: list[str] = field(default_factory=list)
    #: Metrics of the baseline that the current summary no longer has (a regression of its own).
    lost_metrics: list[str] = field(default_factory=list)

    @property
    def moved(self) -> list[Change]:
        return [c for c in self.changes if c.moved]

    @property
    def passed(self) -> bool:
        return not self.moved and not self.missing and not self.newly_failed and not self.lost_metrics

    def lines(self) -> list[str]:
        """A human-readable account: what moved beyond tolerance, what changed within it."""
        out = [f"baseline: {self.compared} scenarios x {len(self.metrics)} metrics compared"]
        for c in sorted(self.changes, key=lambda c: (not c.moved, -c.relative)):
            flag = "MOVED" if c.moved else "within tolerance"
            out.append(f"  {flag}: {_params(c.params)} {c.metric}: {c.baseline:.6g} -> {c.current:.6g} "
                       f"(changed {c.relative:.3%}, tolerance {c.tolerance:.3%})")
        out += [f"  MISSING metric (in the baseline, not in this sweep's summary): {m}" for m in self.lost_metrics]
        out += [f"  MISSING (in the baseline, not in this sweep): {_params(p)}" for p in self.missing]
        out += [f"  FAILED now (ok in the baseline): {_params(p)}" for p in self.newly_failed]
        out += [f"  new (not in the baseline): {_params(p)}" for p in self.added]
        out.append("baseline: PASSED" if self.passed else f"baseline: FAILED ({len(self.moved)} metrics moved, "
                   f"{len(self.lost_metrics)} metrics missing, {len(self.missing)} scenarios missing, "
                   f"{len(self.newly_failed)} newly failed)")
        return out


def _params(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "(base scenario)"


def _rows_by_params(frame: pd.DataFrame, params: Sequence[str]) -> dict[tuple[str, ...], pd.Series]:
    return {tuple(str(row[p]) for p in params): row for _, row in frame.iterrows()}


def _relative(old: float, new: float) -> float:
    if math.isnan(old) and math.isnan(new):
        return 0.0
    if math.isnan(old) or math.isnan(new):
        return math.inf
    if old == new:
        return 0.0
    return abs(new - old) / abs(old) if old != 0 else math.inf


def compare_baseline(current: pd.DataFrame, baseline: pd.DataFrame, spec: Baseline) -> BaselineReport:
    """Compare two summaries scenario by scenario (matched on the swept values), metric by metric.

    A metric of the baseline that the current summary lacks fails the check (`lost_metrics`): a
    measurement that disappeared is a regression, not something to skip. A metric named in
    `spec.metrics` that the baseline lacks is bad input (`SweepError`)."""
    params = param_columns(current)
    if param_columns(baseline) != params:
        raise SweepError(f"the baseline sweeps {param_columns(baseline)}, this study sweeps {params}")
    wanted = spec.metrics or metric_columns(baseline)
    unknown = [m for m in wanted if m not in baseline.columns]
    if unknown:
        raise SweepError(f"baseline.metrics: not in the baseline summary: {', '.join(unknown)} "
                         f"(it has {', '.join(metric_columns(baseline)) or 'no metrics'})")
    lost = [m for m in wanted if m not in current.columns]
    metrics = [m for m in wanted if m in current.columns]
    cur, old = _rows_by_params(current, params), _rows_by_params(baseline, params)
    changes: list[Change] = []
    missing: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    compared = 0
    for key, base_row in old.items():
        label = dict(zip(params, key, strict=True))
        row = cur.get(key)
        if row is None:
            missing.append(label)
            continue
        if base_row["status"] == "ok" and row["status"] != "ok":
            failed.append(label)
            continue
        compared += 1
        for m in metrics:
            rel = _relative(float(base_row[m]), float(row[m]))
            if rel > 0:
                changes.append(Change(label, m, float(base_row[m]), float(row[m]), rel, spec.tolerance_of(m)))
    added = [dict(zip(params, k, strict=True)) for k in cur if k not in old]
    return BaselineReport(changes, missing, added, failed, compared, list(metrics), lost)
