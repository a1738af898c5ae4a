"""Group runs and captures by the shape of their traffic: k-means over standardized features.

Layer 6: this module sees feature vectors (`Item.scalars`, the names of `Features.scalars()`),
never specs or sweeps. `load_items` reads them from directories on disk (a sweep's
`summary.parquet`, a run directory, an analysed capture directory); `cluster` groups them and
returns a typed `Clustering` (compute first: `simstudy.report.cluster_plot` draws it).

The feature vector (`FEATURES_FOR_CLUSTERING`) keeps what describes the *shape* of the traffic
and leaves out what only says how long or how big the trace is (rows, total bytes, duration,
iteration, burst and flow counts, rank count). Quantities that span orders of magnitude
(`LOG10_FEATURES`: bytes, seconds, bits per second, the peak-to-mean ratio) enter as log10 of
the value, floored at `LOG10_FLOOR` (a zero duration is -6 in log10 seconds, not -inf); the
fractions and exponents (duty cycle, period strength, Hurst) enter as they are.

Then, column by column: a feature missing (NaN) in every item is dropped, a missing value is
replaced by the column median, a column with one value after that is dropped (it cannot tell
items apart), and each remaining column is standardized to mean 0 and standard deviation 1.
k-means runs on that matrix (scikit-learn, `n_init=N_INIT`, `random_state=seed`: the same
inputs give the same clusters); with `k=None` it tries k = 2 .. min(`MAX_K`, n - 1) and keeps
the best silhouette (the smallest k on a tie). Clusters are numbered in order of their first
item. Two principal components of the same matrix give the picture.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from sklearn.cluster import KMeans
from sklearn.decomposition import PCA
from sklearn.metrics import silhouette_score

from simstudy import layout
from simstudy.table import read_table
from simstudy.traffic.features import Features, analyze
from simstudy.traffic.pcap import CAPTURE_SUFFIXES

__all__ = [
    "FEATURES_FOR_CLUSTERING",
    "LOG10_FEATURES",
    "LOG10_FLOOR",
    "MAX_K",
    "N_INIT",
    "Clustering",
    "Item",
    "Source",
    "cluster",
    "feature_matrix",
    "load_items",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Source = Literal["sim", "real"]

#: The scalars of `Features.scalars()` that describe the shape of the traffic.
FEATURES_FOR_CLUSTERING: tuple[str, ...] = (
    "duty_cycle",
    "peak_to_mean",
    "burst_mean_s",
    "idle_mean_s",
    "burst_bytes_mean",
    "period_s",
    "period_strength",
    "hurst",
    "flow_size_median",
    "bytes_per_iter_mean",
    "throughput_mean_bps",
)
#: Features taken as log10(max(value, floor)), with their floor (in the feature's own unit).
LOG10_FLOOR: dict[str, float] = {
    "peak_to_mean": 1.0,
    "burst_mean_s": 1e-6,
    "idle_mean_s": 1e-6,
    "period_s": 1e-6,
    "flow_duration_median_s": 1e-6,
    "duration_s": 1e-6,
    "burst_bytes_mean": 1.0,
    "flow_size_median": 1.0,
    "bytes_per_iter_mean": 1.0,
    "total_bytes": 1.0,
    "throughput_mean_bps": 1.0,
    "throughput_p99_bps": 1.0,
    "throughput_peak_bps": 1.0,
}
#: The features that enter as log10 (the keys of `LOG10_FLOOR`).
LOG10_FEATURES: frozenset[str] = frozenset(LOG10_FLOOR)
#: Largest k tried when k is chosen by silhouette.
MAX_K = 8
#: k-means restarts (fixed, so that results do not depend on scikit-learn's default).
N_INIT = 10
#: Fewest items for which k is chosen (silhouette needs n > k >= 2).
MIN_ITEMS_TO_CHOOSE = 3
#: A standardized column whose values differ by less than this (relative) is constant.
_CONSTANT_RTOL = 1e-12

#: Files of a run or capture directory.
FEATURES_JSON = layout.FEATURES
TRAFFIC = layout.TRAFFIC
SUMMARY = layout.SUMMARY
#: Where `simstudy analyze PATH` writes features.json by default.
ANALYSIS = layout.ANALYSIS_DIR
#: The metadata file of a capture directory made by simstudy.
META = layout.META
#: Files that only a simulated run directory has (written by the backends and the sweep runner).
SIM_MARKERS = (layout.RUN_JSON, layout.RECORD)


class ClusterError(ValueError):
    """Items that cannot be clustered, or a directory that holds none: names the path or the knob."""

@dataclass(frozen=True)
class Item:
    """One thing to cluster: a simulated run or a captured job, by its feature scalars."""

    name: str
    """Unique name: a run key, or a directory name."""
    label: str
    """What to show beside the name: the swept values ("a=1, b=x") or a description."""
    source: Source
    """"sim" for a simulation, "real" for a packet capture."""
    scalars: dict[str, float]
    """Feature scalars by name (`Features.scalars()`; missing or NaN allowed)."""

    def __post_init__(self) -> None:
        if self.source not in ("sim", "real"):
            raise ValueError(f"item {self.name!r}: source must be 'sim' or 'real', got {self.source!r}")


def _value(name: str, x: float | None) -> float:
    """The clustering value of feature `name`: log10 (floored) for `LOG10_FEATURES`, NaN if missing."""
    if x is None:
        return math.nan
    v = float(x)
    if not math.isfinite(v):
        return math.nan
    floor = LOG10_FLOOR.get(name)
    return math.log10(max(v, floor)) if floor is not None else v


def feature_matrix(items: Sequence[Item], features: Sequence[str]) -> FloatArray:
    """Items x features, transformed as the clustering takes them (log10 where stated), NaN kept."""
    return np.array([[_value(f, it.scalars.get(f)) for f in features] for it in items],
                    dtype=np.float64).reshape(len(items), len(features))


@dataclass(frozen=True, eq=False)
class Clustering:
    """The result of `cluster`: which items fall together, in which feature space, and why."""

    items: tuple[Item, ...]
    features: tuple[str, ...]
    """The features used (the columns of `values` and `matrix`), in the order asked for."""
    dropped: dict[str, str]
    """Features asked for but not used, with the reason."""
    imputed: dict[str, int]
    """Features used that were missing in some items: how many (filled with the column median)."""
    values: FloatArray
    """Items x features as clustered before standardizing: log10 for `LOG10_FEATURES`, imputed."""
    matrix: FloatArray
    """`values` standardized per column (mean 0, standard deviation 1): what k-means sees."""
    labels: IntArray
    """Cluster of each item, 0 .. k-1, numbered in order of each cluster's first item."""
    k: int
    silhouette: float | None
    """Mean silhouette of the clustering (None when k < 2 or n <= k)."""
    scores: dict[int, float]
    """Silhouette of every k tried when k was chosen (empty when k was given or not chosen)."""
    pcs: FloatArray
    """Items x 2: coordinates on the first two principal components of `matrix` (0 when absent)."""
    explained: tuple[float, float]
    """Fraction of the variance of `matrix` on each of those components."""
    note: str
    """How k came about, in words."""
    seed: int = 0

    def groups(self) -> dict[int, list[str]]:
        """Item names per cluster, clusters in order, items in input order."""
        out: dict[int, list[str]] = {c: [] for c in range(self.k)}
        for item, c in zip(self.items, self.labels, strict=True):
            out[int(c)].append(item.name)
        return out

    def centroids(self) -> FloatArray:
        """Clusters x features: mean of each cluster in standardized units."""
        return np.array([self.matrix[self.labels == c].mean(axis=0) for c in range(self.k)],
                        dtype=np.float64).reshape(self.k, len(self.features))

    def distinguishing(self, top: int | None = None) -> list[tuple[str, float]]:
        """Features by how far apart the cluster centroids are (max - min, standardized units),
        largest first (empty with one cluster); at most `top` of them."""
        if self.k < 2:
            return []
        c = self.centroids()
        spread = c.max(axis=0) - c.min(axis=0)
        order = sorted(range(len(self.features)), key=lambda j: (-spread[j], j))
        return [(self.features[j], float(spread[j])) for j in order[:top]]

    def cluster_medians(self, c: int) -> dict[str, float]:
        """Median of each feature over cluster `c`, in the feature's own unit (log10 undone)."""
        med = np.median(self.values[self.labels == c], axis=0)
        return {f: float(10.0 ** m) if f in LOG10_FEATURES else float(m)
                for f, m in zip(self.features, med, strict=True)}

    def lines(self, *, top: int = 4) -> list[str]:
        """A printable account: the setup, one block per cluster, the distinguishing features."""
        sil = "" if self.silhouette is None else f", silhouette {self.silhouette:.3f}"
        out = [f"{len(self.items)} items in {self.k} cluster{'s' if self.k != 1 else ''}{sil} ({self.note})"]
        logs = [f for f in self.features if f in LOG10_FEATURES]
        out.append(f"features ({len(self.features)}, standardized; log10 of {', '.join(logs) or 'none'}): "
                   + ", ".join(self.features))
        if self.dropped:
            out.append("dropped: " + "; ".join(f"{f} ({why})" for f, why in self.dropped.items()))
        if self.imputed:
            out.append("imputed with the median: " + ", ".join(f"{f} ({n} items)" for f, n in self.imputed.items()))
        best = self.distinguishing(top)
        width = max(len(it.name) for it in self.items)
        for c, names in self.groups().items():
            out.append("")
            out.append(f"cluster {c} ({len(names)} item{'s' if len(names) != 1 else ''}):")
            for item, lab in zip(self.items, self.labels, strict=True):
                if lab == c:
                    out.append(f"  {item.name:<{width}}  [{item.source}]  {item.label}".rstrip())
            if best:
                med = self.cluster_medians(c)
                out.append("  median: " + ", ".join(f"{f} {med[f]:.4g}" for f, _ in best))
        if best:
            out.append("")
            out.append("distinguishing features (spread of cluster centroids, standard deviations): "
                       + ", ".join(f"{f} {s:.2f}" for f, s in best))
        return out


