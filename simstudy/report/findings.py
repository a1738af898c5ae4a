"""What a study found, in sentences computed from its summary, each with its numbers.

Every `Finding` keeps the numbers its sentence states (`values`), so a test can check the
sentence against the summary, and no sentence is written that the numbers do not support:

* `bound`: which scenarios are communication-bound (exposed communication >= COMM_BOUND of the
  iteration) and which compute-bound (<= COMPUTE_BOUND); nothing is claimed of a class that is empty;
* `burstiness`: the burstiest and the smoothest model (or scenario) by peak-to-mean throughput
  (1 ms bins) and duty cycle, only when they differ by more than BURSTY_RATIO;
* `axis`: per swept axis, how iteration time and bytes per iteration change along it (mean over
  the other axes), when they change by more than CHANGE;
* `loss`: along a swept packet-loss axis (a path ending in `loss`), per value of the other axes,
  how iteration time grows against the lossless run, how far the slowest tenth of iterations
  (`iteration_p90_ms`) sits above the mean (the tail timeouts make), and how the traffic's burst
  structure (peak-to-mean, duty cycle) moves;
* `against`: with more than one axis, each other value of the first axis against its first value
  (the baseline: ring all-reduce, staleness 0), scenario by scenario over the other axes: the range
  and median of the ratios of iteration time, the busiest rank's bytes and peak-to-mean throughput,
  and the scenarios at both ends of the iteration time's range;
* `variability`: along swept compute-variability paths (below `system.variability`: stragglers,
  jitter), per value of the other axes, the throughput each configuration loses against the one
  without variability (every such path at 0, [], {} or null): `samples_per_s` (each worker at its
  own pace) where the summary has it, else the inverse of `iteration_ms`;
* `failed` / `skipped`: what did not run, with the first reason.

`network_differences(a, b)` compares two summaries of one study run on two networks (flowsim and
the packet network), scenario by scenario.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from simstudy import layout

#: Exposed communication / iteration time at or above which a scenario is communication-bound.
COMM_BOUND = 0.5
#: ... and at or below which it is compute-bound.
COMPUTE_BOUND = 0.2
#: Peak-to-mean ratios closer than this factor are "about equally bursty".
BURSTY_RATIO = 1.05
#: An axis that changes a metric by less than this fraction does not change it.
CHANGE = 0.02
_LIST = 6


@dataclass(frozen=True)
class Finding:
    kind: str
    sentence: str
    values: dict[str, Any] = field(default_factory=dict)


def _names(labels: list[str]) -> str:
    shown = labels[:_LIST]
    more = f" and {len(labels) - _LIST} more" if len(labels) > _LIST else ""
    return ", ".join(shown) + more


def _label(row: pd.Series, params: list[str]) -> str:
    return ", ".join(f"{p}={row[p]}" for p in params) if params else str(row.get("key", "?"))


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.3e}"


def bound(ok: pd.DataFrame, params: list[str]) -> list[Finding]:
    if "exposed_comm_frac" not in ok.columns or ok.empty:
        return []
    frac = ok["exposed_comm_frac"].astype(float)
    comm = ok[frac >= COMM_BOUND]
    comp = ok[frac <= COMPUTE_BOUND]
    out = []
    n = len(ok)
    if len(comm):
        labels = [f"{_label(r, params)} ({r['exposed_comm_frac']:.0%})" for _, r in comm.iterrows()]
        out.append(Finding("bound", f"{len(comm)} of {n} scenarios are communication-bound (exposed communication "
                           f">= {COMM_BOUND:.0%} of the iteration): {_names(labels)}.",
                           {"communication_bound": len(comm), "scenarios": n}))
    if len(comp):
        labels = [f"{_label(r, params)} ({r['exposed_comm_frac']:.0%})" for _, r in comp.iterrows()]
        out.append(Finding("bound", f"{len(comp)} of {n} scenarios are compute-bound (exposed communication "
                           f"<= {COMPUTE_BOUND:.0%} of the iteration): {_names(labels)}.",
                           {"compute_bound": len(comp), "scenarios": n}))
    if not len(comm) and not len(comp):
        out.append(Finding("bound", f"No scenario is clearly communication- or compute-bound: exposed communication "
                           f"is {frac.min():.0%}-{frac.max():.0%} of the iteration in all {n}.",
                           {"min": float(frac.min()), "max": float(frac.max())}))
    elif len(comm) == n:
        out.append(Finding("bound", "None is compute-bound.", {"compute_bound": 0}))
    elif len(comp) == n:
        out.append(Finding("bound", "None is communication-bound.", {"communication_bound": 0}))
    return out


def burstiness(ok: pd.DataFrame, params: list[str]) -> list[Finding]:
    if "peak_to_mean" not in ok.columns or ok["peak_to_mean"].isna().all():
        return []
    by = "model" if "model" in params and ok["model"].nunique() > 1 else None
    if by:
        g = ok.groupby(by, sort=False).agg(ptm=("peak_to_mean", "mean"), duty=("duty_cycle", "mean"))
        names = [str(i) for i in g.index]
    else:
        g = pd.DataFrame({"ptm": ok["peak_to_mean"].to_numpy(), "duty": ok["duty_cycle"].to_numpy()})
        names = [_label(r, params) for _, r in ok.iterrows()]
    g = g.assign(name=names).dropna(subset=["ptm"])
    if len(g) < 2:
        return []
    hi = g.loc[g["ptm"].idxmax()]
    lo = g.loc[g["ptm"].idxmin()]
    ratio = float(hi["ptm"] / lo["ptm"])
    what = "model" if by else "scenario"
    vals = {"burstiest": hi["name"], "peak_to_mean": float(hi["ptm"]), "smoothest": lo["name"],
            "smoothest_peak_to_mean": float(lo["ptm"]), "ratio": ratio}
    if ratio < BURSTY_RATIO:
        return [Finding("burstiness", f"Every {what}'s traffic is about equally bursty: peak-to-mean throughput "
                        f"(1 ms bins) {lo['ptm']:.2f}-{hi['ptm']:.2f}.", vals)]
    duty = (f"; duty cycle {hi['duty']:.2f} against {lo['duty']:.2f}"
            if math.isfinite(hi["duty"]) and math.isfinite(lo["duty"]) else "")
    return [Finding("burstiness", f"The burstiest {what} is {hi['name']}: peak-to-mean throughput (1 ms bins) "
                    f"{hi['ptm']:.2f}, {ratio:.2f}x that of the smoothest, {lo['name']} ({lo['ptm']:.2f}){duty}"
                    f"{' (means over the other axes)' if by and len(params) > 1 else ''}.", vals)]


def _axis_values(ok: pd.DataFrame, axis: str, metric: str) -> pd.Series:
    means = ok.groupby(axis, sort=False)[metric].mean()
    try:
        return means.sort_index(key=lambda s: pd.to_numeric(s))
    except (ValueError, TypeError):
        return means


def axis_effects(ok: pd.DataFrame, params: list[str]) -> list[Finding]:
    out = []
    groups: dict[tuple[int, ...], list[str]] = {}
    for axis in params:  # axes zipped together split the scenarios the same way: one sentence
        if ok[axis].astype(str).nunique() >= 2:
            groups.setdefault(tuple(int(c) for c in pd.factorize(ok[axis].astype(str))[0]), []).append(axis)
    independent = len(groups)
    for together in groups.values():
        axis = together[0]
        parts = []
        vals: dict[str, Any] = {"axis": axis}
        for metric, name, unit in (("iteration_ms", "iteration time", " ms"), ("bytes_per_iter", "bytes per iteration",
                                                                                "")):
            if metric not in ok.columns:
                continue
            m = _axis_values(ok, axis, metric).dropna()
            if len(m) < 2 or m.min() <= 0:
                continue
            ratio = float(m.max() / m.min())
            vals[metric] = {str(k): float(v) for k, v in m.items()}
            if ratio - 1 < CHANGE:
                parts.append(f"leaves {name} unchanged ({_fmt(float(m.mean()))}{unit}, within {CHANGE:.0%})")
                continue
            numeric = pd.to_numeric(pd.Series(m.index), errors="coerce").notna().all()
            if numeric:
                first, last = m.index[0], m.index[-1]
                parts.append(f"takes {name} from {_fmt(float(m.iloc[0]))}{unit} at {first} to "
                             f"{_fmt(float(m.iloc[-1]))}{unit} at {last} ({float(m.iloc[-1] / m.iloc[0]):.2f}x)")
            else:
                parts.append(f"spans {name} from {_fmt(float(m.min()))}{unit} ({m.idxmin()}) to "
                             f"{_fmt(float(m.max()))}{unit} ({m.idxmax()}), {ratio:.2f}x")
        if parts:
            avg = " (means over the other axes)" if independent > 1 else ""
            name = f"`{axis}`" + (f" (with {', '.join(f'`{a}`' for a in together[1:])})" if len(together) > 1 else "")
            out.append(Finding("axis", f"{name} " + "; it ".join(parts) + f"{avg}.", vals))
    return out


def loss_axis(ok: pd.DataFrame, params: list[str]) -> str | None:
    """The swept packet-loss path (numeric, lossless included), if the study has one."""
    for p in params:
        if p.split(".")[-1] == "loss":
            v = pd.to_numeric(ok[p], errors="coerce")
            if v.notna().all() and v.nunique() >= 2 and (v == 0).any():
                return p
    return None


def _pct(x: float) -> str:
    return f"{x * 100:g}%"


def loss_effects(ok: pd.DataFrame, params: list[str]) -> list[Finding]:
    axis = loss_axis(ok, params) if not ok.empty else None
    if axis is None or "iteration_ms" not in ok.columns:
        return []
    rest = [p for p in params if p != axis]
    frame = ok.assign(_loss=pd.to_numeric(ok[axis]))
    groups = list(frame.groupby(rest, sort=False)) if rest else [("all", frame)]
    out: list[Finding] = []
    slow: list[str] = []
    growth: dict[str, dict[str, float]] = {}
    for name, g in groups:
        g = g.sort_values("_loss")
        base = g[g["_loss"] == 0]["iteration_ms"]
        lossy = g[g["_loss"] > 0]
        if base.empty or lossy.empty or not float(base.iloc[0]) > 0:
            continue
        b = float(base.iloc[0])
        label = name if isinstance(name, str) else ", ".join(str(x) for x in (name if isinstance(name, tuple)
                                                                               else (name,)))
        ratios = {_pct(float(r["_loss"])): float(r["iteration_ms"]) / b for _, r in lossy.iterrows()}
        growth[label] = ratios
        first, last = lossy.iloc[0], lossy.iloc[-1]
        slow.append(f"{label} {_fmt(b)} ms without loss, {_fmt(float(first['iteration_ms']))} ms at "
                    f"{_pct(float(first['_loss']))} ({float(first['iteration_ms']) / b:.2f}x), "
                    f"{_fmt(float(last['iteration_ms']))} ms at {_pct(float(last['_loss']))} "
                    f"({float(last['iteration_ms']) / b:.3g}x)")
    if slow:
        out.append(Finding("loss", f"Along `{axis}`, iteration time: " + "; ".join(slow) + ".",
                           {"axis": axis, "slowdown": growth}))
    if "iteration_p90_ms" in frame.columns and frame["iteration_p90_ms"].notna().any():
        tail = (frame["iteration_p90_ms"] / frame["iteration_ms"]).groupby(frame["_loss"]).mean().sort_index()
        vals = {_pct(float(k)): float(v) for k, v in tail.items()}
        peak = tail.idxmax()
        out.append(Finding("loss", f"The slowest tenth of iterations (90th percentile over the mean, mean over "
                           f"{'the other axes' if rest else 'the scenarios'}): "
                           + ", ".join(f"{v:.2f}x at {k}" for k, v in vals.items())
                           + f"; the tail is longest at {_pct(float(peak))}.", {"axis": axis, "p90_over_mean": vals}))
    for metric, name in (("peak_to_mean", "peak-to-mean throughput (1 ms bins)"), ("duty_cycle", "duty cycle")):
        if metric not in frame.columns or frame[metric].isna().all():
            continue
        m = frame.groupby("_loss")[metric].mean().sort_index().dropna()
        if len(m) < 2:
            continue
        vals = {_pct(float(k)): float(v) for k, v in m.items()}
        hi, lo = m.idxmax(), m.idxmin()
        out.append(Finding("loss", f"Burst structure: {name} is {float(m.iloc[0]):.2f} without loss, highest at "
                           f"{_pct(float(hi))} ({float(m[hi]):.2f}) and lowest at {_pct(float(lo))} "
                           f"({float(m[lo]):.2f}); by loss: " + ", ".join(f"{v:.2f}" for v in vals.values()) + ".",
                           {"axis": axis, metric: vals}))
    return out


#: Where a study sweeps compute variability (`system.variability.*`).
VARIABILITY = "system.variability"


def _varies_nothing(value: Any) -> bool:
    """A swept variability value that adds nothing: 0, an empty list or mapping, null."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value == 0
    return str(value).strip() in ("", "0", "0.0", "[]", "{}", "None", "null")


