"""What a switch counter series shows at its own resolution, and how two of them compare.

A counter series (`simstudy.traffic.counters`) gives each port's bytes per sample (about 0.5 s
on Zhejiang Lab's switches), nothing finer: no flows, no ranks, no packets. So its analyses are
per port and per tier, on a regular grid of the series' own sample interval:

* **resolution**: switches may refresh a counter less often than it is read: samples of a busy
  port read 0 and the next one twice its share. The grid is the sample interval times the
  smallest k (up to `MAX_MERGE`) at which the busiest ports have no more than `HOLES` of their
  busy samples empty between two that hold `REFRESH_EXCESS` times a typical one, so that
  utilisation is not a comb of 0 and 2x (a port that pauses between bursts keeps its grid);
* **throughput timeline** of every port and tier (each sample's bytes spread over its interval,
  a sample after a gap over the whole gap);
* **utilisation**: per sample and direction, bytes x 8 / (interval x the port's speed); per port
  its mean and peak (the busier direction), per tier the distribution of every port's samples;
* **period**: the highest autocorrelation peak of a port's (or a tier's) throughput at a lag of
  at least 2 samples and at most a third of the series, with its height as the strength; none
  below `MIN_STRENGTH`. **Bytes per period**: the mean throughput x the period;
* **hottest ports** by mean utilisation, and **per-tier totals** when ports map to tiers.

`compare_counters(real, sim)` compares two of them unit by unit (ports when their names match,
else tiers): the utilisation distribution (Wasserstein, relative to the real mean), the mean
utilisation and the period, all judged; `ValidationReport` as for packet traces.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from simstudy.traffic.compare import MetricComparison, ValidationReport, relative_error, wasserstein_relative
from simstudy.traffic.counters import Counters
from simstudy.traffic.period import acf_period
from simstudy.traffic.registry import JOB, decode, encode
from simstudy.traffic.results import Distribution

__all__ = [
    "COUNTER_TOLERANCES",
    "CounterFeatures",
    "PortSummary",
    "TierSummary",
    "analyze_counters",
    "compare_counters",
]

FloatArray = NDArray[np.float64]
#: A counter refreshed less often than read: the samples around its empty ones hold this much more.
REFRESH_EXCESS: Final = 1.5
#: The grid may be this many sample intervals coarse at most.
MAX_MERGE: Final = 4
#: A busy port's samples that read 0 between two busy ones, at most this share of its busy samples.
HOLES: Final = 0.1
#: The shortest autocorrelation peak at least this share of the highest one's height is the period
#: (a periodic series peaks at every multiple of its period too, and noise may favour one of them).
MULTIPLE_SHARE: Final = 0.9
#: An autocorrelation peak below this is no period.
MIN_STRENGTH: Final = 0.2
#: Series shorter than this (samples) have their autocorrelation summed directly, longer ones by FFT.
DIRECT_SAMPLES: Final = 4096
#: Ports shown as the hottest, and in the timeline.
HOTTEST: Final = 10
#: Tolerances of `compare_counters`, by the metric's last part.
COUNTER_TOLERANCES: Final[dict[str, float]] = {"utilization:wasserstein": 0.25, "mean_utilization": 0.2,
                                               "period_s": 0.1}


@dataclass(frozen=True)
class PortSummary:
    """One port over the series."""

    key: str
    """"device:port"."""
    device: str
    port: str
    tier: str
    peer: str
    capacity_gbps: float
    rx_bytes: float
    tx_bytes: float
    mean_utilization: float
    """The busier direction's bytes / (its speed x the series' length)."""
    peak_utilization: float
    period_s: float
    period_strength: float
    bytes_per_period: float


@dataclass(frozen=True)
class TierSummary:
    """The ports of one tier together."""

    tier: str
    ports: int
    bytes: float
    """rx + tx of its ports."""
    mean_utilization: float
    period_s: float
    period_strength: float
    bytes_per_period: float
    utilization: Distribution
    """Every port's utilisation in every grid step, both directions."""


