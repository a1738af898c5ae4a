"""The replicas shortcut (`flowsim.replicas`): replica 0 simulated for every data-parallel replica,
against the full path it replaces.

On random jobs (tensor, pipeline, context and expert parallelism, data parallelism of 2-4 replicas,
every collective algorithm, one- and two-dimension networks, leaf-spines with ECMP per flow or
per pair, compute variability) run in
`unaware` on both engines: the same finish times, spans and traffic rows as every rank simulated
(`FULL`) and as the default shortcuts without this one. Where a job's replicas run alike by
construction (no variability, no expert or context parallelism, no double binary tree, a network
that is the same one replica on) the run must have taken it.
Also: the compiler's check of the graph (`compiler.replicas`), and the guard under the shortcut."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simstudy.backends import FlowsimBackend, RunResult
from simstudy.backends.flowsim import FULL, Shortcuts
from simstudy.backends.flowsim.comms import Comms
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.flowsim.system import NotAlike
from simstudy.backends.network import Network
from simstudy.backends.traffic_build import WorkloadInfo
from simstudy.chakra import Node, NodeType
from simstudy.compiler import build_graph, compile_scenario, resolve
from simstudy.compiler.graph import RankGraph
from simstudy.compiler.replicas import replica_orbits, same_under
from simstudy.spec import Scenario
from tests.backends.bundles import collective_node, write_bundle
from tests.backends.fastpaths import assert_same

LLAMA = {"zoo": "llama3_8b", "options": {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 128,
                                         "vocab": 256, "seq_len": 32}}
MOE = {"zoo": "mixtral_8x7b", "options": {**LLAMA["options"], "experts": 4, "top_k": 2}}
NO_REPLICAS = Shortcuts(replicas=False)


def _job(tp: int, pp: int, cp: int, ep: int, dp: int, *, algorithm: str = "ring", topology: Any = None,
         jitter: float = 0.0) -> Scenario:
    npus = tp * pp * cp * dp
    parallelism: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "microbatches": pp,
                                   "aggregation": {"kind": "allreduce", "algorithm": algorithm}}
    if ep > 1:
        parallelism["ep"] = ep
    system: dict[str, Any] = {"peak_tflops": 10}
    if jitter:
        system["variability"] = {"jitter": {"distribution": "normal", "cv": jitter, "seed": 3}}
    model = MOE if ep > 1 else {**LLAMA, "options": {**LLAMA["options"], "layers": max(2, pp)}}
    return Scenario.model_validate({
        "name": "job", "model": model, "parallelism": parallelism, "system": system,
        "training": {"precision": "bf16", "iterations": 2, "batch_size_per_worker": 6 * pp},
        "topology": topology or {"kind": "switch", "npus": npus, "bandwidth_gbps": 100}})


@st.composite
def jobs(draw: st.DrawFn) -> tuple[Scenario, bool]:
    """A job, and whether its replicas run alike by construction (the run must take the shortcut)."""
    tp, pp = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    cp = draw(st.sampled_from([1, 1, 2]))
    ep = draw(st.sampled_from([1, 1, 2])) if cp == 1 else 1
    dp = draw(st.sampled_from([2, 3, 4])) if ep == 1 else 2 * ep
    npus = tp * pp * cp * dp
    algorithm = draw(st.sampled_from(["ring", "direct", "halving_doubling", "double_binary_tree"]))
    if algorithm in ("double_binary_tree", "halving_doubling") and dp & (dp - 1):
        algorithm = "ring"  # (they need a power of two)
    net = draw(st.sampled_from(["switch", "ring", "fully_connected", "two_dims", "leaf_spine"]))
    inner = tp * cp
    second = draw(st.sampled_from(["switch", "ring"]))
    if net == "leaf_spine" and pp * dp % 2 == 0:  # a graph: hosts of tp x cp GPUs under two leaves
        topology: dict[str, Any] = {
            "kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": pp * dp // 2, "gpus_per_host": inner,
            "bandwidth_gbps": 100, "ecmp": draw(st.sampled_from(["flow", "pair"])),
            "oversubscription": draw(st.sampled_from([1.0, 2.0]))}
    elif net == "two_dims" and inner > 1:
        topology = {"kind": "multi_dim", "dims": [
            {"type": "switch", "npus": inner, "bandwidth_gbps": 400, "latency_ns": 200},
            {"type": second, "npus": npus // inner, "bandwidth_gbps": 100, "latency_ns": 700}]}
    else:
        net = "switch" if net in ("two_dims", "leaf_spine") else net
        topology = {"kind": net, "npus": npus, "bandwidth_gbps": 100}
    jitter = draw(st.sampled_from([0.0, 0.0, 0.0, 0.2]))
    # moving every rank one replica on maps the network onto itself: any map of a switch or a fully
    # connected dimension, a rotation of a ring (one stage: every rank moves by tp x cp)
    same_network = net in ("switch", "fully_connected") or (net == "ring" and pp == 1) or (
        net == "two_dims" and (second == "switch" or pp == 1))
    # (context parallelism reduces gradients over dp x cp ranks: more than one rank per replica)
    alike = jitter == 0 and ep == 1 and cp == 1 and same_network and algorithm != "double_binary_tree"
    return _job(tp, pp, cp, ep, dp, algorithm=algorithm, topology=topology, jitter=jitter), alike


def _runs(spec: Scenario, tmp: Path) -> dict[str, RunResult]:
    bundle = compile_scenario(spec, tmp / "bundle", et_files=False).bundle
    paths = {"full": (FULL, "compiled"), "all": (Shortcuts(), "compiled"), "python": (Shortcuts(), "python"),
             "no_replicas": (NO_REPLICAS, "compiled")}
    return {name: FlowsimBackend(congestion="unaware", traffic="rows", shortcuts=cuts, engine=engine).run(
        bundle, tmp / name) for name, (cuts, engine) in paths.items()}


@given(job=jobs())
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_replica_zero_stands_for_every_replica(job: tuple[Scenario, bool],
                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    spec, alike = job
    results = _runs(spec, tmp_path_factory.mktemp("replicas"))
    assert_same(results)  # type: ignore[arg-type]
    taken = results["all"].details["replicas"]
    assert results["python"].details["replicas"] == taken
    assert results["full"].details["replicas"] == results["no_replicas"].details["replicas"] == 1
    if alike:  # (a replica of one rank: every rank identical, the shortcut for that is taken first)
        assert taken == spec.parallelism.dp or results["all"].details["identical_ranks"], spec
    assert ("replicas" in results["all"].details["shortcuts"]) == (taken > 1)


def test_a_job_too_big_to_simulate_every_replica_runs_replica_zero(tmp_path: Path) -> None:
    """Every rank of 8 replicas of a tensor- and pipeline-parallel job on two dimensions, with the
    replicas counted once each: the same counts of transfers and bytes, per rank, as the full path."""
    spec = _job(2, 2, 1, 1, 8, topology={"kind": "multi_dim", "dims": [
        {"type": "switch", "npus": 2, "bandwidth_gbps": 400}, {"type": "switch", "npus": 16, "bandwidth_gbps": 100}]})
    bundle = compile_scenario(spec, tmp_path / "bundle", et_files=False).bundle
    fast = FlowsimBackend(congestion="unaware", traffic="none").run(bundle, tmp_path / "fast")
    full = FlowsimBackend(congestion="unaware", traffic="none", shortcuts=FULL).run(bundle, tmp_path / "full")
    assert fast.details["replicas"] == 8
    assert fast.ranks == full.ranks
    assert (fast.output.transfers, fast.output.total_bytes) == (full.output.transfers, full.output.total_bytes)
    assert np.array_equal(fast.output.sent, full.output.sent)
    assert fast.spans.sort_values(["rank", "node"]).reset_index(drop=True).equals(
        full.spans.sort_values(["rank", "node"]).reset_index(drop=True))


def test_on_a_graph_every_rank_is_simulated(tmp_path: Path) -> None:
    """A leaf-spine is not ASTRA-SIM's dimensions: the shortcut is not taken (on a 3-tier Clos a
    data-parallel ring crosses a ToR every few members and its members finish apart), and the run
    is the full path's."""
    spec = _job(2, 2, 1, 1, 4, topology={"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 4,
                                          "gpus_per_host": 2, "bandwidth_gbps": 100})
    results = _runs(spec, tmp_path)
    assert_same(results)  # type: ignore[arg-type]
    assert results["all"].details["replicas"] == 1