def _prepare(items: Sequence[Item], features: Sequence[str]) -> tuple[
        list[str], dict[str, str], dict[str, int], FloatArray]:
    """The usable features, the dropped ones (with why), the imputed counts and the imputed values."""
    raw = feature_matrix(items, features)
    keep: list[int] = []
    dropped: dict[str, str] = {}
    imputed: dict[str, int] = {}
    for j, name in enumerate(features):
        col = raw[:, j]
        missing = np.isnan(col)
        if missing.all():
            known = any(name in it.scalars for it in items)
            dropped[name] = "missing in every item" if known else "not a scalar of any item"
            continue
        if missing.any():
            col[missing] = float(np.median(col[~missing]))
            imputed[name] = int(missing.sum())
        lo, hi = float(col.min()), float(col.max())
        if len(items) > 1 and hi - lo <= _CONSTANT_RTOL * max(1.0, abs(lo), abs(hi)):
            dropped[name] = f"the same in every item ({_show(name, lo)})"
            imputed.pop(name, None)
            continue
        keep.append(j)
    return [features[j] for j in keep], dropped, imputed, raw[:, keep]


def _show(name: str, v: float) -> str:
    return f"{10.0 ** v:.4g}" if name in LOG10_FEATURES else f"{v:.4g}"


def _standardize(values: FloatArray) -> FloatArray:
    mean = values.mean(axis=0)
    std = values.std(axis=0)
    return np.asarray((values - mean) / np.where(std > 0, std, 1.0), dtype=np.float64)


