"""Plots of typed analysis results."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from simstudy import layout
from simstudy.backends import RunResult
from simstudy.traffic.timeline import Timeline, throughput_timeline


def plot_timeline(timeline: Timeline, path: Path, *, title: str = "") -> Path:
    """Throughput over time: the total on top, the busiest rank pairs below."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def render_run(result: RunResult, out: Path) -> Path:
    """timeline.png of a run directory: 1 ms throughput, total and per rank pair."""
    span = float(result.traffic["t_end_s"].max()) if len(result.traffic) else 0.0
    bin_s = 1e-3 if span > 5e-3 else max(span / 200, 1e-7)
    return plot_timeline(throughput_timeline(result.traffic, bin_s, t0_s=0.0), out / layout.TIMELINE_PNG,
                         title=f"{result.backend}: throughput ({bin_s * 1e3:g} ms bins)")