def test_the_compiler_finds_the_replicas_of_a_layout() -> None:
    """tp 2 x pp 2 x dp 3: rank t + 2 (d + 3 s); replica d holds t = 0, 1 of both stages."""
    spec = resolve(_job(2, 2, 1, 1, 3))
    graph = build_graph(spec)
    replicas = replica_orbits(graph, spec)
    assert replicas is not None
    assert replicas.tolist() == [[0, 1, 6, 7], [2, 3, 8, 9], [4, 5, 10, 11]]
    # a rank that sends elsewhere than its image's peers: the graph is no longer the same one replica on
    ranks = np.arange(graph.npus)
    d = (ranks // 2) % 3
    sigma = ranks + 2 * ((d + 1) % 3 - d)
    assert same_under(graph, sigma)
    g = next(g for g in graph.ranks if g.peers)
    graph.ranks[g.rank] = RankGraph(g.rank, g.tasks, g.groups, {k: (v + 2) % graph.npus for k, v in g.peers.items()})
    assert not same_under(graph, sigma)


@pytest.mark.parametrize("spec", [
    _job(2, 2, 1, 1, 3, jitter=0.2),  # every rank draws its own compute
    _job(2, 2, 1, 1, 1),  # one replica
    _job(1, 1, 1, 2, 4),  # expert parallelism splits the replicas
], ids=["variability", "one_replica", "experts"])
def test_no_replicas_where_they_do_not_run_alike(spec: Scenario) -> None:
    resolved = resolve(spec)
    assert replica_orbits(build_graph(resolved), resolved) is None


def test_a_rank_that_stands_for_members_finishing_apart_is_refused(tmp_path: Path) -> None:
    """The guard under the shortcut: a collective that one member stands for (`report`) must finish
    every member at once. A ring over (0, 1, 2) on a ring of four takes two hops back to 0 and
    finishes 0 later than 1 and 2: standing for them is refused (`NotAlike`, on which a run starts
    again without replicas). Replicas the compiler declares never meet it: their network and
    groups are the same one replica on, so every member of such a collective runs alike."""
    traces = [[collective_node(0, "all_reduce", 1 << 20, group="1")] for _ in range(3)]
    traces.append([Node(0, "idle", NodeType.COMP_NODE)])
    bundle = write_bundle(tmp_path / "b", [("Ring", 4, 10.0, 500.0)], traces, groups={"1": [0, 1, 2], "2": [3]})
    full = FlowsimBackend(congestion="unaware", shortcuts=FULL).run(bundle, tmp_path / "full")
    assert len({r.finish_ns for r in full.ranks[:3]}) == 2
    info = WorkloadInfo.from_bundle(bundle)
    comms = Comms(info, Network.from_topology(info.topology), "unaware", Scheduler(), lambda *a: None)
    comms.collective("all_reduce", (0, 1, 2), 1 << 20, True, lambda r, t: None, None)  # every member told
    with pytest.raises(NotAlike, match="does not finish them at once"):
        comms.collective("all_reduce", (0, 1, 2), 1 << 20, True, lambda r, t: None, None, report=(1,))
