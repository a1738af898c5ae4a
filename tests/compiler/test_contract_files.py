"""The bundle contract: simstudy's node attributes, the topology file and the collective registry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simstudy import chakra
from simstudy.chakra import CollectiveType, Node, NodeType
from simstudy.compiler import BundleError, compile_scenario
from simstudy.compiler.attributes import node_meta
from simstudy.compiler.collectives import ALGORITHMS, algorithm
from simstudy.compiler.parameter_server import READY_BYTES
from simstudy.compiler.topology_file import NetworkTopology, read_topology, scenario_topology
from simstudy.layout import TOPOLOGY
from simstudy.spec import Scenario
from simstudy.spec.collectives import system_implementations


def _ps_bundle(tmp: Path) -> tuple[Scenario, list[list[Node]]]:
    spec = {"name": "ps", "model": "small_cnn",
            "parallelism": {"dp": 3, "bucket_size_mib": 0.25, "aggregation": {"kind": "parameter_server",
                                                                              "servers": 1, "mode": "sync"}},
            "topology": {"kind": "switch", "npus": 4}, "training": {"batch_size_per_worker": 4, "iterations": 2}}
    res = compile_scenario(Scenario.model_validate(spec), tmp)
    return res.scenario, [chakra.read_trace(res.bundle.et_path(r))[1] for r in range(4)]


def test_nodes_say_op_iteration_flow_and_chunk(tmp_path: Path) -> None:
    _, ranks = _ps_bundle(tmp_path / "b")
    worker, server = ranks[0], ranks[3]
    sends = [(n, node_meta(n)) for n in worker if n.type == NodeType.COMM_SEND_NODE]
    pushes = [m for _, m in sends if m.op == "push"]
    assert pushes and {m.iteration for m in pushes} == {0, 1}
    # the rest say that the worker's pulls are posted (gloo's rendezvous): small, and part of the pull
    ready = [n for n, m in sends if m.op != "push"]
    assert ready and {node_meta(n).op for n in ready} == {"pull"}
    assert {int(n.get("comm_size")) for n in ready} == {READY_BYTES}
    replies = [(n, node_meta(n)) for n in server if n.type == NodeType.COMM_SEND_NODE]
    assert {m.op for _, m in replies} == {"pull"}
    # A sync reply is sliced: its slices (consecutive tags) are chunks of one flow, the first slice's tag.
    by_flow: dict[int, set[int]] = {}
    for n, m in replies:
        assert int(n.get("comm_tag")) == m.flow + m.chunk
        by_flow.setdefault(m.flow, set()).add(m.chunk)
    assert all(chunks == set(range(8)) for chunks in by_flow.values())
    computes = [node_meta(n).iteration for n in worker if n.type == NodeType.COMP_NODE]
    assert computes[0] == 0 and computes[-1] == 1


def test_foreign_nodes_fall_back_to_what_they_say() -> None:
    coll = Node(5, "x", NodeType.COMM_COLL_NODE, attrs=[chakra.comm_type(CollectiveType.ALL_GATHER),
                                                        chakra.comm_size(8)])
    send = Node(6, "y", NodeType.COMM_SEND_NODE, attrs=[chakra.comm_dst(1), chakra.comm_size(8), chakra.comm_tag(42)])
    assert node_meta(coll).op == "allgather" and node_meta(coll).flow == 5
    assert node_meta(send).op == "p2p" and node_meta(send).flow == 42 and node_meta(send).iteration == 0


def test_topology_file_round_trips(tmp_path: Path) -> None:
    spec = {"name": "ft", "model": "small_cnn", "topology": {"kind": "fat_tree", "k": 4, "bandwidth_gbps": 40},
            "training": {"batch_size_per_worker": 4, "iterations": 1}}
    res = compile_scenario(Scenario.model_validate(spec), tmp_path / "b")
    topo = read_topology(res.bundle.directory / TOPOLOGY)
    assert topo == scenario_topology(res.scenario)
    assert topo.hosts == 16 and topo.routing.ecmp and len(topo.links) == 2 * (16 + 16 + 16)
    assert {link.tier for link in topo.links} == {"edge", "aggregation", "core"}
    assert all(link.bytes_per_ns == 5.0 for link in topo.links)


def test_native_topology_is_network_yml(tmp_path: Path) -> None:
    """ASTRA-SIM dimensions become links with exactly the capacity ASTRA-SIM derives from network.yml."""
    spec = {"name": "md", "model": "small_cnn", "topology": {"kind": "multi_dim", "dims": [
        {"type": "ring", "npus": 4, "bandwidth_gbps": 100}, {"type": "switch", "npus": 2, "bandwidth_gbps": 25}]},
        "training": {"batch_size_per_worker": 4, "iterations": 1}}
    res = compile_scenario(Scenario.model_validate(spec), tmp_path / "b")
    topo = read_topology(res.bundle.directory / TOPOLOGY)
    ring = [link for link in topo.links if link.dim == 0]
    switch = [link for link in topo.links if link.dim == 1]
    assert len(ring) == 2 * 4 * 2 and len(switch) == 2 * 2 * 4 and len(topo.switches) == 4
    assert ring[0].bytes_per_ns == pytest.approx(12.5) and switch[0].bytes_per_ns == pytest.approx(3.125)
    assert [d.stride for d in topo.routing.dims] == [1, 4]


def test_bad_topology_file_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / TOPOLOGY
    good = scenario_topology(Scenario.model_validate({"model": "small_cnn", "topology": {"kind": "ring", "npus": 4}}))
    data = good.to_json()
    data["links"][0]["dst"] = "h9"
    path.write_text(json.dumps(data))
    with pytest.raises(BundleError, match=r"topology.json: links\[0\]: h0->h9 joins a node"):
        read_topology(path)
    data = good.to_json()
    data["routing"]["dims"][0]["npus"] = 5
    with pytest.raises(BundleError, match=r"routing.dims: the dimensions hold 5 NPUs, not 4"):
        NetworkTopology.from_json(data, source=str(path))


def test_registry_names_patterns_and_reductions() -> None:
    assert algorithm("halvingDoubling") is ALGORITHMS["halving_doubling"] is algorithm("oneHalvingDoubling")
    assert system_implementations("double_binary_tree") == {
        "all_reduce": "doubleBinaryTree", "all_gather": "ring", "reduce_scatter": "ring", "all_to_all": "direct"}
    ring = ALGORITHMS["ring"].pattern("all_reduce", [0, 1, 2, 3], 4000)
    assert ring.steps == 6 and set(ring.nbytes) == {1000} and ring.total_bytes == 6 * 4 * 1000
    assert ALGORITHMS["ring"].processing("all_reduce", 4, 4000) == {0: 1000, 1: 1000, 2: 1000}
    hd = ALGORITHMS["halving_doubling"].pattern("all_reduce", np.arange(8), 8000)
    assert hd.steps == 6 and list(hd.nbytes[hd.step == 0][:1]) == [4000]
    # ASTRA-SIM reduces after each reduce step but the last, on the size of the next message.
    assert ALGORITHMS["halving_doubling"].processing("reduce_scatter", 8, 8000) == {0: 2000, 1: 1000}
    assert ALGORITHMS["direct"].pattern("all_to_all", [0, 1, 2], 300).steps == 1
    with pytest.raises(ValueError, match="doubleBinaryTree implements all_reduce, all_to_all, not all_gather"):
        ALGORITHMS["double_binary_tree"].pattern("all_gather", [0, 1, 2], 10)
