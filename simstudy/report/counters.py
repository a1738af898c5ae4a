"""Reports of a switch counter series (`simstudy analyze COUNTERS`) and of its validation against
a simulation (`simstudy validate --real COUNTERS --spec S`): markdown, features and plots."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from simstudy import layout
from simstudy.report.files import figure, save_figure, write_text
from simstudy.traffic.counter_features import CounterFeatures, counters_frame
from simstudy.validation import CounterValidation

#: Plots of a counter series.
COUNTER_TIMELINE = "counters_timeline.png"
COUNTER_UTILIZATION = "utilization.png"


def plot_counter_timelines(features: dict[str, CounterFeatures], path: Path) -> Path:
    """Throughput of every tier (and the hottest ports of the first series) over time."""
    fig, ax = figure(figsize=(11, 3.6))
    for label, f in features.items():
        for name, rates in f.timelines.items():
            if name.startswith("tier ") or len(features) == 1:
                ax.plot(f.times_s, rates * 8 / 1e9, lw=0.8, label=f"{label}: {name}" if len(features) > 1 else name)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("Gbit/s")
    ax.set_title(f"throughput per {next(iter(features.values())).grid_s:.3g} s step", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    return save_figure(fig, path)


def plot_utilization(features: dict[str, CounterFeatures], path: Path) -> Path:
    """CDF of the utilisation samples of every tier, one line per series and tier."""
    fig, ax = figure(figsize=(6.5, 3.6))
    for label, f in features.items():
        for t in f.tiers:
            if t.utilization.count:
                v = t.utilization.values
                ax.plot(v, np.linspace(0, 1, len(v)), drawstyle="steps-post", label=f"{label}: {t.tier}")
    ax.set_xlabel("utilisation per step and direction")
    ax.set_ylabel("CDF")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def _num(x: float, fmt: str = ".3g") -> str:
    return "-" if not math.isfinite(x) else format(x, fmt)


def counter_lines(f: CounterFeatures) -> list[str]:
    """The tiers and ports of a counter analysis as markdown."""
    lines = [f"{len(f.ports)} ports, {f.duration_s:.1f} s, a sample every {f.sample_s:.3g} s (analysed in "
             f"{f.grid_s:.3g} s steps).", ""]
    lines += [f"- note: {n}" for n in f.notes]
    lines += ["", "## Tiers", "", "| tier | ports | GB (rx + tx) | mean utilisation | p50 | p99 | period (s) "
              "| strength | GB per period |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in f.tiers:
        d = t.utilization
        lines.append(f"| {t.tier} | {t.ports} | {t.bytes / 1e9:,.1f} | {_num(t.mean_utilization)} | "
                     f"{_num(d.median)} | {_num(d.quantile(0.99))} | {_num(t.period_s)} | {t.period_strength:.2f} | "
                     f"{_num(t.bytes_per_period / 1e9)} |")
    frame = counters_frame(f)
    lines += ["", "## Ports (hottest first)", "", "| " + " | ".join(frame.columns) + " |",
              "|---|---|---|" + "---:|" * (len(frame.columns) - 3)]
    order = {k: i for i, k in enumerate(f.hottest)}
    frame = frame.assign(_o=[order.get(k, len(order)) for k in frame["port"]]).sort_values(["_o", "port"])
    for row in frame.drop(columns="_o").itertuples(index=False):
        lines.append("| " + " | ".join(v if isinstance(v, str) else _num(float(v)) for v in row) + " |")
    lines += ["", "A period is the shortest autocorrelation peak of a port's throughput as high as the highest, at "
              "2 steps or more; a strength under 0.2 (no period) means the port's traffic does not repeat at this "
              "resolution.", ""]
    return lines


def render_counter_analysis(f: CounterFeatures, out: Path, *, title: str, notes: list[str] | None = None) -> Path:
    """features.json, plots/ and analysis.md of a counter series; returns analysis.md."""
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / layout.FEATURES, json.dumps(f.to_json()) + "\n")
    plots = out / layout.PLOTS_DIR
    plots.mkdir(exist_ok=True)
    plot_counter_timelines({title: f}, plots / COUNTER_TIMELINE)
    plot_utilization({title: f}, plots / COUNTER_UTILIZATION)
    lines = [f"# Switch counters of `{title}`", "", f"Format: {f.format}; source `{f.source}`.", "",
             *counter_lines(f), *(f"- note: {n}" for n in notes or []), "", "## Plots", "",
             f"![timeline]({layout.PLOTS_DIR}/{COUNTER_TIMELINE})",
             f"![utilisation]({layout.PLOTS_DIR}/{COUNTER_UTILIZATION})", ""]
    return write_text(out / layout.ANALYSIS_MD, "\n".join(lines))


def render_counter_validation(v: CounterValidation, out: Path) -> Path:
    """validation.md, both features files and side-by-side plots; returns validation.md."""
    out.mkdir(parents=True, exist_ok=True)
    both = {"real": v.real_features, "simulated": v.sim_features}
    for name, f in zip((layout.FEATURES_REAL, layout.FEATURES_SIM), both.values(), strict=True):
        write_text(out / name, json.dumps(f.to_json()) + "\n")
    plots = out / layout.PLOTS_DIR
    plots.mkdir(exist_ok=True)
    plot_counter_timelines(both, plots / COUNTER_TIMELINE)
    plot_utilization(both, plots / COUNTER_UTILIZATION)
    s = v.scenario
    lines = [f"# Validation of the counters `{v.real.path.name}`", "",
             f"Real: `{v.real.path}` ({v.real.format}, {len(v.real.ports)} ports, a sample every "
             f"{v.real.sample_s:.3g} s). Simulated: scenario `{s.name}` ({s.npus} ranks) on `{v.run.backend}`, its "
             f"link table read as switch counters at the same interval ({len(v.sim.ports)} ports), run directory "
             "`sim/`.", "", v.report.to_markdown(), "", "## The real counters", "", *counter_lines(v.real_features),
             "## The simulated counters", "", *counter_lines(v.sim_features), "## Plots", "",
             f"![timeline]({layout.PLOTS_DIR}/{COUNTER_TIMELINE})",
             f"![utilisation]({layout.PLOTS_DIR}/{COUNTER_UTILIZATION})", ""]
    return write_text(out / layout.VALIDATION_MD, "\n".join(lines))
