"""Real against simulated traffic, metric by metric, each with a distance and a tolerance.

`compare(real, sim)` takes two `Features` (from `analyze`, or read back from features.json)
and returns a `ValidationReport`: one `MetricComparison` per entry of the tolerances, which
are `DEFAULT_TOLERANCES` updated by the caller's mapping. The metric name says how it is
measured:

- ``name`` (a key of `Features.scalars()`): relative error ``|sim - real| / |real|``
  (0 when both are 0, infinite when only the real value is 0).
- ``dist:wasserstein``: the 1-Wasserstein distance between the real and simulated samples of a
  distribution, divided by the mean absolute real value, so that it is scale-free (scaling a
  distribution by a gives |a - 1|, like a relative error). ``dist`` is one of `DISTRIBUTIONS`.
- ``dist:ks``: the two-sample Kolmogorov-Smirnov statistic (0..1), on values rounded to
  `KS_RESOLUTION` of the largest one (see `ks_distance`).
- ``traffic_matrix:jensen_shannon``: the Jensen-Shannon distance (base 2, 0..1) between the
  two traffic matrices normalised to sum to 1, aligned on the union of their ranks.
- ``traffic_matrix:jensen_shannon_undirected``: the same on the bytes between each pair of
  ranks in both directions together (who talks with whom: a ring run the other way round,
  as gloo's is against ASTRA-SIM's, is far off directed and equal undirected).

A metric passes when its distance is at most its tolerance. A metric that cannot be measured
(NaN on either side, an empty distribution, a matrix without traffic) does not pass: its row
has distance NaN, `passed` False and a `note` saying why. To leave a metric out on purpose,
name it in `skip`; the report lists what was skipped.

**The verdict is given on the job.** Every metric declares a level (`METRICS`): *job-level*
metrics say what the training job does (bytes per iteration, the period, who talks to whom,
the duty cycle at the iteration's scale, connections per rank pair) and decide
`ValidationReport.passed`; *transport-level* metrics (sub-iteration bursts and idle gaps, the
1 ms throughput distribution, the Hurst exponent) are reported with the reason they can differ
(a token bucket, CPU-bound endpoints, TCP) and decide nothing unless `judge` names their level
too. A metric added by name through `tolerances` is judged. A report without judged rows does
not pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy.spatial.distance import jensenshannon
from scipy.stats import ks_2samp, wasserstein_distance

from simstudy.traffic.features import ANALYSES, Distribution, Features, TrafficMatrix
from simstudy.traffic.registry import JOB, TRANSPORT, Level, Metric

__all__ = [
    "DEFAULT_TOLERANCES",
    "DISTRIBUTIONS",
    "JOB",
    "KS_RESOLUTION",
    "METRICS",
    "TRANSPORT",
    "MetricComparison",
    "ValidationReport",
    "compare",
    "ks_distance",
    "matrix_distance",
    "relative_error",
    "wasserstein_relative",
]

Kind = Literal["relative", "wasserstein", "ks", "jensen_shannon"]

#: The tolerance of every compared metric, from the metrics each analysis of `ANALYSES` declares
#: (see the module docstring for how each name is measured). Override any of them with
#: `compare(..., tolerances=...)`.
DEFAULT_TOLERANCES: dict[str, float] = {m.name: m.tolerance for a in ANALYSES for m in a.metrics}
#: Every declared metric by name (tolerance, level, and what it says or why it may differ).
METRICS: dict[str, Metric] = {m.name: m for a in ANALYSES for m in a.metrics}


def _distribution(analysis: str, get: Callable[[Any], Distribution]) -> Callable[[Features], Distribution]:
    return lambda f: get(getattr(f, analysis))


#: The distributions that can be compared, by name (those the analyses offer).
DISTRIBUTIONS: dict[str, Callable[[Features], Distribution]] = {
    name: _distribution(a.name, get) for a in ANALYSES for name, get in a.distributions.items()}

_MATRIX = "traffic_matrix"
_UNDIRECTED = "jensen_shannon_undirected"
#: Values of two samples closer than this fraction of their largest magnitude are equal for KS.
KS_RESOLUTION = 1e-6


@dataclass(frozen=True)
class MetricComparison:
    """One row of a report. `real` and `simulated` are the scalar values, the means of the
    distributions, or for the matrix the number of rank pairs with traffic."""

    metric: str
    real: float
    simulated: float
    distance: float
    kind: Kind
    tolerance: float
    passed: bool
    """Its distance is within its tolerance (whether or not it is judged)."""
    note: str = ""
    """Why it could not be measured, when it could not."""
    level: Level = JOB
    judged: bool = True
    """It decides the verdict (its level is judged)."""
    why: str = ""
    """What it says about the job (job level), or why real and simulated may differ in it (transport level)."""
    fitted: str = ""
    """How the fitted compute (`validate --fit`) determines it; empty when it does not."""


@dataclass(frozen=True)
class ValidationReport:
    """The comparison of a real and a simulated trace: the verdict on the judged (job-level)
    rows, the others reported beside it."""

    rows: tuple[MetricComparison, ...]
    skipped: tuple[str, ...] = ()

    @property
    def judged(self) -> tuple[MetricComparison, ...]:
        return tuple(r for r in self.rows if r.judged)

    @property
    def reported(self) -> tuple[MetricComparison, ...]:
        """Rows that are shown but do not decide the verdict (transport level by default)."""
        return tuple(r for r in self.rows if not r.judged)

    @property
    def passed(self) -> bool:
        """Every judged row passes (and there is at least one)."""
        return bool(self.judged) and all(r.passed for r in self.judged)

    @property
    def failures(self) -> tuple[MetricComparison, ...]:
        """Judged rows that do not pass."""
        return tuple(r for r in self.judged if not r.passed)

    @property
    def verdict(self) -> str:
        """"PASS", or "FAIL (k of n job-level metrics)"."""
        if self.passed:
            return "PASS"
        return f"FAIL ({len(self.failures)} of {len(self.judged)} judged metrics)"

    def with_fit(self, determined: Mapping[str, str]) -> ValidationReport:
        """The report with the rows of `determined` (metric -> how the fit determines it) marked."""
        return replace(self, rows=tuple(replace(r, fitted=determined.get(r.metric, "")) for r in self.rows))

    def to_frame(self) -> pd.DataFrame:
        """One row per metric: metric, level, judged, real, simulated, distance, kind, tolerance,
        passed, note, why, fitted."""
        cols = ["metric", "level", "judged", "real", "simulated", "distance", "kind", "tolerance", "passed", "note",
                "why", "fitted"]
        return pd.DataFrame([[getattr(r, c) for c in cols] for r in self.rows], columns=cols)

    def to_markdown(self) -> str:
        """The judged metrics and the verdict, then the metrics reported beside it with the reason
        they may differ, then notes."""
        head = ["| metric | real | simulated | distance | tolerance | pass |", "|---|---:|---:|---:|---:|:---:|"]
        fit = any(r.fitted for r in self.rows)
        judged_head = [head[0] + " fit |", head[1] + ":---:|"] if fit else head

        def row(r: MetricComparison, mark: str) -> str:
            return (f"| {r.metric} | {_fmt(r.real)} | {_fmt(r.simulated)} | {_fmt(r.distance)} "
                    f"| {_fmt(r.tolerance)} | {mark} |")

        def judged_row(r: MetricComparison) -> str:
            text = row(r, "yes" if r.passed else "**no**")
            return text + (f" {'fitted' if r.fitted else ''} |" if fit else "")

        lines = ["Judged (what the training job does):", "", *judged_head,
                 *(judged_row(r) for r in self.judged), "", f"**{self.verdict}**"]
        if self.reported:
            lines += ["", "Reported, not judged (the transport shapes these; why they can differ below):", "",
                      "| metric | real | simulated | distance | tolerance | within |", head[1],
                      *(row(r, "yes" if r.passed else "no") for r in self.reported)]
            whys = dict.fromkeys(r.why for r in self.reported if r.why)
            lines += ["", *(f"- {', '.join(r.metric for r in self.reported if r.why == w)}: {w}" for w in whys)]
        notes = [f"- {r.metric}: {r.note}" for r in self.rows if r.note]
        notes += [f"- {r.metric} (fit): {r.fitted}" for r in self.rows if r.fitted]
        if self.skipped:
            notes.append(f"- skipped: {', '.join(self.skipped)}")
        return "\n".join([*lines, *(["", *notes] if notes else [])]) + "\n"


def _fmt(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.4g}"


# ---------------------------------------------------------------------------------------------
# distances


def relative_error(real: float, simulated: float) -> float:
    """|simulated - real| / |real|: 0 when both are 0, inf when only `real` is, NaN with a NaN."""
    if math.isnan(real) or math.isnan(simulated):
        return math.nan
    if real == simulated:
        return 0.0
    return abs(simulated - real) / abs(real) if real != 0 else math.inf


def wasserstein_relative(real: Distribution, simulated: Distribution) -> float:
    """1-Wasserstein distance / mean |real value| (NaN when either side is empty)."""
    if real.count == 0 or simulated.count == 0:
        return math.nan
    w = float(wasserstein_distance(real.values, simulated.values))
    scale = float(np.abs(real.values).mean())
    if scale > 0:
        return w / scale
    return 0.0 if w == 0 else math.inf


def ks_distance(real: Distribution, simulated: Distribution) -> float:
    """Two-sample Kolmogorov-Smirnov statistic (NaN when either side is empty).

    Values are first rounded to a grid of `KS_RESOLUTION` x the largest magnitude of either
    sample: the statistic only sees order, so float residue (1e-16 apart, or rounding noise in
    idle bins) would otherwise turn two equal point masses into a distance of 1.
    """
    if real.count == 0 or simulated.count == 0:
        return math.nan
    a, b = real.values, simulated.values
    grid = KS_RESOLUTION * max(float(np.abs(a).max()), float(np.abs(b).max()))
    if grid > 0:
        a, b = np.round(a / grid) * grid, np.round(b / grid) * grid
    return float(ks_2samp(a, b).statistic)


def matrix_distance(real: TrafficMatrix, simulated: TrafficMatrix, *, undirected: bool = False) -> float:
    """Jensen-Shannon distance (base 2) of the byte fractions on the union of both rank sets
    (NaN when either matrix has no traffic); `undirected` adds each pair's two directions."""
    if real.total == 0 or simulated.total == 0:
        return math.nan
    ranks = sorted(set(real.ranks) | set(simulated.ranks))
    p, q = _aligned(real, ranks), _aligned(simulated, ranks)
    if undirected:
        p, q = np.triu(p + p.T), np.triu(q + q.T)
    return float(jensenshannon(p.ravel(), q.ravel(), base=2))


