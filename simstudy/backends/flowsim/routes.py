"""Routes of the whole network and what a message costs on them (`Routes`), and the link orbits a
symmetric collective runs on (`Lanes`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simstudy.backends.network import Network
from simstudy.spec import Congestion

__all__ = ["IntArray", "Lanes", "Route", "Routes"]

IntArray = NDArray[np.int64]
Route = tuple[tuple[int, ...], tuple[int, ...] | None, float, int]


class Routes:
    """Routes of the whole network and what a message costs on them."""

    def __init__(self, net: Network, *, cut_loss: bool = True) -> None:
        self.net = net
        topo = net.topology
        self.native = topo.routing.kind == "dimension_order"
        self.dims = [(d.stride, d.npus, d.topology) for d in topo.routing.dims]
        self.capacity = net.capacity
        #: the capacity a model shares: cut by the links' loss, unless TCP under loss models it, and by
        #: the transport's headers where no TCP model counts them (RoCE: `Transport.goodput`)
        goodput = topo.transport.goodput
        self.effective = [c * goodput * (1.0 - loss) if cut_loss else c * goodput
                          for c, loss in zip(net.capacity, net.loss, strict=True)]
        #: whether a route depends on the flow (ECMP hashing flows on a graph)
        self.per_flow = net.per_flow
        self._cache: dict[tuple[int, int], list[tuple[tuple[int, ...], float, float] | None]] = {}
        self._alike: dict[tuple[int, int], bool] = {}

    def links(self, src: int, dst: int, flow: int = 0) -> tuple[tuple[int, ...], float, float]:
        """(link ids, path latency, smallest capacity) from src to dst for a flow (ECMP picks one
        of the equal-cost paths by the flow, or by the pair)."""
        found = self._cache.get((src, dst))
        if found is None:  # each path measured when a flow first takes it (a pair may have hundreds)
            found = self._cache[(src, dst)] = [None] * len(self.net.paths(src, dst))
        k = 0 if len(found) == 1 else self.net.pick(src, dst, flow, len(found))
        entry = found[k]
        if entry is None:
            path = self.net.paths(src, dst)[k]
            entry = found[k] = (path, *self._cost(path)[:2])
        return entry

    def _cost(self, path: tuple[int, ...]) -> tuple[float, float, float]:
        """A path's latency, narrowest link and narrowest effective link."""
        return (self.net.path_latency(path), min((self.capacity[i] for i in path), default=math.inf),
                min((self.effective[i] for i in path), default=math.inf))

    def alike(self, src: int, dst: int) -> bool:
        """Whether every path from src to dst costs a message alike: the same latency, narrowest
        link and narrowest effective link (then which one ECMP picks changes no time where links
        are not shared)."""
        found = self._alike.get((src, dst))
        if found is None:
            found = self._alike[(src, dst)] = len({self._cost(p) for p in self.net.paths(src, dst)}) <= 1
        return found

    def alone_ns(self, src: int, dst: int, size: int, flow: int = 0) -> int:
        """What a message takes with nothing else on its links, as ASTRA-SIM's congestion-unaware
        model charges it: on ASTRA-SIM dimensions, hops x latency + bytes / bandwidth of the first
        dimension in which the ends differ (`MultiDimTopology::send`), read from the route's links
        in that dimension (a topology.json may give links of one dimension different speeds: then
        the sum of their latencies and the narrowest one); on a graph, the path's latency + bytes /
        its narrowest link (and so between a host and a switch of ASTRA-SIM dimensions)."""
        if self.native and src < self.net.hosts and dst < self.net.hosts:
            for stride, n, kind in self.dims:
                a, b = (src // stride) % n, (dst // stride) % n
                if a != b:
                    if kind == "Ring":
                        cw = (b - a) % n
                        hops = min(cw, n - cw)
                    else:
                        hops = 2 if kind == "Switch" else 1
                    # dimension order: the route's first hops are the ones in this dimension
                    hop_links = self.links(src, dst)[0][:hops]
                    lats = {self.net.latency[i] for i in hop_links}
                    lat = hops * next(iter(lats)) if len(lats) == 1 else sum(self.net.latency[i] for i in hop_links)
                    return int(lat + size / min(self.capacity[i] for i in hop_links))
            return 0
        _, lat, cap = self.links(src, dst, flow)
        return int(lat + size / cap)

    def route(self, src: int, dst: int, size: int, flow: int = 0) -> Route:
        path, lat, _ = self.links(src, dst, flow)
        return path, None, lat, self.alone_ns(src, dst, size, flow)

    def shared_route(self, src: int, dst: int, size: int, flow: int = 0) -> Route:
        """`route` for the models that share links (they do not use the uncontended time)."""
        path, lat, _ = self.links(src, dst, flow)
        return path, None, lat, 0


class Lanes:
    """The link orbits of an ASTRA-SIM network under the symmetry of a collective: rank 0's
    routes on one queue (or one fluid link) per orbit. Per dimension, `rotate` maps rank r to
    r + 1 along it, `xor` to r XOR 1 (a switch or a fully connected dimension only)."""

    def __init__(self, routes: Routes, symmetry: tuple[str, ...], mode: Congestion) -> None:
        self.routes = routes
        #: a route carries its uncontended time (links not shared), or its links with their multiplicity (fluid)
        self.alone = not mode.shares_links
        self.fluid = mode.fluid
        topo = routes.net.topology
        keys: dict[tuple[object, ...], int] = {}
        orbit = np.empty(len(topo.links), dtype=np.int64)
        for i, link in enumerate(topo.links):
            k = link.dim
            stride, n, _ = routes.dims[k]
            if link.src.startswith("h") and link.dst.startswith("h"):
                a = (int(link.src[1:]) // stride) % n
                b = (int(link.dst[1:]) // stride) % n
                key: tuple[object, ...] = (k, "x", a ^ b) if symmetry[k] == "xor" else (k, "r", (b - a) % n)
            else:
                key = (k, "up" if link.src.startswith("h") else "down")
            orbit[i] = keys.setdefault(key, len(keys))
        self.orbit = orbit
        #: the compiled collectives' routes on these lanes (`Comms._core_run`)
        self.core_routes: dict[tuple[int, int, int, int], Any] = {}
        self.capacity = [-1.0] * len(keys)
        self.latency = [-1.0] * len(keys)
        for i, o in enumerate(orbit.tolist()):
            cap, lat = routes.effective[i], routes.net.latency[i]
            if self.capacity[o] >= 0 and (self.capacity[o], self.latency[o]) != (cap, lat):
                # the planner plans lanes only on dimensions whose links are all alike
                raise ValueError(f"link {routes.net.names[i]} differs from the other links of its orbit")
            self.capacity[o], self.latency[o] = cap, lat

    def route(self, src: int, dst: int, size: int, flow: int = 0) -> Route:
        path, lat, _ = self.routes.links(src, dst)
        keys = tuple(int(self.orbit[i]) for i in path)
        alone = self.routes.alone_ns(src, dst, size) if self.alone else 0
        if not self.fluid:
            return keys, None, lat, alone
        uniq: dict[int, int] = {}
        for k in keys:
            uniq[k] = uniq.get(k, 0) + 1
        return tuple(uniq), tuple(uniq.values()), lat, alone

    def links_of(self, used: set[int]) -> IntArray:
        return np.flatnonzero(np.isin(self.orbit, np.fromiter(used, dtype=np.int64, count=len(used))))
