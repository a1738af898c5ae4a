"""flowsim's discrete-event engine: ASTRA-SIM's workload semantics on flowsim's network.

Per rank, as ASTRA-SIM's workload layer does: a node is issued once its data and control
dependencies are done, dependency-free nodes in ascending id order, with at most one compute
node and one communication node (collective or send; receives are exempt) in flight. Compute
nodes take `duration_micros` x 1000 ns (0 -> 1 ns). A collective starts once every member of
its group has issued it (the k-th collective a rank issues on a group meets the k-th of the
others) and is timed step by step by `collective.time_chunk`. A send's message is a flow on
the network: alone it takes int(path latency + bytes / bandwidth) as in ASTRA-SIM; flows that
share links get max-min fair rates (with `contention`). A receive completes when its message
(same source, destination, tag and size) has arrived. Events are ordered by (time, sequence),
so runs are deterministic.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from simstudy.backends.base import BackendError, empty_spans, make_spans
from simstudy.backends.flowsim.collective import CollectiveTiming, pipelined_phases, time_chunk, time_dimensions
from simstudy.backends.network import Network
from simstudy.backends.patterns import chunking
from simstudy.backends.traffic_build import (
    COLLECTIVE_KIND,
    TrafficBuilder,
    WorkloadInfo,
    span_kind,
)
from simstudy.chakra import CollectiveType, Node, NodeType
from simstudy.compile.attributes import FLOWS_PER_COLLECTIVE, node_meta

COMM_TYPES = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE)


@dataclass
class _Rank:
    nodes: dict[int, Node]
    pending: dict[int, int]
    children: dict[int, list[int]]
    ready: list[int] = field(default_factory=list)
    comp_busy: bool = False
    comm_busy: bool = False
    cpu_busy: bool = False
    left: int = 0
    finish: int = 0
    compute_ns: int = 0
    comm_spans: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class _Flow:
    node: Node
    src: int
    dst: int
    size: int
    tag: int
    path: tuple[int, ...]
    latency: float
    start: int
    remaining: float
    rate: float = 0.0


class Engine:
    """One simulation of a bundle."""

    def __init__(self, info: WorkloadInfo, net: Network, *, contention: bool, timeout_s: float | None) -> None:
        self.info = info
        self.net = net
        self.contention = contention
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.events: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self.seq = 0
        self.now = 0
        self.traffic = TrafficBuilder()
        self.ranks = [self._rank_state(r, nodes) for r, nodes in enumerate(info.nodes)]
        self.coll_seen: dict[tuple[int, ...], list[int]] = defaultdict(list)
        self.coll_waiting: dict[tuple[tuple[int, ...], int], list[tuple[int, Node, int]]] = {}
        self.timing_cache: dict[tuple[Any, ...], CollectiveTiming] = {}
        self.sending: dict[int, _Flow] = {}
        self.next_flow = 0
        self.flow_version = 0
        self.flow_clock = 0.0
        self.arrived: dict[tuple[int, int, int, int], deque[int]] = defaultdict(deque)
        self.posted: dict[tuple[int, int, int, int], deque[tuple[int, int]]] = defaultdict(deque)
        self.system = info.system
        self.endpoint_delay = float(self.system.get("endpoint-delay", 10))
        self.mem_bw = float(self.system.get("local-mem-bw", 1600)) or 1600.0
        self.active_chunks = max(1, int(self.system.get("active-chunks-per-dimension", 1)))
        self.issued: dict[tuple[int, int], int] = {}
        self.span_rows: list[tuple[int, int, int, int]] = []

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
        state = _Rank(by_id, pending, children, left=len(by_id))
        state.ready = sorted(i for i, c in pending.items() if c == 0)
        if not state.ready:
            raise BackendError(f"{self.info.bundle.et_path(rank)}: no dependency-free node (a cycle?)")
        return state

    # -- event loop --------------------------------------------------------------------------

    def at(self, t: int, fn: Callable[..., None], *args: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, fn, args))

    def spans(self) -> pd.DataFrame:
        """When every node of every rank ran (see `base.SPAN_COLUMNS`)."""
        if not self.span_rows:
            return empty_spans()
        rank, node, start, end = (np.asarray(c, dtype=np.int64) for c in zip(*self.span_rows, strict=True))
        names = [self.ranks[r].nodes[n].name for r, n in zip(rank.tolist(), node.tolist(), strict=True)]
        kinds = [span_kind(self.ranks[r].nodes[n].type) for r, n in zip(rank.tolist(), node.tolist(), strict=True)]
        return make_spans(rank, node, names, kinds, start, end)

    def run(self) -> None:
        for r in range(len(self.ranks)):
            self.issue_ready(r)
        checks = 0
        while self.events:
            t, _, fn, args = heapq.heappop(self.events)
            self.now = t
            fn(*args)
            checks += 1
            if self.deadline is not None and checks % 4096 == 0 and time.monotonic() > self.deadline:
                raise BackendError(f"flowsim: timed out at simulated time {t} ns")
        stuck = [r for r, s in enumerate(self.ranks) if s.left]
        if stuck:
            r = stuck[0]
            s = self.ranks[r]
            waiting = sorted(i for i, c in s.pending.items() if c == 0)[:3]
            names = [s.nodes[i].name for i in waiting]
            raise BackendError(
                f"flowsim: deadlock: {len(stuck)} ranks never finished (rank {r} has {s.left} nodes left; "
                f"waiting on {names or 'dependencies'}): a collective some member never issued, or a receive "
                "without a matching send?"
            )

    # -- issuing -----------------------------------------------------------------------------

    def available(self, s: _Rank, node: Node) -> bool:
        if node.get("is_cpu_op", False):
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
        self.issued[(rank, node.id)] = self.now
        cpu = bool(node.get("is_cpu_op", False))
        if node.type == NodeType.COMP_NODE or cpu:
            if node.duration_micros == 0 and int(node.get("num_ops", 0) or 0) == 0:
                self.complete(rank, node.id)
                return
            dur = node.duration_micros * 1000 if node.duration_micros else 1
            if cpu:
                s.cpu_busy = True
            else:
                s.comp_busy = True
                s.compute_ns += dur
            self.at(self.now + dur, self.on_done, rank, node.id)
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
        s = self.ranks[rank]
        node = s.nodes[node_id]
        if node.get("is_cpu_op", False):
            s.cpu_busy = False
        elif node.type == NodeType.COMP_NODE:
            s.comp_busy = False
        elif node.type in COMM_TYPES:
            s.comm_busy = False
        self.complete(rank, node_id)
        self.issue_ready(rank)

    def complete(self, rank: int, node_id: int) -> None:
        s = self.ranks[rank]
        self.span_rows.append((rank, node_id, self.issued.pop((rank, node_id), self.now), self.now))
        s.left -= 1
        s.finish = max(s.finish, self.now)
        for child in s.children.get(node_id, ()):
            s.pending[child] -= 1
            if s.pending[child] == 0:
                heapq.heappush(s.ready, child)

    # -- collectives -------------------------------------------------------------------------

    def issue_collective(self, rank: int, node: Node) -> None:
        ctype = CollectiveType(int(node.get("comm_type", 0)))
        kind = COLLECTIVE_KIND.get(ctype)
        if kind is None:
            if ctype == CollectiveType.BROADCAST:
                dur = node.duration_micros * 1000 if node.duration_micros else 1
                self.at(self.now + dur, self.on_done, rank, node.id)
                return
            raise BackendError(
                f"{self.info.bundle.et_path(rank)}: node {node.id}: collective {ctype.name} is not supported "
                "(ASTRA-SIM simulates ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL)"
            )
        group, algorithm = self.info.plan(node, rank, kind)
        members = tuple(group)
        if rank not in members:
            raise BackendError(f"{self.info.bundle.et_path(rank)}: node {node.id}: rank {rank} is not in its group")
        seen = self.coll_seen[members]
        index = sum(1 for r in seen if r == rank)
        seen.append(rank)
        key = (members, index)
        waiting = self.coll_waiting.setdefault(key, [])
        waiting.append((rank, node, self.now))
        if len(waiting) == len(members):
            del self.coll_waiting[key]
            self.start_collective(kind, algorithm, members, waiting)

    def start_collective(
        self, kind: str, algo: str, members: tuple[int, ...], parts: list[tuple[int, Node, int]]
    ) -> None:
        start = max(t for _, _, t in parts)
        _rank0, node0, _ = parts[0]
        size = int(node0.get("comm_size", 0))
        chunk_bytes, chunks = chunking(size, self.info.chunks, kind, self.info.npus)
        concurrent = min(self.active_chunks, chunks)
        key = (kind, algo, members, chunk_bytes, concurrent)
        timing = self.timing_cache.get(key)
        if timing is None:
            if self.info.by_dimension(kind, members):
                timing = time_dimensions(
                    self.net, kind, self.info.algorithms(kind), self.info.dim_sizes(), chunk_bytes,
                    optimization=self.info.optimization, endpoint_delay_ns=self.endpoint_delay,
                    local_mem_bw_bpns=self.mem_bw, contention=self.contention, concurrent=concurrent,
                )
            else:
                timing = time_chunk(
                    self.net, kind, algo, list(members), chunk_bytes,
                    endpoint_delay_ns=self.endpoint_delay, local_mem_bw_bpns=self.mem_bw,
                    contention=self.contention, concurrent=concurrent,
                )
            self.timing_cache[key] = timing
        meta = node_meta(node0)
        op, it, base = meta.op, meta.iteration, meta.flow * FLOWS_PER_COLLECTIVE
        if len(timing.phase_ns) > 1 and concurrent == 1 and chunks > 1:
            span, shifts = pipelined_phases(timing, chunks)
            finish = start + span
            for c, shift in enumerate(shifts):
                self.traffic.add_pattern(
                    timing.pattern, None, start + shift + timing.step_start_ns, start + shift + timing.step_end_ns,
                    flow=base + c, op=op, iteration=it, chunk=c,
                )
        else:
            rounds = math.ceil(chunks / concurrent)
            finish = start + rounds * timing.chunk_ns
            for c in range(chunks):
                base = start + (c // concurrent) * timing.chunk_ns
                self.traffic.add_pattern(
                    timing.pattern, None, base + timing.step_start_ns, base + timing.step_end_ns,
                    flow=base + c, op=op, iteration=it, chunk=c,
                )
        for rank, node, _ in parts:
            self.ranks[rank].comm_spans.append((start, finish))
            self.at(finish, self.on_done, rank, node.id)

    # -- point to point ----------------------------------------------------------------------

    def issue_send(self, rank: int, node: Node) -> None:
        dst = int(node.get("comm_dst", -1))
        size = int(node.get("comm_size", 0))
        tag = int(node.get("comm_tag", 0))
        if not 0 <= dst < len(self.ranks) or dst == rank:
            raise BackendError(f"{self.info.bundle.et_path(rank)}: send node {node.id}: bad destination {dst}")
        path = self.net.route(rank, dst, tag)
        flow = _Flow(node, rank, dst, size, tag, path, self.net.path_latency(path), self.now, float(size))
        if not self.contention or size == 0:
            cap = min((self.net.capacity[i] for i in path), default=math.inf)
            arrival = self.now + int(flow.latency + size / cap)
            self.at(arrival, self.on_arrival, flow)
            return
        self.sending[self.next_flow] = flow
        self.next_flow += 1
        self.reflow()

    def reflow(self) -> None:
        """Advance the flows still sending to now, recompute max-min rates, schedule the next drain."""
        active = list(self.sending.values())
        dt = self.now - self.flow_clock
        for f in active:
            f.remaining -= f.rate * dt
        self.flow_clock = self.now
        rates = self.net.maxmin_rates([f.path for f in active])
        for f, r in zip(active, rates, strict=True):
            f.rate = float(r)
        self.flow_version += 1
        if active:
            drain = min(f.remaining / f.rate for f in active)
            self.at(self.now + max(math.floor(drain), 0), self.on_drain, self.flow_version)

    def on_drain(self, version: int) -> None:
        if version != self.flow_version:
            return
        dt = self.now - self.flow_clock
        for fid, f in list(self.sending.items()):
            if f.remaining - f.rate * dt <= 1e-6 * max(f.size, 1) + f.rate:
                del self.sending[fid]
                self.at(self.now + int(f.latency), self.on_arrival, f)
        self.reflow()

    def on_arrival(self, f: _Flow) -> None:
        node = f.node
        meta = node_meta(node)
        self.traffic.add(
            t_start_s=np.array([f.start * 1e-9]), t_end_s=np.array([self.now * 1e-9]), src=np.array([f.src]),
            dst=np.array([f.dst]), bytes=np.array([f.size]), flow=meta.flow, op=meta.op,
            iteration=meta.iteration, chunk=meta.chunk, step=0,
        )
        self.ranks[f.src].comm_spans.append((f.start, self.now))
        self.on_done(f.src, node.id)
        key = (f.src, f.dst, f.tag, f.size)
        if self.posted[key]:
            rank, nid = self.posted[key].popleft()
            self.ranks[rank].comm_spans.append((f.start, self.now))
            self.on_done(rank, nid)
        else:
            self.arrived[key].append(self.now)

    def issue_recv(self, rank: int, node: Node) -> None:
        src = int(node.get("comm_src", -1))
        key = (src, rank, int(node.get("comm_tag", 0)), int(node.get("comm_size", 0)))
        if self.arrived[key]:
            self.arrived[key].popleft()
            self.at(self.now, self.on_done, rank, node.id)
        else:
            self.posted[key].append((rank, node.id))