def _aligned(m: TrafficMatrix, ranks: list[int]) -> NDArray[np.float64]:
    pos = {r: i for i, r in enumerate(ranks)}
    idx = np.array([pos[r] for r in m.ranks], dtype=np.int64)
    out = np.zeros((len(ranks), len(ranks)))
    out[np.ix_(idx, idx)] = m.fractions
    return out


# ---------------------------------------------------------------------------------------------
# the report


def _row(metric: str, kind: Kind, real: float, simulated: float, distance: float, tolerance: float,
         missing: str) -> MetricComparison:
    if math.isnan(distance):
        return MetricComparison(metric, real, simulated, math.nan, kind, tolerance, False, missing)
    return MetricComparison(metric, real, simulated, distance, kind, tolerance, distance <= tolerance)


def _judge(row: MetricComparison, judge: Collection[Level]) -> MetricComparison:
    declared = METRICS.get(row.metric)
    level = declared.level if declared is not None else JOB
    why = declared.why if declared is not None else "added by the caller"
    return replace(row, level=level, judged=level in judge or declared is None, why=why)


def _missing(real_ok: bool, sim_ok: bool, what: str) -> str:
    sides = [s for s, ok in (("real", real_ok), ("simulated", sim_ok)) if not ok]
    return f"not measurable: no {what} in the {' and '.join(sides)} trace" if sides else "not measurable"


