"""A bundle's network, routable: the links of its topology file and the routes between hosts.

Built from the bundle's topology.json (or, for input sets without one, from network.yml's
ASTRA-SIM dimensions). Both backends route transfers with it; flowsim also shares link
bandwidth on it.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from numpy.typing import NDArray

from simstudy.compile.topology_file import NativeDim, NetworkTopology, native_topology


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
        net._switch_of = [{} for _ in topology.routing.dims]
        for link in topology.links:
            if link.dim >= 0 and link.src.startswith("h") and link.dst in switches:
                net._switch_of[link.dim][int(link.src[1:])] = link.dst
        return net

    @classmethod
    def from_dims(cls, dims: Sequence[NativeDim]) -> Network:
        return cls.from_topology(native_topology(dims))

    @property
    def hosts(self) -> int:
        return self.topology.hosts

    @property
    def kind(self) -> str:
        return self.topology.kind

    # -- routing -----------------------------------------------------------------------------

    def route(self, src: int, dst: int, flow: int = 0) -> tuple[int, ...]:
        """Link ids from host `src` to host `dst` (ECMP picks a path by hashing the flow)."""
        paths = self._routes.get((src, dst))
        if paths is None:
            paths = self._routes[(src, dst)] = self._paths(src, dst)
        if len(paths) == 1:
            return paths[0]
        return paths[zlib.crc32(f"{src},{dst},{flow}".encode()) % len(paths)]

    def _paths(self, src: int, dst: int) -> list[tuple[int, ...]]:
        routing = self.topology.routing
        if routing.kind == "dimension_order":
            return [self._dims_route(src, dst)]
        a, b = f"h{src}", f"h{dst}"
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
