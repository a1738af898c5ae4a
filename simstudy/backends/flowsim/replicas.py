"""Ranks that stand for others: two shortcuts that simulate some ranks and take the others' times
from them, each kept beside the full path it replaces (`Shortcuts`) and proven against it by
`tests/backends/test_replicas.py` and `test_fast_paths.py`.

* **Identical ranks** (`identical_ranks`): every rank runs rank 0's trace, with only collectives of
  every rank that every rank finishes at once: rank 0 is simulated for all.
* **Replicas** (`replica_plan`): a data-parallel job whose replicas run alike (the compiler's
  `Bundle.replicas`, checked on the graph: `compiler.replicas`) on a network that is the same
  when every rank moves one replica on (ASTRA-SIM's dimensions, mapped onto themselves), in
  `unaware` (no link is shared, so no replica slows another). Replica 0 is simulated. Not on a
  graph: on a 3-tier Clos a data-parallel ring crosses a ToR every few members, so its members
  finish apart and the replicas would not stay alike.

  A collective of one rank of every replica (a data-parallel group) is simulated whole when its
  replica-0 member issues it: the others issue it at the same instant, by symmetry. It must finish
  every member at once, so that the replicas stay alike. Its timing alone says so
  (`Comms._launch`, hence the `isolated` shortcut); where it does not, the run starts again
  without replicas (`system.NotAlike`). No algorithm whose trees take turns across collectives
  (the double binary tree: replica 0 alone would take other turns).

  Everything else replica 0 runs (its tensor- and pipeline-parallel collectives, its sends) every
  other replica runs on its own ranks at the same times. Its transfers are counted once per
  replica and its rows copied with their ranks moved (`ReplicaSink`); its ranks' spans and totals
  are copied too (the engine, `_spans`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simstudy.backends.patterns import uses_trees
from simstudy.backends.traffic_build import COLLECTIVE_KIND, WorkloadInfo
from simstudy.backends.traffic_out import TrafficOutput, TrafficSink
from simstudy.chakra import CollectiveType, NodeType
from simstudy.compiler.attributes import in_network_of

IntArray = NDArray[np.int64]
#: counts' arrays spread over the replicas kept for their next use (a collective's timing counts the
#: same arrays every time it is found again)
SPREAD_KEPT = 4096
#: symmetric(kind, members, size): whether every member of the collective finishes at once
Symmetric = Callable[[str, tuple[int, ...], int], bool]


def identical_ranks(info: WorkloadInfo, symmetric: Symmetric) -> bool:
    """Whether every rank runs the same as rank 0 from start to end: one trace for all (the same
    decoded list), no point-to-point transfers, and only collectives of every rank, in order,
    that every rank finishes at once (`symmetric(kind, members, size)`), none of them in-network."""
    first = info.nodes[0]
    if any(nodes is not first for nodes in info.nodes):
        return False
    everyone = tuple(range(info.npus))
    for n in first:
        if n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
            return False
        if n.type != NodeType.COMM_COLL_NODE:
            continue
        if in_network_of(n) is not None:  # the switches' transfers are no rank's
            return False
        kind = COLLECTIVE_KIND.get(CollectiveType(int(n.get("comm_type", 0))))
        if kind is None:
            continue
        if tuple(info.members(n, 0)) != everyone or not symmetric(kind, everyone, int(n.get("comm_size", 0))):
            return False
    return True


@dataclass(frozen=True, eq=False)
class Replicas:
    """Replicas that run alike: `ranks[k, i]` is the i-th rank of replica k (replica 0 is
    simulated); `whole` the members of every collective simulated whole (one rank per replica)."""

    ranks: IntArray
    whole: frozenset[tuple[int, ...]] = field(repr=False)

    @property
    def count(self) -> int:
        return int(self.ranks.shape[0])

    @property
    def simulated(self) -> list[int]:
        return [int(r) for r in self.ranks[0]]

    @cached_property
    def _at(self) -> IntArray:
        """Each rank of replica 0's place in it (-1: another replica's)."""
        at = np.full(self.ranks.size, -1, dtype=np.int64)
        at[self.ranks[0]] = np.arange(self.ranks.shape[1])
        return at

    def images(self, ranks: IntArray) -> IntArray:
        """Every replica's ranks for replica 0's `ranks` (replica by replica: shape (count, len))."""
        out: IntArray = self.ranks[:, self._at[ranks]]
        return out


def replica_plan(info: WorkloadInfo) -> Replicas | None:
    """The replicas to simulate one of (see the module docstring), or None: the bundle declares none,
    the network is not the same one replica on, or replica 0 sends to another replica, runs a
    collective that is neither its own nor one rank of every replica (or a broadcast or an
    in-network one of those), or one whose trees take turns."""
    ranks = info.bundle.replicas
    if ranks is None or ranks.size != info.npus:
        return None
    if info.topology.routing.kind != "dimension_order":  # a graph: routes not checked (see the docstring)
        return None
    alike: dict[int, set[tuple[float, float, float]]] = {}  # every link of a dimension alike
    for link in info.topology.links:
        alike.setdefault(link.dim, set()).add((link.bytes_per_ns, link.latency_ns, link.loss))
    sigma = np.empty(info.npus, dtype=np.int64)
    sigma[ranks] = np.roll(ranks, -1, axis=0)
    if any(len(v) > 1 for v in alike.values()) or not _moves_network(sigma, [(d.topology, d.npus) for d in info.dims]):
        return None
    first = set(ranks[0].tolist())
    orbit_of = {int(r): frozenset(ranks[:, i].tolist()) for i, r in enumerate(ranks[0])}
    whole: set[tuple[int, ...]] = set()
    seen: dict[tuple[int, str, str | None], bool] = {}  # (rank, group, kind) -> its own (else: whole)
    for r in ranks[0].tolist():
        for n in info.nodes[r]:
            if n.type == NodeType.COMM_SEND_NODE or n.type == NodeType.COMM_RECV_NODE:
                if int(n.get("comm_dst" if n.type == NodeType.COMM_SEND_NODE else "comm_src", -1)) not in first:
                    return None
                continue
            if n.type != NodeType.COMM_COLL_NODE:
                continue
            members = info.members(n, r)
            kind = COLLECTIVE_KIND.get(CollectiveType(int(n.get("comm_type", 0))))
            key = (r, str(n.get("pg_name", "") or ""), kind)
            own = seen.get(key)
            if own is None:
                own = seen[key] = first.issuperset(members)
                if in_network_of(n) is not None or (
                        kind is not None and uses_trees(info.collectives, kind, members, len(members) < info.npus)):
                    return None
                if not own and (frozenset(members) != orbit_of[r] or kind is None):
                    return None
            if not own:
                whole.add(members)
    return Replicas(ranks, frozenset(whole))


def _moves_network(sigma: IntArray, dims: list[tuple[str, int]]) -> bool:
    """Whether the rank permutation `sigma` maps ASTRA-SIM's native network (dimension types and
    sizes, innermost first; every link of a dimension alike) onto itself: each coordinate of a
    rank's image depends on the same coordinate of the rank only, through a map of that dimension
    onto itself (any one-to-one map of a switch or fully connected dimension, a rotation or
    reflection of a ring)."""
    ranks = np.arange(len(sigma), dtype=np.int64)
    stride = 1
    for kind, size in dims:
        x, y = (ranks // stride) % size, (sigma // stride) % size
        stride *= size
        f = np.full(size, -1, dtype=np.int64)
        f[x] = y
        if not (f[x] == y).all() or not np.array_equal(np.sort(f), np.arange(size)):
            return False
        if kind.lower() == "ring":
            turn, flip = (f - np.arange(size)) % size, (f + np.arange(size)) % size
            if not ((turn == turn[0]).all() or (flip == flip[0]).all()):
                return False
    return True


class ReplicaSink:
    """A sink that takes replica 0's transfers for every replica (`Replicas`): a transfer between
    two ranks of replica 0 is every replica's, moved to its ranks; a transfer of a collective
    simulated whole (between replicas) is taken once. Counts are told as rows are: `count`s of
    replica-0 ranks only are every replica's."""

    def __init__(self, sink: TrafficSink, replicas: Replicas) -> None:
        self.sink = sink
        self.replicas = replicas
        self.mode = sink.mode
        self.keeps_rows = sink.keeps_rows
        self._first = np.zeros(len(sink.sent), dtype=bool)
        self._first[replicas.ranks[0]] = True
        #: each count's arrays for every replica, by the identity of replica 0's (held with them)
        self._spread: dict[tuple[int, int], tuple[IntArray, Any, IntArray, NDArray[np.float64]]] = {}

    @property
    def transfers(self) -> int:
        return self.sink.transfers

    def add(self, op: Any, iteration: Any, t_start_ns: Any, t_end_ns: Any, src: Any, dst: Any, nbytes: Any,
            flow: Any, chunk: Any, step: Any) -> None:
        self.sink.add(op, iteration, t_start_ns, t_end_ns, src, dst, nbytes, flow, chunk, step)
        src = np.atleast_1d(np.asarray(src, dtype=np.int64))
        dst = np.broadcast_to(np.asarray(dst, dtype=np.int64), src.shape)
        own = np.flatnonzero(self._first[src] & self._first[dst])
        if not len(own):
            return
        cols = [_pick(c, own, len(src)) for c in (op, iteration, t_start_ns, t_end_ns, nbytes, flow, chunk, step)]
        s, d = self.replicas.images(src[own]), self.replicas.images(dst[own])
        for k in range(1, self.replicas.count):
            self.sink.add(cols[0], cols[1], cols[2], cols[3], s[k], d[k], *cols[4:])

    def count(self, transfers: int, total_bytes: int, ranks: IntArray, sent: NDArray[np.float64]) -> None:
        if not self._first[ranks].all():
            self.sink.count(transfers, total_bytes, ranks, sent)
            return
        key = (id(ranks), id(sent))
        spread = self._spread.get(key)
        if spread is None or spread[0] is not ranks or spread[1] is not sent:
            if len(self._spread) >= SPREAD_KEPT:
                self._spread.clear()
            n = self.replicas.count
            spread = self._spread[key] = (ranks, sent, self.replicas.images(ranks).ravel(), np.tile(sent, n))
        n = self.replicas.count
        self.sink.count(transfers * n, total_bytes * n, spread[2], spread[3])

    def close(self) -> TrafficOutput:
        return self.sink.close()


def _pick(col: Any, at: IntArray, n: int) -> Any:
    """`col[at]` where `col` is a column of n values, else `col` (one value for all)."""
    if isinstance(col, np.ndarray) and col.ndim == 1 and len(col) == n:
        return col[at]
    return col