def variability_effects(ok: pd.DataFrame, params: list[str]) -> list[Finding]:
    axes = [p for p in params if p == VARIABILITY or p.startswith(f"{VARIABILITY}.")]
    if not axes or ok.empty:
        return []
    per_worker = "samples_per_s" in ok.columns and ok["samples_per_s"].notna().all()
    if not per_worker and "iteration_ms" not in ok.columns:
        return []
    rate = ok["samples_per_s"].astype(float) if per_worker else 1e3 / ok["iteration_ms"].astype(float)
    unit = " samples/s" if per_worker else " iterations/s"
    frame = ok.assign(_rate=rate, _plain=ok[axes].apply(lambda r: all(_varies_nothing(v) for v in r), axis=1))
    rest = [p for p in params if p not in axes]
    groups = list(frame.groupby(rest, sort=False)) if rest else [((), frame)]
    out: list[Finding] = []
    for name, g in groups:
        ref = g[g["_plain"]]
        if ref.empty or not float(ref["_rate"].iloc[0]) > 0:
            continue
        base = float(ref["_rate"].iloc[0])
        where = ", ".join(f"{p}={v}" for p, v in zip(rest, name if isinstance(name, tuple) else (name,), strict=True))
        losses: dict[str, float] = {}
        for _, r in g[~g["_plain"]].iterrows():
            what = ", ".join(f"{a.split('.')[-1]}={r[a]}" for a in axes if not _varies_nothing(r[a]))
            losses[what] = 1 - float(r["_rate"]) / base
        if not losses:
            continue
        worst = max(losses, key=lambda k: losses[k])
        parts = [f"{k} {'loses' if v >= 0 else 'gains'} {abs(v):.1%}" for k, v in losses.items()]
        out.append(Finding("variability", f"{where + ': ' if where else ''}against {_fmt(base)}{unit} without "
                           f"stragglers or jitter, throughput " + "; ".join(parts) + f" (most: {worst}).",
                           {"metric": "samples_per_s" if per_worker else "1/iteration_ms", "group": where,
                            "reference": base, "loss": losses}))
    return out


