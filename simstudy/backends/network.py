"""A bundle's network, routable: the links of its topology file and the routes between hosts.

Built from the bundle's topology.json (or, for input sets without one, from network.yml's
ASTRA-SIM dimensions). Both backends route transfers with it (flowsim to put them on links, both
to bin them per link); flowsim's network models (`flowsim.netmodels`) share its links.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx

from simstudy.compiler.topology_file import NetworkTopology


@dataclass
class Network:
    """Directed links (capacity in bytes/ns, latency in ns) and routes between hosts."""

    topology: NetworkTopology
    capacity: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    _graph: nx.Graph = field(default_factory=nx.Graph)
    _routes: dict[tuple[int, int], list[tuple[int, ...]]] = field(default_factory=dict)
    _switch_of: list[dict[int, str]] = field(default_factory=list)  # per dimension: host -> its line's switch
    #: the fast path of graph routing: each host's one switch, the switches' own graph, and per
    #: pair of switches the links of its shortest paths (`_switch_paths`)
    _attach: dict[int, str] = field(default_factory=dict)
    _switches: nx.Graph = field(default_factory=nx.Graph)
    _between: dict[tuple[str, str], list[tuple[int, ...]] | None] = field(default_factory=dict)
    #: (source, destination) -> the path every flow between them takes, whatever ECMP would pick
    #: (Crux's path selection, `flowsim.sharing.intensity_paths`); empty: ECMP alone
    pinned: dict[tuple[int, int], int] = field(default_factory=dict)
    _switch_ids: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_topology(cls, topology: NetworkTopology) -> Network:
        net = cls(topology)
        for link in topology.links:
            net.capacity.append(link.bytes_per_ns)
            net.latency.append(link.latency_ns)
            net.loss.append(link.loss)
            net.names.append(link.name)
            net._graph.add_edge(link.src, link.dst)
        switches = set(topology.switches)
        net._switches = net._graph.subgraph(switches).copy()
        for h in range(topology.hosts):
            name = f"h{h}"
            around = list(net._graph.adj[name]) if name in net._graph else []
            if len(around) == 1 and around[0] in switches:  # a host on one switch is never a hop of a route
                net._attach[h] = around[0]
        net._switch_of = [{} for _ in topology.routing.dims]
        for link in topology.links:
            if link.dim >= 0 and link.src.startswith("h") and link.dst in switches:
                net._switch_of[link.dim][int(link.src[1:])] = link.dst
        return net

    @property
    def hosts(self) -> int:
        return self.topology.hosts

    @cached_property
    def buckets(self) -> dict[int, tuple[float, float]]:
        """The links behind a token bucket: link id -> (token rate in bytes/ns, bucket in bytes);
        one pass over the links, kept (the backend and its model both ask)."""
        return {i: (link.tbf_bytes_per_ns, float(link.tbf_burst_bytes))
                for i, link in enumerate(self.topology.links) if link.tbf_bytes_per_ns > 0}

    @property
    def kind(self) -> str:
        return self.topology.kind

    def endpoint_name(self, endpoint: int) -> str:
        """The node a transfer's endpoint names: rank r is host `h<r>`, and `hosts + i` the topology's
        i-th switch (a switch that takes part in a transfer: one that aggregates, see
        `flowsim.in_network`)."""
        if 0 <= endpoint < self.hosts:
            return f"h{endpoint}"
        return self.topology.switches[endpoint - self.hosts]

    def switch_endpoint(self, name: str) -> int:
        """The endpoint id of switch `name` (see `endpoint_name`)."""
        if not self._switch_ids:
            self._switch_ids.update((s, self.hosts + i) for i, s in enumerate(self.topology.switches))
        return self._switch_ids[name]

    # -- routing -----------------------------------------------------------------------------

    @property
    def per_flow(self) -> bool:
        """Whether routes depend on the flow (ECMP hashing flows), not only on the two ends."""
        return self.topology.routing.per_flow

    def route(self, src: int, dst: int, flow: int = 0) -> tuple[int, ...]:
        """Link ids from host `src` to host `dst` (ECMP picks a path by hashing the flow, or only
        the two ends when the routing hashes pairs)."""
        paths = self.paths(src, dst)
        if len(paths) == 1:
            return paths[0]
        return paths[self.pick(src, dst, flow, len(paths))]

    def paths(self, src: int, dst: int) -> list[tuple[int, ...]]:
        """Every path a transfer from `src` to `dst` may take (one unless ECMP has a choice)."""
        paths = self._routes.get((src, dst))
        if paths is None:
            paths = self._routes[(src, dst)] = self._paths(src, dst)
        return paths

    def pick(self, src: int, dst: int, flow: int, n: int) -> int:
        """Which of `n` equal-cost paths ECMP gives a flow: a hash of (source, destination, flow),
        with flow 0 for every flow when the routing hashes host pairs; a pinned pair's path for every flow."""
        if self.pinned:
            found = self.pinned.get((src, dst))
            if found is not None:
                return found
        return zlib.crc32(f"{src},{dst},{flow if self.per_flow else 0}".encode()) % n

    def _paths(self, src: int, dst: int) -> list[tuple[int, ...]]:
        routing = self.topology.routing
        if src >= self.hosts or dst >= self.hosts:  # a switch is an end: the graph's shortest paths
            return self._node_paths(self.endpoint_name(src), self.endpoint_name(dst))
        if routing.kind == "dimension_order":
            return [self._dims_route(src, dst)]
        sa, sb = self._attach.get(src), self._attach.get(dst)
        if sa is not None and sb is not None and src != dst:
            between = self._switch_paths(sa, sb)
            if between is not None:
                link = self.topology.link_id
                first, last = link(f"h{src}", sa), link(sb, f"h{dst}")
                return [(first, *p, last) for p in between]
        return self._graph_paths(src, dst)

    def _switch_paths(self, sa: str, sb: str) -> list[tuple[int, ...]] | None:
        """The links of the shortest paths from switch `sa` to switch `sb` (of every one, in the order
        `_graph_paths` sorts them, with ECMP; of the only one without), once per pair of switches:
        a host on one switch is the first or last hop of every route through it, so the routes of
        all the hosts of two switches are theirs (`_graph_paths` is the reference), found by a
        search from both ends (`shortest_paths`). None where the
        routing has no ECMP and several shortest paths: then which one networkx returns decides."""
        key = (sa, sb)
        if key in self._between:
            return self._between[key]
        node_paths = shortest_paths(self._switches.adj, sa, sb)
        if not node_paths:
            raise nx.NetworkXNoPath(f"no path from {sa} to {sb}")
        found: list[tuple[int, ...]] | None = None
        if self.topology.routing.ecmp or len(node_paths) == 1:
            link = self.topology.link_id
            found = [tuple(link(u, v) for u, v in itertools.pairwise(p)) for p in sorted(node_paths)]
        self._between[key] = found
        return found

    def _graph_paths(self, src: int, dst: int) -> list[tuple[int, ...]]:
        """The routes of a graph found on the whole graph, host to host (the reference)."""
        return self._node_paths(f"h{src}", f"h{dst}")

    def _node_paths(self, a: str, b: str) -> list[tuple[int, ...]]:
        """The shortest paths between two nodes of the graph (every one, sorted, with ECMP)."""
        routing = self.topology.routing
        if routing.ecmp:
            node_paths = sorted(nx.all_shortest_paths(self._graph, a, b))
        else:
            node_paths = [nx.shortest_path(self._graph, a, b)]
        link = self.topology.link_id
        return [tuple(link(u, v) for u, v in itertools.pairwise(p)) for p in node_paths]

    def _dims_route(self, src: int, dst: int) -> tuple[int, ...]:
        link = self.topology.link_id
        out: list[int] = []
        cur = src
        for k, d in enumerate(self.topology.routing.dims):
            a, b = (cur // d.stride) % d.npus, (dst // d.stride) % d.npus
            if a == b:
                continue
            base = cur - a * d.stride
            if d.topology == "Ring":
                n = d.npus
                cw = (b - a) % n
                step = 1 if cw <= n - cw else -1
                hops = [base + ((a + i * step) % n) * d.stride for i in range(min(cw, n - cw) + 1)]
                out.extend(link(f"h{u}", f"h{v}") for u, v in itertools.pairwise(hops))
            elif d.topology == "Switch":
                sw = self._switch_of[k][cur]
                out += [link(f"h{cur}", sw), link(sw, f"h{base + b * d.stride}")]
            else:
                out.append(link(f"h{cur}", f"h{base + b * d.stride}"))
            cur = base + b * d.stride
        return tuple(out)

    def path_latency(self, path: Sequence[int]) -> float:
        return float(sum(self.latency[link] for link in path))


def shortest_paths(adj: Mapping[str, Iterable[str]], a: str, b: str) -> list[list[str]]:
    """Every shortest path from `a` to `b` (nodes, in sorted order; none where there is none), by a
    breadth-first search from both ends that stops where they meet: each pair's search sees the
    nodes around its ends, not the whole graph (on a 3-tier Clos of 16,384 GPUs a search of the
    whole graph from each source switch was 28 s of the run). The reference: networkx's
    `all_shortest_paths` (`Network._graph_paths`), which a property test compares."""
    if a == b:
        return [[a]]
    dist = ({a: 0}, {b: 0})
    # per side, each node's neighbours one step nearer that side's end (its predecessors there)
    back: tuple[dict[str, list[str]], dict[str, list[str]]] = ({a: []}, {b: []})
    frontier = ([a], [b])
    depth = [0, 0]
    meet: int | None = None
    while meet is None:
        side = 0 if len(frontier[0]) <= len(frontier[1]) else 1
        if not frontier[side]:
            return []
        seen, other, pred = dist[side], dist[1 - side], back[side]
        depth[side] += 1
        d = depth[side]
        nxt: list[str] = []
        for u in frontier[side]:
            for v in adj[u]:
                known = seen.get(v)
                if known is None:
                    seen[v] = d
                    pred[v] = [u]
                    nxt.append(v)
                elif known == d:
                    pred[v].append(u)
        frontier[side][:] = nxt
        touching = [seen[v] + other[v] for v in nxt if v in other]
        if touching:
            meet = min(touching)
    # every shortest path crosses exactly one node at distance h from a (and meet - h from b), both
    # within what each side has searched
    h = max(0, meet - depth[1])
    middle = sorted(v for v, k in dist[0].items() if k == h and dist[1].get(v) == meet - h)
    paths: list[list[str]] = []
    for m in middle:
        heads = _walk(back[0], m)
        tails = _walk(back[1], m)
        paths.extend(head[::-1] + tail[1:] for head in heads for tail in tails)
    return sorted(paths)


def _walk(pred: dict[str, list[str]], start: str) -> list[list[str]]:
    """Every chain from `start` through `pred` to the node that has none (the search's end)."""
    done: list[list[str]] = []
    stack = [[start]]
    while stack:
        chain = stack.pop()
        before = pred[chain[-1]]
        if not before:
            done.append(chain)
        else:
            stack.extend([*chain, p] for p in before)
    return done
