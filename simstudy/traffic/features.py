"""The analysis pipeline: the same numbers from simulated transfers and from captured packets.

Every analysis is a function from a TrafficTable to a frozen dataclass (compute first; plots in
`simstudy.report` consume these results). `analyze` runs them all once and returns `Features`,
which flattens to named scalars (`Features.scalars()`: sweep summary columns, clustering
features) and round-trips through JSON (`features.json`), so that `compare` needs nothing else.

Conventions, stated once:

- Training traffic only. Rows whose `op` is ``"control"`` (heartbeats, rendezvous, capture
  bookkeeping) and rows to or from an endpoint without a rank (-1) are dropped before any
  metric (`training_rows`).
- Whole iterations only. Without iteration marks, the iterations are found from the traffic
  (`simstudy.traffic.iterations`), and every metric but the timelines (which show the whole
  trace) looks at the steady window of whole iterations (`Period.window_s`): setup traffic and
  partial iterations at either end do not count.
- Throughput series are bytes per second, as in `Timeline`. Scalar names ending in ``_bps``
  are **bits** per second (network convention, like `bandwidth_gbps` in the specs).
- The timeline starts at the first training transfer (not at time zero), so that a capture and
  a simulation of the same job line up. Metrics that need a series use its 1 ms total.
- Distributions (`Distribution`) keep the count and mean of every observation, 21 quantiles
  (0, 5, ..., 100 %), and at most `MAX_VALUES` values for distances: every observation when
  there are that few, else `MAX_VALUES` evenly spaced quantiles (deterministic). `Features`
  holds the summarised form already, so a comparison gives the same numbers from memory and
  from features.json.
- A flow is one (`flow`, `src`, `dst`) triple: a directional 5-tuple in a capture, one
  collective chunk between two ranks in a simulation.
- Ranks are what the table says; `Features.roles` says which are workers and which parameter
  servers (given by the source, or found from the table by `simstudy.traffic.roles`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from simstudy.traffic.iterations import Iterations, find_iterations
from simstudy.traffic.per_iteration import (
    Boundaries,
    BytesPerIteration,
    Period,
    Runs,
    bytes_per_iteration,
    iteration_groups,
    iteration_period,
    marked_runs,
    per_iteration_bytes,
    period_from,
)
from simstudy.traffic.registry import JOB, TRANSPORT, Analysis, Context, Metric
from simstudy.traffic.results import (
    CONTROL_OP,
    MAX_VALUES,
    ON_THRESHOLD,
    QUANTILE_LEVELS,
    Distribution,
    ValueEq,
    training_rows,
)
from simstudy.traffic.roles import Roles, classify, with_iterations
from simstudy.traffic.timeline import Timeline, link_timeline, throughput_timeline

__all__ = [
    "ANALYSES",
    "CONTROL_OP",
    "MAX_VALUES",
    "ON_THRESHOLD",
    "QUANTILE_LEVELS",
    "Boundaries",
    "BytesPerIteration",
    "Distribution",
    "Features",
    "FlowStats",
    "IterationProfile",
    "OnOff",
    "Period",
    "TrafficMatrix",
    "analyze",
    "bytes_per_iteration",
    "flow_stats",
    "hurst",
    "iteration_period",
    "iteration_profile",
    "iteration_starts",
    "on_off",
    "rebin",
    "traffic_matrix",
    "training_rows",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: A bin with fewer bytes than this is never on, whatever the threshold (what is left of
#: rounding when transfers are spread over bins).
MIN_ON_BYTES = 0.5
#: Hurst estimate: needs this many bins; aggregation levels m go from 1 to n / HURST_MIN_BLOCKS
#: (at least that many blocks per level), HURST_LEVELS of them, log-spaced.
HURST_MIN_BINS = 100
HURST_MIN_BLOCKS = 10
HURST_LEVELS = 20
#: The iteration-scale duty cycle bins the steady window in this many bins per period, and
#: counts a bin busy above this fraction of the busiest bin.
ITERATION_BINS = 20
ITERATION_ON = 0.1
#: `Features.to_json` format tag.
FORMAT = "simstudy.features/2"


# ---------------------------------------------------------------------------------------------
# result types (`Distribution`, `Period` and `BytesPerIteration` are defined beside their analyses)


def _floats(a: ArrayLike) -> FloatArray:
    return np.asarray(a, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class TrafficMatrix(ValueEq):
    """Bytes sent between ranks: `bytes[i, j]` from `ranks[i]` to `ranks[j]`."""

    ranks: tuple[int, ...]
    bytes: IntArray

    @property
    def total(self) -> int:
        return int(self.bytes.sum())

    @property
    def fractions(self) -> FloatArray:
        """`bytes` normalised to sum to 1 (all zeros when there is no traffic)."""
        total = self.total
        return self.bytes / total if total else np.zeros(self.bytes.shape)

    def to_json(self) -> dict[str, Any]:
        return {"ranks": list(self.ranks), "bytes": self.bytes.tolist()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TrafficMatrix:
        ranks = tuple(int(r) for r in d["ranks"])
        return cls(ranks, np.asarray(d["bytes"], dtype=np.int64).reshape(len(ranks), len(ranks)))


@dataclass(frozen=True, eq=False)
class OnOff(ValueEq):
    """Bursts: maximal runs of bins whose throughput exceeds `threshold_bytes_per_s`.

    Idle periods are the gaps between bursts (so one fewer than bursts). The duty cycle is
    the on fraction over whole on/off cycles (first burst start to last burst start), so a trace
    that stops right after a burst is not biased; with a single burst it is the on fraction of
    the whole timeline. Bytes in bins below the threshold belong to no burst.
    """

    bin_s: float
    threshold: float
    """Fraction of the peak bin that defines "on"."""
    threshold_bytes_per_s: float
    duty_cycle: float
    peak_bytes_per_s: float
    mean_bytes_per_s: float
    peak_to_mean: float
    rates: Distribution
    """Throughput of every bin, bytes per second."""
    bursts: Distribution
    """Burst durations, seconds."""
    idles: Distribution
    """Idle durations, seconds."""
    burst_bytes: Distribution
    """Bytes per burst."""


@dataclass(frozen=True, eq=False)
class FlowStats(ValueEq):
    """Flows (one per (`flow`, `src`, `dst`)): count, sizes, durations, flows per rank pair."""

    count: int
    sizes: Distribution
    """Bytes per flow."""
    durations: Distribution
    """Last end - first start of each flow, seconds (0 for a one-packet flow)."""
    per_pair: dict[str, int]
    """Flows per rank pair, labelled "src->dst" as in `Timeline`."""


def rebin(timeline: Timeline, factor: int) -> Timeline:
    """`timeline` in bins `factor` times wider (rates averaged; the last bin padded with zeros)."""
    if factor < 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
    if factor == 1:
        return timeline
    series = {}
    for k, v in timeline.series.items():
        n = -(-len(v) // factor)
        padded = np.zeros(n * factor)
        padded[: len(v)] = v
        series[k] = padded.reshape(n, factor).mean(axis=1)
    return Timeline(timeline.bin_s * factor, timeline.t0_s, series)


def _timeline_to_json(tl: Timeline) -> dict[str, Any]:
    n = len(tl.total) if "total" in tl.series else 0
    capped = rebin(tl, max(1, -(-n // MAX_VALUES)))
    return {"bin_s": capped.bin_s, "t0_s": capped.t0_s, "series": {k: v.tolist() for k, v in capped.series.items()}}


def _timeline_from_json(d: Mapping[str, Any]) -> Timeline:
    return Timeline(float(d["bin_s"]), float(d["t0_s"]), {str(k): _floats(v) for k, v in d["series"].items()})


@dataclass(frozen=True, eq=False)
class Features(ValueEq):
    """Everything `analyze` measures on one table (training rows only)."""

    roles: Roles
    """Who is who: workers, parameter servers, control endpoints, and the evidence."""
    ranks: tuple[int, ...]
    """Every rank that sends or receives training traffic."""
    rows: int
    total_bytes: int
    duration_s: float
    """Last end - first start of the training rows (0 when empty)."""
    timeline_1ms: Timeline
    """1 ms throughput: total and the 8 busiest rank pairs."""
    timeline_10ms: Timeline
    """The same in 10 ms bins (the 1 ms timeline averaged over blocks of ten)."""
    link_timeline_1ms: Timeline | None
    """Per `link` (the 8 busiest) when the table has a link column, else None."""
    link_timeline_10ms: Timeline | None
    matrix: TrafficMatrix
    period: Period
    bytes_per_iteration: BytesPerIteration
    on_off: OnOff
    flows: FlowStats
    hurst: float
    """Aggregated-variance Hurst exponent of the 1 ms throughput (NaN when too short)."""
    duty_iteration: float
    """Fraction of the steady window the network is busy, in bins of a twentieth of the period
    (`ITERATION_BINS`; a bin is busy above `ITERATION_ON` of the busiest one): the duty cycle a
    person sees in a plot of whole iterations, where TCP's sub-millisecond gaps do not show."""

    def scalars(self) -> dict[str, float]:
        """The scalar metrics, flat (sweep summary columns, clustering features); `_bps` = bits/s.
        Each analysis of `ANALYSES` contributes its own, in table order."""
        out: dict[str, float] = {}
        for a in ANALYSES:
            out.update({k: float(v) for k, v in a.scalars(getattr(self, a.name)).items()})
        return out

    def distributions(self) -> dict[str, Distribution]:
        """The distributions that metrics can compare ('<name>:wasserstein', '<name>:ks')."""
        return {name: get(getattr(self, a.name)) for a in ANALYSES for name, get in a.distributions.items()}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN as null). Timelines longer than `MAX_VALUES` bins are stored
        rebinned to at most that many, so `from_json(f.to_json()) == f` holds exactly when every
        timeline is that short, and `to_json` of the result always equals `f.to_json()`."""
        return {"format": FORMAT, **{a.name: a.to_json(getattr(self, a.name)) for a in ANALYSES}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Features:
        if d.get("format") != FORMAT:
            raise ValueError(f"not a features document (format {d.get('format')!r}, expected {FORMAT!r})")
        missing = [a.name for a in ANALYSES if a.name not in d]
        if missing:
            raise ValueError(f"features document without {', '.join(missing)}")
        return cls(**{a.name: a.from_json(d[a.name]) for a in ANALYSES})


# ---------------------------------------------------------------------------------------------
# the analyses (`training_rows`: `simstudy.traffic.results`; the period and the bytes per iteration:
# `simstudy.traffic.per_iteration`)


def _rank_index(src: NDArray[Any], dst: NDArray[Any]) -> tuple[IntArray, IntArray, IntArray]:
    """The sorted ranks present in src or dst, and src/dst as indices into them."""
    if len(src) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    lo, hi = int(min(src.min(), dst.min())), int(max(src.max(), dst.max()))
    if lo >= 0 and hi < 1 << 20:
        seen = (np.bincount(src, minlength=hi + 1) + np.bincount(dst, minlength=hi + 1)) > 0
        ranks = np.flatnonzero(seen).astype(np.int64)
        lookup = np.cumsum(seen) - 1
        return ranks, lookup[src].astype(np.int64), lookup[dst].astype(np.int64)
    ranks, inv = np.unique(np.concatenate([src, dst]).astype(np.int64), return_inverse=True)
    return ranks, inv[: len(src)].astype(np.int64), inv[len(src):].astype(np.int64)


def _matrix(ranks: IntArray, si: IntArray, di: IntArray, nbytes: IntArray) -> TrafficMatrix:
    r = len(ranks)
    if r == 0:
        return TrafficMatrix((), np.zeros((0, 0), dtype=np.int64))
    counts = np.bincount(si * r + di, weights=nbytes.astype(np.float64), minlength=r * r)
    return TrafficMatrix(tuple(int(x) for x in ranks), np.rint(counts).astype(np.int64).reshape(r, r))


def traffic_matrix(table: pd.DataFrame) -> TrafficMatrix:
    """Bytes between every pair of ranks (training rows)."""
    rows = training_rows(table)
    ranks, si, di = _rank_index(rows["src"].to_numpy(), rows["dst"].to_numpy())
    return _matrix(ranks, si, di, rows["bytes"].to_numpy())


# --- on/off ----------------------------------------------------------------------------------


def _on_off(rates: FloatArray, bin_s: float, threshold: float) -> OnOff:
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold is a fraction of the peak bin in [0, 1), got {threshold}")
    n = len(rates)
    peak = float(rates.max()) if n else 0.0
    mean = float(rates.mean()) if n else math.nan
    level = max(threshold * peak, MIN_ON_BYTES / bin_s)
    on = rates > level
    d = np.diff(np.concatenate([[0], on, [0]]).astype(np.int8))
    s, e = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    cum = np.concatenate([[0.0], np.cumsum(rates) * bin_s])
    burst_bins, idle_bins = e - s, s[1:] - e[:-1]
    if len(s) >= 2:
        duty = float(burst_bins[:-1].sum()) / float(s[-1] - s[0])
    elif len(s) == 1:
        duty = float(burst_bins[0]) / n
    else:
        duty = math.nan
    return OnOff(
        bin_s=bin_s, threshold=threshold, threshold_bytes_per_s=level, duty_cycle=duty,
        peak_bytes_per_s=peak, mean_bytes_per_s=mean, peak_to_mean=peak / mean if mean > 0 else math.nan,
        rates=Distribution.of(rates), bursts=Distribution.of(burst_bins * bin_s),
        idles=Distribution.of(idle_bins * bin_s), burst_bytes=Distribution.of(cum[e] - cum[s]),
    )


def on_off(table: pd.DataFrame, *, bin_s: float = 1e-3, threshold: float = ON_THRESHOLD) -> OnOff:
    """Bursts and idle periods of the total throughput in `bin_s` bins (see `OnOff`).

    A bin is on when its throughput exceeds `threshold` x the peak bin (default
    `ON_THRESHOLD`, 1 %); `threshold=0` counts any bin with bytes as on (at least
    `MIN_ON_BYTES`: rounding residue of transfers spread over bins is not traffic).
    """
    rows = training_rows(table)
    return _on_off(throughput_timeline(rows, bin_s, pairs=0).total, bin_s, threshold)


# --- flows -----------------------------------------------------------------------------------


def _flow_stats(rows: pd.DataFrame, ranks: IntArray, si: IntArray, di: IntArray) -> FlowStats:
    if len(rows) == 0:
        return FlowStats(0, Distribution.of([]), Distribution.of([]), {})
    r = max(1, len(ranks))
    codes, _ = pd.factorize(rows["flow"].to_numpy(), sort=False)
    g, uniq = pd.factorize(codes.astype(np.int64) * (r * r) + si * r + di, sort=False)
    count = len(uniq)
    sizes = np.bincount(g, weights=rows["bytes"].to_numpy().astype(np.float64), minlength=count)
    first = np.full(count, np.inf)
    last = np.full(count, -np.inf)
    np.minimum.at(first, g, rows["t_start_s"].to_numpy())
    np.maximum.at(last, g, rows["t_end_s"].to_numpy())
    pair = np.asarray(uniq, dtype=np.int64) % (r * r)
    per_pair = np.bincount(pair, minlength=r * r)
    labels = {f"{ranks[p // r]}->{ranks[p % r]}": int(per_pair[p]) for p in np.flatnonzero(per_pair)}
    return FlowStats(count, Distribution.of(sizes), Distribution.of(last - first), labels)


def flow_stats(table: pd.DataFrame) -> FlowStats:
    """Flows of the training rows: one per (`flow`, `src`, `dst`)."""
    rows = training_rows(table)
    ranks, si, di = _rank_index(rows["src"].to_numpy(), rows["dst"].to_numpy())
    return _flow_stats(rows, ranks, si, di)


# --- self-similarity -------------------------------------------------------------------------


def _hurst(x: FloatArray) -> float:
    n = len(x)
    if n < HURST_MIN_BINS:
        return math.nan
    levels = np.unique(np.floor(np.logspace(0.0, math.log10(n // HURST_MIN_BLOCKS), HURST_LEVELS)).astype(np.int64))
    var = np.array([x[: (n // m) * m].reshape(n // m, m).mean(axis=1).var(ddof=1) for m in levels])
    ok = var > 0
    if ok.sum() < 3:
        return math.nan
    slope = np.polyfit(np.log(levels[ok]), np.log(var[ok]), 1)[0]
    return float(1.0 + slope / 2.0)


def hurst(table: pd.DataFrame, *, bin_s: float = 1e-3) -> float:
    """Hurst exponent of the total throughput in `bin_s` bins, by aggregated variance.

    For m in `HURST_LEVELS` log-spaced block sizes from 1 to n / `HURST_MIN_BLOCKS` bins, the
    variance of the block means; H = 1 + slope / 2 of log variance against log m (0.5 for
    independent bins, towards 1 for long-range dependence). NaN with fewer than
    `HURST_MIN_BINS` bins or a constant series. Strictly periodic traffic gives low, even
    negative values: once blocks span whole iterations, their means hardly vary.
    """
    rows = training_rows(table)
    return _hurst(throughput_timeline(rows, bin_s, pairs=0).total)


# --- the table of analyses --------------------------------------------------------------------


class _Shared(Context):
    """The series several analyses use, each computed once."""

    def __init__(self, table: pd.DataFrame, boundaries: Boundaries | None, roles: Roles | None) -> None:
        super().__init__(_BY_NAME)
        self.table = table
        self.boundaries = boundaries
        self.given_roles = roles

    @cached_property
    def rows(self) -> pd.DataFrame:
        return training_rows(self.table)

    @cached_property
    def timeline(self) -> Timeline:
        """Total and per-pair throughput of all training rows in 1 ms bins (plots, 10 ms)."""
        return throughput_timeline(self.rows, 1e-3)

    @cached_property
    def links(self) -> Timeline | None:
        rows = self.rows
        return link_timeline(rows, 1e-3, t0_s=self.timeline.t0_s) if "link" in rows.columns and len(rows) else None

    @cached_property
    def groups(self) -> pd.DataFrame | None:
        return iteration_groups(self.rows)

    @cached_property
    def runs(self) -> tuple[Runs | None, str]:
        return marked_runs(self.rows, self.boundaries, self.groups)

    @cached_property
    def found(self) -> Iterations | None:
        """Iterations found from the traffic (None when the table marks them)."""
        return None if self.runs[0] else find_iterations(self.rows)

    @cached_property
    def steady(self) -> pd.DataFrame:
        """The training rows of whole steady iterations: the table's own with iteration marks,
        else those in the window of the iterations found (all rows when none was found)."""
        found = self.found
        if found is None or not found.count:
            return self.rows
        lo, hi = found.window_s
        t = self.rows["t_start_s"].to_numpy()
        return self.rows[(t >= lo) & (t < hi)]

    @cached_property
    def rates(self) -> FloatArray:
        """Total throughput of the steady rows in 1 ms bins (on/off, Hurst)."""
        return throughput_timeline(self.steady, 1e-3, pairs=0).total

    @cached_property
    def index(self) -> tuple[IntArray, IntArray, IntArray]:
        return _rank_index(self.steady["src"].to_numpy(), self.steady["dst"].to_numpy())


def _roles(c: _Shared) -> Roles:
    roles = c.given_roles if c.given_roles is not None else classify(c.table, renumber_ranks=False)[0]
    found = c.found
    if found is not None and found.count:  # periodicity evidence: bytes in every whole iteration
        roles = with_iterations(roles, found.senders, found.sender_bytes)
    return roles


def _duration(rows: pd.DataFrame) -> float:
    return float(rows["t_end_s"].max() - rows["t_start_s"].min()) if len(rows) else 0.0


def _duty_iteration(c: _Shared) -> float:
    period = c.get("period").period_s
    rows = c.steady
    if not (math.isfinite(period) and period > 0) or len(rows) == 0:
        return math.nan
    bin_s = max(1e-3, period / ITERATION_BINS)
    rates = throughput_timeline(rows, bin_s, pairs=0).total
    return float(np.mean(rates > ITERATION_ON * rates.max())) if rates.max() > 0 else math.nan


def _flows_per_pair(f: FlowStats) -> float:
    return float(np.mean(list(f.per_pair.values()))) if f.per_pair else math.nan


def _timeline_analysis(name: str, compute: Callable[[_Shared], Timeline | None]) -> Analysis[Timeline | None]:
    return Analysis(name, compute, Timeline | None, encode=lambda t: None if t is None else _timeline_to_json(t),
                    decode=lambda d: None if d is None else _timeline_from_json(d))


_SUB_ITERATION = ("shaped within an iteration by TCP's windows and retransmissions, a token bucket's pacing and "
                  "CPU-bound endpoints, which a simulator of the job does not model")
_TRACE_LENGTH = "depends on how many iterations each trace holds and on how a framework opens connections"

#: Every analysis `analyze` runs, in order (see `simstudy.traffic.registry.Analysis`). Each name
#: is a field of `Features`.
ANALYSES: tuple[Analysis[Any], ...] = (
    Analysis("roles", _roles, Roles,
             scalars=lambda r: {"worker_count": len(r.workers), "server_count": len(r.servers)}),
    Analysis("ranks", lambda c: tuple(int(r) for r in c.index[0]), tuple[int, ...],
             scalars=lambda r: {"rank_count": len(r)}),
    Analysis("rows", lambda c: len(c.rows), int, scalars=lambda n: {"rows": n}),
    Analysis("total_bytes", lambda c: int(c.rows["bytes"].sum()), int, scalars=lambda b: {"total_bytes": b}),
    Analysis("duration_s", lambda c: _duration(c.rows), float, scalars=lambda d: {"duration_s": d}),
    _timeline_analysis("timeline_1ms", lambda c: c.timeline),
    _timeline_analysis("timeline_10ms", lambda c: rebin(c.timeline, 10)),
    _timeline_analysis("link_timeline_1ms", lambda c: c.links),
    _timeline_analysis("link_timeline_10ms", lambda c: None if c.links is None else rebin(c.links, 10)),
    Analysis("matrix", lambda c: _matrix(c.index[0], c.index[1], c.index[2], c.steady["bytes"].to_numpy()),
             TrafficMatrix, metrics=(
        Metric("traffic_matrix:jensen_shannon", 0.10, TRANSPORT,
               "a ring all-reduce may run either way round (gloo sends to rank - 1, ASTRA-SIM to rank + 1): who "
               "talks with whom is judged on the undirected matrix"),
        Metric("traffic_matrix:jensen_shannon_undirected", 0.10, JOB, "who talks with whom, either direction"),
    )),
    Analysis("period", lambda c: period_from(c.timeline.total, 1e-3, c.runs[0], c.runs[1], c.found), Period,
             scalars=lambda p: {"period_s": p.period_s, "period_strength": p.strength},
             metrics=(Metric("period_s", 0.10, JOB, "the iteration time"),)),
    Analysis("bytes_per_iteration",
             lambda c: per_iteration_bytes(c.rows, c.groups, c.timeline.total, 1e-3, c.get("period").period_s,
                                            c.get("roles").workers, c.found),
             BytesPerIteration, scalars=lambda b: {"iterations": b.iterations, "bytes_per_iter_mean": b.mean,
                                                   "bytes_per_iter_total": b.total},
             metrics=(Metric("bytes_per_iter_mean", 0.10, JOB, "what each worker sends per iteration"),
                      Metric("bytes_per_iter_total", 0.10, JOB, "what all workers and servers send per iteration"))),
    Analysis("on_off", lambda c: _on_off(c.rates, 1e-3, ON_THRESHOLD), OnOff,
             scalars=lambda o: {
                 "duty_cycle": o.duty_cycle, "peak_to_mean": o.peak_to_mean, "burst_count": o.bursts.count,
                 "burst_mean_s": o.bursts.mean, "idle_mean_s": o.idles.mean, "burst_bytes_mean": o.burst_bytes.mean,
                 "throughput_mean_bps": 8.0 * o.mean_bytes_per_s, "throughput_p99_bps": 8.0 * o.rates.quantile(0.99),
                 "throughput_peak_bps": 8.0 * o.peak_bytes_per_s},
             distributions={"throughput_1ms": lambda o: o.rates, "burst_s": lambda o: o.bursts,
                            "burst_bytes": lambda o: o.burst_bytes, "idle_s": lambda o: o.idles},
             metrics=(
                 Metric("throughput_mean_bps", 0.20, JOB, "bytes per second over whole iterations"),
                 Metric("duty_cycle", 0.20, TRANSPORT, f"on/off in 1 ms bins is {_SUB_ITERATION}"),
                 Metric("peak_to_mean", 0.30, TRANSPORT, f"the busiest 1 ms bin is {_SUB_ITERATION}"),
                 Metric("burst_mean_s", 0.25, TRANSPORT, f"sub-iteration bursts are {_SUB_ITERATION}"),
                 Metric("idle_mean_s", 0.25, TRANSPORT, f"sub-iteration idle gaps are {_SUB_ITERATION}"),
                 Metric("burst_bytes_mean", 0.20, TRANSPORT, f"sub-iteration bursts are {_SUB_ITERATION}"),
                 Metric("throughput_1ms:wasserstein", 0.30, TRANSPORT, f"1 ms throughput is {_SUB_ITERATION}"),
                 Metric("throughput_1ms:ks", 0.30, TRANSPORT, f"1 ms throughput is {_SUB_ITERATION}"),
                 Metric("burst_s:wasserstein", 0.30, TRANSPORT, f"sub-iteration bursts are {_SUB_ITERATION}"),
                 Metric("burst_s:ks", 0.30, TRANSPORT, f"sub-iteration bursts are {_SUB_ITERATION}"),
                 Metric("burst_bytes:wasserstein", 0.30, TRANSPORT, f"sub-iteration bursts are {_SUB_ITERATION}"),
                 Metric("burst_bytes:ks", 0.30, TRANSPORT, f"sub-iteration bursts are {_SUB_ITERATION}"),
                 Metric("idle_s:wasserstein", 0.30, TRANSPORT, f"sub-iteration idle gaps are {_SUB_ITERATION}"),
                 Metric("idle_s:ks", 0.30, TRANSPORT, f"sub-iteration idle gaps are {_SUB_ITERATION}"),
             )),
    Analysis("flows", lambda c: _flow_stats(c.steady, *c.index), FlowStats,
             scalars=lambda f: {"flow_count": f.count, "flow_size_median": f.sizes.median,
                                "flow_duration_median_s": f.durations.median, "flows_per_pair": _flows_per_pair(f)},
             distributions={"flow_size": lambda f: f.sizes},
             metrics=(Metric("flows_per_pair", 0.25, JOB, "connections between each pair of ranks"),
                      Metric("flow_size:wasserstein", 0.30, TRANSPORT, f"bytes per flow {_TRACE_LENGTH}"),
                      Metric("flow_size:ks", 0.30, TRANSPORT, f"bytes per flow {_TRACE_LENGTH}"))),
    Analysis("hurst", lambda c: _hurst(c.rates), float, scalars=lambda h: {"hurst": h},
             metrics=(Metric("hurst", 0.15, TRANSPORT, f"the Hurst exponent of 1 ms throughput is {_SUB_ITERATION}"),)),
    Analysis("duty_iteration", _duty_iteration, float, scalars=lambda d: {"duty_cycle_iteration": d},
             metrics=(Metric("duty_cycle_iteration", 0.20, JOB,
                             "the fraction of each iteration the network is busy, at the iteration's scale"),)),
)
_BY_NAME: dict[str, Analysis[Any]] = {a.name: a for a in ANALYSES}


@dataclass(frozen=True, eq=False)
class IterationProfile(ValueEq):
    """Throughput through each whole iteration, aligned at its start: what a person compares when
    two traces of the same job are laid over each other one iteration at a time."""

    offsets_s: FloatArray
    """Time since the iteration's start of every bin (its left edge)."""
    curves: FloatArray
    """Bytes per second: iterations x bins (NaN past the trace's end)."""
    starts_s: FloatArray
    """Start of each iteration (table time)."""

    @property
    def mean(self) -> FloatArray:
        """The mean curve over iterations (zeros when there are none)."""
        if len(self.curves) == 0:
            return np.zeros(len(self.offsets_s))
        return np.asarray(np.nanmean(self.curves, axis=0), dtype=np.float64)