@dataclass(frozen=True)
class CounterFeatures:
    """The analyses of one counter series (see the module docstring)."""

    source: str
    format: str
    sample_s: float
    """The median interval between samples."""
    grid_s: float
    """The step of the grid the analyses use (`sample_s` x the merge the counters' refresh needs)."""
    duration_s: float
    ports: tuple[PortSummary, ...]
    tiers: tuple[TierSummary, ...]
    hottest: tuple[str, ...]
    times_s: FloatArray
    """Grid steps' starts."""
    timelines: dict[str, FloatArray]
    """Bytes per second per grid step: "tier <name>" for every tier and the hottest ports by key."""
    utilization: dict[str, Distribution]
    """Per port key: its utilisation samples (both directions)."""
    notes: tuple[str, ...] = ()

    def port(self, key: str) -> PortSummary:
        return next(p for p in self.ports if p.key == key)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {f.name: encode(getattr(self, f.name)) for f in fields(self)}
        return data

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CounterFeatures:
        hints = typing.get_type_hints(cls)
        return cls(**{f.name: decode(d[f.name], hints[f.name]) for f in fields(cls) if f.name in d})


# ---------------------------------------------------------------------------------------------
# series on a grid


def _gridded(t_end: FloatArray, interval: FloatArray, nbytes: FloatArray, step: float, n: int) -> FloatArray:
    """Bytes per grid step of [k step, (k+1) step): each sample's bytes spread evenly over its interval."""
    out = np.zeros(n)
    lo, hi = t_end - interval, t_end
    k0 = np.clip(np.floor(lo / step).astype(np.int64), 0, n - 1)
    k1 = np.clip(np.floor(np.nextafter(hi, -np.inf) / step).astype(np.int64), 0, n - 1)
    one = k0 == k1
    np.add.at(out, k0[one], nbytes[one])
    for i in np.flatnonzero(~one).tolist():
        width = hi[i] - lo[i]
        for k in range(int(k0[i]), int(k1[i]) + 1):
            overlap = min(hi[i], (k + 1) * step) - max(lo[i], k * step)
            if overlap > 0 and width > 0:
                out[k] += nbytes[i] * overlap / width
    return out


def _holes(x: FloatArray) -> float:
    """Share of the busy samples of a series that read 0 between two busy ones which carry, on
    average, at least `REFRESH_EXCESS` times a typical busy sample: a counter refreshed between
    two reads (a port that pauses between bursts reads 0 with ordinary samples around)."""
    busy = x > 0
    if busy.sum() < 3:
        return 0.0
    typical = float(np.median(x[busy]))
    around = (x[:-2] + x[2:]) / 2
    inner = ~busy[1:-1] & busy[:-2] & busy[2:] & (around >= REFRESH_EXCESS * typical)
    return float(inner.sum() / busy.sum())


