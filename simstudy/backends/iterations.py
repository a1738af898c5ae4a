"""A run's training iterations from its node spans: when each rank's and the job's iterations end.

Every ET node carries its iteration (`simstudy.iteration`); an iteration of a rank runs from the
issue of its first node to the end of its last. Any backend that reports spans has them.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from simstudy.backends.traffic_build import WorkloadInfo, by_rank
from simstudy.compiler.attributes import node_iteration


def span_iterations(info: WorkloadInfo, spans: pd.DataFrame) -> np.ndarray:
    """The iteration of every span's node (ranks that share a trace share one lookup)."""
    out = np.full(len(spans), -1, dtype=np.int64)
    if not len(spans):
        return out
    node = spans["node"].to_numpy()
    luts: dict[int, dict[int, int]] = {}
    for r, sel in by_rank(spans["rank"].to_numpy()):
        if not 0 <= r < len(info.nodes):
            continue
        nodes = info.nodes[r]
        lut = luts.get(id(nodes))
        if lut is None:
            lut = luts[id(nodes)] = {n.id: node_iteration(n) for n in nodes}
        out[sel] = [lut.get(i, -1) for i in node[sel].tolist()]
    return out


def iteration_spans(info: WorkloadInfo, spans: pd.DataFrame) -> dict[int, list[tuple[int, int]]]:
    """Each rank's iterations, (start ns, end ns), in order."""
    if not len(spans):
        return {}
    frame = spans.assign(k=span_iterations(info, spans))
    g = frame[frame["k"] >= 0].groupby(["rank", "k"])
    starts, ends = g["start_ns"].min(), g["end_ns"].max()
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for (r, _k), a in starts.items():
        out[int(r)].append((int(a), int(ends[(r, _k)])))
    return dict(out)


def iteration_ends(info: WorkloadInfo, spans: pd.DataFrame) -> list[int]:
    """When the job's iterations end (ns): the last rank's end of each, in order."""
    if not len(spans):
        return []
    k = span_iterations(info, spans)
    ends = spans["end_ns"].to_numpy()[k >= 0]
    kk = k[k >= 0]
    if not len(kk):
        return []
    return [int(x) for x in pd.Series(ends).groupby(kk).max().sort_index().tolist()]
