"""What a dashboard page shows, computed first (typed, binned, capped) and rendered second
(`simstudy.report.dashboard.page`).

A page is built from binned data only, whatever the size of the run: a throughput timeline is a
pyramid of binnings (1 ms bins up to a few hundred bins for the whole run) from which the page
picks, on every zoom, the finest level that the visible range holds in at most `SHOWN_BINS` bins;
a traffic matrix of many ranks is summed over groups of ranks; a Gantt chart shows one
iteration of at most `GANTT_RANKS` ranks. Four kinds of directory have a page:

* `study`: a sweep's results directory (summary.parquet);
* `run`: a run directory (run.json);
* `capture`: a directory of packet captures (one pcap per host, meta.json optional), or switch
  counters (`simstudy.traffic.counters`: tiers and hottest ports over time, every port's
  utilisation and period in a table);
* `validation`: the `validation/` directory `simstudy validate` writes (or the directory above it).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from simstudy import layout
from simstudy.backends.rundir import run_iterations
from simstudy.linktable import read_links, utilization_note
from simstudy.sweeps.runner import run_link_summary
from simstudy.table import read_table
from simstudy.traffic.compare import ValidationReport, compare
from simstudy.traffic.counter_features import CounterFeatures, analyze_counters, compare_counters, counters_frame
from simstudy.traffic.counters import CountersError, is_counters, load_counters
from simstudy.traffic.features import Features, analyze, iteration_profile
from simstudy.traffic.sources import SourceError, load_traffic
from simstudy.traffic.timeline import spread_bytes

Kind = Literal["study", "run", "capture", "validation"]
FloatArray = NDArray[np.float64]

#: The finest bin of a timeline (the issue's "down to 1 ms bins").
FINEST_BIN_S = 1e-3
#: The coarsest level of a pyramid has at most this many bins (the whole run at a glance).
COARSEST_BINS = 500
#: A zoom shows the finest level whose bins in the visible range are at most this many.
SHOWN_BINS = 500
#: At most this many values in all the levels of one pyramid (about 8 bytes each in the page):
#: a longer run gets a coarser finest bin, said on the page.
PYRAMID_CAP = 1_500_000
#: Traffic matrices larger than this are summed over groups of consecutive ranks.
MATRIX_CAP = 128
#: The Gantt chart shows this many ranks at most (the first ones).
GANTT_RANKS = 32
GANTT_SPANS = 20_000
#: Scenario timelines of a study: at most this many bins each.
STUDY_TIMELINE_BINS = 600


class DashboardError(ValueError):
    """A path the dashboard cannot show: one line naming the path and what was expected."""


def detect(path: Path) -> tuple[Kind, Path]:
    """What kind of directory `path` is (and the directory to read)."""
    if not path.exists():
        raise DashboardError(f"{path}: no such file or directory")
    if not path.is_dir():
        if is_counters(path):  # a counters CSV
            return "capture", path
        raise DashboardError(f"{path}: not a directory; expected a study results directory (summary.parquet), a "
                             f"run directory (run.json), a capture directory (*.pcap), switch counters or a "
                             f"validation directory")
    if (path / layout.SUMMARY).is_file() or (path / layout.STUDY_JSON).is_file():
        return "study", path
    if (path / layout.RUN_JSON).is_file():
        return "run", path
    if (path / layout.FEATURES_REAL).is_file():
        return "validation", path
    if (path / layout.VALIDATION_DIR / layout.FEATURES_REAL).is_file():
        return "validation", path / layout.VALIDATION_DIR
    if any(p.suffix in layout.CAPTURE_SUFFIXES for p in path.iterdir() if p.is_file()) or is_counters(path):
        return "capture", path
    raise DashboardError(f"{path}: none of the four kinds: expected summary.parquet (a study's results), run.json "
                         f"(a run), {layout.FEATURES_REAL} (a validation) or capture files "
                         f"({', '.join(layout.CAPTURE_SUFFIXES)})")


# -- timelines -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """One binning of a timeline: `rates[label]` in bytes per second per bin from `t0_s`."""

    bin_s: float
    t0_s: float
    rates: dict[str, FloatArray]
    hover: tuple[str, ...] = ()
    """Per bin: what was in flight (collective, iteration, bytes)."""


@dataclass(frozen=True)
class Pyramid:
    """The same timeline at several bin widths, finest first; `note` says when it was capped."""

    levels: tuple[Level, ...]
    total_bytes: float
    note: str = ""

    @property
    def finest(self) -> Level:
        return self.levels[0]


def _series_key(table: pd.DataFrame) -> tuple[NDArray[np.int64], list[str]]:
    """Each row's series: its op, and its job when the table holds several jobs."""
    ops = table["op"].astype(str).to_numpy()
    if "job" in table.columns and table["job"].nunique() > 1:
        labels = np.char.add(np.char.add("job ", table["job"].astype(str).to_numpy().astype(str)),
                             np.char.add(" ", ops.astype(str)))
    else:
        labels = ops.astype(str)
    codes, uniques = pd.factorize(labels, sort=True)
    return codes.astype(np.int64), [str(u) for u in uniques]