def network_differences(a: pd.DataFrame, b: pd.DataFrame, params: list[str], names: tuple[str, str] = (
        "flowsim", "ns-3"), *, agree: float = 0.10) -> list[Finding]:
    """Where two networks' runs of one study differ: scenarios matched on `params`, the ratio of
    each network's iteration time (mean and 90th percentile) and peak-to-mean, and which
    scenarios agree within `agree`."""
    ok_a, ok_b = a[a["status"] == "ok"], b[b["status"] == "ok"]
    key = [p for p in params if p in ok_a.columns and p in ok_b.columns]
    both = ok_a.merge(ok_b, on=key, suffixes=("_a", "_b"))
    if both.empty:
        return [Finding("networks", f"{names[0]} and {names[1]} have no scenario in common.")]
    out = []
    for metric, what in (("iteration_ms", "iteration time"), ("iteration_p90_ms", "90th-percentile iteration time"),
                         ("peak_to_mean", "peak-to-mean throughput")):
        if f"{metric}_a" not in both.columns or f"{metric}_b" not in both.columns:
            continue
        r = (both[f"{metric}_b"] / both[f"{metric}_a"]).astype(float)
        good = r.notna()
        if not good.any():
            continue
        labels = [_label(row, key) for _, row in both[good].iterrows()]
        within = [lab for lab, x in zip(labels, r[good], strict=True) if abs(x - 1) <= agree]
        worst = int((r[good] - 1).abs().to_numpy().argmax())
        out.append(Finding("networks", f"{what}: {names[1]} over {names[0]} {r[good].min():.2f}x-{r[good].max():.2f}x "
                           f"(median {r[good].median():.2f}x); within {agree:.0%} in {len(within)} of {len(labels)} "
                           f"scenarios; furthest apart: {labels[worst]} ({r[good].iloc[worst]:.2f}x).",
                           {"metric": metric, "ratios": dict(zip(labels, map(float, r[good]), strict=True)),
                            "within": len(within), "scenarios": len(labels)}))
    return out


