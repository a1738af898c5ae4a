"""In-network aggregation on flowsim: timings small enough to work out by hand, the bytes on every
worker's link (the gradient once up and once down, against a ring's 2(n-1)/n x), the jobs' trees,
switches as endpoints of the traffic table, and the backends that refuse it.

The hand cases: one layer of P = 1,000,000 fp32 parameters (G = 4,000,000 bytes, one DDP bucket
issued after the backward), measured compute F = 1000 us, B = 2000 us, optimizer 50 us; links of
8 Gbit/s (1 byte/ns) with 1000 ns latency; chunks of 500,000 bytes (chunk_kib 488.28125), so n = 8
chunks. A chunk's hop over one link takes t1 = 1000 + 500,000 ns (uncontended: latency + bytes /
bandwidth, in the fluid and the unaware model alike).
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from simstudy.backends import FlowsimBackend
from simstudy.backends.astrasim import AstraSimBackend
from simstudy.backends.base import BackendError
from simstudy.backends.flowsim.in_network import Trees
from simstudy.backends.network import Network
from simstudy.compiler import compile_any, resolve
from simstudy.compiler.topology_file import topology_of
from simstudy.spec import Cluster, Scenario, Topology

US = 1000
F, B, OPT = 1000 * US, 2000 * US, 50 * US
CHUNK_KIB = 500_000 / 1024
N_CHUNKS = 8
T1 = 1000 + 500_000

ONE_LAYER = {"name": "one", "layers": [{"name": "w", "params": 1_000_000, "fwd_flops_per_sample": 1.0,
                                        "activation_bytes_per_sample": 4}]}
MEASURED = {"measured": {"forward_us": 1000.0, "backward_us": 2000.0, "optimizer_us": 50.0}}


def hand(topology: dict[str, Any], slots: int, dp: int = 2, iterations: int = 2) -> dict[str, Any]:
    return {"name": "hand", "model": ONE_LAYER, "system": MEASURED, "topology": topology,
            "parallelism": {"dp": dp, "aggregation": {"kind": "in_network", "slots": slots, "chunk_kib": CHUNK_KIB}},
            "training": {"iterations": iterations}}


def run(tmp: Path, spec: dict[str, Any], congestion: str = "fluid", traffic: str = "rows") -> Any:
    parsed = Cluster.model_validate(spec) if spec.get("kind") == "cluster" else Scenario.model_validate(spec)
    bundle = compile_any(parsed, tmp / "bundle").bundle
    return FlowsimBackend(congestion=congestion, traffic=traffic).run(bundle, tmp / "run")


def finish(tmp: Path, spec: dict[str, Any], congestion: str = "fluid") -> int:
    ranks = run(tmp, spec, congestion).ranks
    assert len({r.finish_ns for r in ranks}) == 1  # every worker receives the last sum at once
    return int(ranks[0].finish_ns)


SWITCH = {"kind": "switch", "npus": 2, "bandwidth_gbps": 8, "latency_ns": 1000}


@pytest.mark.parametrize("congestion", ["fluid", "unaware"])
@pytest.mark.parametrize("slots", [64, 2])
def test_enough_slots_pipeline_the_chunks(tmp_path: Path, congestion: str, slots: int) -> None:
    """2 workers on one switch. A worker sends chunk i once chunk i-1 has arrived: chunk i reaches the
    switch at (i + 1) t1 and, with both contributions there, goes down at once, arriving at (i + 2) t1
    (the downlinks are other links than the uplinks). The last sum arrives at (n + 1) t1 = 4.509 ms.
    Two slots are enough: chunk i + 2 takes the slot chunk i frees at (i + 2) t1, just when the worker's
    link is free for it. Two iterations: 2 x (F + B + 9 t1 + OPT)."""
    assert finish(tmp_path, hand(SWITCH, slots), congestion) == 2 * (F + B + (N_CHUNKS + 1) * T1 + OPT) == 15_118_000


@pytest.mark.parametrize("congestion", ["fluid", "unaware"])
def test_one_slot_serialises_the_chunks(tmp_path: Path, congestion: str) -> None:
    """One slot: chunk i + 1 waits until chunk i's sum is back at both workers, up and down: 2 t1 per
    chunk, 2 n t1 = 8.016 ms per all-reduce."""
    assert finish(tmp_path, hand(SWITCH, 1), congestion) == 2 * (F + B + 2 * N_CHUNKS * T1 + OPT) == 22_132_000


def test_a_leaf_spine_tree(tmp_path: Path) -> None:
    """2 leaves of one host each, one spine (8 Gbit/s uplinks). A worker's chunk crosses 3 links to its
    leaf (GPU -> host switch -> NIC -> leaf: 3 latencies, the NIC's 1 byte/ns): a = 3000 + 500,000 ns,
    so chunk i is at the leaf at (i + 1) a; the leaf sends it up (b = t1, free again before the next
    chunk comes), the spine, with both leaves' sums, sends it down (b) and the leaf to its worker (a):
    the last sum arrives at (n + 1) a + 2 b = 5.529 ms."""
    a, b = 3000 + 500_000, T1
    leaf_spine = {"kind": "leaf_spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 1, "bandwidth_gbps": 8,
                  "latency_ns": 1000}
    t = (N_CHUNKS + 1) * a + 2 * b
    assert finish(tmp_path, hand(leaf_spine, 64, iterations=1)) == F + B + t + OPT == 8_579_000


def test_jobs_share_a_switch_s_slots(tmp_path: Path) -> None:
    """Two jobs of 2 workers on one star switch, one iteration. With 64 slots they do not meet (every
    worker has its own link): each takes (n + 1) t1 as alone. With 1 slot, shared: the first job's
    chunks 0 and 1 go first (chunk 1 asked before the other job's chunk 0), then the jobs take turns,
    2 t1 per chunk: the first job's chunk k (k >= 1) gets the slot at (4k - 2) t1, its last is back at
    28 t1; the other job's chunk k at (4k + 4) t1 until the first is done, then back to back: its last
    is back at 32 t1 = 2 n x 2 t1 (the slot was never idle)."""
    def cluster(slots: int) -> dict[str, Any]:
        agg = {"kind": "in_network", "slots": slots, "chunk_kib": CHUNK_KIB}
        job = {"model": ONE_LAYER, "system": MEASURED, "gpus": 2, "parallelism": {"aggregation": agg},
               "training": {"iterations": 1}}
        return {"kind": "cluster", "name": "c", "topology": {"kind": "star", "npus": 4, "bandwidth_gbps": 8,
                                                             "latency_ns": 1000},
                "jobs": [{"name": "a", **job}, {"name": "b", **job}]}

    plenty = run(tmp_path / "64", cluster(64)).ranks
    assert {r.finish_ns for r in plenty} == {F + B + (N_CHUNKS + 1) * T1 + OPT}
    one = run(tmp_path / "1", cluster(1)).ranks
    a, b = {one[0].finish_ns, one[1].finish_ns}, {one[2].finish_ns, one[3].finish_ns}
    assert len(a) == len(b) == 1
    assert sorted([a.pop(), b.pop()]) == [F + B + 28 * T1 + OPT, F + B + 32 * T1 + OPT]


def _gradient(spec: dict[str, Any]) -> int:
    s = resolve(Scenario.model_validate(spec))
    return sum(layer.params for layer in s.resolved_model.layers) * 4


@pytest.mark.parametrize("congestion", ["fluid", "unaware", "aware"])
def test_each_worker_link_carries_the_gradient_once_up_and_once_down(tmp_path: Path, congestion: str) -> None:
    """8 workers on a leaf-spine (2 leaves of 4, 2 spines), 2 iterations: every worker sends G per
    iteration to its leaf and receives G from it, on its own link in each direction (the link table:
    GPU -> host switch and back); a ring all-reduce sends 2(n - 1)/n G (1.75 G) each way."""
    topology = {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 4, "bandwidth_gbps": 100}
    base = {"name": "bytes", "model": "small_cnn", "topology": topology, "training": {"iterations": 2}}
    spec = {**base, "parallelism": {"dp": 8, "aggregation": {"kind": "in_network", "slots": 4, "chunk_kib": 16}}}
    g = _gradient(spec)
    result = run(tmp_path / "inc", spec, congestion, traffic="rows")
    rows = result.output.table()
    for r in range(8):
        assert rows.loc[rows["src"] == r, "bytes"].sum() == 2 * g
        assert rows.loc[rows["dst"] == r, "bytes"].sum() == 2 * g
    assert set(rows["step"]) == {0, 1, 2, 3}
    ends = result.details["switch_endpoints"]
    spine = f"spine{zlib.crc32(b'in_network,0') % 2}"  # the job's ECMP hash picks the spine
    assert sorted(ends.values()) == ["leaf0", "leaf1", spine]
    leaf = {name: int(i) for i, name in ends.items()}
    for r in range(8):
        assert set(rows.loc[rows["src"] == r, "dst"]) == {leaf[f"leaf{r // 4}"]}
    per_link = _link_bytes(tmp_path / "inc_links", spec, congestion)
    ring_links = _link_bytes(tmp_path / "ring_links", {**base, "parallelism": {"dp": 8}}, congestion)
    for r in range(8):
        for name in (f"h{r}->n{r}", f"n{r}->h{r}"):
            assert per_link[name] == pytest.approx(2 * g)
            assert per_link[name] / ring_links[name] == pytest.approx(8 / (2 * 7), rel=1e-3)


def _link_bytes(tmp: Path, spec: dict[str, Any], congestion: str) -> pd.Series:
    result = run(tmp, spec, congestion, traffic="links")
    links = result.output.links
    assert links is not None
    return links.groupby("name", observed=True)["bytes"].sum()


def _trees(topology: dict[str, Any]) -> Trees:
    from pydantic import TypeAdapter

    return Trees(Network.from_topology(topology_of(TypeAdapter(Topology).validate_python(topology))))


def test_a_clos_tree_meets_in_one_aggregation_switch_per_pod_and_one_core() -> None:
    trees = _trees({"kind": "clos3", "pods": 2, "tors_per_pod": 2, "hosts_per_tor": 2, "aggs_per_pod": 2,
                    "cores": 2})
    net = trees.net
    name = net.endpoint_name
    pick = zlib.crc32(b"in_network,3")
    across = trees.tree(tuple(range(8)), 3)  # both pods: a core on top, one aggregation switch per pod
    assert [name(across.first[w]) for w in range(8)] == ["t0.0", "t0.0", "t0.1", "t0.1", "t1.0", "t1.0", "t1.1",
                                                        "t1.1"]
    top = [s for s, p in across.parent.items() if p < 0]
    assert [name(s) for s in top] == [f"c{pick % 2}"]
    aggs = {name(across.parent[across.first[w]]) for w in range(8)}
    assert aggs == {f"a0.{pick % 2}", f"a1.{pick % 2}"}  # the same position in both pods
    assert across.height == 3 and sorted(across.depth.values()) == [0, 1, 1, 2, 2, 2, 2]
    one_pod = trees.tree((0, 2), 3)  # two ToRs of pod 0: an aggregation switch of the pod on top
    assert [name(s) for s, p in one_pod.parent.items() if p < 0] == [f"a0.{pick % 2}"]
    one_tor = trees.tree((0, 1), 3)
    assert [name(s) for s in one_tor.parent] == ["t0.0"] and one_tor.height == 1
    assert dict(one_tor.children) == {net.switch_endpoint("t0.0"): (0, 1)}


def test_switch_endpoints_are_routed_and_named() -> None:
    net = Network.from_topology(topology_of(Scenario.model_validate(
        {"model": "small_cnn", "topology": {"kind": "leaf_spine", "leaves": 2, "hosts_per_leaf": 2, "nics_per_host": 1},
         "parallelism": {"dp": 4}}).topology))
    leaf = net.switch_endpoint("leaf1")
    assert net.endpoint_name(leaf) == "leaf1" and net.endpoint_name(2) == "h2" and leaf >= net.hosts
    assert [net.names[i] for i in net.route(2, leaf)] == ["h2->n2", "n2->n2.nic0", "n2.nic0->leaf1"]
    assert [net.names[i] for i in net.route(leaf, net.switch_endpoint("spine0"))] == ["leaf1->spine0"]
    assert net.route(0, 3) == net._graph_paths(0, 3)[net.pick(0, 3, 0, len(net.paths(0, 3)))]  # hosts as before


def test_analyses_read_a_table_with_switch_endpoints(tmp_path: Path) -> None:
    from simstudy.traffic.features import analyze

    spec = {"name": "a", "model": "small_cnn", "topology": {"kind": "star", "npus": 4},
            "parallelism": {"dp": 4, "aggregation": {"kind": "in_network", "chunk_kib": 32}},
            "training": {"iterations": 3}}
    table = run(tmp_path, spec).output.table()
    assert int(table["dst"].max()) == 4 and np.all(table.loc[table["src"] == 4, "dst"] < 4)
    found = analyze(table).scalars()
    assert found["total_bytes"] == table["bytes"].sum()
    # from the traffic alone, the switch is where every worker's bytes go and come from: a server's role
    assert (found["rank_count"], found["worker_count"], found["server_count"]) == (5, 4, 1)


def test_the_other_backends_refuse_it_with_one_line(tmp_path: Path) -> None:
    bundle = compile_any(Scenario.model_validate(hand(SWITCH, 4)), tmp_path / "b").bundle
    with pytest.raises(BackendError) as info:
        AstraSimBackend(binary=tmp_path / "no-such-binary").run(bundle, tmp_path / "run")
    assert str(info.value) == ("astrasim: aggregation kind in_network (in-network aggregation) runs on flowsim only; "
                               "use backend flowsim")


def test_a_switch_s_transfers_belong_to_the_job_of_their_worker() -> None:
    """The job column of a cluster run: a transfer's source NPU's job; from a switch, its destination
    NPU's; between two switches -1 (the switch is no job's)."""
    from simstudy.backends.jobs import row_jobs

    owner = np.array([0, 1, 0, 1], dtype=np.int32)
    src, dst = np.array([0, 3, 9, 12, 9]), np.array([9, 12, 2, 15, 15])
    assert row_jobs(owner, src, dst).tolist() == [0, 1, 0, -1, -1]
    assert row_jobs(owner, np.array([2, 1]), np.array([0, 3])).tolist() == [0, 1]
