"""A run's training iterations from its node spans: when each rank's and the job's iterations end.

Every ET node carries its iteration (`simstudy.iteration`); an iteration of a rank runs from the
issue of its first node to the end of its last. Any backend that reports spans has them.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from simstudy.backends.traffic_build import WorkloadInfo, by_rank
from simstudy.chakra import Node
from simstudy.compiler.attributes import node_iteration

#: Traces whose iteration lookups are kept at once (ranks that share a trace share one; a lookup of
#: every rank's trace at once was 0.4 GB on 4,096 GPUs)
LOOKUPS_KEPT = 64


def span_iterations(info: WorkloadInfo, spans: pd.DataFrame) -> np.ndarray:
    """The iteration of every span's node (ranks that share a trace share one lookup: an array by
    node id where the trace's ids run 0, 1, ..., else a dictionary)."""
    out = np.full(len(spans), -1, dtype=np.int64)
    if not len(spans):
        return out
    node = spans["node"].to_numpy()
    luts: dict[int, np.ndarray | dict[int, int]] = {}
    each: dict[int, int] = {}  # by node object: the ranks of a stage share most of their nodes
    for r, sel in by_rank(spans["rank"].to_numpy()):
        if not 0 <= r < len(info.nodes):
            continue
        nodes = info.nodes[r]
        lut = luts.get(id(nodes))
        if lut is None:
            if len(luts) >= LOOKUPS_KEPT:
                luts.clear()
            lut = luts[id(nodes)] = _iterations_by_id(nodes, each)
        ids = node[sel]
        if isinstance(lut, np.ndarray):
            known = (ids >= 0) & (ids < len(lut))
            out[sel] = np.where(known, lut[np.where(known, ids, 0)], -1)
        else:
            out[sel] = [lut.get(i, -1) for i in ids.tolist()]
    return out


def _iterations_by_id(nodes: list[Node], each: dict[int, int]) -> np.ndarray | dict[int, int]:
    """The iteration of every node of a trace by id (`each`: found before, by node object)."""
    def of(n: Node) -> int:
        found = each.get(id(n))
        if found is None:
            found = each[id(n)] = node_iteration(n)
        return found

    if all(n.id == k for k, n in enumerate(nodes)):
        return np.fromiter((of(n) for n in nodes), dtype=np.int64, count=len(nodes))
    return {n.id: of(n) for n in nodes}


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
    return last_ends(span_iterations(info, spans), spans["end_ns"].to_numpy())


#: Iterations up to which `last_ends` passes over the spans once per iteration
FEW_ITERATIONS = 64


def last_ends(k: np.ndarray, ends: np.ndarray, *, few: int = FEW_ITERATIONS) -> list[int]:
    """The latest end of each iteration number k >= 0 present, in order (k < 0: no iteration). Up to
    `few` iterations one pass over the spans per iteration (no copy of them: 38 M spans on 16,384
    GPUs); more, grouped (a copy, sorted)."""
    if not len(k) or k.max() < 0:
        return []
    top = int(k.max())
    if top < few:
        return [int(ends[mask].max()) for mask in ((k == i) for i in range(top + 1)) if mask.any()]
    valid = k >= 0
    return [int(x) for x in pd.Series(ends[valid]).groupby(k[valid]).max().sort_index().tolist()]
