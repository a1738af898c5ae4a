"""Know before you run: the counts of `simstudy.backends.estimate` against the compiled bundle and the
engine, and the refusal of a run beyond the machine (one line, exit 2, nothing allocated per rank)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from simstudy.backends.estimate import EstimateError, check_memory, count, estimate
from simstudy.backends.flowsim.engine import Engine
from simstudy.backends.network import Network
from simstudy.backends.traffic_build import WorkloadInfo
from simstudy.compiler import Task, compile_any, resolve
from simstudy.compiler.hybrid import compile_hybrid, distinct_hybrid
from simstudy.spec import BackendSpec, Cluster, Scenario
from tests.conftest import REPO, run_cli

GIB = 1 << 30


def _hybrid(parallelism: dict[str, Any], npus: int, model: str = "gpt2_medium") -> dict[str, Any]:
    return {"name": "h", "model": model, "parallelism": parallelism,
            "topology": {"kind": "switch", "npus": npus, "bandwidth_gbps": 100},
            "training": {"batch_size_per_worker": 4, "iterations": 1}}


SPECS = {
    "tp2_pp2_dp2": _hybrid({"tp": 2, "pp": 2, "dp": 2, "microbatches": 2}, 8),
    "tp2_pp2_dp2_interleaved": _hybrid({"tp": 2, "pp": 2, "dp": 2, "microbatches": 4, "virtual_stages": 2}, 8),
    "pp2_dp2_fsdp": _hybrid({"pp": 2, "dp": 2, "microbatches": 2, "sharding": "fsdp"}, 4),
    "resnet_tp2_pp2": _hybrid({"tp": 2, "pp": 2, "microbatches": 2}, 4, model="resnet50"),
    "dp8": {"name": "dp8", "model": "resnet50", "parallelism": {"dp": 8},
            "topology": {"kind": "ring", "npus": 8}, "training": {"iterations": 2}},
}


def _load(name: str) -> Scenario | Cluster:
    if name.endswith(".yaml"):
        from simstudy.api import load_spec

        return load_spec(REPO / name)
    return Scenario.model_validate(SPECS[name])


@pytest.mark.parametrize("name", [*SPECS, "specs/examples/resnet50_ps4_switch.yaml",
                                  "specs/examples/two_jobs_leafspine.yaml"])
def test_counts_are_the_compiled_bundles_and_the_engines(name: str, tmp_path: Path) -> None:
    """Ranks, ET nodes and messages counted from the distinct graphs are what the whole compile
    writes and what the engine expects to simulate."""
    spec = _load(name)
    w = count(spec)
    info = WorkloadInfo.from_bundle(compile_any(spec, tmp_path / "b").bundle)
    engine = Engine(info, Network.from_topology(info.topology), mode="unaware", timeout_s=None,
                    emit=lambda *a: None)
    assert w.ranks == info.npus
    assert w.messages == engine.expected_transfers() > 0
    cluster_extra = sum(len(n) for n in info.nodes) - w.nodes  # a cluster's start offsets are nodes of its own
    assert cluster_extra == 0 or isinstance(spec, Cluster)
    assert w.distinct <= w.ranks
    assert w.flows_at_peak >= w.ranks // 2


def _on_hosts(model: str, parallelism: dict[str, Any], hosts: int) -> Scenario:
    """A job on `hosts` hosts of 4 GPUs, one host per leaf."""
    return Scenario.model_validate({
        "name": "hosts", "model": model, "parallelism": parallelism,
        "topology": {"kind": "leaf_spine", "leaves": hosts, "spines": 1, "hosts_per_leaf": 1, "gpus_per_host": 4,
                     "bandwidth_gbps": 100},
        "training": {"batch_size_per_worker": 2, "iterations": 1}})


def test_crossing_weighs_the_messages_that_leave_a_host_by_the_groups_beside_them() -> None:
    """What a fluid run's shared links grow with, by hand: a ring of all 8 ranks on 2 hosts of 4
    leaves a host at 2 of its 8 neighbours, alone (one group per host): a quarter of its messages.
    Tensor parallelism on one host leaves it never. With DP 2 beside TP 4, every data-parallel
    message leaves its host, beside the 3 other groups of that host: 4 each."""
    ring = count(_on_hosts("resnet50", {"dp": 8}, 2))
    assert ring.crossing == ring.messages / 4 > 0
    tp = count(_on_hosts("gpt2_medium", {"tp": 4}, 1))
    assert tp.crossing == 0 and tp.messages > 0
    both = count(_on_hosts("gpt2_medium", {"tp": 4, "dp": 2}, 2))
    data_parallel = both.messages - 2 * tp.messages  # the two replicas' tensor-parallel messages are tp's
    assert data_parallel > 0 and both.crossing == 4 * data_parallel


def test_a_pipelines_sends_that_leave_their_host_are_counted_apart() -> None:
    """A pipeline's sends' part of `crossing`, by hand: TP 4 x PP 2 on 2 hosts of 4 GPUs puts each
    stage on a host of its own, so every send between the stages leaves its host, beside the host's 3
    other ranks (4 each), and tensor parallelism adds nothing; on one host of 4 (TP 2 x PP 2) no send
    does; a parameter server's sends are not a pipeline's."""
    from simstudy.compiler import TaskKind

    job = _on_hosts("gpt2_medium", {"tp": 4, "pp": 2, "microbatches": 2}, 2)
    sends = sum(t.kind is TaskKind.SEND for g in compile_hybrid(resolve(job)).ranks for t in g.tasks)
    w = count(job)
    assert sends > 0 and w.crossing_sends == 4 * sends == w.crossing
    alone = count(_on_hosts("gpt2_medium", {"tp": 2, "pp": 2, "microbatches": 2}, 1))
    assert alone.crossing_sends == 0 == alone.crossing and alone.messages > 0
    # a parameter server's pushes and pulls leave their hosts too, at each worker's own pace: not a pipeline's
    ps = count(_on_hosts("resnet50", {"dp": 4, "aggregation": {"kind": "parameter_server", "servers": 4,
                                                              "placement": "dedicated"}}, 2))
    assert ps.crossing > 0 == ps.crossing_sends


def test_a_clusters_jobs_are_weighed_on_the_hosts_they_are_placed_on() -> None:
    """A job of a shared cluster is counted on the cluster's hosts, where it is placed (its own
    scenario stands on a switch of its ranks, where no message leaves a host): packed from NPU 0 it
    weighs as the same job alone on the network; on one GPU of each host, every ring neighbour is on
    another host, beside the host's other GPU: twice each message (no replicas on a graph either)."""
    topology = {"kind": "leaf_spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 4, "gpus_per_host": 2,
                "bandwidth_gbps": 100}
    training = {"batch_size_per_worker": 2, "iterations": 1}

    def cluster(placement: object) -> Cluster:
        return Cluster.model_validate({"kind": "cluster", "name": "c", "topology": topology, "jobs": [
            {"name": "a", "model": "resnet50", "gpus": 8, "placement": placement, "training": training}]})

    alone = count(Scenario.model_validate({"name": "a", "model": "resnet50", "parallelism": {"dp": 8},
                                           "topology": {**topology, "npus": 8}, "training": training}))
    packed, apart = count(cluster("packed")), count(cluster({"npus": list(range(0, 16, 2))}))
    assert packed.crossing == alone.crossing == alone.messages / 2 > 0
    assert apart.crossing == 2 * alone.messages and apart.replicas == packed.replicas == 1


