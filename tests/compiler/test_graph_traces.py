"""Traces in memory (`graph_traces`, what flowsim runs from when no ET file is asked for) against the
slow path they replace: every rank's ET file written, then decoded by a bundle's reader; and the
run's tables from a task list's first rank (`Bundle.templates`) against the tables found node by node.

On random scenarios (data parallelism with every aggregation kind, tensor, pipeline, context and
expert parallelism, compute variability, two jobs on one cluster): the same nodes, shared the same
way (one Node object where the reader interns one, one list where it gives one), and a flowsim run
from memory equal to the run from the files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simstudy.backends import FlowsimBackend
from simstudy.backends.flowsim.engine import Engine
from simstudy.backends.flowsim.shortcuts import Shortcuts
from simstudy.backends.flowsim.tables import rank_tables
from simstudy.backends.traffic_build import read_traces
from simstudy.chakra import Node
from simstudy.compiler import build_graph, compile_any, resolve
from simstudy.compiler.chakra_out import graph_traces
from simstudy.spec import Cluster, Scenario

LLAMA = {"zoo": "llama3_8b", "options": {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 128,
                                         "vocab": 256, "seq_len": 32}}
MOE = {"zoo": "mixtral_8x7b", "options": {**LLAMA["options"], "experts": 4, "top_k": 2}}
AGGREGATION = [
    {"kind": "allreduce", "algorithm": "ring"},
    {"kind": "allreduce", "algorithm": "double_binary_tree"},
    {"kind": "parameter_server", "servers": 1, "mode": "sync"},
    {"kind": "parameter_server", "servers": 2, "mode": "async"},
    {"kind": "gossip", "peers": 2},
]


def _dp(npus: int, aggregation: dict[str, Any], jitter: float, seed: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": "small_cnn", "parallelism": {"dp": npus, "aggregation": aggregation},
                            "topology": {"kind": "switch", "npus": npus + aggregation.get("servers", 0)}}
    if jitter:
        spec["system"] = {"peak_tflops": 10, "variability": {"jitter": {"distribution": "normal", "cv": jitter,
                                                                        "seed": seed}}}
    return spec


def _llm(tp: int, pp: int, cp: int, ep: int, dp: int) -> dict[str, Any]:
    parallelism = {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "microbatches": pp}
    model = MOE if ep > 1 else LLAMA
    if ep > 1:
        parallelism["ep"] = ep
    return {"model": model, "parallelism": parallelism, "training": {"precision": "bf16", "iterations": 2},
            "topology": {"kind": "switch", "npus": tp * pp * cp * dp}}


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario | Cluster:
    shape = draw(st.sampled_from(["dp", "llm", "cluster"]))
    if shape == "dp":
        aggregation = draw(st.sampled_from(AGGREGATION))
        tree = aggregation.get("algorithm") == "double_binary_tree"  # 2^k ranks
        gossip = aggregation["kind"] == "gossip"  # 2 peers: 3 ranks at least
        npus = draw(st.sampled_from([4, 8] if tree and gossip else [2, 4, 8] if tree else [3, 4, 8] if gossip
                                    else [2, 3, 4, 8]))
        spec = _dp(npus, aggregation, draw(st.sampled_from([0.0, 0.2])), draw(st.integers(0, 9)))
        return Scenario.model_validate({"name": "dp", "training": {"iterations": 2}, **spec})
    if shape == "llm":
        tp, pp, cp = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
        ep = draw(st.sampled_from([1, 2])) if cp == 1 else 1
        dp = draw(st.sampled_from([1, 2])) * ep
        dp = 2 if tp * pp * cp * dp == 1 else dp
        return Scenario.model_validate({"name": "llm", **_llm(tp, pp, cp, ep, dp)})
    jobs = [{"name": "a", "model": "small_cnn", "gpus": 4, "placement": "spread", "training": {"iterations": 2}},
            {"name": "b", "model": "lstm_lm", "gpus": 4, "placement": "packed", "training": {"iterations": 2},
             "start_ms": draw(st.sampled_from([0, 1]))}]
    return Cluster.model_validate({"kind": "cluster", "name": "two", "system": {"peak_tflops": 10},
                                   "topology": {"kind": "leaf_spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2,
                                                "gpus_per_host": 2, "bandwidth_gbps": 100}, "jobs": jobs})


def _shape(traces: list[list[Node]]) -> tuple[list[int], list[list[int]]]:
    """How the traces share: each rank's list as the number of the first rank with that list object,
    each node as the number of its object in order of first appearance."""
    lists: dict[int, int] = {}
    nodes: dict[int, int] = {}
    return ([lists.setdefault(id(t), r) for r, t in enumerate(traces)],
            [[nodes.setdefault(id(n), len(nodes)) for n in t] for t in traces])


@given(spec=scenarios())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_memory_traces_are_the_decoded_files(spec: Scenario | Cluster, tmp_path_factory: pytest.TempPathFactory
                                             ) -> None:
    tmp = tmp_path_factory.mktemp("traces")
    files = compile_any(spec, tmp / "files").bundle
    memory = compile_any(spec, tmp / "memory", et_files=False).bundle
    assert files.traces is None and memory.traces is not None
    assert not list((tmp / "memory").glob("*.et"))
    for compiled in (True, False):  # the compiled core's reader and chakra's own
        decoded = read_traces(files, files.npus, compiled=compiled)
        assert memory.traces == decoded
        assert _shape(memory.traces) == _shape(decoded)
    # the run's tables: a rank of a task list met before takes that rank's numbers (`templates`),
    # the same tables as numbering every node
    refuse = object.__new__(Engine)._rank_state  # needs no more of an engine than its method
    ranks, tables = rank_tables(memory.traces, memory.templates, refuse=refuse)
    ranks_ref, tables_ref = rank_tables(memory.traces, refuse=refuse)
    assert len(tables) == len(tables_ref) and all(np.array_equal(a, b) for a, b in zip(tables, tables_ref, strict=True))
    assert [(t.cpu, t.names, len(by_id)) for by_id, t in ranks] == \
        [(t.cpu, t.names, len(by_id)) for by_id, t in ranks_ref]
    assert all(np.array_equal(getattr(a, f), getattr(b, f)) for (_, a), (_, b) in zip(ranks, ranks_ref, strict=True)
               for f in ("ids", "code", "zero", "dur", "pending", "parent", "kid", "span_kind", "iteration"))


@pytest.mark.parametrize("congestion", ["unaware", "fluid"])
@pytest.mark.parametrize("spec", [
    Scenario.model_validate({"name": "llm", **_llm(2, 2, 1, 1, 2)}),
    Scenario.model_validate({"name": "ps", "training": {"iterations": 2},
                             **_dp(4, AGGREGATION[2], 0.2, 3)}),
], ids=["llm", "ps"])
def test_a_run_from_memory_is_the_run_from_files(spec: Scenario, congestion: str, tmp_path: Path) -> None:
    files = compile_any(spec, tmp_path / "files").bundle
    memory = compile_any(spec, tmp_path / "memory", et_files=False).bundle
    a = FlowsimBackend(congestion=congestion).run(files, tmp_path / "a")
    # a bundle in memory may declare replicas (files do not): the same run without that shortcut
    b = FlowsimBackend(congestion=congestion, shortcuts=Shortcuts(replicas=False)).run(memory, tmp_path / "b")
    for c in (b, FlowsimBackend(congestion=congestion).run(memory, tmp_path / "c")):
        assert a.ranks == c.ranks
        assert a.traffic.equals(c.traffic) and a.spans.equals(c.spans)
    skip = {"phases_s", "events"}
    assert {k: v for k, v in a.details.items() if k not in skip} == \
        {k: v for k, v in b.details.items() if k not in skip}


def test_a_rank_without_tasks_is_refused_as_when_written() -> None:
    graph = build_graph(resolve(Scenario.model_validate({"name": "dp", "model": "small_cnn",
                                                         "parallelism": {"dp": 2},
                                                         "topology": {"kind": "switch", "npus": 2}})))
    graph.ranks[1].tasks = []
    with pytest.raises(ValueError, match="rank 1 has no tasks"):
        graph_traces(graph)