#: What `against` compares, with the words of its sentence.
AGAINST_METRICS = (("iteration_ms", "iteration time"), ("bytes_per_iter_rank_max", "bytes sent by the busiest rank"),
                   ("peak_to_mean", "peak-to-mean throughput"))


def against_first(ok: pd.DataFrame, params: list[str]) -> list[Finding]:
    """Each other value of the first axis against its first value, scenario by scenario."""
    if len(params) < 2 or ok.empty:
        return []
    axis, rest = params[0], params[1:]
    values = list(dict.fromkeys(ok[axis].astype(str)))
    if len(values) < 2:
        return []
    frame = ok.assign(_v=ok[axis].astype(str), _rest=[_label(r, rest) for _, r in ok.iterrows()])
    base = frame[frame["_v"] == values[0]].drop_duplicates("_rest").set_index("_rest")
    out = []
    for value in values[1:]:
        other = frame[frame["_v"] == value].drop_duplicates("_rest").set_index("_rest")
        pairs = other.index.intersection(base.index)
        parts: list[str] = []
        vals: dict[str, Any] = {"axis": axis, "baseline": values[0], "value": value, "pairs": len(pairs)}
        for metric, what in AGAINST_METRICS:
            if metric not in frame.columns:
                continue
            r = (other.loc[pairs, metric].astype(float) / base.loc[pairs, metric].astype(float)).dropna()
            r = r[r.map(math.isfinite)]
            if r.empty:
                continue
            vals[metric] = {str(k): float(x) for k, x in r.items()}
            if r.max() - r.min() < 0.005:
                parts.append(f"{what} {r.min():.2f}x")
                continue
            ends = f"; lowest at {r.idxmin()}, highest at {r.idxmax()}" if metric == "iteration_ms" else ""
            parts.append(f"{what} {r.min():.2f}x-{r.max():.2f}x (median {r.median():.2f}x{ends})")
        if parts:
            over = ", ".join(f"`{p}`" for p in rest)
            out.append(Finding("against", f"`{axis}`={value} against {values[0]}, scenario by scenario over {over} "
                               f"({len(pairs)} pairs): " + "; ".join(parts) + ".", vals))
    return out