@given(st.integers(1, 9), st.integers(0, 4), st.integers(2, 200))
def test_crossing_of_a_range_in_closed_form_is_the_member_by_member_count(per_host: int, first_host: int,
                                                                          n: int) -> None:
    """A group of consecutive ranks from a host's first (every rank of a job) is weighed without an
    array per rank; member by member gives the same weight."""
    from simstudy.backends.estimate import _Hosts
    from simstudy.spec.topology import LeafSpine

    topo = LeafSpine(leaves=2, spines=1, hosts_per_leaf=1, gpus_per_host=per_host, bandwidth_gbps=100)
    members = range(first_host * per_host, first_host * per_host + n)
    assert _Hosts(topo).group(0, members) == pytest.approx(_Hosts(topo).group(0, list(members)))


@pytest.mark.parametrize("name", ["tp2_pp2_dp2", "tp2_pp2_dp2_interleaved", "resnet_tp2_pp2"])
def test_distinct_graphs_are_the_templates_of_the_whole_compile(name: str) -> None:
    scenario = resolve(Scenario.model_validate(SPECS[name]))
    whole = compile_hybrid(scenario)
    templates = {id(g.tasks): g for g in whole.ranks}
    graphs, groups = distinct_hybrid(scenario)
    assert len(graphs) == len(templates)
    assert sum(n for _, n in graphs) == whole.npus

    def by_members(tasks: list[Task], ids: dict[int, tuple[int, ...]]) -> list[Task]:
        """The tasks with their groups' members for ids (only the groups used are registered here)."""
        return [replace(t, group=hash(ids[t.group])) if t.group else t for t in tasks]

    for g, n in graphs:
        same = [r for r in whole.ranks if r.rank == g.rank]
        assert same and by_members(same[0].tasks, whole.groups) == by_members(g.tasks, groups)
        assert n == sum(1 for r in whole.ranks if r.tasks is same[0].tasks)


