"""Routes of graph topologies: the fast path (a host on one switch is the first or last hop of every
route through it, so two hosts' routes are those of their switches, found once per pair of
switches by a search from both ends) against the reference (every shortest path of the
whole graph, host to host), on random topologies of every graph kind and random pairs of hosts:
the same paths in the same order, so ECMP's hash picks the same one."""

from __future__ import annotations

from typing import Any

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from simstudy.backends.network import Network, shortest_paths
from simstudy.compiler.topology_file import topology_of
from simstudy.spec.topology import Topology

TOPOLOGY: TypeAdapter[Topology] = TypeAdapter(Topology)
TIERED = {"gpus_per_host": st.integers(1, 4), "nics_per_host": st.integers(1, 2),
          "ecmp": st.sampled_from(["flow", "pair"])}


def _topologies() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.fixed_dictionaries({"kind": st.just("star"), "npus": st.integers(2, 12)}),
        st.fixed_dictionaries({"kind": st.just("clique"), "npus": st.integers(2, 6)}),
        st.fixed_dictionaries({"kind": st.just("tree"), "npus": st.integers(2, 40), "fanout": st.integers(2, 5)}),
        st.fixed_dictionaries({"kind": st.just("binary_tree_star"), "npus": st.integers(2, 24),
                               "hosts_per_leaf": st.integers(1, 4)}),
        st.fixed_dictionaries({"kind": st.just("fat_tree"), "k": st.sampled_from([2, 4, 6])}),
        st.fixed_dictionaries({"kind": st.just("leaf_spine"), "leaves": st.integers(1, 5), "spines": st.integers(1, 4),
                               "hosts_per_leaf": st.integers(1, 3), **TIERED}),
        st.fixed_dictionaries({"kind": st.just("clos3"), "pods": st.integers(1, 3), "tors_per_pod": st.integers(1, 3),
                               "hosts_per_tor": st.integers(1, 2), "aggs_per_pod": st.integers(1, 3),
                               "cores": st.integers(1, 3), **TIERED}),
    )


def _valid(spec: dict[str, Any]) -> bool:
    return not (spec.get("nics_per_host", 1) > spec.get("gpus_per_host", 1))


@settings(max_examples=120, deadline=None)
@given(spec=_topologies().filter(_valid), data=st.data())
def test_fast_routes_equal_the_whole_graphs(spec: dict[str, Any], data: st.DataObject) -> None:
    topo = TOPOLOGY.validate_python({**spec, "bandwidth_gbps": 100})
    net = Network.from_topology(topology_of(topo))
    n = net.hosts
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1, max_size=12))
    for a, b in pairs:
        if a == b:
            continue
        assert net.paths(a, b) == net._graph_paths(a, b), (spec, a, b)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 14), edges=st.lists(st.tuples(st.integers(0, 13), st.integers(0, 13)), max_size=40),
       a=st.integers(0, 13), b=st.integers(0, 13))
def test_the_search_from_both_ends_finds_every_shortest_path(n: int, edges: list[tuple[int, int]], a: int, b: int
                                                             ) -> None:
    """`shortest_paths` against networkx's `all_shortest_paths` on random graphs, connected or not."""
    g = nx.Graph()
    g.add_nodes_from(f"s{i}" for i in range(n))
    g.add_edges_from((f"s{u % n}", f"s{v % n}") for u, v in edges if u % n != v % n)
    src, dst = f"s{a % n}", f"s{b % n}"
    want = sorted(nx.all_shortest_paths(g, src, dst)) if nx.has_path(g, src, dst) else []
    assert shortest_paths(g.adj, src, dst) == want


def test_a_cluster_of_4096_gpus_routes_its_ring_without_a_search_per_pair() -> None:
    """Every host of a 4,096-GPU leaf-spine to the next one: one search per pair of host switches
    (512 pairs of a switch with itself, 512 with the next), not one over the whole graph per pair
    of hosts; spot-checked against the reference."""
    topo = TOPOLOGY.validate_python({"kind": "leaf_spine", "leaves": 32, "spines": 16,
                                                  "hosts_per_leaf": 16, "gpus_per_host": 8, "bandwidth_gbps": 100})
    net = Network.from_topology(topology_of(topo))
    for r in range(net.hosts):
        net.paths(r, (r + 1) % net.hosts)
    assert len(net._between) == 1024
    for r in (0, 7, 127, 4095):
        assert net.paths(r, (r + 1) % net.hosts) == net._graph_paths(r, (r + 1) % net.hosts)
    assert len(net.paths(127, 128)) == 16  # from leaf 0 to leaf 1: one path per spine
    assert len(net.paths(7, 8)) == 1  # two hosts of one leaf