def failures(summary: pd.DataFrame, params: list[str], skipped: list[dict[str, Any]]) -> list[Finding]:
    out = []
    failed = summary[summary["status"] != "ok"]
    if len(failed):
        first = failed.iloc[0]
        out.append(Finding("failed", f"{len(failed)} of {len(summary)} scenarios failed: "
                           f"{_names([_label(r, params) for _, r in failed.iterrows()])} (first error: "
                           f"{str(first.get('error', ''))[:200]}).", {"failed": len(failed)}))
    if skipped:
        reason = str(skipped[0].get("reason", skipped[0].get("error", "")))[:200]
        out.append(Finding("skipped", f"{len(skipped)} combinations were skipped (first reason: {reason}).",
                           {"skipped": len(skipped)}))
    return out


def findings(summary: pd.DataFrame, params: list[str], skipped: list[dict[str, Any]] | None = None) -> list[Finding]:
    """Every finding of a study's summary (see the module's docstring for the rules)."""
    if summary.empty:
        return [Finding("empty", "The study has no scenarios.")]
    ok = summary[summary["status"] == "ok"]
    lead = lead_params(summary, params)
    out = bound(ok, lead) + burstiness(ok, lead) + axis_effects(ok, params) + against_first(ok, lead)
    out += loss_effects(ok, lead) + variability_effects(ok, lead)
    return out + failures(summary, params, skipped or [])


def lead_params(summary: pd.DataFrame, params: list[str]) -> list[str]:
    """The paths that name a scenario: a path whose values move with an earlier one's over every
    scenario (the rest of a zip group) would only repeat it in every label, line and column."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for p in params:
        codes = tuple(int(c) for c in pd.factorize(summary[p].astype(str))[0])
        if codes not in seen:
            seen.add(codes)
            out.append(p)
    return out


def _skipped(out: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads((out / layout.SKIPPED_JSON).read_text())
    except (OSError, ValueError):
        return []
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def study_findings(out: Path) -> tuple[str, ...]:
    """The sentences of a study results directory (for the dashboard's summary)."""
    from simstudy.sweeps import metric_columns

    summary = pd.read_parquet(out / layout.SUMMARY)
    ids = {"index", "key", "status", "error", "cached", "run_s", "backend_wall_s"}
    metrics = set(metric_columns(summary))
    params = [c for c in summary.columns if c not in ids and c not in metrics and c != "bytes_per_iter"]
    return tuple(f.sentence for f in findings(summary, params, _skipped(out)))