def _hover(level_bin: float, t0: float, nbins: int, table: pd.DataFrame, spans: pd.DataFrame | None,
           totals: FloatArray) -> tuple[str, ...]:
    """Per bin: the collective in flight at its middle (lowest rank's span), the iteration of the
    transfers in it, and its bytes."""
    mid = t0 + (np.arange(nbins) + 0.5) * level_bin
    coll = np.full(nbins, "", dtype=object)
    if spans is not None and len(spans):
        c = spans[spans["kind"] == "collective"]
        if len(c):
            c = c[c["rank"] == c["rank"].min()].sort_values("start_ns")
            starts = c["start_ns"].to_numpy() * 1e-9
            ends = c["end_ns"].to_numpy() * 1e-9
            names = c["name"].astype(str).to_numpy()
            i = np.searchsorted(starts, mid, side="right") - 1
            ok = (i >= 0) & (ends[np.clip(i, 0, None)] >= mid)
            coll[ok] = names[i[ok]]
    it = np.full(nbins, -1, dtype=np.int64)
    if "iteration" in table.columns and len(table):
        first = table.groupby("iteration")["t_start_s"].min().sort_values()
        idx = np.searchsorted(first.to_numpy(), mid, side="right") - 1
        it = np.where(idx >= 0, first.index.to_numpy()[np.clip(idx, 0, None)], -1)
    out = []
    for k in range(nbins):
        parts = []
        if coll[k]:
            parts.append(f"collective {coll[k]}")
        if it[k] >= 0:
            parts.append(f"iteration {int(it[k])}")
        parts.append(f"{totals[k] * level_bin / 1e6:.3f} MB in bin")
        out.append(", ".join(parts))
    return tuple(out)


def pyramid(table: pd.DataFrame, spans: pd.DataFrame | None = None, *, finest_s: float = FINEST_BIN_S,
            cap: int = PYRAMID_CAP) -> Pyramid:
    """Throughput per series (op, or job and op) at bins of `finest_s`, 2x, 4x, ... until the
    whole run fits in `COARSEST_BINS`; each transfer spread over its duration, so every level
    holds the table's bytes."""
    if len(table) == 0:
        return Pyramid((Level(finest_s, 0.0, {}),), 0.0, "no transfers")
    t0 = float(table["t_start_s"].min())
    span = max(float(table["t_end_s"].max()) - t0, finest_s)
    codes, labels = _series_key(table)
    note = ""
    finest = finest_s
    while True:
        n0 = math.ceil(span / finest) + 1
        total_vals = sum(len(labels) * math.ceil(n0 / 2**k) for k in range(max(int(math.log2(n0 / COARSEST_BINS)) + 2,
                                                                              1)))
        if total_vals <= cap:
            break
        finest *= 2
    if finest > finest_s:
        note = f"finest bin {finest * 1e3:g} ms (the page is capped at {cap:,} values)"
    start = table["t_start_s"].to_numpy(np.float64)
    end = table["t_end_s"].to_numpy(np.float64)
    nbytes = table["bytes"].to_numpy(np.float64)
    n0 = math.ceil(span / finest) + 1
    base = {lab: spread_bytes(start[codes == i], end[codes == i], nbytes[codes == i], t0, finest, n0)
            for i, lab in enumerate(labels)}
    levels = []
    width, cur = finest, base
    while True:
        totals = np.sum(list(cur.values()), axis=0) / width
        levels.append(Level(width, t0, {k: v / width for k, v in cur.items()},
                            _hover(width, t0, len(totals), table, spans, totals)))
        n = len(next(iter(cur.values())))
        if n <= COARSEST_BINS:
            break
        m = n + (n % 2)
        cur = {k: np.pad(v, (0, m - n)).reshape(-1, 2).sum(axis=1) for k, v in cur.items()}
        width *= 2
    return Pyramid(tuple(levels), float(nbytes.sum()), note)


