"""Per-link results of a run that kept its link table (`traffic: links`, links.parquet): how much
each tier of the network carried and when, and which links were the most loaded.

Typed results only (reports and the dashboard render them): `link_loads` per link, `tier_loads`
per tier with a utilisation timeline, `link_summary` both plus the hottest links, and
`link_metrics` the scalars a sweep summary keeps.

Bytes "through a tier" are the bytes its links carried, summed over the tier's links in both
directions: a transfer from a host to a host under another ToR crosses the `nic` tier twice (up
and down) and, through a spine or core, that tier's links twice as well.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from simstudy.linktable import check_links

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class LinkLoad:
    """One link over the whole run."""

    link: int
    name: str
    tier: str
    capacity_gbps: float
    bytes: float
    mean_utilization: float
    """bytes / (capacity x the run's duration)"""
    peak_utilization: float
    """the busiest bin's utilisation"""


@dataclass(frozen=True)
class TierLoad:
    """One tier of links over the run, with its utilisation bin by bin."""

    tier: str
    links: int
    bytes: float
    mean_utilization: float
    """the tier's bytes / (its links' capacity x the run's duration)"""
    peak_link_utilization: float
    times_s: FloatArray
    """bin starts"""
    utilization: FloatArray
    """per bin: the tier's bytes / (its links' capacity x bin width)"""


@dataclass(frozen=True)
class LinkSummary:
    """Per tier and per link; `hottest` sorted by mean utilisation, busiest first."""

    duration_s: float
    bin_s: float
    tiers: tuple[TierLoad, ...]
    hottest: tuple[LinkLoad, ...]

    def tier(self, name: str) -> TierLoad | None:
        return next((t for t in self.tiers if t.tier == name), None)


def _duration(links: pd.DataFrame, duration_s: float | None) -> float:
    if duration_s is not None and duration_s > 0:
        return duration_s
    if not len(links):
        return 0.0
    return float((links["t_start_s"] + links["bin_s"]).max())


def link_loads(links: pd.DataFrame, *, duration_s: float | None = None) -> list[LinkLoad]:
    """Every link that carried traffic, busiest (by mean utilisation) first."""
    check_links(links)
    span = _duration(links, duration_s)
    if not len(links) or span <= 0:
        return []
    g = links.groupby("link", observed=True).agg(name=("name", "first"), tier=("tier", "first"),
                                                 capacity_gbps=("capacity_gbps", "first"), bytes=("bytes", "sum"),
                                                 peak=("utilization", "max"))
    mean = g["bytes"].to_numpy() * 8 / (g["capacity_gbps"].to_numpy() * 1e9 * span)
    out = [LinkLoad(int(link), str(row.name_), str(row.tier), float(row.capacity_gbps), float(row.bytes), float(m),
                    float(row.peak))
           for (link, row), m in zip(g.rename(columns={"name": "name_"}).iterrows(), mean, strict=True)]
    return sorted(out, key=lambda x: (-x.mean_utilization, x.link))


def tier_loads(links: pd.DataFrame, capacity_gbps: dict[str, tuple[int, float]], *,
               duration_s: float | None = None) -> list[TierLoad]:
    """Per tier: bytes, utilisation and its timeline. `capacity_gbps`: tier -> (links, their total
    capacity), from the topology (a link table lists only links that carried traffic)."""
    check_links(links)
    span = _duration(links, duration_s)
    bin_s = float(links["bin_s"].iloc[0]) if len(links) else 0.0
    nbins = max(int(np.ceil(span / bin_s - 1e-9)), 1) if bin_s > 0 else 1
    times = np.arange(nbins, dtype=np.float64) * bin_s
    out = []
    for tier, (count, capacity) in sorted(capacity_gbps.items()):
        rows = links[links["tier"] == tier]
        total = float(rows["bytes"].sum())
        series: FloatArray = np.zeros(nbins)
        if len(rows) and bin_s > 0:
            idx = np.clip(np.rint(rows["t_start_s"].to_numpy() / bin_s).astype(np.int64), 0, nbins - 1)
            series = np.bincount(idx, weights=rows["bytes"].to_numpy(), minlength=nbins)[:nbins].astype(np.float64)
        cap_bytes_s = capacity * 1e9 / 8
        util: FloatArray = (series / (cap_bytes_s * bin_s) if bin_s > 0 and cap_bytes_s > 0
                            else np.zeros(nbins)).astype(np.float64)
        mean = total / (cap_bytes_s * span) if span > 0 and cap_bytes_s > 0 else 0.0
        peak = float(rows["utilization"].max()) if len(rows) else 0.0
        out.append(TierLoad(tier, count, total, mean, peak, times, util))
    return out


def link_summary(links: pd.DataFrame, capacity_gbps: dict[str, tuple[int, float]], *, top: int = 10,
                 duration_s: float | None = None) -> LinkSummary:
    """Tiers and the `top` hottest links of a run's link table."""
    span = _duration(links, duration_s)
    bin_s = float(links["bin_s"].iloc[0]) if len(links) else 0.0
    return LinkSummary(span, bin_s, tuple(tier_loads(links, capacity_gbps, duration_s=span)),
                       tuple(link_loads(links, duration_s=span)[:top]))


_SAFE = re.compile(r"[^A-Za-z0-9_]+")


def link_metrics(summary: LinkSummary) -> dict[str, float]:
    """The scalars a sweep summary keeps: per tier its bytes and mean utilisation
    (`tier.<tier>.bytes`, `tier.<tier>.utilization`), and the hottest link's mean and peak."""
    out: dict[str, float] = {}
    for t in summary.tiers:
        name = _SAFE.sub("_", t.tier)
        out[f"tier.{name}.bytes"] = t.bytes
        out[f"tier.{name}.utilization"] = t.mean_utilization
    if summary.hottest:
        out["link_utilization_max"] = summary.hottest[0].mean_utilization
        out["link_peak_utilization_max"] = max(x.peak_utilization for x in summary.hottest)
    return out
