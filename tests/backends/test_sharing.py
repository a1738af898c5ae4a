"""How jobs share the network (a cluster's `network`): the fluid model's weighted max-min and
priority classes on cases worked out by hand, MLTCP's weights as bytes are sent, Crux's path
selection, what a job sends per iteration, and the options refused outside the fluid mode."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simstudy import layout
from simstudy.backends import FlowsimBackend, simulate
from simstudy.backends.base import BackendError
from simstudy.backends.flowsim import FULL
from simstudy.backends.flowsim.netmodels import FLUID_SOLVERS, Msg, NetModel
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.flowsim.sharing import (
    JobTraffic,
    MltcpShares,
    PriorityShares,
    WeightedShares,
    intensity_paths,
    job_traffic,
)
from simstudy.backends.network import Network
from simstudy.backends.traffic_build import WorkloadInfo
from simstudy.compiler import JobInfo, compile_cluster, read_jobs
from simstudy.compiler.topology_file import topology_of
from simstudy.spec import BackendSpec, Cluster, SpecError, canonical_json
from tests.backends.test_cluster_run import _cluster

ROOT = Path(__file__).resolve().parents[2]
#: Two jobs of one NPU each: job 0 sends from NPU 0, job 1 from NPU 1, both over link 0.
JOBS = [JobInfo(0, "a", (0,), 0, 1), JobInfo(1, "b", (1,), 0, 1)]


def _run(shares: object, sends: list[tuple[int, int, int]], solver: str = "fast",
         keys: tuple[int, ...] = (0,)) -> dict[int, int]:
    """Messages (start ns, sending NPU, bytes) over `keys` (links of 1 byte/ns, no latency) on a
    fluid model with `shares`: each sender's arrival time."""
    sched = Scheduler()
    net: NetModel = FLUID_SOLVERS[solver](sched, [1.0] * 3, [0.0] * 3)
    net.shares = shares  # type: ignore[attr-defined]
    arrived: dict[int, int] = {}
    for t, src, size in sends:
        msg = Msg(src, 2, size, keys, None, 0.0, 0, lambda m: arrived.__setitem__(m.src, m.t_arrive))
        sched.at(t, net.send, msg)
    sched.run_before(math.inf)
    return arrived


@pytest.mark.parametrize("solver", ["fast", "reference"])
def test_weights_1_and_3_get_a_quarter_and_three_quarters(solver: str) -> None:
    # 1,000 bytes each at 1/4 and 3/4 of a byte/ns: b is done at 1000 / 0.75 = 1333.3 ns (int: 1333);
    # a has then sent 1333 / 4 = 333.25 bytes and sends the other 666.75 alone at 1 byte/ns: 1333 + 666
    got = _run(WeightedShares(JOBS, (1.0, 3.0)), [(0, 0, 1000), (0, 1, 1000)], solver)
    assert got == {1: 1333, 0: 1999}
    # equal weights are max-min: both at half the link, both done at 2000 ns
    assert _run(WeightedShares(JOBS, (2.0, 2.0)), [(0, 0, 1000), (0, 1, 1000)], solver) == {0: 2000, 1: 2000}


def test_weights_in_the_numpy_solver() -> None:
    """More flows than the small solver takes: 13 flows of job 0 (weight 1) and one of job 1
    (weight 13) on one link: job 1's flow gets half of it, each of job 0's 1/26."""
    shares = WeightedShares(JOBS, (1.0, 13.0))
    got = _run(shares, [(0, 1, 1000)] + [(0, 0, 1000)] * 13)
    assert got[1] == 2000  # at 0.5 byte/ns until done (job 0's flows still running)


@pytest.mark.parametrize("solver", ["fast", "reference"])
def test_priority_0_takes_the_whole_link_while_active(solver: str) -> None:
    # a (class 0) alone at 1 byte/ns: done at 1000; b (class 1) gets nothing until then, then the link: 2000
    got = _run(PriorityShares(JOBS, (0, 1)), [(0, 0, 1000), (0, 1, 1000)], solver)
    assert got == {0: 1000, 1: 2000}
    # b started first: it has the link for 500 ns (500 bytes), waits 1000 ns while a sends, then 500 more
    got = _run(PriorityShares(JOBS, (0, 1)), [(500, 0, 1000), (0, 1, 1000)], solver)
    assert got == {0: 1500, 1: 2000}


