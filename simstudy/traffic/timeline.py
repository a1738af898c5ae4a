"""Throughput over time: total, per rank pair, per link."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray


@dataclass(frozen=True)
class Timeline:
    """Bytes per second in fixed bins; `series` maps a label ('total', '0->1', ...) to rates."""

    bin_s: float
    t0_s: float
    series: dict[str, NDArray[np.float64]]

    @property
    def times_s(self) -> NDArray[np.float64]:
        n = len(next(iter(self.series.values()))) if self.series else 0
        return self.t0_s + self.bin_s * np.arange(n, dtype=np.float64)

    @property
    def total(self) -> NDArray[np.float64]:
        return self.series["total"]


def spread_bytes(start: NDArray[np.float64], end: NDArray[np.float64], nbytes: NDArray[np.float64],
                 t0: float, bin_s: float, nbins: int) -> NDArray[np.float64]:
    """Bytes per bin, each transfer spread evenly over [start, end] (a packet lands in one bin)."""
    out = np.zeros(nbins + 1)
    a = (start - t0) / bin_s
    b = (end - t0) / bin_s
    point = b - a < 1e-12
    if point.any():
        np.add.at(out, np.minimum(a[point].astype(np.int64), nbins - 1), nbytes[point])
    span = ~point
    if span.any():
        a, b, w = a[span], b[span], nbytes[span]
        rate = w / (b - a)
        ia = np.minimum(np.floor(a).astype(np.int64), nbins)
        ib = np.minimum(np.floor(b).astype(np.int64), nbins)
        same = ia == ib
        np.add.at(out, ia[same], w[same])
        ia, ib, a, b, rate = ia[~same], ib[~same], a[~same], b[~same], rate[~same]
        np.add.at(out, ia, rate * (ia + 1 - a))
        np.add.at(out, ib, rate * (b - ib))
        diff = np.zeros(nbins + 2)
        np.add.at(diff, ia + 1, rate)
        np.add.at(diff, ib, -rate)
        out += np.cumsum(diff)[: nbins + 1]
    return out[:nbins]


def throughput_timeline(
    table: pd.DataFrame, bin_s: float = 1e-3, *, pairs: int = 8, t0_s: float | None = None
) -> Timeline:
    """Throughput in bins of `bin_s` from `t0_s` (default: the first transfer): total and for
    the `pairs` busiest rank pairs."""
    if len(table) == 0:
        return Timeline(bin_s, 0.0, {"total": np.zeros(0)})
    key = table["src"].astype(np.int64).to_numpy() * 1_000_000 + table["dst"].astype(np.int64).to_numpy()
    return _busiest(table, bin_s, t0_s, key, lambda k: f"{k // 1_000_000}->{k % 1_000_000}", pairs)


def link_timeline(
    table: pd.DataFrame, bin_s: float = 1e-3, *, links: int = 8, t0_s: float | None = None
) -> Timeline:
    """Throughput per link (the optional `link` column) in bins of `bin_s` from `t0_s` (default:
    the first transfer): 'total' over every row, and the `links` busiest links by their label."""
    if len(table) == 0 or "link" not in table.columns:
        return throughput_timeline(table, bin_s, pairs=0, t0_s=t0_s)
    codes, labels = pd.factorize(table["link"], sort=True)
    return _busiest(table, bin_s, t0_s, codes.astype(np.int64), lambda k: str(labels[k]), links)


def _busiest(table: pd.DataFrame, bin_s: float, t0_s: float | None, group: NDArray[np.int64],
             label: Callable[[int], str], top: int) -> Timeline:
    """'total' over every row, and the `top` groups (of `group`; -1: none) with the most bytes."""
    start = table["t_start_s"].to_numpy()
    end = table["t_end_s"].to_numpy()
    nbytes = table["bytes"].to_numpy().astype(np.float64)
    t0 = float(start.min()) if t0_s is None else t0_s
    nbins = max(1, int(np.ceil((float(end.max()) - t0) / bin_s + 1e-9)))
    series = {"total": spread_bytes(start, end, nbytes, t0, bin_s, nbins) / bin_s}
    known = group >= 0
    ranked = pd.Series(nbytes[known]).groupby(group[known]).sum().sort_values(ascending=False, kind="stable")
    for k in ranked.index[:top]:
        sel = group == k
        series[label(int(k))] = spread_bytes(start[sel], end[sel], nbytes[sel], t0, bin_s, nbins) / bin_s
    return Timeline(bin_s, t0, series)


def sender_bytes(table: pd.DataFrame, bin_s: float, t0_s: float) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Bytes per bin of `bin_s` from `t0_s` of every sender (`src`): the senders in order, and a
    bins x senders array (transfers spread over their span, as in `throughput_timeline`)."""
    start = table["t_start_s"].to_numpy()
    end = table["t_end_s"].to_numpy()
    nbytes = table["bytes"].to_numpy().astype(np.float64)
    src = table["src"].to_numpy().astype(np.int64)
    senders, which = np.unique(src, return_inverse=True)
    nbins = max(1, int(np.ceil((float(end.max()) - t0_s) / bin_s + 1e-9))) if len(table) else 1
    out = np.zeros((nbins, len(senders)))
    for k in range(len(senders)):
        sel = which == k
        out[:, k] = spread_bytes(start[sel], end[sel], nbytes[sel], t0_s, bin_s, nbins)
    return senders, out
