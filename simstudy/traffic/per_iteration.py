"""Per iteration: how long an iteration of a table's training traffic takes (`Period`), and what
each worker sends in one (`BytesPerIteration`), from iteration marks when the table or its source
has them, else from the iterations found in the traffic (`simstudy.traffic.iterations`), else from
the periodicity of the 1 ms total (`simstudy.traffic.period`).

Two analyses of `simstudy.traffic.features`; see its docstring for the conventions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from simstudy.traffic.iterations import Candidate, Iterations, find_iterations, interquartile_mean
from simstudy.traffic.period import acf_period, psd_period, whole_periods
from simstudy.traffic.results import ON_THRESHOLD, ValueEq, training_rows
from simstudy.traffic.timeline import throughput_timeline

__all__ = [
    "ACF_CLEAR_PEAK",
    "Boundaries",
    "BytesPerIteration",
    "Period",
    "Runs",
    "bytes_per_iteration",
    "iteration_groups",
    "iteration_period",
    "marked_runs",
    "per_iteration_bytes",
    "period_from",
]

FloatArray = NDArray[np.float64]

#: An autocorrelation peak at least this high is a clear period (preferred to the periodogram).
ACF_CLEAR_PEAK = 0.2
#: Phase bins of the folded cycle used to place iteration boundaries in the quietest phase.
PHASE_BINS = 64

#: Iteration start times: one list, one list per worker, or a mapping worker -> list.
Boundaries = Sequence[float] | Sequence[Sequence[float]] | Mapping[int, Sequence[float]]
#: Iteration numbers and start times, one pair per worker.
Runs = list[tuple[FloatArray, FloatArray]]


@dataclass(frozen=True, eq=False)
class Period(ValueEq):
    """The iteration period, how it was found, and where the iterations are.

    `method`: "boundaries" (given iteration start times) or "iterations" (the table's
    `iteration` column) when they give at least two iterations: the interquartile mean (the
    mean of the middle half, `interquartile_mean`) of (start difference / iteration-number
    difference) over consecutive iterations of every worker;
    else "traffic": the period whose cycles repeat the same bytes, chosen among candidates at
    1, 10 and 100 ms (`simstudy.traffic.iterations`); when no candidate does, the 1 ms
    "autocorrelation" when its peak is clear (height >= `ACF_CLEAR_PEAK`), else the
    "periodogram"; "none" (NaN) when the series is flat or too short.
    """

    period_s: float
    method: str
    strength: float
    """Confidence in the chosen estimate, 0..1: for iteration starts 1 - IQR/median of the
    iteration durations; from the traffic 1 - the variation of bytes per cycle; else the
    strength of the chosen method below."""
    reason: str
    """Why this period, in words."""
    candidates: tuple[Candidate, ...]
    """Every period considered from the traffic, with its verdict (empty with iteration marks)."""
    starts_s: FloatArray
    """Start of every whole iteration found (iteration marks: every marked start)."""
    window_s: tuple[float, float]
    """Whole iterations of steady training found in the traffic (table time; NaN, NaN with
    iteration marks, where the table holds only marked iterations, or when none was found): the
    other analyses look only there."""
    acf_period_s: float
    """Lag of the first significant autocorrelation peak of the 1 ms total after lag 0 (NaN when none)."""
    acf_strength: float
    """Autocorrelation at that peak (0 when none)."""
    psd_period_s: float
    """1 / frequency of the periodogram peak of the 1 ms total (NaN when none)."""
    psd_strength: float
    """Fraction of the non-DC power in that peak's main lobe."""
    iterations_period_s: float
    """Median difference of consecutive iteration starts (NaN when not available)."""
    bin_s: float


