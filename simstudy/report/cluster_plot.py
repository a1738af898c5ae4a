"""The picture of a `Clustering`: items on its first two principal components."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib
from matplotlib.lines import Line2D

from simstudy.report.files import figure, save_figure
from simstudy.traffic.cluster import Clustering

__all__ = ["plot_clusters", "short_label"]

#: Marker per item source.
MARKERS = {"sim": "o", "real": "^"}
#: Longest annotation drawn beside a point.
MAX_LABEL = 32

_DOTTED = re.compile(r"[\w-]+(?:\.[\w-]+)+=")


def short_label(label: str, *, limit: int = MAX_LABEL) -> str:
    """`label` for a point: dotted parameter paths cut to their last part
    ("topology.npus=4" -> "npus=4"), then cut to `limit` characters."""
    text = _DOTTED.sub(lambda m: m.group(0).rsplit(".", 1)[1], label)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plot_clusters(clustering: Clustering, path: str | Path, *, title: str = "") -> Path:
    """Scatter of the items in PC1/PC2, coloured by cluster, marker by source (sim o, real ^),
    each point annotated with its short label (its name when it has none); written to `path`."""
    path = Path(path)
    cmap = matplotlib.colormaps["tab10"]
    fig, ax = figure(figsize=(8, 6))
    x, y = clustering.pcs[:, 0], clustering.pcs[:, 1]
    for i, item in enumerate(clustering.items):
        c = int(clustering.labels[i])
        ax.scatter(x[i], y[i], color=cmap(c % 10), marker=MARKERS[item.source], s=60, edgecolors="black",
                   linewidths=0.5, zorder=3)
        ax.annotate(short_label(item.label or item.name), (x[i], y[i]), xytext=(4, 4), textcoords="offset points",
                    fontsize=7)
    ev1, ev2 = clustering.explained
    ax.set_xlabel(f"PC1 ({ev1:.0%} of variance)")
    ax.set_ylabel(f"PC2 ({ev2:.0%} of variance)")
    sil = "" if clustering.silhouette is None else f", silhouette {clustering.silhouette:.2f}"
    ax.set_title(title or f"{len(clustering.items)} items, {clustering.k} clusters{sil}")
    handles = [Line2D([], [], ls="", marker="s", color=cmap(c % 10), label=f"cluster {c} ({len(names)})")
               for c, names in clustering.groups().items()]
    sources = sorted({it.source for it in clustering.items})
    handles += [Line2D([], [], ls="", marker=MARKERS[s], color="grey", label=s) for s in sources]
    ax.legend(handles=handles, fontsize=8, loc="best")
    ax.grid(True, lw=0.3, alpha=0.5)
    return save_figure(fig, path, dpi=110)
