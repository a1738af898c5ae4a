"""ECMP per flow: on a graph with equal-cost paths, every flow (a chunk of a collective, a send:
the table's `flow` column) takes the path a hash of (source, destination, flow) picks, in the
simulation and in the link table alike; `ecmp: pair` keeps every byte between two hosts on one."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simstudy.backends import FlowsimBackend
from simstudy.backends.flowsim import CORE_MISSING
from simstudy.backends.flowsim.netmodels import core_picks
from simstudy.backends.network import Network
from simstudy.compiler import compile_scenario
from simstudy.compiler.topology_file import read_topology, topology_of
from simstudy.spec import Scenario

#: Two hosts under two leaves joined by two spines, uplinks slower than the NICs: the spines are
#: the bottleneck (the run is bound by communication), and two flows on one spine take twice as long
#: as on two.
TOPOLOGY = {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 1, "bandwidth_gbps": 400,
            "uplink_bandwidth_gbps": 10, "latency_ns": 500}


def scenario(ecmp: str, chunks: int = 8) -> Scenario:
    """ResNet-50 data parallelism on the two hosts: each bucket's all-reduce in `chunks` chunks,
    all in flight at once."""
    return Scenario.model_validate({
        "name": f"ecmp_{ecmp}", "model": "resnet50", "parallelism": {"dp": 2},
        "system": {"collective_chunks": chunks, "active_chunks_per_dimension": chunks},
        "training": {"iterations": 1}, "topology": {**TOPOLOGY, "ecmp": ecmp}})


def spine_bytes(links: object) -> dict[str, float]:
    import pandas as pd

    assert isinstance(links, pd.DataFrame)
    up = links[links["tier"] == "spine"]
    return {str(k): float(v) for k, v in up.groupby("name", observed=True)["bytes"].sum().items() if v > 0}


def test_the_knob_reaches_topology_json(tmp_path: Path) -> None:
    for ecmp in ("flow", "pair"):
        bundle = compile_scenario(scenario(ecmp), tmp_path / ecmp).bundle
        assert bundle.topology is not None
        routing = read_topology(bundle.topology).routing
        assert routing.ecmp and routing.ecmp_hash == ecmp and routing.per_flow == (ecmp == "flow")


def test_routes_hash_flows_or_pairs() -> None:
    for ecmp, spread in (("flow", True), ("pair", False)):
        net = Network.from_topology(topology_of(scenario(ecmp).topology))
        assert len(net.paths(0, 1)) == 2
        paths = {net.route(0, 1, flow) for flow in range(64)}
        assert (len(paths) == 2) == spread, ecmp


@pytest.mark.parametrize("congestion", ["fluid", "aware", "unaware"])
def test_flows_of_one_pair_spread_over_the_spines(congestion: str, tmp_path: Path) -> None:
    """Per flow, the chunks of every all-reduce between the two hosts use both spines: the link
    table carries bytes on both, and where links are shared the run is faster than per pair, where
    all of them queue on one spine. The link table puts each row's bytes on the links the row's
    flow was simulated on: the spines' bytes follow from the rows and the routes by flow."""
    out: dict[str, dict[str, float]] = {}
    finish: dict[str, int] = {}
    for ecmp in ("flow", "pair"):
        bundle = compile_scenario(scenario(ecmp), tmp_path / ecmp).bundle
        links = FlowsimBackend(congestion=congestion, traffic="links").run(bundle, tmp_path / f"l{ecmp}")
        rows = FlowsimBackend(congestion=congestion).run(bundle, tmp_path / f"r{ecmp}")
        assert rows.finish_ns == links.finish_ns
        finish[ecmp] = rows.finish_ns
        out[ecmp] = spine_bytes(links.output.links)
        net = Network.from_topology(read_topology(bundle.topology))  # type: ignore[arg-type]
        t = rows.traffic
        expect: dict[str, float] = {}
        for s, d, f, b in zip(t["src"].tolist(), t["dst"].tolist(), t["flow"].tolist(), t["bytes"].tolist(),
                              strict=True):
            for link in net.route(s, d, f):
                name = net.names[link]
                if "spine" in name:
                    expect[name] = expect.get(name, 0.0) + b
        assert out[ecmp].keys() == expect.keys()
        for name, v in expect.items():
            assert np.isclose(out[ecmp][name], v, rtol=1e-9), (ecmp, name)
    # each direction crosses one spine (its up and down link) per pair, both spines per flow
    assert len(out["pair"]) == 4 and len(out["flow"]) == 8
    assert sum(out["pair"].values()) == pytest.approx(sum(out["flow"].values()))
    if congestion == "unaware":  # links are never shared: the path does not matter
        assert finish["flow"] == finish["pair"]
    else:
        assert finish["flow"] < 0.8 * finish["pair"], finish


@pytest.mark.skipif(CORE_MISSING is not None and not os.environ.get("CI"), reason=f"{CORE_MISSING} (CI builds it)")
@settings(max_examples=300, deadline=None)
@given(multi=st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40), st.integers(1, 512)), max_size=6),
       flow=st.integers(-(2**20), 2**50), chunks=st.integers(1, 6))
def test_the_compiled_hash_picks_the_paths_of_networks_pick(multi: list[tuple[int, int, int]], flow: int,
                                                             chunks: int) -> None:
    """The compiled core's ECMP hash of many flows (`_core.ecmp_picks`) against `Network.pick`,
    the reference: the same path for every flow."""
    net = Network.from_topology(topology_of(scenario("flow").topology))
    assert core_picks(multi, flow, chunks) == tuple(net.pick(s, d, flow + c, n) for s, d, n in multi
                                                   for c in range(chunks))


@pytest.mark.skipif(CORE_MISSING is not None and not os.environ.get("CI"), reason=f"{CORE_MISSING} (CI builds it)")
@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1), st.integers(1, 512)),
                      min_size=1, max_size=6),
       flows=st.lists(st.integers(0, 2**50), min_size=1, max_size=4))
def test_the_compiled_runs_key_routes_by_the_path_networks_pick_gives(pairs: list[tuple[int, int, int]],
                                                                      flows: list[int]) -> None:
    """A compiled run keeps a route by the path ECMP picks for its flow (`_core.PathCounts`), which
    must be the path `Network.pick` gives that flow, whatever the number of paths (one: always the
    first); each pair's number of paths is asked once."""
    from simstudy.backends.flowsim import _core

    net = Network.from_topology(topology_of(scenario("flow").topology))
    paths = {(s, d): n for s, d, n in pairs}
    asked: list[tuple[int, int]] = []

    def count(s: int, d: int) -> int:
        asked.append((s, d))
        return paths[(s, d)]

    counts = _core.PathCounts(count)
    for (s, d), n in paths.items():
        for flow in flows:
            assert counts.pick(s, d, flow) == (net.pick(s, d, flow, n) if n > 1 else 0)
    assert sorted(asked) == sorted(paths)
