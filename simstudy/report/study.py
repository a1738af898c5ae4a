"""The report of a sweep: comparison plots (PNG) and report.md, computed from the summary first."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simstudy import layout
from simstudy.report.files import figure, save_figure, write_text
from simstudy.report.findings import findings, lead_params
from simstudy.spec import PlotSpec
from simstudy.sweeps import BaselineReport, SweepResult, label, metric_columns
from simstudy.sweeps.clusters import hottest_links, is_cluster_study, job_rows, slowdown_by_axis, tier_bytes
from simstudy.table import empty_table, read_table
from simstudy.traffic.timeline import throughput_timeline

#: Metrics shown by default, with their axis labels.
DEFAULT_METRICS: dict[str, str] = {
    "iteration_ms": "time per iteration (ms)",
    "bytes_per_iter_rank_max": "bytes sent per iteration, busiest rank",
    "exposed_comm_frac": "exposed communication / iteration time",
    "peak_to_mean": "throughput peak-to-mean (1 ms bins)",
    "duty_cycle": "duty cycle (on-time over whole on/off cycles, 1 ms bins)",
}
#: Metrics of runs that kept their link table (`traffic: links`), shown when present.
LINK_METRICS: dict[str, str] = {
    "link_utilization_max": "mean utilisation of the most loaded link",
    "link_peak_utilization_max": "peak utilisation (one time bin) of the most loaded links",
}
TIMELINES_MAX = 12


def metric_labels(summary: pd.DataFrame) -> dict[str, str]:
    """The metrics a report compares across its axes, with their labels: the default ones, and for
    runs that kept links the bytes through each tier and the most loaded links' utilisation."""
    out = {m: name for m, name in DEFAULT_METRICS.items() if m in summary.columns}
    out |= {f"tier.{t}.bytes": f"bytes through the {t} tier's links (both directions)" for t in tier_bytes(summary)}
    out |= {m: name for m, name in LINK_METRICS.items() if m in summary.columns}
    return out


@dataclass(frozen=True)
class BarData:
    """A grouped bar chart: `values[hue][x]` is the mean of `metric` over the other axes."""

    metric: str
    x: str | None
    hue: str | None
    x_values: list[Any]
    hue_values: list[Any]
    values: dict[Any, list[float]]
    averaged_over: list[str]


def bar_data(summary: pd.DataFrame, params: list[str], spec: PlotSpec) -> BarData:
    """Means of `spec.y` per (x, hue) cell over the successful runs."""
    ok = summary[summary["status"] == "ok"]
    x = spec.x or (params[0] if params else None)
    hue = spec.hue or next((p for p in params if p != x), None)
    xs = list(dict.fromkeys(ok[x])) if x else ["all"]
    hues = list(dict.fromkeys(ok[hue])) if hue else ["all"]
    values: dict[Any, list[float]] = {}
    for h in hues:
        sel = ok if hue is None else ok[ok[hue] == h]
        values[h] = [float(sel[sel[x] == v][spec.y].mean()) if x else float(sel[spec.y].mean()) for v in xs]
    rest = [p for p in params if p not in (x, hue)]
    return BarData(spec.y, x, hue, xs, hues, values, rest)


def plot_bars(data: BarData, path: Path) -> Path:
    """One bar per (x, hue) cell."""
    fig, ax = figure(figsize=(max(5.0, 1.1 * len(data.x_values) * max(1, len(data.hue_values)) ** 0.5), 3.8))
    width = 0.8 / max(1, len(data.hue_values))
    pos = np.arange(len(data.x_values))
    for i, h in enumerate(data.hue_values):
        ax.bar(pos + (i - (len(data.hue_values) - 1) / 2) * width, data.values[h], width,
               label=f"{data.hue}={h}" if data.hue else None)
    ax.set_xticks(pos, [str(v) for v in data.x_values], rotation=20 if len(data.x_values) > 4 else 0)
    ax.set_xlabel(data.x or "")
    ax.set_ylabel(DEFAULT_METRICS.get(data.metric, data.metric))
    title = data.metric + (f" (mean over {', '.join(data.averaged_over)})" if data.averaged_over else "")
    ax.set_title(title, fontsize=10)
    if data.hue:
        ax.legend(fontsize=7)
    return save_figure(fig, path, dpi=110)