def test_a_lower_class_takes_what_the_class_before_leaves() -> None:
    """Class 0 crosses links 0 and 1 behind a bottleneck of its own; class 1 on link 1 gets the rest."""
    sched = Scheduler()
    net = FLUID_SOLVERS["fast"](sched, [0.25, 1.0], [0.0, 0.0])
    net.shares = PriorityShares(JOBS, (0, 1))  # type: ignore[attr-defined]
    arrived: dict[int, int] = {}
    for src, keys in ((0, (0, 1)), (1, (1,))):
        sched.at(0, net.send, Msg(src, 2, 1000, keys, None, 0.0, 0, lambda m: arrived.__setitem__(m.src, m.t_arrive)))
    sched.run_before(math.inf)
    # a at 0.25 (its own link) -> 4000 ns; b at the 0.75 left of link 1 -> 1333 ns
    assert arrived == {0: 4000, 1: 1333}


def test_mltcp_weights_move_as_bytes_are_sent() -> None:
    # Both jobs send 2,000 bytes per iteration, slope 1. a starts alone at 1 byte/ns; at 1000 ns, when
    # b starts, a has sent half its iteration: weights 1.5 and 1, rates 0.6 and 0.4. a's other 1,000
    # bytes take int(1000 / 0.6) = 1666 ns (done at 2666), b has then sent 666.4 and sends the rest alone.
    shares = MltcpShares(JOBS, 1.0, [2000.0, 2000.0])
    got = _run(shares, [(0, 0, 2000), (1000, 1, 2000)])
    assert got == {0: 2666, 1: 2666 + math.floor(2000 - 1666 * 0.4)}
    assert shares.sent(0, got[1]) == pytest.approx(2000) and shares.sent(1, got[1]) == pytest.approx(2000)
    # a whole iteration sent: the next one starts at weight 1 again
    assert shares.weight(0, got[1]) == pytest.approx(1.0)
    # the weight along the way: 1 + slope x the fraction sent
    half = MltcpShares(JOBS, 3.0, [4000.0, 4000.0])
    _run(half, [(0, 0, 1000)])
    assert half.weight(0, 10_000) == pytest.approx(1 + 3.0 * 1000 / 4000)
    assert half.weight(1, 10_000) == 1.0


def test_mltcp_same_as_reference() -> None:
    sends = [(0, 0, 5000), (300, 1, 7000), (900, 0, 3000), (2000, 1, 100)]
    fast = _run(MltcpShares(JOBS, 2.0, [6000.0, 9000.0]), sends, "fast")
    ref = _run(MltcpShares(JOBS, 2.0, [6000.0, 9000.0]), sends, "reference")
    assert fast == ref


def _leafspine(spines: int = 2) -> Network:
    spec = Cluster.model_validate({
        "kind": "cluster", "topology": {"kind": "leaf_spine", "leaves": 2, "spines": spines, "hosts_per_leaf": 2,
                                        "bandwidth_gbps": 100},
        "jobs": [{"name": "a", "model": "resnet50", "gpus": 1}]}).topology
    return Network.from_topology(topology_of(spec))


@pytest.mark.parametrize("first", [0, 1])
def test_crux_pins_the_most_intense_job_first(first: int) -> None:
    """Two jobs leave leaf 0 for leaf 1 (NPUs 0 -> 2 and 1 -> 2): the more intense one takes
    ECMP's pick, the other the spine left free."""
    net = _leafspine()
    traffic = [JobTraffic(100.0, 100.0 * (10 if first == 0 else 1), {(0, 2): 100.0}),
               JobTraffic(100.0, 100.0 * (10 if first == 1 else 1), {(1, 2): 100.0})]
    pins = intensity_paths(net, traffic)
    pair = [(0, 2), (1, 2)]
    ahead, behind = pair[first], pair[1 - first]
    assert pins[ahead] == net.pick(*ahead, 0, 2)
    assert pins[behind] != pins[ahead]
    up = {p: net.paths(*p)[pins[p]][1] for p in pair}  # the leaf's uplink each pair takes
    assert up[(0, 2)] != up[(1, 2)]


