"""A run's spans grouped by rank in one sort, against the comparison per rank it replaced."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from simstudy.backends import FlowsimBackend
from simstudy.backends.iterations import last_ends, span_iterations
from simstudy.backends.traffic_build import WorkloadInfo, by_rank, union_ns, union_pairs_ns
from simstudy.compiler import compile_scenario
from simstudy.compiler.attributes import node_iteration, node_meta
from simstudy.spec import Scenario


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=60), st.integers(min_value=0, max_value=20)),
                max_size=80))
@settings(max_examples=300, deadline=None)
def test_union_of_flat_pairs_is_the_union_of_tuples(drawn: list[tuple[int, int]]) -> None:
    """A rank's communication time from its flat (start, end) pairs, in numpy, against the loop over
    tuples it replaced (nested, touching, equal and empty intervals)."""
    intervals = [(a, a + d) for a, d in drawn]
    flat = [x for pair in intervals for x in pair]
    assert union_pairs_ns(flat) == union_ns(intervals)


@given(st.lists(st.tuples(st.integers(min_value=-1, max_value=9), st.integers(min_value=0, max_value=10**6)),
                max_size=200))
@settings(max_examples=200, deadline=None)
def test_last_ends_pass_by_iteration_is_the_grouping(drawn: list[tuple[int, int]]) -> None:
    """Each iteration's last end by one pass per iteration, against the grouping it falls back to."""
    k = np.asarray([a for a, _ in drawn], dtype=np.int64)
    ends = np.asarray([b for _, b in drawn], dtype=np.int64)
    assert last_ends(k, ends) == last_ends(k, ends, few=0)


@given(st.lists(st.integers(min_value=0, max_value=40), max_size=300))
@settings(max_examples=200, deadline=None)
def test_by_rank_is_the_comparison_per_rank(ranks: list[int]) -> None:
    rank = np.asarray(ranks, dtype=np.int64)
    slow = [(r, np.flatnonzero(rank == r)) for r in np.unique(rank).tolist()]
    fast = by_rank(rank)
    assert [r for r, _ in fast] == [r for r, _ in slow]
    for (_, a), (_, b) in zip(fast, slow, strict=True):
        assert a.tolist() == b.tolist()


def _span_iterations_per_trace(info: WorkloadInfo, spans: pd.DataFrame) -> np.ndarray:
    """The lookup this replaced: every trace's nodes through `node_meta`, its ranks by `isin`."""
    out = np.full(len(spans), -1, dtype=np.int64)
    rank = spans["rank"].to_numpy()
    node = spans["node"].to_numpy()
    traces: dict[int, list[int]] = defaultdict(list)
    for r, nodes in enumerate(info.nodes):
        traces[id(nodes)].append(r)
    for ranks in traces.values():
        lut = {n.id: node_meta(n).iteration for n in info.nodes[ranks[0]]}
        sel = np.isin(rank, ranks)
        out[sel] = [lut.get(int(i), -1) for i in node[sel].tolist()]
    return out


def test_span_iterations_as_before(tmp_path: Path) -> None:
    spec = Scenario.model_validate({
        "name": "spans", "model": "gpt2_small",
        "parallelism": {"dp": 2, "pp": 2, "microbatches": 2},
        "topology": {"kind": "switch", "npus": 4, "bandwidth_gbps": 100},
        "training": {"iterations": 3, "batch_size_per_worker": 2},
    })
    bundle = compile_scenario(spec, tmp_path / "bundle").bundle
    result = FlowsimBackend(traffic="none").run(bundle, tmp_path / "run")
    info = WorkloadInfo.from_bundle(bundle)
    spans = result.spans
    found = span_iterations(info, spans)
    assert (found >= 0).all() and set(found.tolist()) == {0, 1, 2}
    assert found.tolist() == _span_iterations_per_trace(info, spans).tolist()
    # a rank beyond the traces (identical ranks stand for more) is left at -1, as before
    extra = pd.concat([spans, spans.head(3).assign(rank=99)], ignore_index=True)
    assert span_iterations(info, extra).tolist() == _span_iterations_per_trace(info, extra).tolist()
    for nodes in info.nodes:
        assert [node_iteration(n) for n in nodes] == [node_meta(n).iteration for n in nodes]
