"""Plots of typed analysis results."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from simstudy import layout
from simstudy.backends import RunResult
from simstudy.report.files import figure, save_figure
from simstudy.traffic.timeline import Timeline, throughput_timeline


def plot_timeline(timeline: Timeline, path: Path, *, title: str = "") -> Path:
    """Throughput over time: the total on top, the busiest rank pairs below."""
    fig, (top, bottom) = figure(2, 1, figsize=(9, 5.5), sharex=True)
    t_ms = (timeline.times_s - timeline.t0_s) * 1e3
    top.plot(t_ms, timeline.total * 8 / 1e9, lw=0.8, color="black", drawstyle="steps-post")
    top.set_ylabel("total Gbit/s")
    top.set_title(title or f"throughput, {timeline.bin_s * 1e3:g} ms bins")
    for label, values in timeline.series.items():
        if label != "total":
            bottom.plot(t_ms, values * 8 / 1e9, lw=0.7, label=label, drawstyle="steps-post")
    bottom.set_ylabel("per rank pair Gbit/s")
    bottom.set_xlabel("time (ms)")
    if len(timeline.series) > 1:
        bottom.legend(fontsize=7, ncol=4, loc="upper right")
    return save_figure(fig, path, dpi=110)


def render_run(result: RunResult, out: Path) -> Path | None:
    """timeline.png of a run directory: throughput, total and per rank pair (from the traffic
    table, row group by row group, or, for a run that kept links, from the busiest links)."""
    output = result.output
    if output.mode == "none":
        return None
    if output.mode == "links":
        return _render_links(result, out)
    span = result.finish_ns * 1e-9
    bin_s = 1e-3 if span > 5e-3 else max(span / 200, 1e-7)
    return plot_timeline(_chunked_timeline(output.chunks, bin_s), out / layout.TIMELINE_PNG,
                         title=f"{result.backend}: throughput ({bin_s * 1e3:g} ms bins)")


def _chunked_timeline(chunks: Callable[[], Iterator[pd.DataFrame]], bin_s: float, pairs: int = 8) -> Timeline:
    """The throughput timeline of a table given in chunks: the total and the busiest pairs overall."""
    per_pair: pd.Series | None = None
    for t in chunks():
        pair = t["src"].astype(np.int64) * 1_000_000 + t["dst"].astype(np.int64)
        s = t["bytes"].groupby(pair).sum()
        per_pair = s if per_pair is None else per_pair.add(s, fill_value=0)
    ranked = [] if per_pair is None else per_pair.sort_values(ascending=False, kind="stable").index[:pairs].tolist()
    top = set(ranked)
    series: dict[str, NDArray[np.float64]] = {}
    for t in chunks():
        if not len(t):
            continue
        parts = [throughput_timeline(t, bin_s, pairs=0, t0_s=0.0)]
        key = t["src"].astype(np.int64).to_numpy() * 1_000_000 + t["dst"].astype(np.int64).to_numpy()
        sel = np.isin(key, list(top))
        if sel.any():
            parts.append(throughput_timeline(t[sel], bin_s, pairs=pairs, t0_s=0.0))
        for tl in parts:
            for label, values in tl.series.items():
                if label == "total" and tl is not parts[0]:
                    continue
                have = series.get(label)
                if have is None or len(have) < len(values):
                    grown = np.zeros(len(values))
                    if have is not None:
                        grown[: len(have)] = have
                    have = series[label] = grown
                have[: len(values)] += values
    if not series:
        return throughput_timeline(pd.DataFrame(), bin_s)
    n = max(len(v) for v in series.values())
    return Timeline(bin_s, 0.0, {k: np.pad(v, (0, n - len(v))) for k, v in series.items()})


def _render_links(result: RunResult, out: Path) -> Path | None:
    """Throughput of the busiest links (and of them all, summed) from a run's link table."""
    links = result.links
    if links is None or not len(links):
        return None
    bin_s = float(links["bin_s"].iloc[0])
    bins = np.rint(links["t_start_s"].to_numpy() / bin_s).astype(np.int64)
    n = int(bins.max()) + 1
    total = np.bincount(bins, weights=links["bytes"].to_numpy(), minlength=n) / bin_s
    series = {"total": total}
    busiest = links.groupby("name", observed=True)["bytes"].sum().sort_values(ascending=False, kind="stable")
    for name in busiest.index[:8]:
        sel = (links["name"] == name).to_numpy()
        series[str(name)] = np.bincount(bins[sel], weights=links["bytes"].to_numpy()[sel], minlength=n) / bin_s
    return plot_timeline(Timeline(bin_s, 0.0, series), out / layout.TIMELINE_PNG,
                         title=f"{result.backend}: bytes on links, all links summed and the busiest "
                               f"({bin_s * 1e3:g} ms bins)")
