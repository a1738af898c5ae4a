"""Reports of one traffic analysis (`simstudy analyze`) and of a validation (`simstudy validate`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes

from simstudy import layout
from simstudy.report.files import figure, save_figure, write_text
from simstudy.report.plots import plot_timeline
from simstudy.traffic.features import Distribution, Features, TrafficMatrix, iteration_profile
from simstudy.validation import Validation


def _image(name: str) -> str:
    """A markdown image of `plots/<name>`."""
    return f"![{name.rsplit('.', 1)[0]}]({layout.PLOTS_DIR}/{name})"


def _matrix(ax: Axes, m: TrafficMatrix, title: str) -> None:
    data = m.bytes.astype(np.float64)
    im = ax.imshow(data / max(float(data.max()), 1.0), cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(m.ranks)), [str(r) for r in m.ranks], fontsize=7)
    ax.set_yticks(range(len(m.ranks)), [str(r) for r in m.ranks], fontsize=7)
    ax.set_xlabel("to rank")
    ax.set_ylabel("from rank")
    ax.set_title(title, fontsize=9)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, label="bytes / max")


def _cdf(ax: Axes, d: Distribution, label: str, scale: float = 1.0) -> None:
    if d.count:
        v = d.values * scale
        ax.plot(v, np.linspace(0, 1, len(v)), drawstyle="steps-post", label=label)


def plot_distributions(features: dict[str, Features], path: Path) -> Path:
    """CDFs of burst durations, idle durations, burst sizes and flow sizes, one line per trace."""
    fig, axes = figure(1, 4, figsize=(13, 3.2))
    panels: list[tuple[str, Callable[[Features], Distribution], float]] = [
        ("burst duration (ms)", lambda f: f.on_off.bursts, 1e3),
        ("idle duration (ms)", lambda f: f.on_off.idles, 1e3),
        ("burst size (MB)", lambda f: f.on_off.burst_bytes, 1e-6),
        ("flow size (MB)", lambda f: f.flows.sizes, 1e-6),
    ]
    for ax, (title, get, scale) in zip(axes, panels, strict=True):
        for label, f in features.items():
            _cdf(ax, get(f), label, scale)
        ax.set_xlabel(title, fontsize=8)
        ax.set_ylim(0, 1)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("CDF")
    axes[0].legend(fontsize=7)
    return save_figure(fig, path)


def plot_matrices(matrices: dict[str, TrafficMatrix], path: Path) -> Path:
    fig, axes = figure(1, len(matrices), figsize=(4.6 * len(matrices), 3.8), squeeze=False)
    for ax, (label, m) in zip(axes[0], matrices.items(), strict=True):
        _matrix(ax, m, f"traffic matrix: {label}")
    return save_figure(fig, path)


def plot_throughputs(features: dict[str, Features], path: Path) -> Path:
    """1 ms total throughput of each trace on one time axis (aligned origins)."""
    fig, ax = figure(figsize=(10, 3.4))
    for label, f in features.items():
        tl = f.timeline_1ms
        ax.plot(tl.times_s * 1e3, tl.total * 8 / 1e9, lw=0.8, drawstyle="steps-post", label=label)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("Gbit/s (1 ms bins)")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_per_iteration(features: dict[str, Features], path: Path) -> Path:
    """Every whole iteration of each trace laid over the others, aligned at its start (thin lines),
    and each trace's mean iteration (thick), on one time axis: real against simulated, one
    iteration at a time, so that the eye and the verdict look at the same thing."""
    fig, ax = figure(figsize=(10, 3.6))
    span = max((f.period.period_s for f in features.values() if np.isfinite(f.period.period_s)), default=np.nan)
    for (label, f), color in zip(features.items(), ("tab:blue", "tab:orange", "tab:green"), strict=False):
        prof = iteration_profile(f, span_s=span * 1.1 if np.isfinite(span) else None, bins=80)
        if len(prof.curves) == 0:
            continue
        x = prof.offsets_s * 1e3
        for curve in prof.curves:
            ax.plot(x, curve * 8 / 1e6, color=color, lw=0.5, alpha=0.35, drawstyle="steps-post")
        ax.plot(x, prof.mean * 8 / 1e6, color=color, lw=2.0, drawstyle="steps-post",
                label=f"{label}: {len(prof.curves)} iterations, period {f.period.period_s * 1e3:.1f} ms")
    ax.set_xlabel("time since the iteration's start (ms)")
    ax.set_ylabel("Mbit/s (all links)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:  # nothing to lay over: say so on the plot rather than leave it blank
        ax.text(0.5, 0.5, "no whole iteration found in " + " or ".join(features), transform=ax.transAxes,
                ha="center", va="center", fontsize=9)
    ax.set_title("throughput through each iteration, aligned at iteration starts (thin: each; thick: mean)",
                 fontsize=9)
    return save_figure(fig, path)


def _roles_lines(f: Features) -> list[str]:
    r = f.roles
    return [f"Roles ({r.source}): {r.reason}.", "", *(f"- {line}" for line in r.lines())]


def _period_lines(f: Features) -> list[str]:
    p = f.period
    out = [f"Period {p.period_s * 1e3:.3f} ms ({p.method}): {p.reason}."]
    if p.candidates:
        out += ["", "| candidate (ms) | found by | steady cycles | bytes per cycle vary | durations vary | verdict |",
                "|---:|---|---:|---:|---:|---|"]
        for c in p.candidates:
            if c.cycles >= 2 or c.verdict.startswith("chosen"):
                out.append(f"| {c.period_s * 1e3:.4g} | {', '.join(c.found_by[:3])} | {c.cycles} | "
                           f"{c.volume_cv:.1%} | {c.duration_cv:.1%} | {c.verdict} |")
        hidden = sum(1 for c in p.candidates if c.cycles < 2 and not c.verdict.startswith("chosen"))
        if hidden:
            out += ["", f"{hidden} more candidates had fewer than 2 steady cycles."]
    return out


def _scalar_table(features: dict[str, Features]) -> list[str]:
    names = list(next(iter(features.values())).scalars())
    head = "| metric | " + " | ".join(features) + " |"
    rule = "|---|" + "---:|" * len(features)
    rows = [f"| {n} | " + " | ".join(f"{f.scalars()[n]:.4g}" for f in features.values()) + " |" for n in names]
    return [head, rule, *rows]


def render_analysis(features: Features, out: Path, *, title: str, notes: list[str] | None = None) -> Path:
    """features.json, plots/ and analysis.md of one traffic table; returns analysis.md."""
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / layout.FEATURES, json.dumps(features.to_json()) + "\n")
    plots = out / layout.PLOTS_DIR
    plots.mkdir(exist_ok=True)
    plot_timeline(features.timeline_1ms, plots / layout.TIMELINE_PLOT, title=f"{title}: throughput, 1 ms bins")
    plot_matrices({title: features.matrix}, plots / layout.MATRIX_PLOT)
    plot_distributions({title: features}, plots / layout.DISTRIBUTIONS_PLOT)
    plot_per_iteration({title: features}, plots / layout.PER_ITERATION_PLOT)
    p = features.period
    bpi = features.bytes_per_iteration
    lines = [f"# Traffic of `{title}`", "",
             f"{features.rows:,} rows, {features.total_bytes / 1e6:,.3f} MB between {len(features.ranks)} ranks "
             f"over {features.duration_s * 1e3:.3f} ms.", "",
             f"- iteration period: {p.period_s * 1e3:.3f} ms ({p.method}, strength {p.strength:.2f})",
             f"- bytes per iteration per worker: {bpi.mean / 1e6:.3f} MB (mean over {len(bpi.ranks)} workers, "
             f"{bpi.iterations} whole iterations, {bpi.method}); all training endpoints: {bpi.total / 1e6:.3f} MB",
             f"- duty cycle at the iteration's scale: {features.duty_iteration:.3f}",
             f"- on/off: duty cycle {features.on_off.duty_cycle:.3f}, peak-to-mean {features.on_off.peak_to_mean:.2f}, "
             f"{features.on_off.bursts.count} bursts",
             f"- flows: {features.flows.count}, median size {features.flows.sizes.median / 1e6:.3f} MB",
             f"- Hurst exponent (aggregated variance): {features.hurst:.3f}", ""]
    lines += [f"- note: {n}" for n in notes or []]
    lines += ["", "## Who is who", "", *_roles_lines(features), "", "## The iteration", "", *_period_lines(features),
              "", "## All scalar metrics", "", *_scalar_table({title: features}), "",
              "## Plots", "", *(_image(name) for name in (layout.TIMELINE_PLOT, layout.PER_ITERATION_PLOT,
                                                          layout.MATRIX_PLOT, layout.DISTRIBUTIONS_PLOT)), ""]
    return write_text(out / layout.ANALYSIS_MD, "\n".join(lines))


def render_validation(v: Validation, out: Path) -> Path:
    """validation.md and side-by-side plots of a validation; returns validation.md."""
    out.mkdir(parents=True, exist_ok=True)
    plots = out / layout.PLOTS_DIR
    plots.mkdir(exist_ok=True)
    both = {"real": v.real_features, "simulated": v.sim_features}
    plot_throughputs(both, plots / layout.THROUGHPUT_PLOT)
    plot_per_iteration(both, plots / layout.PER_ITERATION_PLOT)
    plot_matrices({k: f.matrix for k, f in both.items()}, plots / layout.MATRICES_PLOT)
    plot_distributions(both, plots / layout.DISTRIBUTIONS_PLOT)
    for name, f in zip((layout.FEATURES_REAL, layout.FEATURES_SIM), both.values(), strict=True):
        write_text(out / name, json.dumps(f.to_json()) + "\n")
    s = v.scenario
    lines = [f"# Validation of `{v.real.path.name}`", "",
             f"Real traffic: `{v.real.path}` ({v.real.kind}, {len(v.real.table):,} rows). Simulated: scenario "
             f"`{s.name}` ({s.npus} ranks) on `{v.run.backend}` ({v.run.backend_version}), "
             f"{len(v.sim_table):,} transfers, run directory `sim/`.", "",
             v.report.to_markdown(), ""]
    if v.not_measurable:
        lines += [f"Not measurable on either trace (left out): {', '.join(v.not_measurable)}.", ""]
    if v.real.experiment is not None:
        e = v.real.experiment
        lines += [f"Experiment (from the directory name): {e.framework}, {e.model}, {e.optimizer}, batch "
                  f"{e.batch_size}, {e.backend}, delay {e.delay}" + (f", {e.topology}" if e.topology else "") + ".", ""]
    lines += ["## One iteration at a time", "", _image(layout.PER_ITERATION_PLOT), "",
              "## Side by side", "", *(_image(name) for name in (layout.THROUGHPUT_PLOT, layout.MATRICES_PLOT,
                                                                  layout.DISTRIBUTIONS_PLOT)),
              "", "## The real trace", "", *_roles_lines(v.real_features), "", *_period_lines(v.real_features),
              "", "## Scalar metrics", "", *_scalar_table(both), ""]
    return write_text(out / layout.VALIDATION_MD, "\n".join(lines))