def test_one_path_is_not_pinned() -> None:
    net = _leafspine(spines=1)
    assert intensity_paths(net, [JobTraffic(1.0, 1.0, {(0, 2): 1.0})]) == {}


def test_job_traffic_is_what_the_jobs_send(tmp_path: Path) -> None:
    """Bytes per iteration read from the traces = the bytes the run's transfers carried, per job;
    compute per iteration: the one layer's forward and backward at the job's rate."""
    cluster = _cluster([0, 2], [1, 3])
    bundle = compile_cluster(cluster, tmp_path / "b").bundle
    info = WorkloadInfo.from_bundle(bundle)
    traffic = job_traffic(info, read_jobs(bundle.directory) or [])
    result = simulate(cluster, tmp_path / "run", BackendSpec())
    for job, t in zip(result.details["jobs"], traffic, strict=True):
        assert t.bytes_per_iter == pytest.approx(job["bytes_per_iter"], rel=1e-12)
        assert t.bytes_per_iter == 2 * (2 * 32 * 2**20)  # two ranks, each 2 ring steps of half the 64 MiB
        assert 0 < t.compute_ns_per_iter < 1e6 and t.pairs.keys() == {(job["npus"][0], job["npus"][1]),
                                                                       (job["npus"][1], job["npus"][0])}


def _shared(tmp_path: Path, name: str, network: dict[str, object], **jobs: dict[str, object]) -> dict[str, dict]:
    cluster = _cluster([0, 2], [1, 3])
    data = cluster.model_dump(mode="json")
    data["network"] = network
    for i, job in enumerate(data["jobs"]):
        job.update(jobs.get(job["name"], {}))
        data["jobs"][i] = job
    result = simulate(Cluster.model_validate(data), tmp_path / name, BackendSpec())
    return {j["name"]: j for j in result.details["jobs"]}


def test_cluster_policies_end_to_end(tmp_path: Path) -> None:
    """The two all-reduce jobs of test_cluster_run on one uplink: fair sharing slows both alike
    (1.95x); priority runs job a as if alone and b behind it; weights 3:1 favour a at no cost to b; MLTCP,
    with b started a little later, lets the jobs slide apart (both below fair sharing)."""
    fair = _shared(tmp_path, "fair", {})
    assert fair["a"]["slowdown"] == pytest.approx(fair["b"]["slowdown"], rel=1e-9)
    prio = _shared(tmp_path, "prio", {"sharing": "priority"}, b={"priority": 1})
    assert prio["a"]["slowdown"] == pytest.approx(1.0, rel=1e-9)
    assert prio["b"]["slowdown"] > 1.5
    weighted = _shared(tmp_path, "w", {"sharing": "weighted"}, a={"weight": 3})
    # a at 3/4 of the uplink while b sends; b, behind, gets the whole of it when a is done: the link is
    # never idle, so b ends about when it ends under fair sharing
    assert 1.0 < weighted["a"]["slowdown"] < fair["a"]["slowdown"] - 0.3
    assert weighted["b"]["slowdown"] == pytest.approx(fair["b"]["slowdown"], rel=0.01)


def test_mltcp_lets_two_jobs_slide_into_interleaving(tmp_path: Path) -> None:
    """CASSINI's two ResNet-50 jobs (specs/multijob_interleave.yaml: ~8 ms of compute and ~8 ms of
    all-reduce per iteration, on one uplink), b started 2 ms after a: under fair sharing their
    all-reduces keep colliding; MLTCP favours the job further into its iteration's bytes, so the
    two drift apart until one communicates while the other computes."""
    base = yaml.safe_load((ROOT / "specs" / "multijob_interleave.yaml").read_text(encoding="utf-8"))["base"]
    for job in base["jobs"]:
        job["training"]["iterations"] = 10
    base["jobs"][1]["start_ms"] = 2.0
    mean = {}
    for sharing in ("fair", "mltcp"):
        cluster = Cluster.model_validate({**base, "name": "m", "network": {"sharing": sharing}})
        jobs = simulate(cluster, tmp_path / sharing, BackendSpec()).details["jobs"]
        mean[sharing] = sum(j["slowdown"] for j in jobs) / len(jobs)
    assert mean["fair"] > 1.2 and mean["mltcp"] < 1.1


