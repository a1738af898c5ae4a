"""flowsim's network: hosts, switches and directed links, routes, and max-min fair rates.

Native ASTRA-SIM dimensions become graphs with the hop counts ASTRA-SIM uses (Ring: the
shorter way round; Switch: host -> switch -> host; FullyConnected: one hop). Several
dimensions are routed dimension by dimension, innermost first. Graph topologies (star, tree,
binary-tree-star, clique, fat-tree) are built link by link and routed by shortest path, with
ECMP over equal-cost paths on fat-trees.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from numpy.typing import NDArray

from simstudy.backends.traffic_build import NetDim
from simstudy.compile.astra_config import GIB
from simstudy.spec import BinaryTreeStar, Clique, FatTree, Star, Tree


def gibps_to_bpns(bandwidth_gibps: float) -> float:
    """ASTRA-SIM's GiB/s to bytes per ns."""
    return bandwidth_gibps * GIB / 1e9


@dataclass
class Network:
    """Directed links (capacity in bytes/ns, latency in ns) and routes between hosts."""

    hosts: int
    capacity: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    ecmp: bool = False
    ring: int = 0
    _links: dict[tuple[object, object], int] = field(default_factory=dict)
    _graph: nx.Graph = field(default_factory=nx.Graph)
    _routes: dict[tuple[int, int], list[tuple[int, ...]]] = field(default_factory=dict)
    _dims: list[tuple[int, int]] = field(default_factory=list)  # (stride, size) per dimension
    _dim_nets: list[Network] = field(default_factory=list)

    def add_link(self, a: object, b: object, bpns: float, latency_ns: float, loss: float = 0.0) -> None:
        """A bidirectional link: two directed links of the same capacity."""
        for u, v in ((a, b), (b, a)):
            if (u, v) in self._links:
                continue
            self._links[(u, v)] = len(self.capacity)
            self.capacity.append(bpns)
            self.latency.append(latency_ns)
            self.loss.append(loss)
            self.names.append(f"{_label(u)}->{_label(v)}")
        self._graph.add_edge(a, b)

    # -- routing -----------------------------------------------------------------------------

    def route(self, src: int, dst: int, flow: int = 0) -> tuple[int, ...]:
        """Link ids from host `src` to host `dst` (ECMP picks a path by hashing the flow)."""
        if self._dims:
            return self._route_dims(src, dst, flow)
        paths = self._routes.get((src, dst))
        if paths is None and self.ring:
            paths = self._routes[(src, dst)] = [self._ring_route(src, dst)]
        if paths is None:
            if self.ecmp:
                node_paths = sorted(nx.all_shortest_paths(self._graph, ("h", src), ("h", dst)), key=str)
            else:
                node_paths = [nx.shortest_path(self._graph, ("h", src), ("h", dst))]
            paths = [tuple(self._links[(u, v)] for u, v in itertools.pairwise(p)) for p in node_paths]
            self._routes[(src, dst)] = paths
        if len(paths) == 1:
            return paths[0]
        return paths[zlib.crc32(f"{src},{dst},{flow}".encode()) % len(paths)]

    def _ring_route(self, a: int, b: int) -> tuple[int, ...]:
        """The shorter way round (clockwise on a tie), as ASTRA-SIM counts ring hops."""
        n = self.ring
        cw = (b - a) % n
        step = 1 if cw <= n - cw else -1
        hops = [(a + k * step) % n for k in range(min(cw, n - cw) + 1)]
        return tuple(self._links[(("h", u), ("h", v))] for u, v in itertools.pairwise(hops))

    def _route_dims(self, src: int, dst: int, flow: int) -> tuple[int, ...]:
        out: list[int] = []
        cur = src
        offset = 0
        for (stride, size), sub in zip(self._dims, self._dim_nets, strict=True):
            a, b = (cur // stride) % size, (dst // stride) % size
            if a != b:
                base = cur - a * stride
                line = self._line_offset(base, stride, size)
                out.extend(offset + line + link for link in sub.route(a, b, flow))
                cur += (b - a) * stride
            offset += len(sub.capacity) * (self.hosts // size)
        return tuple(out)

    def _line_offset(self, base: int, stride: int, size: int) -> int:
        """Index of the line (the ranks that differ only in this dimension) times its link count."""
        low = base % stride
        high = base // (stride * size)
        line = high * stride + low
        sub = self._dim_nets[[s for s, _ in self._dims].index(stride)]
        return line * len(sub.capacity)

    def path_latency(self, path: Sequence[int]) -> float:
        return float(sum(self.latency[link] for link in path))

    # -- rates -------------------------------------------------------------------------------

    def maxmin_rates(self, paths: Sequence[Sequence[int]]) -> NDArray[np.float64]:
        """Max-min fair rates (bytes/ns) of flows sharing links (progressive filling)."""
        n = len(paths)
        rates = np.zeros(n)
        if n == 0:
            return rates
        flow_idx = np.repeat(np.arange(n), [len(p) for p in paths])
        link_idx = np.fromiter(itertools.chain.from_iterable(paths), dtype=np.int64, count=len(flow_idx))
        if len(link_idx) == 0:
            return np.full(n, np.inf)
        links, local = np.unique(link_idx, return_inverse=True)
        cap = np.asarray(self.capacity)[links] * (1.0 - np.asarray(self.loss)[links])
        active = np.ones(n, dtype=bool)
        remaining = cap.copy()
        while active.any():
            on = active[flow_idx]
            counts = np.bincount(local[on], minlength=len(links))
            with np.errstate(divide="ignore", invalid="ignore"):
                share = np.where(counts > 0, remaining / np.maximum(counts, 1), np.inf)
            s = share.min()
            bottleneck = share <= s * (1 + 1e-12)
            frozen = np.zeros(n, dtype=bool)
            frozen[flow_idx[on & bottleneck[local]]] = True
            frozen &= active
            rates[frozen] = s
            used = np.bincount(local[frozen[flow_idx]], minlength=len(links)) * s
            remaining = remaining - used
            active &= ~frozen
        return rates


def _label(node: object) -> str:
    if isinstance(node, tuple):
        return f"{node[0]}{node[1]}" if len(node) == 2 else "".join(str(x) for x in node)
    return str(node)


def _basic(kind: str, n: int, bpns: float, latency: float) -> Network:
    net = Network(hosts=n)
    if kind == "Ring":
        for i in range(n):
            if n == 2 and i == 1:
                break
            net.add_link(("h", i), ("h", (i + 1) % n), bpns, latency)
        net.ring = n
    elif kind == "Switch":
        for i in range(n):
            net.add_link(("h", i), ("s", 0), bpns, latency)
    elif kind == "FullyConnected":
        for i in range(n):
            for j in range(i + 1, n):
                net.add_link(("h", i), ("h", j), bpns, latency)
    else:
        raise ValueError(f"unknown dimension {kind!r}")
    return net


def native_network(dims: Sequence[NetDim]) -> Network:
    """The network of ASTRA-SIM dimensions (innermost first), routed dimension by dimension."""
    if len(dims) == 1:
        d = dims[0]
        return _basic(d.topology, d.npus, gibps_to_bpns(d.bandwidth_gibps), d.latency_ns)
    total = int(np.prod([d.npus for d in dims]))
    net = Network(hosts=total)
    stride = 1
    for d in dims:
        sub = _basic(d.topology, d.npus, gibps_to_bpns(d.bandwidth_gibps), d.latency_ns)
        net._dims.append((stride, d.npus))
        net._dim_nets.append(sub)
        lines = total // d.npus
        for line in range(lines):
            for k in range(len(sub.capacity)):
                net.capacity.append(sub.capacity[k])
                net.latency.append(sub.latency[k])
                net.loss.append(0.0)
                net.names.append(f"d{len(net._dims) - 1}.l{line}.{sub.names[k]}")
        stride *= d.npus
    return net


GraphTopology = Star | Clique | Tree | BinaryTreeStar | FatTree


def graph_network(topo: GraphTopology) -> Network:
    """The link-by-link network of a graph topology."""
    bpns = topo.bandwidth_gbps / 8.0
    lat, loss = topo.latency_ns, topo.loss
    n = topo.total_npus
    net = Network(hosts=n)
    if isinstance(topo, Star):
        for i in range(n):
            net.add_link(("h", i), ("s", 0), bpns, lat, loss)
    elif isinstance(topo, Clique):
        for i in range(n):
            for j in range(i + 1, n):
                net.add_link(("h", i), ("h", j), bpns, lat, loss)
    elif isinstance(topo, Tree | BinaryTreeStar):
        per_leaf = topo.fanout if isinstance(topo, Tree) else topo.hosts_per_leaf
        fanout = topo.fanout if isinstance(topo, Tree) else 2
        level: list[object] = []
        for i in range(n):
            leaf = ("s", 0, i // per_leaf)
            net.add_link(("h", i), leaf, bpns, lat, loss)
            if leaf not in level:
                level.append(leaf)
        depth = 1
        while len(level) > 1:
            parents: list[object] = []
            for j, child in enumerate(level):
                parent = ("s", depth, j // fanout)
                net.add_link(child, parent, bpns, lat, loss)
                if parent not in parents:
                    parents.append(parent)
            level = parents
            depth += 1
    elif isinstance(topo, FatTree):
        k = topo.k
        half = k // 2
        net.ecmp = True
        for i in range(n):
            pod, rest = divmod(i, half * half)
            edge = rest // half
            net.add_link(("h", i), ("e", pod, edge), bpns, lat, loss)
        for pod in range(k):
            for e in range(half):
                for a in range(half):
                    net.add_link(("e", pod, e), ("a", pod, a), bpns, lat, loss)
            for a in range(half):
                for c in range(half):
                    net.add_link(("a", pod, a), ("c", a, c), bpns, lat, loss)
    else:  # pragma: no cover - exhaustive
        raise ValueError(f"unsupported graph topology {topo!r}")
    return net