@dataclass(frozen=True, eq=False)
class BytesPerIteration(ValueEq):
    """Bytes each worker sends per iteration, their mean over workers, and the total of all
    training endpoints (workers and parameter servers), over whole iterations only."""

    ranks: tuple[int, ...]
    """The workers (`Roles.workers`; every sender when the roles name none)."""
    per_worker: FloatArray
    mean: float
    """Mean of `per_worker`."""
    total: float
    """Bytes per iteration of every training endpoint together."""
    iterations: int
    """Whole iterations counted (iteration column: the most any rank has)."""
    method: str
    """"iteration_column": a rank's bytes / its number of distinct iterations; "traffic": bytes
    of the whole steady iterations found (`Period.window_s`) / their number; "period": no
    iteration was found, bytes / iterations estimated from the period (see
    `bytes_per_iteration`); "none"."""


# --- the period ------------------------------------------------------------------------------


def _boundary_runs(boundaries: Boundaries) -> Runs:
    """Normalise boundaries to (iteration numbers, start times) per worker."""
    if isinstance(boundaries, Mapping):
        lists: list[Sequence[float]] = list(boundaries.values())
    elif len(boundaries) and np.ndim(boundaries[0]) > 0:
        lists = list(boundaries)  # type: ignore[arg-type]
    else:
        lists = [boundaries]  # type: ignore[list-item]
    out = []
    for b in lists:
        t = np.sort(np.asarray(b, dtype=np.float64))
        out.append((np.arange(len(t), dtype=np.float64), t))
    return out


def _iteration_runs(groups: pd.DataFrame) -> Runs:
    """(iteration numbers, first start) per worker from the (src, iteration) groups."""
    out = []
    for _, g in groups.groupby("src", sort=True):
        g = g.sort_values("iteration")
        out.append((g["iteration"].to_numpy(np.float64), g["start"].to_numpy(np.float64)))
    return out


def _period_from_starts(runs: Runs) -> tuple[float, float]:
    """(typical duration of an iteration, 1 - IQR/median) from per-worker iteration starts: the
    interquartile mean of the durations (`interquartile_mean`), as the traffic finds it."""
    per = [np.diff(t) / np.diff(k) for k, t in runs if len(t) >= 2]
    d = np.concatenate(per) if per else np.zeros(0)
    d = d[np.isfinite(d) & (d > 0)]
    if len(d) == 0:
        return math.nan, 0.0
    q1, med, q3 = np.quantile(d, [0.25, 0.5, 0.75])
    return interquartile_mean(d), float(np.clip(1.0 - (q3 - q1) / med, 0.0, 1.0))


def period_from(rates: FloatArray, bin_s: float, runs: Runs | None, runs_method: str,
                found: Iterations | None = None, window: tuple[float, float] | None = None) -> Period:
    """The `Period` of a throughput series in `bin_s` bins, from the marked iteration starts `runs`
    (`marked_runs`, found by `runs_method`) or the iterations `found` in the traffic (see `Period`)."""
    acf_p, acf_height = acf_period(rates, bin_s)
    acf_s = min(1.0, acf_height)
    psd_p, psd_s = psd_period(rates, bin_s)
    it_p, it_s = _period_from_starts(runs) if runs else (math.nan, 0.0)
    starts = np.sort(np.concatenate([s for _, s in runs])) if runs else np.zeros(0)
    candidates: tuple[Candidate, ...] = found.candidates if found is not None else ()
    win = window if window is not None else (math.nan, math.nan)
    if math.isfinite(it_p):
        chosen = (it_p, runs_method, it_s,
                  f"typical time between the {len(starts)} marked iteration starts (interquartile mean)")
    elif found is not None and found.count:
        starts, win = found.starts_s, found.window_s
        cv = next(c.volume_cv for c in found.candidates if c.verdict.startswith("chosen"))
        chosen = (found.period_s, "traffic", float(np.clip(1.0 - cv, 0.0, 1.0)), found.reason)
    elif math.isfinite(acf_p) and acf_s >= ACF_CLEAR_PEAK:
        chosen = (acf_p, "autocorrelation", acf_s, _fallback(found, "the first clear 1 ms autocorrelation peak"))
    elif math.isfinite(psd_p):
        chosen = (psd_p, "periodogram", psd_s, _fallback(found, "the 1 ms periodogram peak"))
    elif math.isfinite(acf_p):
        chosen = (acf_p, "autocorrelation", acf_s, _fallback(found, "the first 1 ms autocorrelation peak"))
    else:
        chosen = (math.nan, "none", 0.0, "the traffic is flat or too short for a period")
    return Period(chosen[0], chosen[1], chosen[2], chosen[3], candidates, starts, win, acf_p, acf_s, psd_p, psd_s,
                  it_p, bin_s)


