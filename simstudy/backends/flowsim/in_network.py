"""flowsim's in-network aggregation: all-reduces that the switches compute (SwitchML, ATP).

A collective node that carries `simstudy.in_network.slots` (`compiler.attributes.in_network_of`)
is not run by the system layer's algorithms but here, on the same network model (every message goes
through `Comms.send`, so it shares links with everything else):

* **the job's tree** (`job_tree`), found on the bundle's topology: each worker's first switch is
  the nearest switch that is not inside its host (a ToR; a star's or a switch's only switch;
  `HOST_TIERS` are the links of a host's own switch and NICs, which only forward); when the workers
  have several first switches, the top is a switch nearest to all of them (a spine of a
  leaf-spine, a core of a three-tier Clos, an aggregation switch when the job stays in one pod), and
  each switch below it climbs to a neighbour one hop nearer the top. Where there is a choice (which
  spine or core, which aggregation switch of a pod), the job's ECMP hash picks it, the same
  position for every switch of one level, so that one pod's ToRs meet in one aggregation switch.
* **chunks**: a worker's gradient of S bytes is ceil(S / chunk) chunks. A worker sends its chunks
  to its first switch one after the other, each once the previous one has arrived (a window of one
  chunk per hop, for every hop below); a switch that has every contribution of a chunk (its
  workers' and its child switches') sends one partial sum up, and the top sends the sum down:
  every switch passes it to each of its children. Each worker's link carries the gradient once up
  and once down.
* **slots**: a switch holds at most `slots` chunks at once, shared by every job whose tree holds
  it. A chunk takes one slot in every switch of its job's tree when its first worker is about to
  send it (once that worker's previous chunk is on the wire) and frees them when its sum has
  reached every worker; a chunk that finds a switch full waits, and waiting chunks get their slots
  in the order they asked for them (a chunk that fits goes before one that does not).

A transfer's ends are ranks and switches: switch i of the topology is endpoint `hosts + i`
(`Network.endpoint_name`); a row's `step` is its hop: 0 from a worker, up to 2 x the tree's height - 1
into a worker.
"""

from __future__ import annotations

import zlib
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simstudy.backends.base import BackendError
from simstudy.backends.flowsim.comms import Comms
from simstudy.backends.flowsim.netmodels import Msg
from simstudy.backends.network import Network
from simstudy.chakra import Node
from simstudy.compiler.attributes import FLOWS_PER_COLLECTIVE, NodeMeta, node_meta

#: Link tiers inside a host (its GPUs' switch and its NICs): their switches forward, they do not add.
HOST_TIERS = ("intra_host", "nic")


@dataclass(frozen=True)
class Tree:
    """One job's aggregation tree, as endpoint ids: each worker's first switch, each switch's parent
    (-1 at the top) and children (its workers, then its child switches), and how deep each switch
    sits below the top."""

    first: dict[int, int]
    parent: dict[int, int]
    children: dict[int, tuple[int, ...]]
    depth: dict[int, int]
    #: every switch of the tree, and the hops from the deepest worker up to the top
    switches: tuple[int, ...] = field(init=False)
    height: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "switches", tuple(self.parent))
        object.__setattr__(self, "height", max(self.depth[s] for s in self.first.values()) + 1)


def _job_hash(job: int) -> int:
    return zlib.crc32(f"in_network,{job}".encode())