@dataclass(frozen=True)
class Matrix:
    """Bytes between groups of ranks (a group is one rank unless there are more than MATRIX_CAP)."""

    labels: tuple[str, ...]
    bytes: FloatArray


def traffic_matrix(table: pd.DataFrame) -> Matrix:
    t = table[(table["src"] >= 0) & (table["dst"] >= 0)]
    if len(t) == 0:
        return Matrix((), np.zeros((0, 0)))
    n = int(max(t["src"].max(), t["dst"].max())) + 1
    group = max(1, math.ceil(n / MATRIX_CAP))
    g = math.ceil(n / group)
    m = np.zeros((g, g))
    np.add.at(m, (t["src"].to_numpy() // group, t["dst"].to_numpy() // group), t["bytes"].to_numpy(np.float64))
    labels = tuple(str(i) if group == 1 else f"{i * group}-{min(n, (i + 1) * group) - 1}" for i in range(g))
    return Matrix(labels, m)


@dataclass(frozen=True)
class Gantt:
    """Per-rank compute and communication spans of one iteration's time slot."""

    iteration: int
    window_s: tuple[float, float]
    rank: tuple[int, ...]
    kind: tuple[str, ...]
    name: tuple[str, ...]
    start_s: tuple[float, ...]
    end_s: tuple[float, ...]
    ranks_shown: int
    ranks_total: int


def gantt(spans: pd.DataFrame, finish_s: float, iterations: int) -> Gantt | None:
    """The spans in the slot of the second iteration (the first when there is one): finish time /
    iterations wide, of the first GANTT_RANKS ranks."""
    if spans is None or len(spans) == 0 or iterations < 1 or finish_s <= 0:
        return None
    k = 1 if iterations > 1 else 0
    slot = finish_s / iterations
    lo, hi = k * slot, (k + 1) * slot
    ranks = sorted(int(r) for r in spans["rank"].unique())
    shown = ranks[:GANTT_RANKS]
    s = spans[spans["rank"].isin(shown) & (spans["end_ns"] * 1e-9 > lo) & (spans["start_ns"] * 1e-9 < hi)
              & (spans["kind"] != "other")].head(GANTT_SPANS)
    return Gantt(k, (lo, hi), tuple(int(r) for r in s["rank"]), tuple(str(x) for x in s["kind"]),
                 tuple(str(x) for x in s["name"]), tuple(float(x) * 1e-9 for x in s["start_ns"]),
                 tuple(float(x) * 1e-9 for x in s["end_ns"]), len(shown), len(ranks))


@dataclass(frozen=True)
class LinkView:
    """The hottest links of a run that kept its link table, and their utilisation over time."""

    names: tuple[str, ...]
    tiers: tuple[str, ...]
    mean_utilization: tuple[float, ...]
    peak_utilization: tuple[float, ...]
    times_s: FloatArray
    utilization: dict[str, FloatArray]
    tier_bytes: dict[str, float]
    note: str = ""
    """How to read the utilisation under the run's congestion model (`linktable.utilization_note`)."""


def link_view(run: Path, finish_s: float, top: int = 10, congestion: str | None = None) -> LinkView | None:
    path = run / layout.LINKS
    if not path.is_file():
        return None
    links = read_links(path)
    if not len(links):
        return None
    summ = run_link_summary(links, run / layout.BUNDLE_DIR, finish_s, top=top)
    bin_s = summ.bin_s or 1e-3
    nb = max(1, math.ceil(summ.duration_s / bin_s))
    step = max(1, math.ceil(nb / STUDY_TIMELINE_BINS))
    times: FloatArray = np.arange(0, nb, step, dtype=np.float64) * bin_s
    util: dict[str, FloatArray] = {}
    for ld in summ.hottest[:8]:
        rows = links[links["link"] == ld.link]
        idx = np.clip(np.rint(rows["t_start_s"].to_numpy() / bin_s).astype(np.int64) // step, 0, len(times) - 1)
        b = np.bincount(idx, weights=rows["bytes"].to_numpy(np.float64), minlength=len(times))
        util[ld.name] = b * 8 / (ld.capacity_gbps * 1e9 * bin_s * step)
    return LinkView(tuple(x.name for x in summ.hottest), tuple(x.tier for x in summ.hottest),
                    tuple(x.mean_utilization for x in summ.hottest), tuple(x.peak_utilization for x in summ.hottest),
                    times, util, {t.tier: t.bytes for t in summ.tiers}, utilization_note(congestion))


# -- the four kinds --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunData:
    path: Path
    title: str
    facts: dict[str, str]
    timeline: Pyramid | None
    matrix: Matrix | None
    gantt: Gantt | None
    links: LinkView | None
    jobs: list[dict[str, Any]] = field(default_factory=list)




def _jobs(info: dict[str, Any]) -> list[dict[str, Any]]:
    """Per job of a cluster run: name, NPUs, start, iteration time shared and alone, slowdown."""
    details = info.get("details")
    jobs = details.get("jobs", []) if isinstance(details, dict) else []
    keep = ("name", "start_ms", "iterations", "iteration_ms", "alone_iteration_ms", "slowdown", "bytes_per_iter")
    return [{**{k: j.get(k) for k in keep}, "npus": len(j.get("npus", []))} for j in jobs if isinstance(j, dict)]


def run_data(run: Path) -> RunData:
    try:
        info = json.loads((run / layout.RUN_JSON).read_text())
    except (OSError, ValueError) as exc:
        raise DashboardError(f"{run / layout.RUN_JSON}: unreadable run record ({exc})") from None
    finish_s = float(info.get("finish_ns", 0)) * 1e-9
    spans = pd.read_parquet(run / layout.SPANS) if (run / layout.SPANS).is_file() else None
    table = read_table(run / layout.TRAFFIC) if (run / layout.TRAFFIC).is_file() else None
    details = info.get("details")
    congestion = details.get("congestion") if isinstance(details, dict) else None
    backend = str(info.get("backend", "?"))
    if isinstance(congestion, str) and congestion != backend:  # ns3's network model is ns-3's own: no "ns3 (ns3)"
        backend += f" ({congestion})"
    facts = {"backend": backend, "finish": f"{finish_s * 1e3:.3f} ms",
             "ranks": str(len(info.get("ranks", []))), "transfers": f"{int(info.get('transfers', 0)):,}",
             "bytes": f"{float(info.get('bytes', 0)) / 1e9:.3f} GB", "kept": str(info.get("traffic", "rows"))}
    return RunData(run, f"Run {run.name}", facts,
                   pyramid(table, spans) if table is not None else None,
                   traffic_matrix(table) if table is not None else None,
                   gantt(spans, finish_s, run_iterations(run)) if spans is not None else None,
                   link_view(run, finish_s, congestion=congestion), _jobs(info))


@dataclass(frozen=True)
class ScenarioTimeline:
    key: str
    label: str
    bin_s: float
    t0_s: float
    rates: FloatArray


@dataclass(frozen=True)
class StudyData:
    path: Path
    title: str
    description: str
    params: tuple[str, ...]
    metrics: tuple[str, ...]
    table: pd.DataFrame
    timelines: tuple[ScenarioTimeline, ...]
    findings: tuple[str, ...]


def _study_timeline(run: Path, key: str, label: str) -> ScenarioTimeline | None:
    if not (run / layout.TRAFFIC).is_file():
        return None
    t = pd.read_parquet(run / layout.TRAFFIC, columns=["t_start_s", "t_end_s", "bytes"])
    if not len(t):
        return None
    t0 = float(t["t_start_s"].min())
    span = float(t["t_end_s"].max()) - t0
    bin_s = max(FINEST_BIN_S, span / STUDY_TIMELINE_BINS)
    n = math.ceil(span / bin_s) + 1
    rates = spread_bytes(t["t_start_s"].to_numpy(np.float64), t["t_end_s"].to_numpy(np.float64),
                    t["bytes"].to_numpy(np.float64), t0, bin_s, n) / bin_s
    return ScenarioTimeline(key, label, bin_s, t0, rates)


def study_data(out: Path, findings: tuple[str, ...] = ()) -> StudyData:
    from simstudy.sweeps import metric_columns

    summary_path = out / layout.SUMMARY
    if not summary_path.is_file():
        raise DashboardError(f"{out}: a study directory without {layout.SUMMARY}: the sweep wrote nothing yet "
                             f"(run `simstudy sweep STUDY -o {out}`)")
    summary = pd.read_parquet(summary_path)
    meta: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        meta = json.loads((out / layout.STUDY_JSON).read_text())
    ids = {"index", "key", "status", "error", "cached"}
    metrics = tuple(c for c in metric_columns(summary) if c in summary.columns)
    params = tuple(c for c in summary.columns if c not in ids and c not in metrics
                   and c not in {"run_s", "backend_wall_s", "bytes_per_iter"})
    timelines = []
    for _, row in summary[summary["status"] == "ok"].iterrows():
        label = ", ".join(f"{p}={row[p]}" for p in params)
        tl = _study_timeline(out / layout.RUNS_DIR / str(row["key"]), str(row["key"]), label)
        if tl is not None:
            timelines.append(tl)
    name = str(meta.get("name", out.name)) if isinstance(meta, dict) else out.name
    desc = str(meta.get("description", "") or "") if isinstance(meta, dict) else ""
    return StudyData(out, f"Study {name}", desc, params, metrics, summary, tuple(timelines), findings)


@dataclass(frozen=True)
class Overlay:
    """Throughput through one iteration, aligned at iteration starts, per trace ('real', 'simulated')."""

    offsets_s: FloatArray
    mean: dict[str, FloatArray]
    each: dict[str, FloatArray]
    """Iterations x bins per trace (at most 20 iterations)."""


def overlay(features: dict[str, Features]) -> Overlay | None:
    spans = [f.period.period_s for f in features.values() if math.isfinite(f.period.period_s)]
    if not spans:
        return None
    span = max(spans)
    profiles = {k: iteration_profile(f, span_s=span) for k, f in features.items()}
    profiles = {k: p for k, p in profiles.items() if len(p.offsets_s)}
    if not profiles:
        return None
    offsets = next(iter(profiles.values())).offsets_s
    n = min(len(p.offsets_s) for p in profiles.values())
    return Overlay(offsets[:n], {k: p.mean[:n] for k, p in profiles.items()},
                   {k: p.curves[:20, :n] for k, p in profiles.items()})


@dataclass(frozen=True)
class TraceData:
    """A capture or a validation: timelines, per-iteration overlay and (validation) the verdict;
    for switch counters, per tier and hottest port, and a table of every port."""

    path: Path
    title: str
    facts: dict[str, str]
    timelines: dict[str, tuple[FloatArray, FloatArray]]
    overlay: Overlay | None
    report: ValidationReport | None
    step_label: str = "1 ms bins"
    """What one point of the timelines is."""
    ports: pd.DataFrame | None = None
    """Switch counters: one row per port (`counters_frame`)."""


def _timeline_of(f: Features) -> tuple[FloatArray, FloatArray]:
    tl = f.timeline_1ms
    total = tl.series.get("total", np.zeros(0))
    return tl.times_s, total


def _counter_trace(title: str, path: Path, features: dict[str, CounterFeatures],
                   report: ValidationReport | None) -> TraceData:
    first = next(iter(features.values()))
    timelines = {(f"{label}: {name}" if len(features) > 1 else name): (f.times_s, rates)
                 for label, f in features.items() for name, rates in f.timelines.items()
                 if len(features) == 1 or name.startswith("tier ")}
    facts = {"ports": str(len(first.ports)), "sample": f"{first.sample_s:.3g} s", "steps": f"{first.grid_s:.3g} s",
             "duration": f"{first.duration_s:.1f} s"}
    for t in first.tiers:
        facts[f"tier {t.tier}"] = (f"mean utilisation {t.mean_utilization:.3f}, period "
                                   + (f"{t.period_s:.3g} s" if math.isfinite(t.period_s) else "none")
                                   + f" (strength {t.period_strength:.2f})")
    if report is not None:
        facts = {"verdict": report.verdict, **facts}
    return TraceData(path, title, facts, timelines, None, report, f"{first.grid_s:.3g} s steps",
                     counters_frame(first))


def counters_data(path: Path) -> TraceData:
    try:
        c = load_counters(path)
    except CountersError as exc:
        raise DashboardError(str(exc)) from None
    return _counter_trace(f"Switch counters {c.label}", path, {"real": analyze_counters(c)}, None)


def capture_data(path: Path) -> TraceData:
    if is_counters(path):
        return counters_data(path)
    try:
        src = load_traffic(path)
    except SourceError as exc:
        raise DashboardError(str(exc)) from None
    from simstudy.validation import payload_view

    f = analyze(payload_view(src.table), boundaries=src.boundaries, roles=src.roles)  # as `simstudy analyze`
    facts = {"packets": f"{len(src.table):,}", "workers": str(len(f.roles.workers)),
             "period": f"{f.period.period_s * 1e3:.2f} ms",
             "payload per iteration": f"{f.bytes_per_iteration.total / 1e6:.3f} MB"}
    return TraceData(path, f"Capture {path.name}", facts, {"real": _timeline_of(f)}, overlay({"real": f}), None)


def validation_data(vdir: Path) -> TraceData:
    try:
        data = json.loads((vdir / layout.FEATURES_REAL).read_text())
        if isinstance(data, dict) and "grid_s" in data:  # switch counters against a simulated link table
            real_c = CounterFeatures.from_json(data)
            sim_c = CounterFeatures.from_json(json.loads((vdir / layout.FEATURES_SIM).read_text()))
            return _counter_trace(f"Validation {vdir.parent.name}", vdir, {"real": real_c, "simulated": sim_c},
                                  compare_counters(real_c, sim_c))
        real = Features.from_json(data)
        sim = Features.from_json(json.loads((vdir / layout.FEATURES_SIM).read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DashboardError(f"{vdir}: unreadable features ({type(exc).__name__}: {exc})") from None
    report = compare(real, sim)
    facts = {"verdict": report.verdict, "period real": f"{real.period.period_s * 1e3:.2f} ms",
             "period simulated": f"{sim.period.period_s * 1e3:.2f} ms"}
    return TraceData(vdir, f"Validation {vdir.parent.name}", facts,
                     {"real": _timeline_of(real), "simulated": _timeline_of(sim)},
                     overlay({"real": real, "simulated": sim}), report)


def load(path: Path, *, findings_for: Callable[[Path], tuple[str, ...]] | None = None
         ) -> tuple[Kind, RunData | StudyData | TraceData]:
    """The page data of `path`; `findings_for(study_dir)`: the sentences a study's summary states."""
    kind, where = detect(path)
    if kind == "study":
        data = study_data(where)
        if findings_for is not None and len(data.table):
            data = replace(data, findings=findings_for(where))
        return kind, data
    if kind == "run":
        return kind, run_data(where)
    if kind == "validation":
        return kind, validation_data(where)
    return kind, capture_data(where)