def _kmeans(matrix: FloatArray, k: int, seed: int) -> IntArray:
    """k-means labels renumbered in order of first appearance."""
    if k == 1:
        return np.zeros(len(matrix), dtype=np.int64)
    raw = KMeans(n_clusters=k, n_init=N_INIT, random_state=seed).fit_predict(matrix)
    order = {int(c): i for i, c in enumerate(dict.fromkeys(int(x) for x in raw))}
    return np.array([order[int(x)] for x in raw], dtype=np.int64)


def _silhouette(matrix: FloatArray, labels: IntArray) -> float | None:
    n, found = len(labels), len(np.unique(labels))
    if found < 2 or n <= found:
        return None
    return float(silhouette_score(matrix, labels))


def _pca(matrix: FloatArray) -> tuple[FloatArray, tuple[float, float]]:
    n, d = matrix.shape
    pcs = np.zeros((n, 2), dtype=np.float64)
    ratio = [0.0, 0.0]
    m = min(2, n - 1, d)
    if m < 1 or float(matrix.var(axis=0).sum()) == 0.0:
        return pcs, (0.0, 0.0)
    pca = PCA(n_components=m, svd_solver="full")
    pcs[:, :m] = pca.fit_transform(matrix)
    ratio[:m] = [float(r) for r in pca.explained_variance_ratio_]
    return pcs, (ratio[0], ratio[1])