def _merge(samples: list[FloatArray]) -> int:
    """The smallest k at which the busiest ports' series have few holes (see `HOLES`)."""
    for k in range(1, MAX_MERGE + 1):
        merged = [x[: len(x) // k * k].reshape(-1, k).sum(axis=1) for x in samples]
        if all(_holes(m) <= HOLES for m in merged):
            return k
    return MAX_MERGE


def _period(x: FloatArray, step: float) -> tuple[float, float]:
    """(period, strength): the shortest autocorrelation peak (`simstudy.traffic.period.acf_period`)
    at lags 2 .. n/3, of any prominence, as high as the highest (`MULTIPLE_SHARE`), refined by a
    parabola through its neighbours only; NaN and its height when below `MIN_STRENGTH`, NaN, 0 when
    there is none. The autocorrelation is summed directly below `DIRECT_SAMPLES` samples."""
    period, strength = acf_period(x, step, longest=max(3, len(x) // 3), prominence=None, positive=False,
                                  share=MULTIPLE_SHARE, refine=0, direct_below=DIRECT_SAMPLES)
    return (period if strength >= MIN_STRENGTH else math.nan), strength


# ---------------------------------------------------------------------------------------------
# analyze


def analyze_counters(c: Counters, *, merge: int | None = None) -> CounterFeatures:
    """The analyses of a counter series (see the module docstring); `merge`: use this many sample
    intervals per grid step instead of finding it (two series are compared on one grid)."""
    t = c.table
    sample = c.sample_s
    duration = float(t["t_s"].max()) if len(t) else 0.0
    n0 = max(1, math.ceil(duration / sample - 1e-9))
    groups = list(t.groupby(["device", "port"], observed=True, sort=True))
    raw: dict[str, tuple[FloatArray, FloatArray]] = {}
    info: dict[str, tuple[str, str, str, str, float]] = {}
    for (device, port), rows in groups:
        key = f"{device}:{port}"
        te, iv = rows["t_s"].to_numpy(), rows["interval_s"].to_numpy()
        raw[key] = (_gridded(te, iv, rows["rx_bytes"].to_numpy(), sample, n0),
                    _gridded(te, iv, rows["tx_bytes"].to_numpy(), sample, n0))
        info[key] = (str(device), str(port), str(rows["tier"].iloc[0]), str(rows["peer"].iloc[0]),
                     float(rows["capacity_gbps"].iloc[0]))
    busiest = sorted(raw, key=lambda k: -(raw[k][0].sum() + raw[k][1].sum()))[:8]
    k = merge or (_merge([raw[b][0] + raw[b][1] for b in busiest]) if busiest else 1)
    step = sample * k
    n = n0 // k
    notes = []
    if k > 1 and merge is None:
        notes.append(f"the counters are refreshed about every {step:.3g} s but read every {sample:.3g} s (busy ports "
                     f"read 0 in many samples and twice their share in the next): the analyses use {step:.3g} s steps")

    def coarse(x: FloatArray) -> FloatArray:
        return np.asarray(x[: n * k].reshape(n, k).sum(axis=1), dtype=np.float64)

    ports: list[PortSummary] = []
    util: dict[str, Distribution] = {}
    rates: dict[str, FloatArray] = {}
    for key, (rx, tx) in raw.items():
        device, port, tier, peer, cap = info[key]
        rx_c, tx_c = coarse(rx), coarse(tx)
        both = rx_c + tx_c
        rates[key] = both / step
        cap_bytes = cap * 1e9 / 8 * step if math.isfinite(cap) and cap > 0 else math.nan
        u_rx, u_tx = rx_c / cap_bytes, tx_c / cap_bytes
        util[key] = Distribution.of(np.concatenate([u_rx, u_tx]) if math.isfinite(cap_bytes) else np.zeros(0))
        mean_u = max(float(u_rx.mean()), float(u_tx.mean())) if n and math.isfinite(cap_bytes) else math.nan
        peak_u = max(float(u_rx.max()), float(u_tx.max())) if n and math.isfinite(cap_bytes) else math.nan
        period, strength = _period(both, step)
        per = float(both.mean() / step * period) if math.isfinite(period) else math.nan
        ports.append(PortSummary(key, device, port, tier, peer, cap, float(rx.sum()), float(tx.sum()), mean_u, peak_u,
                                 period, strength, per))
    tiers = []
    timelines: dict[str, FloatArray] = {}
    for tier in sorted({p.tier for p in ports}):
        mine = [p for p in ports if p.tier == tier]
        series = np.sum([rates[p.key] for p in mine], axis=0) * step
        period, strength = _period(series, step)
        dist = Distribution.of(np.concatenate([util[p.key].values for p in mine]))
        caps = sum(p.capacity_gbps for p in mine if math.isfinite(p.capacity_gbps))
        total = float(sum(p.rx_bytes + p.tx_bytes for p in mine))
        mean_u = total * 8 / (2 * caps * 1e9 * n * step) if caps > 0 and n else math.nan
        tiers.append(TierSummary(tier, len(mine), total, mean_u, period, strength,
                                 float(series.mean() / step * period) if math.isfinite(period) else math.nan, dist))
        timelines[f"tier {tier}"] = series / step
    hottest = tuple(p.key for p in sorted(ports, key=lambda p: -(p.mean_utilization if math.isfinite(
        p.mean_utilization) else -1.0))[:HOTTEST])
    for key in hottest:
        timelines[key] = rates[key]
    return CounterFeatures(str(c.path), c.format, sample, step, n * step, tuple(ports), tuple(tiers), hottest,
                           np.arange(n, dtype=np.float64) * step, timelines, util, tuple(notes))


# ---------------------------------------------------------------------------------------------
# compare


def _units(real: CounterFeatures, sim: CounterFeatures, by: str) -> tuple[str, list[tuple[str, str]]]:
    ports_r, ports_s = {p.key for p in real.ports}, {p.key for p in sim.ports}
    common = sorted(ports_r & ports_s)
    if by == "port" or (by == "auto" and ports_r and len(common) >= 0.5 * len(ports_r)):
        return "port", [(k, k) for k in common]
    tiers_r, tiers_s = {t.tier for t in real.tiers}, {t.tier for t in sim.tiers}
    return "tier", [(t, t) for t in sorted(tiers_r & tiers_s)]


def compare_counters(real: CounterFeatures, sim: CounterFeatures, *, by: str = "auto",
                     tolerances: Mapping[str, float] | None = None) -> ValidationReport:
    """Compare two counter series unit by unit: ports (`by="port"`, or `"auto"` when at least half
    the real ports have a simulated port of the same name) or tiers; every metric judged."""
    tol = {**COUNTER_TOLERANCES, **(tolerances or {})}
    kind, units = _units(real, sim, by)
    rows: list[MetricComparison] = []
    if not units:
        rows.append(MetricComparison(f"{kind}s", math.nan, math.nan, math.nan, "relative", 0.0, False,
                                     f"no {kind} in common between the real and the simulated counters"))
        return ValidationReport(tuple(rows))
    for a, b in units:
        if kind == "port":
            r_one: PortSummary | TierSummary = real.port(a)
            s_one: PortSummary | TierSummary = sim.port(b)
            r_u, s_u = real.utilization[a], sim.utilization[b]
        else:
            r_one = next(t for t in real.tiers if t.tier == a)
            s_one = next(t for t in sim.tiers if t.tier == b)
            r_u, s_u = r_one.utilization, s_one.utilization  # type: ignore[union-attr]
        label = f"{kind} {a}"
        w = wasserstein_relative(r_u, s_u)
        rows.append(_row(f"{label}: utilization:wasserstein", "wasserstein", r_u.mean, s_u.mean, w,
                         tol["utilization:wasserstein"]))
        rows.append(_row(f"{label}: mean_utilization", "relative", r_one.mean_utilization, s_one.mean_utilization,
                         relative_error(r_one.mean_utilization, s_one.mean_utilization), tol["mean_utilization"]))
        if math.isfinite(r_one.period_s) or math.isfinite(s_one.period_s):
            rows.append(_row(f"{label}: period_s", "relative", r_one.period_s, s_one.period_s,
                             relative_error(r_one.period_s, s_one.period_s), tol["period_s"]))
    return ValidationReport(tuple(rows))


def _row(metric: str, kind: Any, real: float, sim: float, distance: float, tolerance: float) -> MetricComparison:
    if math.isnan(distance):
        return MetricComparison(metric, real, sim, math.nan, kind, tolerance, False, "not measurable", JOB, True,
                                "what the counters show of the job at their resolution")
    return MetricComparison(metric, real, sim, distance, kind, tolerance, distance <= tolerance, "", JOB, True,
                            "what the counters show of the job at their resolution")


def counters_frame(f: CounterFeatures) -> pd.DataFrame:
    """One row per port: what `analyze_counters` found (for reports and the dashboard)."""
    return pd.DataFrame([{"port": p.key, "tier": p.tier, "peer": p.peer, "Gbit/s": p.capacity_gbps,
                          "mean util": p.mean_utilization, "peak util": p.peak_utilization,
                          "period (s)": p.period_s, "strength": p.period_strength,
                          "GB per period": p.bytes_per_period / 1e9, "GB rx": p.rx_bytes / 1e9,
                          "GB tx": p.tx_bytes / 1e9} for p in f.ports])