def test_shortcuts_keep_weighted_results(tmp_path: Path) -> None:
    """A collective timed alone has one job's flows only, all of one weight and class: the
    shortcuts give what the full path gives."""
    data = _cluster([0, 2], [1, 3]).model_dump(mode="json")
    data["network"] = {"sharing": "weighted"}
    data["jobs"][0]["weight"] = 3
    data["jobs"][1]["start_ms"] = 7.0
    bundle = compile_cluster(Cluster.model_validate(data), tmp_path / "b").bundle
    assert (bundle.directory / layout.SHARING).is_file()
    full = FlowsimBackend(shortcuts=FULL).run(bundle, tmp_path / "full")
    fast = FlowsimBackend().run(bundle, tmp_path / "fast")
    assert full.finish_ns == fast.finish_ns and fast.details["fast"] > 0


def test_default_network_writes_nothing_new(tmp_path: Path) -> None:
    cluster = _cluster([0, 2], [1, 3])
    bundle = compile_cluster(cluster, tmp_path / "b").bundle
    assert not (bundle.directory / layout.SHARING).exists()
    text = canonical_json(cluster)
    assert '"network"' not in text and '"weight"' not in text and '"priority"' not in text
    weighted = Cluster.model_validate({**cluster.model_dump(mode="json"), "network": {"sharing": "weighted"}})
    assert json.loads(canonical_json(weighted))["network"]["sharing"] == "weighted"
    # the reference of a slowdown is the job alone on today's network
    assert canonical_json(weighted.alone(0)) == canonical_json(cluster.alone(0))


def test_other_modes_refuse_the_options(tmp_path: Path) -> None:
    data = _cluster([0, 2], [1, 3]).model_dump(mode="json")
    data["network"] = {"routing": {"policy": "intensity"}}
    cluster = Cluster.model_validate(data)
    for spec in (BackendSpec(congestion="aware"), BackendSpec(congestion="unaware"), BackendSpec(name="astrasim")):
        with pytest.raises(SpecError) as err:
            simulate(cluster, tmp_path / "x", spec, source="c.yaml")
        assert err.value.field == "network.routing.policy" and "fluid" in str(err.value)
        assert "\n" not in str(err.value)
    bundle = compile_cluster(cluster, tmp_path / "b").bundle
    with pytest.raises(BackendError, match=r"sharing.json: network.routing.policy: .*fluid"):
        FlowsimBackend(congestion="unaware").run(bundle, tmp_path / "u")
    spec = tmp_path / "c.yaml"
    spec.write_text(yaml.safe_dump({**data, "kind": "cluster", "network": {"sharing": "mltcp"}}), encoding="utf-8")
    cli = subprocess.run([sys.executable, "-m", "simstudy", "run", str(spec), "--congestion", "aware", "-o",
                          str(tmp_path / "cli")], capture_output=True, text=True, cwd=ROOT)
    assert cli.returncode == 2
    assert cli.stderr.strip().count("\n") == 0 and "network.sharing" in cli.stderr


@pytest.mark.parametrize("bad,field", [({"network": {"sharing": "lottery"}}, "network.sharing"),
                                       ({"network": {"routing": {"policy": "random"}}}, "network.routing.policy"),
                                       ({"network": {"mltcp": {"slope": -1}}}, "network.mltcp.slope")])
def test_bad_values_name_the_field(bad: dict[str, object], field: str) -> None:
    from simstudy.spec import spec_error

    data = {**_cluster([0, 2], [1, 3]).model_dump(mode="json"), **bad}
    with pytest.raises(Exception) as err:
        Cluster.model_validate(data)
    assert spec_error(err.value, data, None, "c.yaml").field == field  # type: ignore[arg-type]