def cluster(
    items: Sequence[Item],
    *,
    k: int | None = None,
    features: Sequence[str] = FEATURES_FOR_CLUSTERING,
    seed: int = 0,
) -> Clustering:
    """Group `items` by k-means over their standardized `features` (see the module docstring).

    `k=None` chooses k in 2 .. min(`MAX_K`, n - 1) by the best silhouette; with fewer than
    `MIN_ITEMS_TO_CHOOSE` items, or when every item has the same features, there is one cluster
    (the `note` says why). Raises ClusterError when there are no items, names repeat, no feature
    has a value in any item, or `k` is not in 1 .. n.
    """
    items = tuple(items)
    if not items:
        raise ClusterError("nothing to cluster: no items")
    names = [it.name for it in items]
    if len(set(names)) < len(names):
        repeated = sorted({x for x in names if names.count(x) > 1})
        raise ClusterError(f"item names must be unique; repeated: {repeated}")
    features = tuple(features)
    if not features:
        raise ClusterError("no features to cluster on")
    n = len(items)
    if k is not None and not 1 <= k <= n:
        raise ClusterError(f"k must be between 1 and the number of items ({n}), got {k}")
    used, dropped, imputed, values = _prepare(items, features)
    if not used and all("missing" in why or "not a scalar" in why for why in dropped.values()):
        raise ClusterError(
            f"no usable features: none of {list(features)} has a value in any of the {n} items "
            f"({'; '.join(f'{f}: {why}' for f, why in dropped.items())})")
    matrix = _standardize(values)
    distinct = len(np.unique(matrix, axis=0)) if used else 1
    scores: dict[int, float] = {}
    if k is not None:
        note = f"k={k} given"
        if k > distinct:
            raise ClusterError(f"k={k} but the items have only {distinct} distinct feature vectors")
    elif n < MIN_ITEMS_TO_CHOOSE:
        k, note = 1, f"{n} item{'s' if n != 1 else ''}: too few to choose k (needs {MIN_ITEMS_TO_CHOOSE}): one cluster"
    elif not used or distinct == 1:
        k, note = 1, "every item has the same features: one cluster"
    else:
        candidates = range(2, min(MAX_K, n - 1, distinct) + 1)
        for c in candidates:
            s = _silhouette(matrix, _kmeans(matrix, c, seed))
            if s is not None:
                scores[c] = s
        if not scores:
            k, note = 1, "no k in 2 .. n - 1 gives separate clusters: one cluster"
        else:
            k = max(scores, key=lambda c: (scores[c], -c))
            note = f"k chosen by silhouette over k={candidates.start}..{candidates.stop - 1}"
    labels = _kmeans(matrix, k, seed) if used else np.zeros(n, dtype=np.int64)
    pcs, explained = _pca(matrix)
    return Clustering(
        items=items, features=tuple(used), dropped=dropped, imputed=imputed, values=values, matrix=matrix,
        labels=labels, k=k, silhouette=_silhouette(matrix, labels), scores=scores, pcs=pcs,
        explained=explained, note=note, seed=seed,
    )


# ---------------------------------------------------------------------------------------------
# reading items from disk