def _fallback(found: Iterations | None, what: str) -> str:
    why = f"{found.reason}; " if found is not None else ""
    return f"{why}{what} (not checked against the bytes per cycle)"


def iteration_groups(rows: pd.DataFrame) -> pd.DataFrame | None:
    """One row per (src, iteration): bytes and first start; None without an iteration column."""
    if "iteration" not in rows.columns or len(rows) == 0:
        return None
    src = rows["src"].to_numpy().astype(np.int64)
    it = rows["iteration"].to_numpy().astype(np.int64)
    key = (src << 32) + (it - np.iinfo(np.int32).min)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    first = np.flatnonzero(np.concatenate([[True], ks[1:] != ks[:-1]]))
    k = ks[first]
    return pd.DataFrame({
        "bytes": np.add.reduceat(rows["bytes"].to_numpy()[order], first),
        "start": np.minimum.reduceat(rows["t_start_s"].to_numpy()[order], first),
        "src": k >> 32,
        "iteration": (k & 0xFFFFFFFF) + np.iinfo(np.int32).min,
    })


def iteration_period(table: pd.DataFrame, *, bin_s: float = 1e-3, boundaries: Boundaries | None = None) -> Period:
    """The iteration period of the training traffic (see `Period` for how it is chosen).

    The autocorrelation and periodogram estimates come from the total throughput in `bin_s`
    bins. `boundaries` (iteration start times) or else the table's `iteration` column, when they
    give at least two iterations, decide the period: the interquartile mean of (start difference /
    iteration-number difference) over consecutive iterations of every worker.
    """
    rows = training_rows(table)
    rates = throughput_timeline(rows, bin_s, pairs=0).total
    runs, method = marked_runs(rows, boundaries, iteration_groups(rows))
    return period_from(rates, bin_s, runs, method, None if runs else find_iterations(rows))


def marked_runs(rows: pd.DataFrame, boundaries: Boundaries | None,
                groups: pd.DataFrame | None) -> tuple[Runs | None, str]:
    """The marked iteration starts of every worker and where they come from: the given
    `boundaries`, else the table's iteration column (its `iteration_groups`); (None, "none")."""
    if boundaries is not None:
        return _boundary_runs(boundaries), "boundaries"
    if groups is not None:
        return _iteration_runs(groups), "iterations"
    return None, "none"


# --- bytes per iteration ---------------------------------------------------------------------


def _quiet_phase(hist: FloatArray) -> float:
    """Phase (0..1) in the middle of the longest quiet run of a circular histogram."""
    p = len(hist)
    quiet = hist <= ON_THRESHOLD * hist.max()
    if not quiet.any():
        return (int(np.argmin(hist)) + 0.5) / p
    e = np.concatenate([[0], quiet, quiet, [0]]).astype(np.int8)
    d = np.diff(e)
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    lengths = np.minimum(ends - starts, p)
    i = int(np.argmax(lengths))
    return float((starts[i] + lengths[i] / 2) / p) % 1.0