def _huge(path: Path, dp: int = 43_200) -> Path:
    """LLaMA-3 70B on TP 8 x PP 16 x DP `dp` (5,529,600 GPUs: the 55,296 of the issue with two zeros
    too many) on a 3-tier Clos."""
    spec = {"name": "llama3_70b_typo", "model": "llama3_70b",
            "parallelism": {"dp": dp, "tp": 8, "pp": 16, "microbatches": 16, "sp": True},
            "topology": {"kind": "clos3", "pods": dp * 128 // 1024, "tors_per_pod": 16, "hosts_per_tor": 8,
                         "aggs_per_pod": 4, "cores": 8, "gpus_per_host": 8, "bandwidth_gbps": 400},
            "system": {"peak_tflops": 989, "efficiency": 0.4},
            "training": {"batch_size_per_worker": 16, "iterations": 1, "precision": "bf16"}}
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def test_a_run_beyond_the_machine_is_refused_in_one_line_before_it_allocates(tmp_path: Path) -> None:
    spec = _huge(tmp_path / "typo.yaml")
    # the CLI in a process of its own, whose peak memory is the only child's of its parent
    parent = ("import json, resource, subprocess, sys, time; t = time.perf_counter(); "
              "r = subprocess.run([sys.executable, '-m', 'simstudy', *sys.argv[1:]], capture_output=True, text=True); "
              "print(json.dumps({'rc': r.returncode, 'out': r.stdout, 'err': r.stderr, "
              "'s': time.perf_counter() - t, 'kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))")
    t0 = time.perf_counter()
    got = subprocess.run([sys.executable, "-c", parent, "run", str(spec), "-o", str(tmp_path / "run"), "--quiet"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    r = json.loads(got.stdout)
    assert r["rc"] == 2, r
    lines = r["err"].strip().splitlines()
    assert len(lines) == 1, lines
    assert "typo.yaml" in lines[0] and "GiB" in lines[0] and "--force" in lines[0] and "available" in lines[0]
    assert r["out"] == ""
    assert r["kb"] * 1024 < GIB / 2, f"the refusal held {r['kb'] / 1024:.0f} MB"
    assert time.perf_counter() - t0 < 120  # seconds on a loaded 2-core machine, not the hours of the run
    assert not (tmp_path / "run").exists()


def test_estimate_prints_the_counts_and_each_engines_cost(tmp_path: Path) -> None:
    spec = _huge(tmp_path / "typo.yaml")
    r = run_cli("run", "--estimate", str(spec), cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[0]
    assert "5,529,600 ranks" in head and "16 distinct graphs" in head
    for mode in ("unaware", "aware", "fluid"):
        assert any(line.split()[:2] == ["flowsim", mode] for line in r.stdout.splitlines()), r.stdout
    assert "exceeds this machine" in r.stdout


def test_the_check_compares_the_estimate_with_the_memory_available() -> None:
    spec = Scenario.model_validate(SPECS["dp8"])
    fluid = BackendSpec(name="flowsim", congestion="fluid")
    est = check_memory(spec, fluid, available=lambda: 1 << 40)
    assert est is not None
    need = est.costs[0].memory_bytes
    assert 50 << 20 < need < 1 << 30
    with pytest.raises(EstimateError, match=r"--force"):
        check_memory(spec, fluid, available=lambda: need - 1)
    assert check_memory(spec, fluid, available=lambda: None) is not None  # no /proc/meminfo: nothing refused
    assert check_memory(spec, BackendSpec(name="ns3")) is None  # no model: not checked
    # what only the Python engine runs (TCP without loss here) is checked with the Python engine's costs
    tcp = Scenario.model_validate({**SPECS["dp8"], "topology": {"kind": "ring", "npus": 8,
                                                                "transport": {"model": "tcp"}}})
    checked = check_memory(tcp, fluid, available=lambda: 1 << 40)
    assert checked is not None and checked.costs[0].backend == "flowsim-python"
    larger = estimate(Scenario.model_validate({**SPECS["dp8"], "parallelism": {"dp": 64},
                                               "topology": {"kind": "ring", "npus": 64}}))
    assert larger.workload.ranks == 64 and "64 ranks" in str(larger)


def test_a_sweep_skips_a_scenario_beyond_the_machine_with_the_reason(tmp_path: Path) -> None:
    study = {"name": "sizes", "base": {"model": "gpt2_medium", "training": {"batch_size_per_worker": 8,
                                                                           "iterations": 1}},
             "zip": [{"parallelism": [{"tp": 8, "pp": 8, "dp": 1, "microbatches": 8},
                                      {"tp": 8, "pp": 8, "dp": 20_000, "microbatches": 8}],
                      "topology": [{"kind": "switch", "npus": 64}, {"kind": "switch", "npus": 1_280_000}]}],
             "backend_options": {"congestion": "unaware", "traffic": "none"}}
    path = tmp_path / "sizes.yaml"
    path.write_text(yaml.safe_dump(study), encoding="utf-8")
    r = run_cli("sweep", str(path), "-o", str(tmp_path / "out"), "--quiet", "--no-report", cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr
    skipped = json.loads((tmp_path / "out" / "skipped.json").read_text(encoding="utf-8"))
    assert [s["index"] for s in skipped] == [1]
    assert "GiB" in skipped[0]["reason"] and "available" in skipped[0]["reason"]
    assert len(list((tmp_path / "out" / "runs").iterdir())) == 1