class Trees:
    """The aggregation trees of a network's jobs (see the module's description), found once per job and workers."""

    def __init__(self, net: Network) -> None:
        self.net = net
        adj: dict[str, set[str]] = defaultdict(set)
        adders: set[str] = set()
        switches = set(net.topology.switches)
        for link in net.topology.links:
            adj[link.src].add(link.dst)
            for end in (link.src, link.dst):
                if end in switches and link.tier not in HOST_TIERS:
                    adders.add(end)
        self.adj = {n: sorted(v) for n, v in adj.items()}
        self.adders = adders
        self.switches = switches
        self.found: dict[tuple[tuple[int, ...], int], Tree] = {}

    def tree(self, members: tuple[int, ...], job: int) -> Tree:
        key = (members, job)
        found = self.found.get(key)
        if found is None:
            found = self.found[key] = self._tree(members, job)
        return found

    def _first(self, worker: int, pick: int) -> str:
        """The nearest adding switch of a worker, through its host's own switches only."""
        seen = {f"h{worker}"}
        frontier = [f"h{worker}"]
        while frontier:
            found: list[str] = []
            nxt: list[str] = []
            for u in frontier:
                for v in self.adj.get(u, ()):
                    if v in seen or v not in self.switches:
                        continue
                    seen.add(v)
                    (found if v in self.adders else nxt).append(v)
            if found:
                found.sort()
                return found[pick % len(found)]
            frontier = nxt
        raise BackendError(f"in-network aggregation: rank {worker} reaches no switch that aggregates "
                           f"(topology {self.net.kind})")

    def _distances(self, start: str) -> dict[str, int]:
        """Hops from `start` to every adding switch, over adding switches only."""
        dist = {start: 0}
        queue = deque([start])
        while queue:
            u = queue.popleft()
            for v in self.adj.get(u, ()):
                if v in self.adders and v not in dist:
                    dist[v] = dist[u] + 1
                    queue.append(v)
        return dist

    def _tree(self, members: tuple[int, ...], job: int) -> Tree:
        pick = _job_hash(job)
        first = {w: self._first(w, pick) for w in members}
        bottoms = sorted(set(first.values()))
        if len(bottoms) == 1:
            top = bottoms[0]
        else:
            dists = [self._distances(b) for b in bottoms]
            reach = {s: max(d[s] for d in dists) for s in dists[0] if all(s in d for d in dists)}
            if not reach:
                raise BackendError(f"in-network aggregation: no switch joins the first switches {bottoms} of the "
                                   f"job's ranks (topology {self.net.kind})")
            best = min(reach.values())
            nearest = sorted(s for s, d in reach.items() if d == best)
            top = nearest[pick % len(nearest)]
        to_top = self._distances(top)
        parent: dict[str, str | None] = {top: None}
        for b in bottoms:
            x = b
            while x not in parent:
                up = [y for y in self.adj[x] if y in self.adders and to_top.get(y) == to_top[x] - 1]
                parent[x] = up[pick % len(up)]
                x = up[pick % len(up)]
        ids = self.net.switch_endpoint
        children: dict[int, list[int]] = {ids(s): [] for s in parent}
        for w in members:
            children[ids(first[w])].append(w)
        for s, p in parent.items():
            if p is not None:
                children[ids(p)].append(ids(s))
        return Tree({w: ids(s) for w, s in first.items()},
                     {ids(s): -1 if p is None else ids(p) for s, p in parent.items()},
                     {s: tuple(c) for s, c in children.items()}, {ids(s): to_top[s] for s in parent})


@dataclass(eq=False)
class _Worker:
    rank: int
    node: Node
    issued: int
    #: the next chunk it sends, and the sums it has received
    next: int = 0
    got: int = 0


@dataclass(eq=False)
class _Hop:
    """One sender -> receiver hop of an aggregation: a chunk on the wire at a time, the rest queued."""

    busy: bool = False
    queue: deque[tuple[int, bool]] = field(default_factory=deque)


@dataclass(eq=False)
class _Aggregation:
    """One in-network all-reduce of a job: its tree, chunks, workers so far and chunks in flight."""

    tree: Tree
    members: tuple[int, ...]
    meta: NodeMeta
    sizes: list[int]
    workers: dict[int, _Worker] = field(default_factory=dict)
    #: chunks 0..requested-1 have asked for slots, 0..granted-1 hold them
    requested: int = 0
    granted: int = 0
    partial: dict[tuple[int, int], int] = field(default_factory=dict)
    delivered: dict[int, int] = field(default_factory=dict)
    hops: dict[tuple[int, int], _Hop] = field(default_factory=dict)

    def hop(self, src: int, dst: int) -> _Hop:
        found = self.hops.get((src, dst))
        if found is None:
            found = self.hops[(src, dst)] = _Hop()
        return found


