"""flowsim's discrete-event engine: ASTRA-SIM's workload layer over flowsim's communication layer.

Per rank, as ASTRA-SIM's workload layer does: a node is issued once its data and control
dependencies are done, dependency-free nodes in ascending id order, with at most one compute
node and one communication node (collective or send; receives are exempt) in flight. Compute
nodes take `duration_micros` x 1000 ns (0 -> 1 ns), or on shared hosts (`system.host_cores`) that
much work at the speed their host's cores give them (`hosts`). A collective starts once every member of its
group has issued it (the k-th collective a rank issues on a group meets the k-th of the others)
and runs through `comms` (ASTRA-SIM's system layer on the chosen network model); each member's
node completes when that member has finished its part. A send is one message on the same
network; a receive completes when its message (same source, destination, tag and size) has
arrived. Events are ordered by (time, sequence), so runs are deterministic.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from array import array
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from simstudy.backends.base import BackendError
from simstudy.backends.flowsim.comms import Comms
from simstudy.backends.flowsim.hosts import SharedHosts
from simstudy.backends.flowsim.in_network import InNetwork, chunk_sizes
from simstudy.backends.flowsim.netmodels import Msg, NetModel, core_scheduler
from simstudy.backends.flowsim.replicas import Replicas
from simstudy.backends.flowsim.sched import TICK, Scheduler
from simstudy.backends.flowsim.system import Planner
from simstudy.backends.flowsim.tables import EMPTY, Table, rank_tables
from simstudy.backends.network import Network
from simstudy.backends.patterns import (
    broadcast_messages,
    broadcast_root,
    first_member_messages,
)
from simstudy.backends.traffic_build import COLLECTIVE_KIND, WorkloadInfo
from simstudy.chakra import CollectiveType, Node, NodeType
from simstudy.compiler.attributes import FLOWS_PER_COLLECTIVE, NodeMeta, in_network_of, node_meta
from simstudy.spec import Congestion

COMM_TYPES = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE)
#: the collectives simulated, by their place in the compiled walk's keys (`Engine._gather_key`)
_KINDS = tuple(COLLECTIVE_KIND.values())


@dataclass(slots=True)
class _Coll:
    """What every member's issue of one collective node needs, found once per node object (its
    attributes are looked up by name in a list; its members' tuple, hashed per issue, was a hash of
    every rank per rank for a collective of every rank)."""

    aggregated: tuple[int, int] | None
    kind: str | None  # None: not simulated (a broadcast, or refused)
    ctype: CollectiveType | None
    members: tuple[int, ...]
    group: int  # the number of its members (equal members, one number)
    inside: frozenset[int]
    whole: bool = False  # simulated whole when the issuing rank issues it (it stands for the others)


@dataclass
class _Pending:
    """A collective instance that some members have issued: its size (bytes, the first member's),
    their nodes' ids and issue times."""

    kind: str
    meta: NodeMeta
    size: int
    ids: dict[int, int] = field(default_factory=dict)
    issued: dict[int, int] = field(default_factory=dict)
    act: Any = None


class _Done:
    """`done(rank, t)` of a collective instance (`Comms.collective`): the member's communication span,
    then its node done. `schedule` queues many members' at once in the compiled walk."""

    __slots__ = ("engine", "pending")

    def __init__(self, engine: Engine, pending: _Pending) -> None:
        self.engine = engine
        self.pending = pending

    def __call__(self, rank: int, t: int) -> None:
        engine = self.engine
        engine.ranks[rank].comm(self.pending.issued[rank], t)
        engine.on_done(rank, self.pending.ids[rank])

    def tell(self, run: Any, members: set[int]) -> None:
        """A compiled collective run (`_core.CoreCollectiveRun.tell`) tells the compiled walk itself
        of the end of these members (each but the last to finish): their spans and nodes done there,
        as `self(rank, t)` does (the walk records the span from the node's issue, the member's `issued`)."""
        core = self.engine.core_nodes
        if core is not None:
            run.tell(core, self.pending.ids, members)

    def schedule(self, start: int, offsets: list[int], ranks: list[int]) -> bool:
        """Queue `self(ranks[k], start + offsets[k])` for each k, in this order, as events of the
        compiled walk (the same places in the queue as `sched.at` of each, in C++); False where the
        walk is Python's (nothing queued). The walk records the spans from the nodes' issue times,
        which are the members' `issued`."""
        core = self.engine.core_nodes
        if core is None:
            return False
        ids = self.pending.ids
        core.comm_done_at(start, offsets, ranks, [ids[r] for r in ranks])
        return True


@dataclass
class _Rank:
    #: its nodes by id: the trace itself where its ids are 0, 1, ... in order (as compiled: no
    #: dictionary of every node of every rank), else a dictionary
    nodes: dict[int, Node] | list[Node]
    pending: dict[int, int]
    children: dict[int, list[int]]
    ready: list[int] = field(default_factory=list)
    comp_busy: bool = False
    comm_busy: bool = False
    cpu_busy: bool = False
    left: int = 0
    finish: int = 0
    compute_ns: int = 0
    #: its communication in flight: (start, end) pairs, flat (16 bytes a pair, not a tuple of two ints:
    #: 1.6 GB of tuples on 16,384 GPUs)
    comm_spans: array[int] = field(default_factory=lambda: array("q"))
    #: its CPU nodes (`is_cpu_op`), found once: the attribute is looked up by name in a list
    cpu: set[int] = field(default_factory=set)
    #: its part of the compiled walk's tables (None: the Python walk)
    table: Table | None = None

    def comm(self, start: int, end: int) -> None:
        """Communication was in flight from `start` to `end` (ns)."""
        self.comm_spans.append(start)
        self.comm_spans.append(end)

    def every_node(self) -> Iterable[Node]:
        return self.nodes.values() if isinstance(self.nodes, dict) else self.nodes


#: emit(op/meta, t_send, t_arrive, src, dst, bytes, flow, chunk, step): scalars or arrays.
Emit = Callable[..., None]
#: progress(fraction of the ET nodes done, simulated ns reached)
Tick = Callable[[float, int], None]


#: Collective nodes whose `_Coll` is kept at most (a dictionary of every collective node of a
#: 16,384-GPU run is hundreds of MB; the members of a group look theirs up close together).
COLLECTIVES_KEPT = 1 << 16


class Engine:
    """One simulation of a bundle."""

    def __init__(self, info: WorkloadInfo, net: Network, *, mode: str | Congestion, timeout_s: float | None, emit: Emit,
                 progress: Tick | None = None, identical: bool = False,
                 planner: Planner | None = None, count: Callable[..., None] | None = None,
                 isolated: bool = True, solver: str = "fast",
                 model: Callable[[Scheduler], NetModel] | None = None, engine: str = "python",
                 replicas: Replicas | None = None) -> None:
        self.info = info
        self.net = net
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s
        #: the compiled core's event queue (`engine` compiled: `_core.CoreScheduler`, `Scheduler`'s
        #: equal), or Python's
        self.core_queue = engine == "compiled" and model is None
        self.sched: Scheduler = core_scheduler() if self.core_queue else Scheduler()
        self.emit_rows = emit
        self.comms = Comms(info, net, mode, self.sched, self._emit_collective, planner=planner, count=count,
                           isolated=isolated, solver=solver, model=model(self.sched) if model is not None else None,
                           engine=engine if model is None else "python")
        self.comms.tick = self.tick
        #: all-reduces the switches compute (`in_network`)
        self.in_network = InNetwork(self.comms, net, emit, self._in_network_done)
        #: Every rank runs the same trace and only collectives of every rank that finish together:
        #: rank 0 is simulated for all of them (see `identical_ranks`).
        self.identical = identical
        traces = info.nodes[:1] if identical else info.nodes
        #: whether the compiled core walks the graphs (`_core.CoreNodes`): where it runs the queue and
        #: ranks compute alone (the shared hosts' processor sharing is Python's)
        walk = self.core_queue and info.shared_hosts is None
        tables = None
        if walk:
            parts, tables = rank_tables(traces, info.bundle.templates,
                                        None if replicas is None else set(replicas.simulated), refuse=self._rank_state)
            self.ranks = [_Rank(by_id, {}, {}, left=len(by_id), cpu=table.cpu, table=None if table is EMPTY else table)
                          for by_id, table in parts]
        else:
            self.ranks = [self._rank_state(r, nodes) for r, nodes in enumerate(traces)]
        #: replicas that run alike: replica 0's ranks are simulated (see `replicas.replica_plan`)
        self.replicas = replicas
        self.started = range(len(self.ranks)) if replicas is None else replicas.simulated
        self.total_nodes = sum(len(self.ranks[r].nodes) for r in self.started)
        self.nodes_done = 0
        self.progress = progress
        self.coll_seen: dict[int, dict[int, int]] = defaultdict(dict)  # by group number
        self.coll_waiting: dict[tuple[int, int], _Pending] = {}  # by (group number, instance)
        #: each group's number, its members and their set
        self._groups: dict[tuple[int, ...], int] = {}
        self._group_members: list[tuple[int, ...]] = []
        self._group_sets: list[frozenset[int]] = []
        self.arrived: dict[tuple[int, int, int, int], deque[int]] = defaultdict(deque)
        self.posted: dict[tuple[int, int, int, int], deque[tuple[int, int]]] = defaultdict(deque)
        self.issued: dict[tuple[int, int], int] = {}
        self.span_cols = (array("q"), array("q"), array("q"), array("q"))  # rank, node, start, end
        #: ranks sharing their hosts' cores (`system.host_cores`); None: every rank computes alone
        self.hosts = self._shared_hosts()
        #: per collective node (by identity, the last `COLLECTIVES_KEPT`): what its issues need
        self._colls: dict[int, _Coll] = {}
        #: the walk of every rank's graph on the compiled core (`_core.CoreNodes`: `issue_ready`,
        #: `issue`, `on_done` and `complete` below, event for event)
        self.core_nodes: Any = None
        if tables is not None:
            from simstudy.backends.flowsim import _core

            self.core_nodes = _core.CoreNodes(self.sched, self._issue_comm, *tables)  # type: ignore[arg-type]
            self.core_nodes.gather(self._gather_groups(tables[0]), np.fromiter(map(len, self._group_members), np.int64),
                                   self._gathered, self._gathered_late, self._gather_join)

    def _shared_hosts(self) -> SharedHosts | None:
        shared = self.info.shared_hosts
        if shared is None:
            return None
        cores, host_of = shared
        # with identical ranks, rank 0 stands for every rank of its host (they compute in lock-step)
        weight = [host_of.count(host_of[0])] if self.identical else None
        return SharedHosts(self.sched, host_of[:len(self.ranks)], cores, self._computed, weight)

    def _issue_comm(self, rank: int, node_id: int, code: int) -> None:
        """The compiled walk issues a communication node (`CoreNodes`' code: 2 collective, 3 send, 4 receive)."""
        node = self.ranks[rank].nodes[node_id]
        if code == 2:
            self.issue_collective(rank, node)
        elif code == 3:
            self.issue_send(rank, node)
        else:
            self.issue_recv(rank, node)

    def _computed(self, rank: int, node_id: int, elapsed_ns: int) -> None:
        """A compute node on a shared host is done, `elapsed_ns` after it started."""
        self.ranks[rank].compute_ns += elapsed_ns
        self.on_done(rank, node_id)

    # -- setup -------------------------------------------------------------------------------

    def _rank_state(self, rank: int, nodes: list[Node]) -> _Rank:
        by_id: dict[int, Node] = {}
        for n in nodes:
            by_id[n.id] = n
        pending: dict[int, int] = {}
        children: dict[int, list[int]] = defaultdict(list)
        for n in by_id.values():
            deps = set(n.data_deps) | set(n.ctrl_deps)
            for d in deps:
                if d not in by_id:
                    raise BackendError(
                        f"{self.info.bundle.et_path(rank)}: node {n.id} depends on node {d}, which is not in the file"
                    )
                children[d].append(n.id)
            pending[n.id] = len(deps)
        if not by_id:
            raise BackendError(f"{self.info.bundle.et_path(rank)}: the trace has no nodes")
        state = _Rank(by_id, pending, children, left=len(by_id),
                      cpu={i for i, n in by_id.items() if n.get("is_cpu_op", False)})
        state.ready = sorted(i for i, c in pending.items() if c == 0)
        if not state.ready:
            raise BackendError(f"{self.info.bundle.et_path(rank)}: no dependency-free node (a cycle?)")
        return state

    # -- event loop --------------------------------------------------------------------------

    def run(self) -> None:
        if self.core_nodes is not None:
            self.core_nodes.start(list(self.started))
        else:
            for r in self.started:
                self.issue_ready(r)
        sched = self.sched
        if self.core_queue:  # the compiled core's queue runs its own loop
            # what exists now (the traces, the plans) lives to the end: the collector need not walk it
            gc.freeze()
            try:
                sched.run_before(math.inf, self.tick)  # a tick every TICK events, as below
            finally:
                gc.unfreeze()
            self._stopped()
            return
        heap = sched.heap
        checks = 0
        clock = self.comms.model.clock
        while heap or (clock is not None and clock.busy()):
            if clock is not None:
                clock.advance(heap[0][0] if heap else None)  # may put earlier events on the heap
            ev = heapq.heappop(heap)
            sched.now = ev[0]
            ev[3](*ev[4])
            checks += 1
            if checks % TICK == 0:
                self.tick()
        self._stopped()

    def _stopped(self) -> None:
        """The queue is empty: every rank done, or a deadlock named."""
        sched = self.sched
        core = self.core_nodes
        if core is not None:  # what the compiled walk knows of each rank
            left, finish, compute = (a.tolist() for a in core.rank_totals())
            for r, s in enumerate(self.ranks):
                s.left, s.finish, s.compute_ns = left[r], finish[r], compute[r]
                s.comm_spans.frombytes(core.comm_spans(r).tobytes())  # the spans the walk recorded itself
            self.nodes_done = core.nodes_done
        if self.replicas is not None:  # every replica ran as replica 0
            for i, r in enumerate(self.replicas.simulated):
                a = self.ranks[r]
                for k in self.replicas.ranks[1:, i].tolist():
                    b = self.ranks[k]
                    b.left, b.finish, b.compute_ns, b.comm_spans = a.left, a.finish, a.compute_ns, a.comm_spans
        stuck = [r for r, s in enumerate(self.ranks) if s.left]
        if stuck:
            r = stuck[0]
            s = self.ranks[r]
            free = core.free_nodes(r) if core is not None else (i for i, c in s.pending.items() if c == 0)
            waiting = sorted(free)[:3]
            names = [s.nodes[i].name for i in waiting]
            raise BackendError(
                f"flowsim: deadlock: {len(stuck)} ranks never finished (rank {r} has {s.left} nodes left; "
                f"waiting on {names or 'dependencies'}): a collective some member never issued, or a receive "
                "without a matching send?"
            )
        if core is not None:
            core.release()  # the walk's state of every rank: its spans alone are taken from here on
        if self.progress is not None:
            self.progress(1.0, sched.now)

    def tick(self) -> None:
        """Now and then (also from inside a collective timed alone): the deadline, the progress."""
        now = self.sched.now + self.comms.timing_ns()
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise BackendError(f"flowsim: timed out at simulated time {now} ns")
        if self.progress is not None:
            done = self.core_nodes.nodes_done if self.core_nodes is not None else self.nodes_done
            self.progress(done / max(self.total_nodes, 1), now)

    # -- issuing -----------------------------------------------------------------------------

    def available(self, s: _Rank, node: Node) -> bool:
        if node.id in s.cpu:
            return not s.cpu_busy
        if node.type == NodeType.COMP_NODE:
            return not s.comp_busy
        if node.type in COMM_TYPES:
            return not s.comm_busy
        return True

    def issue_ready(self, rank: int) -> None:
        s = self.ranks[rank]
        keep: list[int] = []
        while s.ready:
            nid = heapq.heappop(s.ready)
            node = s.nodes[nid]
            if self.available(s, node):
                self.issue(rank, node)
            else:
                keep.append(nid)
        for nid in keep:
            heapq.heappush(s.ready, nid)

    def issue(self, rank: int, node: Node) -> None:
        s = self.ranks[rank]
        now = self.sched.now
        self.issued[(rank, node.id)] = now
        cpu = node.id in s.cpu
        if node.type == NodeType.COMP_NODE or cpu:
            if node.duration_micros == 0 and int(node.get("num_ops", 0) or 0) == 0:
                self.complete(rank, node.id)
                return
            dur = node.duration_micros * 1000 if node.duration_micros else 1
            if cpu:
                s.cpu_busy = True
            else:
                s.comp_busy = True
                if self.hosts is not None:  # its time on the host's shared cores is counted when it ends
                    self.hosts.start(rank, node.id, dur)
                    return
                s.compute_ns += dur
            self.sched.at(now + dur, self.on_done, rank, node.id)
        elif node.type == NodeType.COMM_COLL_NODE:
            s.comm_busy = True
            self.issue_collective(rank, node)
        elif node.type == NodeType.COMM_SEND_NODE:
            s.comm_busy = True
            self.issue_send(rank, node)
        elif node.type == NodeType.COMM_RECV_NODE:
            self.issue_recv(rank, node)
        else:
            self.complete(rank, node.id)

    def on_done(self, rank: int, node_id: int) -> None:
        if self.core_nodes is not None:
            self.core_nodes.on_done(rank, node_id)
            return
        s = self.ranks[rank]
        node = s.nodes[node_id]
        if node_id in s.cpu:
            s.cpu_busy = False
        elif node.type == NodeType.COMP_NODE:
            s.comp_busy = False
        elif node.type in COMM_TYPES:
            s.comm_busy = False
        self.complete(rank, node_id)
        self.issue_ready(rank)

    def complete(self, rank: int, node_id: int) -> None:
        s = self.ranks[rank]
        now = self.sched.now
        cols = self.span_cols
        cols[0].append(rank)
        cols[1].append(node_id)
        cols[2].append(self.issued.pop((rank, node_id), now))
        cols[3].append(now)
        s.left -= 1
        self.nodes_done += 1
        s.finish = max(s.finish, now)
        for child in s.children.get(node_id, ()):
            s.pending[child] -= 1
            if s.pending[child] == 0:
                heapq.heappush(s.ready, child)

    # -- collectives -------------------------------------------------------------------------

    def _coll(self, rank: int, node: Node) -> _Coll:
        """`_Coll` of a collective node (its group's errors raised for the rank issuing it)."""
        found = self._colls.get(id(node))
        if found is not None:
            return found
        aggregated = in_network_of(node)
        ctype = kind = None
        if aggregated is None:
            ctype = CollectiveType(int(node.get("comm_type", 0)))
            kind = COLLECTIVE_KIND.get(ctype)
        members: tuple[int, ...] = ()
        group = -1
        if aggregated is not None or kind is not None:
            members = tuple(self.info.members(node, rank))
            group = self._groups.get(members, -1)
            if group < 0:
                group = self._groups[members] = len(self._group_members)
                self._group_members.append(members)
                self._group_sets.append(frozenset(members))
        found = _Coll(aggregated, kind, ctype, members, group, self._group_sets[group] if group >= 0 else frozenset(),
                      self.identical or (self.replicas is not None and members in self.replicas.whole))
        if len(self._colls) >= COLLECTIVES_KEPT:  # the members of a group issue it close together
            self._colls.clear()
        self._colls[id(node)] = found
        return found

    def issue_collective(self, rank: int, node: Node) -> None:
        c = self._coll(rank, node)
        if c.aggregated is not None:
            self.in_network.issue(rank, node, c.members, *c.aggregated)
            return
        kind = c.kind
        if kind is None:
            assert c.ctype is not None
            if c.ctype == CollectiveType.BROADCAST:
                self.broadcast(rank, node)
                return
            raise BackendError(
                f"{self.info.bundle.et_path(rank)}: node {node.id}: collective {c.ctype.name} is not supported "
                "(ASTRA-SIM simulates ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL)"
            )
        members = c.members
        if rank not in c.inside:
            self._not_inside(c.group, [rank], [node.id])
        if c.whole:
            alone = _Pending(kind, node_meta(node), _size(node), {rank: node.id}, {rank: self.sched.now})
            self.comms.collective(kind, members, alone.size, len(members) < self.info.npus,
                                  self._done_fn(alone), alone.meta, report=(rank,),
                                  flow=alone.meta.flow * FLOWS_PER_COLLECTIVE)
            return
        seen = self.coll_seen[c.group]
        index = seen.get(rank, 0)
        seen[rank] = index + 1
        key = (c.group, index)
        pending = self.coll_waiting.get(key)
        if pending is None:
            pending = self.coll_waiting[key] = _Pending(kind, node_meta(node), _size(node))
            # Whether every member issues it at this same instant is known once the instant is over.
            self.sched.after_all(self.sched.now, self._staggered, key)
        self._member(key, pending, rank, node.id)

    def _member(self, key: tuple[int, int], pending: _Pending, rank: int, node_id: int) -> None:
        """A member issues collective instance `key` now: it joins the instance where that started
        without it, or starts it as the last member."""
        members = self._group_members[key[0]]
        pending.ids[rank] = node_id
        pending.issued[rank] = self.sched.now
        if pending.act is not None:
            self.comms.join(pending.act, rank)
        elif len(pending.ids) == len(members):
            self._start(pending, members)
        if len(pending.ids) == len(members):
            del self.coll_waiting[key]

    def _start(self, pending: _Pending, members: tuple[int, ...]) -> None:
        """Every member issued collective instance `pending`, in one instant."""
        self.comms.collective(pending.kind, members, pending.size, len(members) < self.info.npus,
                              self._done_fn(pending), pending.meta, flow=pending.meta.flow * FLOWS_PER_COLLECTIVE)

    # -- collectives gathered by the compiled walk (`_core.CoreNodes.gather`: the same as above) ----

    def _gather_groups(self, base: NDArray[np.int64]) -> NDArray[np.int32]:
        """Per node of the walk's tables, the key on which the walk gathers its members (its group
        number << 3 | its kind's place in `_KINDS`; 32 bits: a node of every rank at 16,384 GPUs is
        30 M of them): a collective node that `issue_collective` would gather (-1: every member is
        issued here)."""
        group = np.full(int(base[-1]), -1, dtype=np.int32)
        found: dict[int, int] = {}  # node object -> its key, or -1
        places: dict[int, tuple[NDArray[np.int64], list[int]]] = {}  # table -> its collectives' places, ids
        for r in self.started:
            table = self.ranks[r].table
            if table is None:
                continue
            place = places.get(id(table))
            if place is None:
                at = np.flatnonzero(table.code == 2)
                place = places[id(table)] = (at, table.ids[at].tolist())
            if not place[1]:
                continue
            nodes = self.ranks[r].nodes
            got = [nodes[i] for i in place[1]]
            keys = list(map(found.get, map(id, got)))
            if None in keys:
                for j, node in enumerate(got):
                    if keys[j] is None:
                        keys[j] = found[id(node)] = self._gather_key(r, node)
            group[place[0] + int(base[r])] = cast("list[int]", keys)
        return group

    def _gather_key(self, rank: int, node: Node) -> int:
        try:
            c = self._coll(rank, node)
        except BackendError:  # raised when issued, as here
            return -1
        if c.aggregated is not None or c.kind is None or c.whole or c.group >= 1 << 27:  # (the last: a key's bits)
            return -1
        return c.group << 3 | _KINDS.index(c.kind)

    def _pending(self, group: int, tag: int, ranks: list[int], node_ids: list[int], issued: list[int]) -> _Pending:
        if not self._group_sets[group].issuperset(ranks):
            self._not_inside(group, ranks, node_ids)
        first = self.ranks[ranks[0]].nodes[node_ids[0]]
        return _Pending(_KINDS[tag], node_meta(first), _size(first), dict(zip(ranks, node_ids, strict=True)),
                        dict(zip(ranks, issued, strict=True)))

    def _not_inside(self, group: int, ranks: list[int], node_ids: list[int]) -> None:
        rank, node_id = next((r, i) for r, i in zip(ranks, node_ids, strict=True) if r not in self._group_sets[group])
        raise BackendError(f"{self.info.bundle.et_path(rank)}: node {node_id}: rank {rank} is not in its group")

    def _gathered(self, group: int, index: int, tag: int, ranks: list[int], node_ids: list[int], issued: list[int]
                  ) -> None:
        """Every member issued it in one instant."""
        self._start(self._pending(group, tag, ranks, node_ids, issued), self._group_members[group])

    def _gathered_late(self, group: int, index: int, tag: int, ranks: list[int], node_ids: list[int],
                       issued: list[int]) -> None:
        """The instant of its first issue is over, and some members have not issued it."""
        self.coll_waiting[(group, index)] = self._pending(group, tag, ranks, node_ids, issued)
        self._staggered((group, index))

    def _gather_join(self, rank: int, node_id: int, group: int, index: int) -> None:
        if rank not in self._group_sets[group]:
            self._not_inside(group, [rank], [node_id])
        self._member((group, index), self.coll_waiting[(group, index)], rank, node_id)

    def _in_network_done(self, rank: int, node: Node, issued: int) -> None:
        self.ranks[rank].comm(issued, self.sched.now)
        self.on_done(rank, node.id)

    def broadcast(self, rank: int, node: Node) -> None:
        """A broadcast takes the node's duration, as ASTRA-SIM (which does not simulate it) charges
        it; its messages (`patterns.broadcast_messages`: this rank's, or every rank's when rank 0
        stands for all) are spread evenly over that time."""
        now = self.sched.now
        dur = node.duration_micros * 1000 if node.duration_micros else 1
        self.sched.at(now + dur, self.on_done, rank, node.id)
        members = self.info.members(node, rank)
        src = node.get("comm_src")
        pattern = broadcast_messages(members, int(node.get("comm_size", 0)),
                                     broadcast_root(members, None if src is None else int(src)))
        sel = np.ones(len(pattern.src), dtype=bool) if self.identical else pattern.src == rank
        if not sel.any():
            return
        edges = np.linspace(now, now + dur, pattern.steps + 1)
        step = pattern.step[sel]
        meta = node_meta(node)
        self.emit_rows(meta, edges[step], edges[step + 1], pattern.src[sel], pattern.dst[sel], pattern.nbytes[sel],
                       np.full(len(step), meta.flow * FLOWS_PER_COLLECTIVE, dtype=np.int64),
                       np.zeros(len(step), dtype=np.int64), step)

    def _staggered(self, key: tuple[int, int]) -> None:
        """Members issued a collective at different times: start it for those that have."""
        pending = self.coll_waiting.get(key)
        if pending is None or pending.act is not None:
            return
        members = self._group_members[key[0]]
        pending.act = self.comms.staggered(pending.kind, members, pending.size, len(members) < self.info.npus,
                                           list(pending.ids), self._done_fn(pending), pending.meta,
                                           flow=pending.meta.flow * FLOWS_PER_COLLECTIVE)

    def _done_fn(self, pending: _Pending) -> _Done:
        return _Done(self, pending)

    def _emit_collective(self, kind: str, meta: NodeMeta, t_send: Any, t_arrive: Any, src: Any, dst: Any,
                         nbytes: Any, chunk: Any, step: Any) -> None:
        self.emit_rows(meta, t_send, t_arrive, src, dst, nbytes, meta.flow * FLOWS_PER_COLLECTIVE + chunk, chunk,
                       step)

    # -- point to point ----------------------------------------------------------------------

    def issue_send(self, rank: int, node: Node) -> None:
        dst = int(node.get("comm_dst", -1))
        size = int(node.get("comm_size", 0))
        tag = int(node.get("comm_tag", 0))
        if not 0 <= dst < len(self.ranks) or dst == rank:
            raise BackendError(f"{self.info.bundle.et_path(rank)}: send node {node.id}: bad destination {dst}")
        meta = node_meta(node)
        self.comms.send(rank, dst, size, self.on_arrival, (node, tag, meta), flow=meta.flow)

    def on_arrival(self, msg: Msg) -> None:
        node, tag, meta = msg.ctx
        now = self.sched.now
        self.emit_rows(meta, msg.t_send, now, msg.src, msg.dst, msg.size, meta.flow, meta.chunk, 0)
        self.ranks[msg.src].comm(msg.t_send, now)
        self.on_done(msg.src, node.id)
        key = (msg.src, msg.dst, tag, msg.size)
        posted = self.posted.get(key)
        if posted:
            rank, nid = posted.popleft()
            if not posted:  # no queue left behind per (src, dst, tag, size) ever used
                del self.posted[key]
            self.ranks[rank].comm(msg.t_send, now)
            self.on_done(rank, nid)
        else:
            self.arrived[key].append(now)

    def issue_recv(self, rank: int, node: Node) -> None:
        src = int(node.get("comm_src", -1))
        key = (src, rank, int(node.get("comm_tag", 0)), int(node.get("comm_size", 0)))
        arrived = self.arrived.get(key)
        if arrived:
            arrived.popleft()
            if not arrived:
                del self.arrived[key]
            self.sched.at(self.sched.now, self.on_done, rank, node.id)
        else:
            self.posted[key].append((rank, node.id))

    # -- what to expect ----------------------------------------------------------------------

    def expected_transfers(self) -> int:
        """About how many transfers the run will simulate (for its progress): per collective node
        of a rank, what its group's first member sends (`patterns`, that member's messages only),
        one per send. Exact for rings and direct collectives; an estimate for trees."""
        info = self.info
        per: dict[tuple[str, int, int, bool], int] = {}
        total = 0
        for rank in self.started:
            for node in self.ranks[rank].every_node():
                if node.type == NodeType.COMM_SEND_NODE:
                    total += 1
                    continue
                if node.type != NodeType.COMM_COLL_NODE:
                    continue
                aggregated = in_network_of(node)
                if aggregated is not None:  # its chunks up and down (the switches' own sends left out)
                    total += 2 * len(chunk_sizes(int(node.get("comm_size", 0)), aggregated[1]))
                    continue
                kind = COLLECTIVE_KIND.get(CollectiveType(int(node.get("comm_type", 0))))
                if kind is None:
                    continue
                members = info.members(node, rank)
                size = int(node.get("comm_size", 0))
                key = (kind, len(members), size, len(members) < info.npus)
                found = per.get(key)
                if found is None:
                    found = per[key] = _first_member_messages(info, kind, members, size, key[3])
                total += found
        return total * (info.npus if self.identical else 1 if self.replicas is None else self.replicas.count)

    # -- spans -------------------------------------------------------------------------------

    def take_span_columns(self) -> tuple[np.ndarray, ...]:
        """(rank, node, start_ns, end_ns) of every node run, in completion order; the compiled walk
        hands its columns over (a second call finds none there)."""
        if self.core_nodes is not None:
            return self.core_nodes.take_span_columns()  # type: ignore[no-any-return]
        return tuple(np.frombuffer(c, dtype=np.int64) if len(c) else np.empty(0, dtype=np.int64)
                     for c in self.span_cols)


def _size(node: Node) -> int:
    """A collective node's size (bytes)."""
    return int(node.get("comm_size", 0))


def _first_member_messages(info: WorkloadInfo, kind: str, members: tuple[int, ...], size: int, group: bool) -> int:
    """The messages the first member of a collective sends, over all its chunks (0 where the
    collective cannot run: the run says why)."""
    try:
        chunks, phases = first_member_messages(info.collectives, kind, members, size, group)
    except (ValueError, BackendError):
        return 0
    return chunks * sum(len(p.src) for p in phases)
