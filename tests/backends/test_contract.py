"""One contract for every backend: same bundle in, same shape out, bytes conserved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simstudy import chakra
from simstudy.backends import AstraSimBackend, Backend, BackendError, FlowsimBackend, RunResult
from simstudy.backends.base import SPAN_COLUMNS
from simstudy.chakra import NodeType
from simstudy.compiler import Bundle, compile_scenario
from simstudy.compiler.parameter_server import READY_BYTES
from simstudy.spec import Scenario
from simstudy.traffic import check_table
from tests.conftest import require_ns3

SCENARIOS: dict[str, dict[str, Any]] = {
    "dp_ring": {"model": "small_cnn", "parallelism": {"dp": 4, "bucket_size_mib": 0.5},
                "topology": {"kind": "ring", "npus": 4}, "system": {"collective_chunks": 3}},
    "dp_switch_hd": {"model": "small_cnn",
                     "parallelism": {"dp": 8, "aggregation": {"kind": "allreduce", "algorithm": "halving_doubling"}},
                     "topology": {"kind": "switch", "npus": 8}},
    "dp_fc_direct": {"model": "lstm_lm", "parallelism": {"dp": 4, "aggregation": {"kind": "allreduce",
                                                                                   "algorithm": "direct"}},
                     "topology": {"kind": "fully_connected", "npus": 4}},
    "ps_sync": {"model": "small_cnn", "parallelism": {"dp": 3, "bucket_size_mib": 0.25,
                                                      "aggregation": {"kind": "parameter_server", "servers": 2}},
                "topology": {"kind": "switch", "npus": 5}},
    "hybrid_tp_pp_zero1": {"model": {"zoo": "decoder", "options": {"layers": 2, "hidden": 64, "heads": 4,
                                                                   "seq_len": 32, "vocab": 256}},
                           "parallelism": {"dp": 2, "tp": 2, "pp": 2, "microbatches": 2, "sharding": "zero1"},
                           "topology": {"kind": "multi_dim", "dims": [{"type": "ring", "npus": 2},
                                                                      {"type": "switch", "npus": 4}]},
                           "system": {"collective_chunks": 2}},
    "dp_multidim_zero1": {"model": "small_cnn", "parallelism": {"dp": 8, "sharding": "zero1"},
                          "topology": {"kind": "multi_dim", "dims": [{"type": "ring", "npus": 4},
                                                                     {"type": "switch", "npus": 2}]},
                          "system": {"collective_chunks": 3}},
    "dp_multidim_allreduce": {"model": "small_cnn", "parallelism": {"dp": 8},
                              "topology": {"kind": "multi_dim", "dims": [{"type": "fully_connected", "npus": 2},
                                                                         {"type": "ring", "npus": 4}]}},
    "fsdp_layerwise_gpipe": {"model": "small_cnn", "parallelism": {"dp": 2, "tp": 2, "microbatches": 2,
                                                                   "schedule": "gpipe", "sharding": "fsdp"},
                             "topology": {"kind": "switch", "npus": 4}},
    "ps_async": {"model": "small_cnn", "parallelism": {"dp": 4, "aggregation": {
        "kind": "parameter_server", "servers": 2, "placement": "colocated", "mode": "async"}},
                 "topology": {"kind": "ring", "npus": 4}},
}


def backend(name: str, astra: Path | None) -> Backend:
    if name == "flowsim":
        return FlowsimBackend()
    if name == "ns3":
        require_ns3()
        from simstudy.backends.ns3 import Ns3Backend

        return Ns3Backend()
    if astra is None:
        pytest.skip("no ASTRA-SIM binary (set ASTRA_SIM_BIN)")
    return AstraSimBackend(astra)


@pytest.fixture(params=["flowsim", pytest.param("astrasim", marks=pytest.mark.astrasim),
                        pytest.param("ns3", marks=pytest.mark.ns3)])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def astra() -> Path | None:
    from simstudy.backends.locate import find_astra_sim

    return find_astra_sim()


def compiled(name: str, tmp: Path) -> tuple[Scenario, Bundle]:
    spec = {"name": name, "training": {"batch_size_per_worker": 4, "iterations": 2}, **SCENARIOS[name]}
    res = compile_scenario(Scenario.model_validate(spec), tmp / "bundle")
    return res.scenario, res.bundle


def expected_bytes(scenario: Scenario, bundle: Bundle) -> int:
    """Bytes every transfer adds up to, from the ET files and the algorithms' definitions.

    ASTRA-SIM splits S into chunks of c = S // C (at least N bytes, N the job's NPUs, except for
    all-gather) and sends ceil(S / c) of them. A collective on a group of k < N ranks is one ring
    over the group; on every rank, per chunk, ring all-reduce sends 2(k-1) messages of c/k,
    reduce-scatter k-1 messages of c/k, all-gather k-1 messages of c (c: the rank's contribution);
    halving-doubling all-reduce 2 x sum_j c/2^(j+1), direct 2 x (k-1) x c/k; a send moves comm_size."""
    from simstudy.backends.traffic_build import COLLECTIVE_KIND, WorkloadInfo
    from simstudy.chakra import CollectiveType

    info = WorkloadInfo.from_bundle(bundle)
    n = info.npus
    c = info.chunks
    total = 0
    for nodes in info.nodes:
        for node in nodes:
            size = int(node.get("comm_size", 0))
            if node.type == NodeType.COMM_SEND_NODE:
                total += size
            elif node.type == NodeType.COMM_COLL_NODE:
                kind = COLLECTIVE_KIND[CollectiveType(int(node.get("comm_type", 0)))]
                group = info.groups.get(str(node.get("pg_name", "") or ""), list(range(n)))
                k = len(group)
                algo = "ring" if k < n else info.algorithm(kind)
                dims = [d.npus for d in info.dims if d.npus > 1]
                if k == n and len(dims) > 1:
                    total += by_dimension_bytes(kind, dims, size, c, n)
                    continue
                if kind == "all_gather":
                    chunk = max(size // c, 1)
                    total += (k - 1) * chunk * -(-size // chunk)
                    continue
                chunk = max(size // c, n)
                count = -(-max(size, c * n) // chunk)
                if kind == "reduce_scatter":
                    total += (k - 1) * (chunk // k) * count
                elif algo in ("ring", "direct"):
                    total += 2 * (k - 1) * (chunk // k) * count
                elif algo == "halvingDoubling":
                    j = k.bit_length() - 1
                    total += 2 * sum(chunk >> (i + 1) for i in range(j)) * count
    return total


def by_dimension_bytes(kind: str, dims: list[int], size: int, c: int, n: int) -> int:
    """A ring collective of every NPU on several dimensions (ASTRA-SIM's baseline): per chunk, an
    all-reduce of the whole chunk on each dimension (2(n_k-1) x chunk/n_k per rank), a
    reduce-scatter dimension by dimension from the innermost with the data shrinking by n_k each
    time, an all-gather from the outermost with the contribution growing by n_k."""
    if kind == "all_gather":
        chunk = max(size // c, 1)
        count = -(-size // chunk)
        sent, part = 0, chunk
        for nk in reversed(dims):
            sent += (nk - 1) * part
            part *= nk
        return sent * count
    chunk = max(size // c, n)
    count = -(-max(size, c * n) // chunk)
    if kind == "all_reduce":
        return sum(2 * (nk - 1) * (chunk // nk) for nk in dims) * count
    sent, part = 0, chunk
    for nk in dims:
        sent += (nk - 1) * (part // nk)
        part //= nk
    return sent * count


def check_contract(result: RunResult, scenario: Scenario, bundle: Bundle) -> None:
    n = scenario.npus
    assert [r.rank for r in result.ranks] == list(range(n))
    for r in result.ranks:
        assert r.finish_ns > 0
        assert 0 <= r.compute_ns <= r.finish_ns
        assert 0 <= r.exposed_comm_ns <= r.finish_ns
        assert r.comm_ns <= r.finish_ns
    check_table(result.traffic)
    t = result.traffic
    assert len(t) > 0
    assert t["src"].between(0, n - 1).all() and t["dst"].between(0, n - 1).all()
    assert (t["src"] != t["dst"]).all()
    assert float(t["t_end_s"].max()) <= result.finish_ns * 1e-9 + 1e-12
    assert int(t["bytes"].sum()) == expected_bytes(scenario, bundle)
    assert set(t["op"].unique()) <= {"allreduce", "allgather", "reducescatter", "push", "pull", "p2p"}
    assert result.summary()["transfers"] == len(t)
    check_spans(result, bundle)


def check_spans(result: RunResult, bundle: Bundle) -> None:
    """Every ET node of every rank ran once, inside the rank's run, and the last one ended at its finish."""
    spans = result.spans
    assert list(spans.columns) == list(SPAN_COLUMNS)
    assert {c: str(spans[c].dtype) for c in spans.columns} == SPAN_COLUMNS
    assert (spans["start_ns"] <= spans["end_ns"]).all() and (spans["start_ns"] >= 0).all()
    for r in result.ranks:
        nodes = chakra.read_trace(bundle.et_path(r.rank))[1]
        mine = spans[spans["rank"] == r.rank]
        assert sorted(mine["node"]) == sorted(n.id for n in nodes)
        assert int(mine["end_ns"].max()) == r.finish_ns
        compute = mine[mine["kind"] == "compute"]
        assert int((compute["end_ns"] - compute["start_ns"]).sum()) >= r.compute_ns * 0.999


#: Scenarios too big for the packet network in a contract test (lstm_lm all-reduces 80 MB per
#: iteration: 3.5 minutes of packets here); benchmarks/ns3.py runs the LSTM example on ns-3.
NS3_TOO_BIG = {"dp_fc_direct"}


_MARKS = {"flowsim": (), "astrasim": (pytest.mark.astrasim,), "ns3": (pytest.mark.ns3,)}


@pytest.mark.parametrize(("name", "backend_name"), [
    pytest.param(name, b, marks=_MARKS[b], id=f"{b}-{name}")
    for b in _MARKS for name in sorted(SCENARIOS) if not (b == "ns3" and name in NS3_TOO_BIG)])
def test_backend_contract(name: str, backend_name: str, astra: Path | None, tmp_path: Path) -> None:
    scenario, bundle = compiled(name, tmp_path)
    result = backend(backend_name, astra).run(bundle, tmp_path / "work", timeout_s=300)
    assert result.backend == backend_name
    check_contract(result, scenario, bundle)


def test_ps_ops_are_push_and_pull(tmp_path: Path) -> None:
    _scenario, bundle = compiled("ps_sync", tmp_path)
    t = FlowsimBackend().run(bundle, tmp_path / "work").traffic
    push = t[t["op"] == "push"]
    pull = t[t["op"] == "pull"]
    replies = pull[pull["src"].isin([3, 4])]
    ready = pull[~pull["src"].isin([3, 4])]  # each worker says its pulls are posted (gloo's rendezvous)
    assert set(push["dst"]) == {3, 4} and set(ready["dst"]) == {3, 4} and set(ready["bytes"]) == {READY_BYTES}
    assert int(push["bytes"].sum()) == int(replies["bytes"].sum())


def test_flowsim_is_deterministic(tmp_path: Path) -> None:
    _, bundle = compiled("ps_async", tmp_path)
    a = FlowsimBackend().run(bundle, tmp_path / "a")
    b = FlowsimBackend().run(bundle, tmp_path / "b")
    assert a.ranks == b.ranks
    assert a.traffic.equals(b.traffic)


def test_missing_trace_is_a_clear_error(tmp_path: Path) -> None:
    _, bundle = compiled("dp_ring", tmp_path)
    bundle.et_path(2).unlink()
    with pytest.raises(Exception, match=r"dp_ring\.2\.et"):
        FlowsimBackend().run(bundle, tmp_path / "work")


def test_astrasim_missing_binary_is_a_clear_error(tmp_path: Path) -> None:
    _, bundle = compiled("dp_ring", tmp_path)
    with pytest.raises(BackendError, match="no ASTRA-SIM binary"):
        AstraSimBackend(tmp_path / "nope").run(bundle, tmp_path / "work")


@pytest.mark.parametrize("topology", [
    {"kind": "star", "npus": 4},
    {"kind": "clique", "npus": 4},
    {"kind": "tree", "npus": 8, "fanout": 2},
    {"kind": "binary_tree_star", "npus": 8, "hosts_per_leaf": 2},
    {"kind": "fat_tree", "k": 4},
])
def test_flowsim_graph_topologies(topology: dict[str, Any], tmp_path: Path) -> None:
    n = topology.get("npus") or topology["k"] ** 3 // 4
    spec = {"name": "g", "model": "small_cnn", "parallelism": {"dp": n}, "topology": topology,
            "training": {"batch_size_per_worker": 4, "iterations": 1}}
    res = compile_scenario(Scenario.model_validate(spec), tmp_path / "bundle")
    result = FlowsimBackend().run(res.bundle, tmp_path / "work")
    check_contract(result, res.scenario, res.bundle)
    assert result.details["network"] == topology["kind"]


def test_flowsim_incast_shares_the_server_link(tmp_path: Path) -> None:
    """Three workers pushing to one server at once share its link: in the fluid mode the pushes
    take about three times longer than alone (max-min fair shares of one link); ASTRA-SIM's
    unaware model does not share links."""
    spec = {"name": "ps", "model": {"name": "m", "layers": [
        {"name": "l", "params": 2**20, "fwd_flops_per_sample": 1, "activation_bytes_per_sample": 4}]},
        "parallelism": {"dp": 3, "aggregation": {"kind": "parameter_server", "servers": 1}},
        "topology": {"kind": "switch", "npus": 4, "bandwidth_gbps": 8, "latency_ns": 0},
        "training": {"batch_size_per_worker": 1, "iterations": 1}}
    bundle = compile_scenario(Scenario.model_validate(spec), tmp_path / "b").bundle
    shared = FlowsimBackend(congestion="fluid").run(bundle, tmp_path / "c").traffic
    alone = FlowsimBackend(congestion="unaware").run(bundle, tmp_path / "n").traffic
    dur = lambda t: (t["t_end_s"] - t["t_start_s"])[t["op"] == "push"]  # noqa: E731
    # 4 MiB at 1 byte/ns alone: 4.19 ms; three sharing the server's downlink: 12.6 ms.
    assert dur(alone).max() == pytest.approx(4 * 2**20 * 1e-9, rel=1e-3)
    assert dur(shared).max() == pytest.approx(3 * 4 * 2**20 * 1e-9, rel=1e-3)


@pytest.mark.parametrize("rendezvous", [True, False])
def test_ps_replies_wait_for_the_workers_backward_in_a_rendezvous(tmp_path: Path, rendezvous: bool) -> None:
    """gloo's send waits for the receiver's posted receive, and a captured worker posts its pulls
    after its whole backward: the reply to a bucket pushed early comes after that backward. An eager
    transport replies as soon as the server has updated, while backward still runs."""
    layers = {"conv1": 5000.0, "pool1": 0.0, "conv2": 100.0, "pool2": 0.0, "conv3": 100.0, "pool3": 0.0,
              "fc1": 100.0, "fc2": 100.0}
    spec = {"name": "ps_meet", "model": "small_cnn",
            "parallelism": {"dp": 2, "bucket_size_mib": 0.25,
                            "aggregation": {"kind": "parameter_server", "rendezvous": rendezvous}},
            "topology": {"kind": "switch", "npus": 3, "bandwidth_gbps": 100},
            "system": {"measured": {"forward_us": 500.0, "backward_us": sum(layers.values()), "optimizer_us": 50.0,
                                    "layers": {k: {"forward_us": 50.0, "backward_us": v} for k, v in layers.items()}}},
            "training": {"batch_size_per_worker": 4, "iterations": 2}}
    res = compile_scenario(Scenario.model_validate(spec), tmp_path / "bundle")
    t = FlowsimBackend().run(res.bundle, tmp_path / "work").traffic
    it0 = t[t["iteration"] == 0]
    pushes = it0[(it0["op"] == "push") & (it0["src"] == 0)]
    replies = it0[(it0["op"] == "pull") & (it0["src"] == 2) & (it0["dst"] == 0)]
    ready = it0[(it0["op"] == "pull") & (it0["src"] == 0)]
    assert len(pushes) >= 2  # a bucket ready early in backward, and the one conv1 closes 5 ms later
    end_of_backward = (50.0 * len(layers) + sum(layers.values())) * 1e-6
    assert pushes["t_start_s"].min() < end_of_backward - 4e-3
    if rendezvous:
        assert set(ready["bytes"]) == {READY_BYTES} and ready["t_start_s"].min() == pytest.approx(end_of_backward)
        assert replies["t_start_s"].min() >= end_of_backward
    else:
        assert ready.empty and replies["t_start_s"].min() < end_of_backward - 4e-3
