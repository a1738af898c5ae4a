"""The fluid model's fast solver equals the reference solver (`FluidNet`, the one every fluid
result of simstudy was computed with until it came) to the last ns: random small bundles
(`fastpaths.cases`: every native algorithm and collective, 1-3 dimensions, staggered starts, two
communicator groups as two jobs, sends), on their ASTRA-SIM dimensions and on graph topologies
with equal-cost paths (leaf-spine, fat-tree and 3-tier Clos, ECMP per flow or per pair, uplinks
oversubscribed so that flows meet), through the full path and with every shortcut: the same
finish times, spans and traffic rows; and with the NPUs split into two jobs that share the network
by weights, priority classes or MLTCP's bytes ratio (a cluster's `network`)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simstudy import layout
from simstudy.backends import FlowsimBackend
from simstudy.compiler import JobInfo, SharingInfo
from simstudy.compiler.topology_file import topology_of
from simstudy.spec import Scenario
from tests.backends.fastpaths import PATHS, Case, assert_same, cases, run_solvers

#: Examples per test (6-20 s in all at load average 3 on 2 cores, 66 s at load average 10;
#: see docs/concepts/backend.md, "Congestion models at scale").
NATIVE = 60
GRAPHS = 90
SHARED = 40


def examples(n: int) -> settings:
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def graph_cases(draw: st.DrawFn) -> Case:
    """A random case whose network is a graph of its NPUs: a leaf-spine, fat-tree or 3-tier Clos
    with several equal-cost paths, ECMP per flow or per pair, uplinks fast or oversubscribed."""
    case = draw(cases(max_npus=16, max_ops=5, uneven=False))
    n = case.npus
    ecmp = draw(st.sampled_from(["flow", "pair"]))
    gpus = draw(st.sampled_from([g for g in (1, 2, 4) if n % g == 0]))
    hosts = n // gpus
    kind = draw(st.sampled_from(["leaf_spine", "clos3"] + (["fat_tree"] if gpus == 1 and n <= 16 else [])))
    common = {"bandwidth_gbps": 100.0, "latency_ns": draw(st.sampled_from([0.0, 500.0])), "ecmp": ecmp}
    if kind == "fat_tree":
        topo: dict[str, object] = {"kind": "fat_tree", "k": 4, "npus": n, **common}
    else:
        per = draw(st.sampled_from([d for d in range(1, hosts + 1) if hosts % d == 0]))
        tiered = {**common, "gpus_per_host": gpus, "intra_host_bandwidth_gbps": draw(st.sampled_from([100.0, 800.0]))}
        over = draw(st.sampled_from([1.0, 4.0]))
        if kind == "leaf_spine":
            topo = {"kind": "leaf_spine", "leaves": hosts // per, "hosts_per_leaf": per,
                    "spines": draw(st.integers(1, 3)), "oversubscription": over, **tiered}
        else:
            tors = hosts // per
            pods = draw(st.sampled_from([p for p in (1, 2) if tors % p == 0]))
            topo = {"kind": "clos3", "pods": pods, "tors_per_pod": tors // pods, "hosts_per_tor": per,
                    "aggs_per_pod": draw(st.integers(1, 2)), "cores": draw(st.integers(1, 2)),
                    "tor_oversubscription": over, **tiered}
    spec = Scenario.model_validate({"name": "g", "model": "resnet50", "parallelism": {"dp": n},
                                    "topology": topo}).topology
    case.topology = topology_of(spec).to_json()
    return case


@st.composite
def sharings(draw: st.DrawFn, npus: int) -> tuple[list[JobInfo], SharingInfo]:
    """Two jobs (the NPUs below a random cut, and the rest) and how they share the network."""
    cut = draw(st.integers(1, npus - 1))
    jobs = [JobInfo(0, "a", tuple(range(cut)), 0, 1), JobInfo(1, "b", tuple(range(cut, npus)), 0, 1)]
    sharing = SharingInfo(draw(st.sampled_from(["weighted", "priority", "mltcp"])),
                          draw(st.sampled_from([0.5, 1.0, 4.0])), draw(st.sampled_from(["ecmp", "intensity"])),
                          tuple(draw(st.sampled_from([0.5, 1.0, 3.0])) for _ in jobs),
                          tuple(draw(st.integers(0, 2)) for _ in jobs))
    return jobs, sharing


def check(case: Case, paths: tuple[str, ...], shared: tuple[list[JobInfo], SharingInfo] | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bundle = case.bundle(Path(tmp) / "b")
        if shared is not None:
            jobs, sharing = shared
            (bundle.directory / layout.JOBS).write_text(json.dumps([j.to_json() for j in jobs]), encoding="utf-8")
            (bundle.directory / layout.SHARING).write_text(json.dumps(sharing.to_json()), encoding="utf-8")
        for name in paths:
            assert_same(run_solvers(bundle, Path(tmp) / name, PATHS[name]), "reference")


@examples(NATIVE)
@given(cases(max_npus=12, max_ops=5))
def test_native_networks(case: Case) -> None:
    """ASTRA-SIM dimensions (and topology.json files with uneven links), message by message and
    with every shortcut (lanes: flows on link orbits, with multiplicities)."""
    check(case, ("full", "all"))


@examples(GRAPHS)
@given(graph_cases())
def test_graphs_with_ecmp(case: Case) -> None:
    """Leaf-spine, fat-tree and 3-tier Clos fabrics, ECMP per flow or per pair, jobs side by side
    and staggered starts: where flows meet on oversubscribed uplinks and on the NICs."""
    check(case, ("full", "all"))


@examples(SHARED)
@given(st.data())
def test_jobs_sharing_by_weights_classes_and_bytes(data: st.DataObject) -> None:
    """Two jobs on a leaf-spine, fat-tree or Clos (routing ECMP or Crux's pinned paths), sharing
    links by weights, priority classes (flows that wait at rate 0) or MLTCP's weights, which move
    as bytes are sent."""
    case = data.draw(graph_cases())
    check(case, ("full", "all"), data.draw(sharings(case.npus)))


def test_reference_is_selectable(tmp_path: Path) -> None:
    """Both solvers run, give the same finish, and the fast one says what it reused or gave its
    routes' own shares without a fill (a ring's steps: routes alone on their links)."""
    case = Case([("Ring", 4, 50.0, 500.0)], ["ring"], 1, 2, "baseline", [])
    from tests.backends.fastpaths import Op

    case.ops = [Op("all_reduce", size=1 << 20), Op("compute", micros=(1, 2, 3, 4)), Op("all_reduce", size=1 << 20)]
    bundle = case.bundle(tmp_path / "b")
    ref = FlowsimBackend(fluid_solver="reference").run(bundle, tmp_path / "r")
    fast = FlowsimBackend().run(bundle, tmp_path / "f")
    assert ref.finish_ns == fast.finish_ns and ref.details["fluid_solver"] == "reference"
    assert fast.details["fluid_solver"] == "fast" and fast.details["rates_reused"] + fast.details["rates_apart"] > 0
