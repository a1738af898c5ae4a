"""In-network aggregation's compiled graph and spec: DDP's buckets, every all-reduce marked for the
switches (slots and chunk bytes on its node), the buckets adding up to the gradient (P x the
precision's bytes) per iteration; the spec's errors name the field and what it takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from simstudy import chakra
from simstudy.compiler import TaskKind, build_graph, compile_any, compile_scenario, resolve
from simstudy.compiler.attributes import in_network_of
from simstudy.compiler.graph import Collective
from simstudy.spec import Cluster, InNetwork, Scenario, SpecError, load_runnable

ITERATIONS = 3


def scenario(aggregation: dict[str, Any], dp: int = 4, *, precision: str = "fp32", model: str = "small_cnn",
             bucket_mib: float = 25.0, topology: dict[str, Any] | None = None) -> Scenario:
    return resolve(Scenario.model_validate({
        "name": "inc", "model": model,
        "parallelism": {"dp": dp, "aggregation": aggregation, "bucket_size_mib": bucket_mib},
        "topology": topology or {"kind": "switch", "npus": dp},
        "training": {"iterations": ITERATIONS, "precision": precision}}))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("bucket_mib", [25.0, 0.05])
def test_the_buckets_of_an_iteration_are_the_gradient_and_the_switches_sum_them(precision: str,
                                                                                bucket_mib: float) -> None:
    s = scenario({"kind": "in_network", "slots": 16, "chunk_kib": 64}, 8, precision=precision, bucket_mib=bucket_mib)
    gradient = sum(layer.params for layer in s.resolved_model.layers) * {"fp32": 4, "bf16": 2}[precision]
    graph = build_graph(s)
    assert graph.npus == 8
    for g in graph.ranks:
        assert g.sent_bytes() == g.received_bytes() == 0  # no point-to-point messages: the switches add
        colls = [t for t in g.tasks if t.kind is TaskKind.COLLECTIVE]
        assert {(t.collective, t.in_network) for t in colls} == {(Collective.ALL_REDUCE, (16, 64 * 1024))}
        for it in range(ITERATIONS):
            assert sum(t.size_bytes for t in colls if t.iteration == it) == gradient
    ring = build_graph(scenario({"kind": "allreduce"}, 8, precision=precision, bucket_mib=bucket_mib)).ranks[0]
    assert [(t.name, t.size_bytes, t.deps) for t in graph.ranks[0].tasks] == \
        [(t.name, t.size_bytes, t.deps) for t in ring.tasks]  # DDP's buckets, issued as DDP issues them
    assert len(colls) > (2 * ITERATIONS if bucket_mib < 1 else 0)  # smaller buckets, more of them


def test_the_traces_carry_slots_and_chunk_bytes_on_every_all_reduce(tmp_path: Path) -> None:
    s = scenario({"kind": "in_network", "slots": 3, "chunk_kib": 1.5}, 4)
    bundle = compile_scenario(s, tmp_path / "b").bundle
    for rank in range(4):
        _, nodes = chakra.read_trace(bundle.et_path(rank))
        marked = [in_network_of(n) for n in nodes if n.type == chakra.NodeType.COMM_COLL_NODE]
        assert marked and set(marked) == {(3, 1536)}
        assert all(in_network_of(n) is None for n in nodes if n.type != chakra.NodeType.COMM_COLL_NODE)
    ring = compile_scenario(scenario({"kind": "allreduce"}, 4), tmp_path / "r").bundle
    _, nodes = chakra.read_trace(ring.et_path(0))
    assert all(in_network_of(n) is None for n in nodes)  # other kinds' traces carry nothing new


def test_a_cluster_job_keeps_its_marks(tmp_path: Path) -> None:
    agg = {"kind": "in_network", "slots": 8, "chunk_kib": 32}
    cluster = Cluster.model_validate({
        "kind": "cluster", "name": "c", "topology": {"kind": "star", "npus": 4},
        "jobs": [{"name": "a", "model": "small_cnn", "gpus": 2, "parallelism": {"aggregation": agg}},
                 {"name": "b", "model": "small_cnn", "gpus": 2, "parallelism": {"aggregation": agg}}]})
    bundle = compile_any(cluster, tmp_path / "c").bundle
    for rank in range(4):
        _, nodes = chakra.read_trace(bundle.et_path(rank))
        assert {in_network_of(n) for n in nodes if n.type == chakra.NodeType.COMM_COLL_NODE} == {(8, 32 * 1024)}


def test_defaults_and_short_form() -> None:
    agg = Scenario.model_validate({"model": "small_cnn", "parallelism": {"dp": 4, "aggregation": {"slots": 4}},
                                   "topology": {"kind": "star", "npus": 4}}).parallelism.aggregation
    assert isinstance(agg, InNetwork) and (agg.slots, agg.chunk_bytes) == (4, 256 * 1024)
    assert not agg.astra_sim and agg.all_reduce_algorithm is None


def _error(spec: dict[str, Any], tmp: Path) -> SpecError:
    import yaml

    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError) as info:
        load_runnable(path)
    return info.value


@pytest.mark.parametrize("kind", ["ring", "fully_connected", "clique", "fat_tree"])
def test_a_topology_without_the_switches_is_refused_naming_the_field_and_the_kinds(tmp_path: Path, kind: str) -> None:
    topology = {"kind": kind, "npus": 4} if kind != "fat_tree" else {"kind": kind, "k": 4, "npus": 4}
    err = _error({"model": "small_cnn", "parallelism": {"dp": 4, "aggregation": {"kind": "in_network"}},
                  "topology": topology}, tmp_path)
    assert err.field == "parallelism.aggregation"
    assert str(err.file).endswith("s.yaml")
    assert err.message == (f"in-network aggregation needs topology kind switch, star, leaf_spine, clos3 or clos_csv; "
                           f"the topology is {kind}")


def test_cluster_errors_name_the_job_field(tmp_path: Path) -> None:
    def job(name: str, slots: int) -> dict[str, Any]:
        return {"name": name, "model": "small_cnn", "gpus": 2,
                "parallelism": {"aggregation": {"kind": "in_network", "slots": slots}}}

    err = _error({"kind": "cluster", "topology": {"kind": "ring", "npus": 4}, "jobs": [job("a", 4), job("b", 4)]},
                 tmp_path)
    assert err.field == "jobs.0.parallelism.aggregation" and "the topology is ring" in err.message
    err = _error({"kind": "cluster", "topology": {"kind": "star", "npus": 4}, "jobs": [job("a", 4), job("b", 8)]},
                 tmp_path)
    assert err.field == "jobs.1.parallelism.aggregation.slots"
    assert err.message == ("slots = 8, but job 'a' gives 4: the jobs of in-network aggregation share the switches, "
                           "so they must give the same slots")


@pytest.mark.parametrize(("parallelism", "npus", "field"), [
    ({"dp": 2, "tp": 2}, 4, "parallelism.aggregation"), ({"dp": 4, "sharding": "zero1"}, 4, "parallelism.aggregation"),
    ({"dp": 1}, 2, "parallelism.dp"),
])
def test_more_than_plain_data_parallelism_is_refused(tmp_path: Path, parallelism: dict[str, Any], npus: int,
                                                     field: str) -> None:
    err = _error({"model": "small_cnn", "parallelism": {**parallelism, "aggregation": {"kind": "in_network"}},
                  "topology": {"kind": "switch", "npus": npus}}, tmp_path)
    assert err.field == field


def test_slots_and_chunk_must_be_positive() -> None:
    for bad in ({"slots": 0}, {"chunk_kib": 0}):
        with pytest.raises(ValidationError):
            InNetwork.model_validate(bad)