def _iterations_in(rates: FloatArray, bin_s: float, period_s: float) -> int:
    """How many iterations' worth of bytes a throughput series holds: its bytes / the mean bytes
    of the period-long windows between the first and the last, rounded (`whole_periods`, as the
    iteration finder counts the iterations of a stretch of traffic), at least 1. Windows
    start in the quietest phase of the cycle, so the ones in the middle hold whole iterations
    and partial ones at the ends count for their share."""
    n = len(rates)
    if n == 0 or not (math.isfinite(period_s) and period_s > 0) or n * bin_s < period_s:
        return 1
    cycles = (np.arange(n) + 0.5) * (bin_s / period_s)
    w = rates * bin_s
    phase_bin = np.minimum(((cycles % 1.0) * PHASE_BINS).astype(np.int64), PHASE_BINS - 1)
    shift = _quiet_phase(np.bincount(phase_bin, weights=w, minlength=PHASE_BINS).astype(np.float64))
    k = np.floor(cycles - shift).astype(np.int64)
    per_window = np.bincount(k - k.min(), weights=w)
    typical = float(per_window[1:-1].mean() if len(per_window) >= 3 else per_window.max())
    return max(1, int(whole_periods(float(w.sum()), typical)[0])) if typical > 0 else 1


def per_iteration_bytes(rows: pd.DataFrame, groups: pd.DataFrame | None, rates: FloatArray, bin_s: float,
                        period_s: float, workers: Sequence[int] = (), found: Iterations | None = None
                        ) -> BytesPerIteration:
    """`BytesPerIteration` of the training `rows`: by the table's iteration column (its
    `iteration_groups`), else by the iterations `found` in the traffic, else by the number of
    periods the throughput series `rates` holds (`_iterations_in`); `workers` only, when given."""
    if len(rows) == 0:
        return BytesPerIteration((), np.zeros(0), math.nan, math.nan, 0, "none")
    if groups is not None:
        uniq, inv = np.unique(groups["src"].to_numpy(), return_inverse=True)
        counts = np.bincount(inv)
        values = np.bincount(inv, weights=groups["bytes"].to_numpy(np.float64)) / counts
        ranks, method, n = [int(r) for r in uniq], "iteration_column", int(counts.max())
        total = float(groups["bytes"].sum()) / n
    elif found is not None and found.count:
        ranks, values, n, method = list(found.senders), found.per_iteration, found.count, "traffic"
        total = float(values.sum())
    else:
        n = _iterations_in(rates, bin_s, period_s)
        src = rows["src"].to_numpy().astype(np.int64)
        lo = int(src.min())
        sent = np.bincount(src - lo, weights=rows["bytes"].to_numpy().astype(np.float64))
        has = np.flatnonzero(np.bincount(src - lo))
        ranks, values, method = [int(r) + lo for r in has], sent[has] / n, "period"
        total = float(values.sum())
    keep = [i for i, r in enumerate(ranks) if r in set(workers)] if workers else list(range(len(ranks)))
    per = np.asarray(values, dtype=np.float64)[keep]
    return BytesPerIteration(tuple(ranks[i] for i in keep), per, float(per.mean()) if len(per) else math.nan,
                             total, n, method)


def bytes_per_iteration(table: pd.DataFrame, *, period: Period | float) -> BytesPerIteration:
    """Bytes each worker (`src` rank) sends per iteration, and the mean over workers.

    With an `iteration` column: a worker's bytes / the number of distinct iterations it sent
    in. Without: a worker's bytes / the number of iterations in the trace, estimated as the
    trace's bytes / the mean bytes of a `period`-long window (the first and last windows left
    out, as they may be partial), rounded, at least 1. This is
    trace duration / period corrected for partial iterations at either end: windows start in
    the quietest phase of the cycle, so a trace that starts or stops mid-cycle, or ends right
    after its last burst, is not off by one.
    """
    rows = training_rows(table)
    period_s = period.period_s if isinstance(period, Period) else float(period)
    groups = iteration_groups(rows)
    rates = throughput_timeline(rows, 1e-3, pairs=0).total if groups is None else np.zeros(0)
    return per_iteration_bytes(rows, groups, rates, 1e-3, period_s)