def timeline_rows(summary: pd.DataFrame, params: list[str]) -> pd.DataFrame:
    """The scenarios whose throughput the report draws: all, up to TIMELINES_MAX; of more, every value
    of the first axis side by side for the first settings of the other axes that fit (by setting)."""
    ok = summary[summary["status"] == "ok"].drop_duplicates("key")
    if len(ok) <= TIMELINES_MAX or len(params) < 2:
        return ok.head(TIMELINES_MAX)
    first, rest = params[0], params[1:]
    values = list(dict.fromkeys(ok[first].astype(str)))
    settings = ok[rest].astype(str).agg("|".join, axis=1)
    kept = list(dict.fromkeys(settings))[:max(1, TIMELINES_MAX // len(values))]
    order = {s: i for i, s in enumerate(kept)}
    rows = ok[settings.isin(kept)]
    rank = settings[rows.index].map(order) * len(values) + rows[first].astype(str).map(values.index)
    return rows.loc[rank.sort_values(kind="stable").index].head(TIMELINES_MAX)


def plot_timelines(result: SweepResult, path: Path, params: list[str]) -> Path | None:
    """Throughput of up to TIMELINES_MAX scenarios (`timeline_rows`), one panel each, on a shared time axis."""
    ok = timeline_rows(result.summary, params)
    if ok.empty:
        return None
    n = len(ok)
    cols = 2 if n > 1 else 1
    rows = math.ceil(n / cols)
    fig, axes = figure(rows, cols, figsize=(10, 1.8 * rows + 0.6), squeeze=False)
    for ax, (_, row) in zip(axes.flat, ok.iterrows(), strict=False):
        traffic = result.run_dir(str(row["key"])) / layout.TRAFFIC
        table = read_table(traffic) if traffic.is_file() else empty_table()  # runs keeping links or none
        span = float(table["t_end_s"].max()) if len(table) else 0.0
        bin_s = 1e-3 if span > 20e-3 else max(span / 200, 1e-7)
        tl = throughput_timeline(table, bin_s, pairs=0, t0_s=0.0)
        ax.plot((tl.times_s - tl.t0_s) * 1e3, tl.total * 8 / 1e9, lw=0.7, drawstyle="steps-post")
        ax.set_title(", ".join(f"{p}={row[p]}" for p in params) or "base", fontsize=8)
        ax.set_ylabel("Gbit/s", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("time (ms)", fontsize=8)
    return save_figure(fig, path)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:.4g}" if abs(v) < 1e6 else f"{v:.3e}"
    return str(v).replace("|", "\\|")


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table of `frame`."""
    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def effects(summary: pd.DataFrame, params: list[str], metric: str) -> list[str]:
    """For each axis: the metric's mean per value and the ratio of the largest to the smallest."""
    ok = summary[summary["status"] == "ok"]
    lines = []
    for p in params:
        means = ok.groupby(p, sort=False)[metric].mean()
        if len(means) < 2 or means.min() <= 0:
            continue
        parts = ", ".join(f"{k}: {v:.4g}" for k, v in means.items())
        lines.append(f"- **{p}** — {parts} (largest / smallest = {means.max() / means.min():.2f}x)")
    return lines


def _plot_specs(result: SweepResult, params: list[str]) -> list[PlotSpec]:
    specs = result.expansion.study.plots
    if specs is not None:
        return specs
    present = set(metric_columns(result.summary))
    return [PlotSpec(y=m) for m in DEFAULT_METRICS if m in present]


def render_study(result: SweepResult, *, baseline: BaselineReport | None = None) -> Path:
    """Write `plots/*.png` and `report.md` into the sweep's directory; returns report.md."""
    params = result.expansion.param_names
    summary = result.summary
    plots = result.out / layout.PLOTS_DIR
    plots.mkdir(exist_ok=True)
    made: list[tuple[str, Path]] = []
    ok = summary[summary["status"] == "ok"]
    if not ok.empty:
        specs = _plot_specs(result, params)
        ys = [spec.y for spec in specs]
        for spec in specs:
            if spec.y in summary.columns:
                # a metric plotted more than once gets the axis in its file name: `samples_per_s_by_<x>`
                name = spec.y if ys.count(spec.y) == 1 or spec.x is None else f"{spec.y}_by_{spec.x}"
                made.append((name, plot_bars(bar_data(summary, params, spec), plots / f"{name}.png")))
        tl = plot_timelines(result, plots / "timelines.png", params)
        if tl is not None:
            made.append(("throughput timelines", tl))
    text = _report_text(result, params, made, baseline)
    path = result.out / layout.REPORT_MD
    return write_text(path, text)


def _report_text(result: SweepResult, params: list[str], made: list[tuple[str, Path]],
                 baseline: BaselineReport | None) -> str:
    study = result.expansion.study
    shown_params = lead_params(result.summary, params)
    exp = result.expansion
    summary = result.summary
    c = result.counts
    lines = [f"# Study `{study.name}`", ""]
    if study.description:
        lines += [study.description.strip(), ""]
    lines += ["## What was swept", ""]
    for path, values in study.axes.items():
        lines.append(f"- `{path}`: {', '.join(str(label(v)) for v in values)}")
    for i, group in enumerate(study.zip):
        lines.append(f"- together (zip {i + 1}): " + "; ".join(
            f"`{p}` = {', '.join(str(label(v)) for v in vs)}" for p, vs in group.items()))
    if not params:
        lines.append("- nothing: one scenario")
    if shown_params != params:
        lines.append("- below, each group of paths swept together is shown by its first path ("
                     + ", ".join(f"`{p}`" for p in shown_params if p not in study.axes) + ")")
    lines += ["", f"Backend `{study.backend}`; {exp.total} combinations, {len(exp.points)} scenarios, "
              f"{len(exp.skipped)} skipped; runs: {c['ok']} computed, {c['cached']} reused, {c['failed']} failed.",
              ""]
    found = findings(summary, params, [{"reason": sk.reason} for sk in exp.skipped])
    if found:
        lines += ["## Findings", "", *(f"- {f.sentence}" for f in found), ""]
    if exp.skipped:
        lines += ["### Skipped combinations", ""]
        lines += [f"- {', '.join(f'{k}={v}' for k, v in s.params.items())}: {s.reason}" for s in exp.skipped]
        lines.append("")
    failed = summary[summary["status"] != "ok"]
    if not failed.empty:
        lines += ["### Failed runs", ""]
        lines += [f"- {', '.join(f'{p}={r[p]}' for p in params)} (run {r['key']}): {r['error']}"
                  for _, r in failed.iterrows()]
        lines.append("")
    labels = metric_labels(summary)
    metrics = [m for m in DEFAULT_METRICS if m in summary.columns]
    if params and not summary[summary["status"] == "ok"].empty:
        lines += ["## What differs", ""]
        for m, name in labels.items():
            eff = effects(summary, shown_params, m)
            if eff:
                lines += [f"**{name}** (`{m}`):", "", *eff, ""]
    if is_cluster_study(summary):
        lines += _cluster_section(result.out, summary, params, shown_params)
    elif tier_bytes(summary):
        lines += ["## Where the bytes went", "", *_links_section(result.out, summary, shown_params)]
    shown = [*shown_params, *metrics, "bytes_per_iter", "status"]
    table = summary[[c for c in dict.fromkeys(shown) if c in summary.columns]]
    lines += ["## Results", "", markdown_table(table.head(200)), ""]
    if len(table) > 200:
        lines += [f"({len(table) - 200} more rows in summary.parquet)", ""]
    if made:
        lines += ["## Plots", ""]
        lines += [f"![{name}]({p.relative_to(result.out).as_posix()})" for name, p in made]
        lines.append("")
    if baseline is not None:
        lines += ["## Baseline check", "", "```", *baseline.lines(), "```", ""]
    lines += ["Every run's directory is `runs/<key>/` (the key is in summary.parquet).", ""]
    return "\n".join(lines)


def _cluster_section(out: Path, summary: pd.DataFrame, params: list[str], shown: list[str]) -> list[str]:
    """Several jobs on one network: how much each slows the others, and where the bytes went
    (`shown`: the swept paths the tables show, see `lead_params`)."""
    lines = ["## Jobs sharing the network", ""]
    for finding in slowdown_by_axis(summary, params):
        lines += [finding.sentence(), ""]
    rows = job_rows(summary, shown)
    if rows:
        table = pd.DataFrame([{**r.params, "job": r.job, "start_ms": r.start_ms, "iteration_ms": r.iteration_ms,
                               "alone_ms": r.alone_iteration_ms, "slowdown": r.slowdown} for r in rows])
        lines += ["Slowdown = iteration time sharing the network / iteration time alone on the same GPUs.", "",
                  markdown_table(table.head(200)), ""]
    return lines + _links_section(out, summary, shown)


def _links_section(out: Path, summary: pd.DataFrame, shown: list[str]) -> list[str]:
    """Runs that kept their link table: the bytes through each tier and the most loaded links."""
    lines: list[str] = []
    tiers = tier_bytes(summary)
    if tiers:
        cols = [*shown, *(f"tier.{t}.bytes" for t in tiers), "link_utilization_max"]
        lines += ["Bytes each tier's links carried (both directions; a byte that crosses a tier going up and coming "
                  "down counts twice), and the mean utilisation of the most loaded link:", "",
                  markdown_table(summary[[c for c in cols if c in summary.columns]].head(200)), ""]
    hot = hottest_links(out, summary, shown)
    if hot:
        hot_rows = [{**h.params, "rank": i + 1, "link": link.name, "tier": link.tier, "Gbit/s": link.capacity_gbps,
                 "bytes": link.bytes, "mean util": link.mean_utilization, "peak util": link.peak_utilization}
                for h in hot for i, link in enumerate(h.links)]
        lines += ["The most loaded links of each scenario (mean utilisation over the run; peak over one time bin):",
                  "", markdown_table(pd.DataFrame(hot_rows).head(200)), ""]
    return lines