def iteration_starts(period: Period) -> FloatArray:
    """One start per iteration: marks of several workers within a tenth of a period are one start."""
    s = np.sort(period.starts_s)
    if len(s) == 0 or not math.isfinite(period.period_s):
        return s
    keep = np.concatenate([[True], np.diff(s) > 0.1 * period.period_s])
    return np.asarray(s[keep], dtype=np.float64)


def iteration_profile(f: Features, *, span_s: float | None = None, bins: int = 200) -> IterationProfile:
    """The 1 ms timeline of `f` cut at every iteration start (`iteration_starts`) into `span_s`
    long pieces (default: its period), averaged into `bins` bins each."""
    starts = iteration_starts(f.period)
    span = span_s if span_s is not None else f.period.period_s
    tl = f.timeline_1ms
    if len(starts) == 0 or not (math.isfinite(span) and span > 0) or "total" not in tl.series:
        return IterationProfile(np.zeros(0), np.zeros((0, 0)), starts)
    width = max(tl.bin_s, span / bins)
    edges = np.arange(0.0, span + 1e-12, width)
    rate = tl.total
    t = tl.times_s
    curves = np.full((len(starts), len(edges)), math.nan)
    for k, s in enumerate(starts):
        idx = np.floor((t - s) / width).astype(np.int64)
        sel = (idx >= 0) & (idx < len(edges))
        if sel.any():
            curves[k] = np.bincount(idx[sel], weights=rate[sel], minlength=len(edges)) / np.maximum(
                np.bincount(idx[sel], minlength=len(edges)), 1)
            last = int(idx[sel].max())
            curves[k, last + 1:] = math.nan
    return IterationProfile(edges, curves, starts)


def analyze(table: pd.DataFrame, *, boundaries: Boundaries | None = None, roles: Roles | None = None) -> Features:
    """Every analysis of `ANALYSES` on the training rows of `table` (shared series computed once).

    `roles`: who is who, as the table's source knows it (a capture's `TrafficSource.roles`);
    default: classified from the table (`simstudy.traffic.roles.classify`, ranks kept)."""
    ctx = _Shared(table, boundaries, roles)
    return Features(**{a.name: ctx.get(a.name) for a in ANALYSES})