def _text(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "NA"
    if isinstance(v, float | np.floating):
        return f"{float(v):g}"
    if isinstance(v, np.integer):
        return str(int(v))
    return str(v)


def _float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _features_file(d: Path) -> Path | None:
    """The features.json of a directory: its own, else the one `simstudy analyze` wrote in `analysis/`."""
    for f in (d / FEATURES_JSON, d / ANALYSIS / FEATURES_JSON):
        if f.is_file():
            return f
    return None


def _dir_scalars(d: Path) -> dict[str, float]:
    """Feature scalars of a run or capture directory: its features.json, else traffic.parquet analysed."""
    f = _features_file(d)
    if f is not None:
        try:
            return Features.from_json(json.loads(f.read_text(encoding="utf-8"))).scalars()
        except (ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"{f}: not a readable features document: {exc}") from exc
    return analyze(read_table(d / TRAFFIC)).scalars()


def _param_columns(frame: pd.DataFrame) -> list[str]:
    """The swept-parameter columns of a sweep summary: those between `index` and `key`."""
    cols = [str(c) for c in frame.columns]
    return cols[cols.index("index") + 1 : cols.index("key")]


def _sweep_items(d: Path) -> list[Item]:
    frame = pd.read_parquet(d / SUMMARY)
    need = {"index", "key", "status"}
    if not need <= set(frame.columns):
        raise ClusterError(f"{d / SUMMARY}: not a sweep summary (needs columns {sorted(need)})")
    params = _param_columns(frame)
    cols = [str(c) for c in frame.columns]
    metrics = [c for c in cols[cols.index("key") + 1 :] if pd.api.types.is_numeric_dtype(frame[c])
               and not pd.api.types.is_bool_dtype(frame[c])]
    from_summary = set(FEATURES_FOR_CLUSTERING) <= set(metrics)
    labels: dict[str, list[str]] = {}
    scalars: dict[str, dict[str, float]] = {}
    for _, row in frame[frame["status"] == "ok"].iterrows():
        key = str(row["key"])
        labels.setdefault(key, []).append(", ".join(f"{p}={_text(row[p])}" for p in params))
        if key in scalars:
            continue  # the same scenario at two points of the sweep: one run
        values = {c: _float(row[c]) for c in metrics}
        if not from_summary:
            run = d / layout.RUNS_DIR / key
            if not ((run / FEATURES_JSON).is_file() or (run / TRAFFIC).is_file()):
                raise ClusterError(f"{d}: the summary has no traffic features and {run} has neither "
                                 f"{FEATURES_JSON} nor {TRAFFIC}")
            values.update(_dir_scalars(run))
        scalars[key] = values
    return [Item(key, " | ".join(labels[key]), "sim", scalars[key]) for key in scalars]


def _has_captures(d: Path) -> bool:
    return (d / META).is_file() or any(p.is_file() and p.suffix.lower() in CAPTURE_SUFFIXES for p in d.iterdir())


def _kind(d: Path) -> str | None:
    if (d / SUMMARY).is_file():
        return "sweep"
    if _features_file(d) is not None or (d / TRAFFIC).is_file():
        return "run"
    if _has_captures(d):
        raise ClusterError(f"{d}: a capture directory that has not been analysed (no {FEATURES_JSON} in it or in "
                         f"{ANALYSIS}/): run `simstudy analyze {d}` first")
    return None


def _source(d: Path) -> Source:
    """"sim" for a run directory (run.json or record.json), "real" for a capture directory (pcaps or
    meta.json), looking in `d` then in its parent (`d` may be the `analysis/` of either); else
    "sim" when `d` has a traffic.parquet, "real" for a bare features.json."""
    for x in (d, d.parent):
        if any((x / m).is_file() for m in SIM_MARKERS):
            return "sim"
        if _has_captures(x):
            return "real"
    return "sim" if (d / TRAFFIC).is_file() else "real"


def _run_item(d: Path) -> Item:
    """A run directory or an analysed capture directory (an `analysis/` directory is named after its parent)."""
    name = d.resolve().parent.name if d.resolve().name == ANALYSIS and not (d / TRAFFIC).is_file() else d.name
    return Item(name, name, _source(d), _dir_scalars(d))


def _items_of(d: Path, kind: str | None) -> list[Item]:
    if kind == "sweep":
        return _sweep_items(d)
    if kind == "run":
        return [_run_item(d)]
    return []


_EXPECTED = (f"a sweep directory ({SUMMARY} and runs/<key>/{FEATURES_JSON}), a run directory ({FEATURES_JSON} "
             f"or {TRAFFIC}, with run.json), an analysed capture directory (pcaps and {ANALYSIS}/{FEATURES_JSON} "
             "from `simstudy analyze`), or a directory of such directories")


def load_items(paths: Iterable[str | Path]) -> list[Item]:
    """Items from directories on disk, in the order given.

    Each path is a sweep directory (one item per `ok` row of `summary.parquet`, named by run
    key, labelled with the swept values "a=1, b=x"; the feature scalars come from the summary's
    columns, or from `runs/<key>/` when the summary lacks them), a run directory (features.json,
    or traffic.parquet analysed here; source "sim"), an analysed capture directory (pcaps or
    meta.json, and features.json in it or in `analysis/`, where `simstudy analyze` writes it;
    source "real"; see `_source` for the exact rule), such an `analysis/` directory itself (named
    after its parent), or a directory whose subdirectories are any of these (e.g. `captures/`, one
    per experiment). Names repeated across paths get the name of their top directory in front
    ("<dir>/<name>"). Raises ClusterError naming the path when it is none of these, or when it holds
    a capture directory that has not been analysed.
    """
    groups: list[tuple[Path, list[Item]]] = []
    for p in paths:
        d = Path(p)
        if not d.is_dir():
            raise ClusterError(f"{d}: no such directory; expected {_EXPECTED}")
        kind = _kind(d)
        items = _items_of(d, kind)
        if kind is None:
            for sub in sorted(x for x in d.iterdir() if x.is_dir()):
                items.extend(_items_of(sub, _kind(sub)))
            if not items:
                raise ClusterError(f"{d}: unknown layout; expected {_EXPECTED}")
        groups.append((d, items))
    count: dict[str, int] = {}
    for _, items in groups:
        for it in items:
            count[it.name] = count.get(it.name, 0) + 1
    out: list[Item] = []
    for d, items in groups:
        top = d.resolve().name
        out.extend(Item(f"{top}/{it.name}", it.label, it.source, it.scalars) if count[it.name] > 1 else it
                   for it in items)
    return out