def chunk_sizes(size: int, chunk_bytes: int) -> list[int]:
    """A worker's gradient of `size` bytes as chunks of `chunk_bytes`: ceil(size / chunk) of them, the
    last one what is left (one empty chunk for an empty gradient)."""
    chunk = max(1, chunk_bytes)
    return [min(chunk, size - c * chunk) if size else 0 for c in range(max(1, -(-size // chunk)))]


#: emit(meta, t_send, t_arrive, src, dst, bytes, flow, chunk, step) of one transfer
Emit = Callable[[NodeMeta, int, int, int, int, int, int, int, int], None]
#: done(rank, node, issued): the rank's node has every chunk's sum
Done = Callable[[int, Node, int], None]


class InNetwork:
    """Every in-network all-reduce of a run, on the run's communication layer."""

    def __init__(self, comms: Comms, net: Network, emit: Emit, done: Done) -> None:
        self.comms = comms
        self.trees = Trees(net)
        self.emit = emit
        self.done = done
        self.free: dict[int, int] = {}
        self.waiting: list[_Aggregation] = []
        self.seen: dict[tuple[tuple[int, ...], int], int] = defaultdict(int)
        self.open: dict[tuple[tuple[int, ...], int], _Aggregation] = {}

    def details(self) -> dict[str, Any]:
        """What run.json's details add: the names of the switches that were ends of transfers, by endpoint
        id (nothing when no all-reduce ran in the network)."""
        used = sorted({s for tree in self.trees.found.values() for s in tree.switches})
        net = self.trees.net
        return {"switch_endpoints": {str(s): net.endpoint_name(s) for s in used}} if used else {}

    def issue(self, rank: int, node: Node, members: tuple[int, ...], slots: int, chunk_bytes: int) -> None:
        """Rank `rank` issues its node of an in-network all-reduce over `members` (the k-th it issues on
        them meets the k-th of the others)."""
        index = self.seen[(members, rank)]
        self.seen[(members, rank)] = index + 1
        key = (members, index)
        agg = self.open.get(key)
        now = self.comms.sched.now
        if agg is None:
            meta = node_meta(node)
            agg = self.open[key] = _Aggregation(self.trees.tree(members, meta.job), members, meta,
                                                chunk_sizes(int(node.get("comm_size", 0)), chunk_bytes))
            for s in agg.tree.switches:
                self.free.setdefault(s, slots)
        worker = agg.workers[rank] = _Worker(rank, node, now)
        if len(agg.workers) == len(members):
            del self.open[key]
        self._advance(agg, worker)
        self._grant()

    # -- slots ---------------------------------------------------------------------------------

    def _advance(self, agg: _Aggregation, w: _Worker) -> None:
        """A worker hands its next granted chunk to its first hop (one waits behind the one on the
        wire), or asks for the next chunk's slots."""
        first = agg.tree.first[w.rank]
        hop = agg.hop(w.rank, first)
        while w.next < len(agg.sizes) and not hop.queue:
            if w.next < agg.granted:
                self._push(agg, w.rank, first, w.next, True)
                w.next += 1
                continue
            if w.next == agg.requested:
                agg.requested += 1
                self.waiting.append(agg)
            break

    def _grant(self) -> None:
        """Give waiting chunks their slots, in the order they asked, each that fits; let their workers go on."""
        i = 0
        while i < len(self.waiting):
            agg = self.waiting[i]
            switches = agg.tree.switches
            if any(self.free[s] <= 0 for s in switches):
                i += 1
                continue
            for s in switches:
                self.free[s] -= 1
            del self.waiting[i]
            agg.granted += 1
            for w in agg.workers.values():
                self._advance(agg, w)

    # -- messages ------------------------------------------------------------------------------

    def _push(self, agg: _Aggregation, src: int, dst: int, chunk: int, up: bool) -> None:
        hop = agg.hop(src, dst)
        if hop.busy:
            hop.queue.append((chunk, up))
        else:
            self._send(agg, hop, src, dst, chunk, up)

    def _send(self, agg: _Aggregation, hop: _Hop, src: int, dst: int, chunk: int, up: bool) -> None:
        hop.busy = True
        self.comms.send(src, dst, agg.sizes[chunk], self._arrived, (agg, chunk, up),
                        flow=agg.meta.flow * FLOWS_PER_COLLECTIVE + chunk)

    def _arrived(self, msg: Msg) -> None:
        agg, chunk, up = msg.ctx
        tree = agg.tree
        src, dst = msg.src, msg.dst
        now = self.comms.sched.now
        sender = tree.depth[src] if src in tree.depth else tree.depth[tree.first[src]] + 1
        step = tree.height - sender if up else tree.height + tree.depth[src]
        self.emit(agg.meta, msg.t_send, now, src, dst, msg.size, agg.meta.flow * FLOWS_PER_COLLECTIVE + chunk,
                  chunk, step)
        hop = agg.hop(src, dst)
        hop.busy = False
        if hop.queue:
            self._send(agg, hop, src, dst, *hop.queue.popleft())
        if up:
            w = agg.workers.get(src)
            if w is not None:
                self._advance(agg, w)
            key = (dst, chunk)
            have = agg.partial.get(key, 0) + 1
            if have < len(tree.children[dst]):
                agg.partial[key] = have
            else:
                agg.partial.pop(key, None)
                parent = tree.parent[dst]
                if parent >= 0:
                    self._push(agg, dst, parent, chunk, True)
                else:
                    self._down(agg, dst, chunk)
        elif dst in tree.children:
            self._down(agg, dst, chunk)
        else:
            self._delivered(agg, agg.workers[dst], chunk)
        self._grant()

    def _down(self, agg: _Aggregation, switch: int, chunk: int) -> None:
        for child in agg.tree.children[switch]:
            self._push(agg, switch, child, chunk, False)

    def _delivered(self, agg: _Aggregation, w: _Worker, chunk: int) -> None:
        w.got += 1
        if w.got == len(agg.sizes):
            self.done(w.rank, w.node, w.issued)
        got = agg.delivered.get(chunk, 0) + 1
        if got < len(agg.members):
            agg.delivered[chunk] = got
            return
        agg.delivered.pop(chunk, None)
        for s in agg.tree.switches:
            self.free[s] += 1
