"""What a study of clusters (several jobs on one network) found: typed results computed from its
summary, which reports render (compute first, render second).

* `job_rows`: per scenario and job, its iteration time shared and alone, and its slowdown;
* `slowdown_by_axis`: per swept axis, the mean slowdown at each value, and the values where it is
  lowest and highest (CASSINI's question: which start offset interleaves the jobs best);
* `tier_bytes`: per scenario, the bytes each tier of the network carried (runs that keep links).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from simstudy import layout
from simstudy.linktable import read_links
from simstudy.sweeps.runner import run_link_summary
from simstudy.traffic.links import LinkLoad

_JOB = re.compile(r"^job\.(?P<job>.+)\.(?P<metric>iteration_ms|alone_iteration_ms|slowdown|start_ms|bytes_per_iter)$")
_TIER = re.compile(r"^tier\.(?P<tier>.+)\.bytes$")


@dataclass(frozen=True)
class JobRow:
    """One job in one scenario of the study."""

    params: dict[str, Any]
    job: str
    start_ms: float
    iteration_ms: float
    alone_iteration_ms: float
    slowdown: float


@dataclass(frozen=True)
class SlowdownByAxis:
    """How the jobs' mean slowdown changes along one swept axis (averaged over the other axes)."""

    axis: str
    values: tuple[Any, ...]
    slowdown: tuple[float, ...]
    best: Any
    best_slowdown: float
    worst: Any
    worst_slowdown: float

    together: tuple[str, ...] = ()

    def sentence(self) -> str:
        name = f"`{self.axis}`" + (f" (swept together with {', '.join(f'`{a}`' for a in self.together)})"
                                   if self.together else "")
        if self.worst_slowdown - self.best_slowdown < 5e-4:
            return (f"The jobs' mean slowdown does not change with {name}: {self.best_slowdown:.3f}x their time alone "
                    f"at every value.")
        return (f"The jobs' mean slowdown is lowest at {name} = {self.best}: {self.best_slowdown:.3f}x their "
                f"time alone, and highest at {self.worst}: {self.worst_slowdown:.3f}x "
                f"({(self.worst_slowdown / self.best_slowdown - 1) * 100:.1f}% longer iterations there).")


def is_cluster_study(summary: pd.DataFrame) -> bool:
    return "slowdown_mean" in summary.columns


def job_names(summary: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(m["job"] for c in summary.columns if (m := _JOB.match(str(c)))))


def job_rows(summary: pd.DataFrame, params: list[str]) -> list[JobRow]:
    """Every job of every finished scenario."""
    ok = summary[summary["status"] == "ok"]
    out = []
    for _, row in ok.iterrows():
        for job in job_names(summary):
            if pd.isna(row.get(f"job.{job}.iteration_ms")):
                continue
            out.append(JobRow({p: row[p] for p in params}, job, float(row[f"job.{job}.start_ms"]),
                              float(row[f"job.{job}.iteration_ms"]), float(row[f"job.{job}.alone_iteration_ms"]),
                              float(row[f"job.{job}.slowdown"])))
    return out


def slowdown_by_axis(summary: pd.DataFrame, params: list[str]) -> list[SlowdownByAxis]:
    """For each swept axis with several values, the mean slowdown per value and its extremes."""
    ok = summary[(summary["status"] == "ok") & summary["slowdown_mean"].notna()]
    out: list[SlowdownByAxis] = []
    seen: dict[tuple[int, ...], int] = {}
    for axis in params:
        if ok.empty or ok[axis].astype(str).nunique() < 2:
            continue
        codes = tuple(int(c) for c in pd.factorize(ok[axis].astype(str))[0])
        if codes in seen:  # zipped with an axis already reported: the same groups of scenarios
            first = out[seen[codes]]
            out[seen[codes]] = replace(first, together=(*first.together, axis))
            continue
        seen[codes] = len(out)
        means = ok.groupby(axis, sort=False)["slowdown_mean"].mean()
        values = tuple(means.index)
        slow = tuple(float(v) for v in means.to_numpy())
        best = min(range(len(slow)), key=lambda i: (slow[i], i))
        worst = max(range(len(slow)), key=lambda i: (slow[i], -i))
        out.append(SlowdownByAxis(axis, values, slow, values[best], slow[best], values[worst], slow[worst]))
    return out


@dataclass(frozen=True)
class HotLinks:
    """The most loaded links of one scenario (runs that kept their link table)."""

    params: dict[str, Any]
    links: tuple[LinkLoad, ...]


def hottest_links(out: Path, summary: pd.DataFrame, params: list[str], *, top: int = 5) -> list[HotLinks]:
    """Per finished scenario that kept links.parquet, its `top` links by mean utilisation over the run."""
    found = []
    for _, row in summary[summary["status"] == "ok"].iterrows():
        run = out / layout.RUNS_DIR / str(row["key"])
        if not (run / layout.LINKS).is_file():
            continue
        summ = run_link_summary(read_links(run / layout.LINKS), run / layout.BUNDLE_DIR,
                                float(row["finish_ms"]) * 1e-3, top=top)
        found.append(HotLinks({p: row[p] for p in params}, summ.hottest))
    return found


def tier_bytes(summary: pd.DataFrame) -> list[str]:
    """The tiers whose bytes the summary has (runs that kept their link table)."""
    return [m["tier"] for c in summary.columns if (m := _TIER.match(str(c)))]


def fmt(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"