def _compare_one(metric: str, tolerance: float, real: Features, sim: Features,
                 real_scalars: Mapping[str, float], sim_scalars: Mapping[str, float]) -> MetricComparison:
    base, _, how = metric.partition(":")
    if not how:
        r, s = real_scalars[metric], sim_scalars[metric]
        note = _missing(not math.isnan(r), not math.isnan(s), "value")
        return _row(metric, "relative", r, s, relative_error(r, s), tolerance, note)
    if base == _MATRIX:
        a, b = real.matrix, sim.matrix
        note = _missing(a.total > 0, b.total > 0, "traffic")
        return _row(metric, "jensen_shannon", float(np.count_nonzero(a.bytes)), float(np.count_nonzero(b.bytes)),
                    matrix_distance(a, b, undirected=how == _UNDIRECTED), tolerance, note)
    da, db = DISTRIBUTIONS[base](real), DISTRIBUTIONS[base](sim)
    note = _missing(da.count > 0, db.count > 0, "observations")
    if how == "wasserstein":
        return _row(metric, "wasserstein", da.mean, db.mean, wasserstein_relative(da, db), tolerance, note)
    return _row(metric, "ks", da.mean, db.mean, ks_distance(da, db), tolerance, note)


def _check_name(metric: str, scalars: Collection[str]) -> None:
    base, sep, how = metric.partition(":")
    ok = (metric in scalars if not sep else
          (base == _MATRIX and how in ("jensen_shannon", _UNDIRECTED))
          or (base in DISTRIBUTIONS and how in ("wasserstein", "ks")))
    if not ok:
        raise ValueError(
            f"unknown metric {metric!r}: use a scalar of Features.scalars(), '<distribution>:wasserstein' or "
            f"'<distribution>:ks' with a distribution in {sorted(DISTRIBUTIONS)}, or '{_MATRIX}:jensen_shannon'"
            f" or '{_MATRIX}:{_UNDIRECTED}'")


def compare(real: Features, sim: Features, *, tolerances: Mapping[str, float] | None = None,
            skip: Collection[str] = (), judge: Collection[Level] = (JOB,)) -> ValidationReport:
    """Compare a real trace's features with a simulated one's (see the module docstring).

    `tolerances` updates `DEFAULT_TOLERANCES` (a new name adds a judged metric); `skip` leaves
    metrics out; `judge`: the levels that decide the verdict (default job level only). Unknown
    metric names raise ValueError.
    """
    chosen = {**DEFAULT_TOLERANCES, **(tolerances or {})}
    real_scalars, sim_scalars = real.scalars(), sim.scalars()
    for name in [*chosen, *skip]:
        _check_name(name, real_scalars)
    for name, tol in chosen.items():
        if not tol >= 0:
            raise ValueError(f"tolerance of {name!r} must be >= 0, got {tol}")
    rows = tuple(_judge(_compare_one(m, tol, real, sim, real_scalars, sim_scalars), judge)
                 for m, tol in chosen.items() if m not in skip)
    return ValidationReport(rows, tuple(m for m in chosen if m in skip))
