"""Reading a bundle for simulation, and turning timed ET nodes into a TrafficTable."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simstudy import chakra
from simstudy.backends.base import BackendError, empty_spans, make_spans
from simstudy.backends.patterns import (
    CollectiveConfig,
    Pattern,
    TreeTurns,
    broadcast_messages,
    broadcast_root,
    chunk_messages,
    chunking,
    uses_trees,
)
from simstudy.chakra import CollectiveType, Node, NodeType
from simstudy.compiler import Bundle
from simstudy.compiler.attributes import FLOWS_PER_COLLECTIVE, node_meta
from simstudy.compiler.bundle import SystemConfig
from simstudy.compiler.topology_file import NativeDim, NetworkTopology, native_topology, read_topology
from simstudy.table import OPS, make_table

COLLECTIVE_KIND = {
    CollectiveType.ALL_REDUCE: "all_reduce",
    CollectiveType.ALL_GATHER: "all_gather",
    CollectiveType.REDUCE_SCATTER: "reduce_scatter",
    CollectiveType.ALL_TO_ALL: "all_to_all",
}


@dataclass
class WorkloadInfo:
    """A bundle read back: ET nodes per rank, network dimensions, system settings, groups."""

    bundle: Bundle
    nodes: list[list[Node]]
    dims: list[NativeDim]
    system: dict[str, Any]
    groups: dict[str, list[int]]
    topology: NetworkTopology

    @property
    def npus(self) -> int:
        return len(self.nodes)

    @cached_property
    def collectives(self) -> CollectiveConfig:
        """What decides every collective's messages (see `patterns`)."""
        return CollectiveConfig.from_system(self.system, self.dim_sizes())

    @property
    def chunks(self) -> int:
        return self.collectives.splits

    def algorithm(self, kind: str) -> str:
        return self.collectives.algorithm(kind)

    def algorithms(self, kind: str) -> list[str]:
        """The configured algorithm of each network dimension."""
        return list(self.collectives.algorithms(kind))

    @property
    def optimization(self) -> str:
        return self.collectives.optimization

    def by_dimension(self, kind: str, members: Sequence[int]) -> bool:
        """True when ASTRA-SIM runs this collective dimension by dimension (see `CollectiveConfig`)."""
        return self.collectives.by_dimension(kind, members)

    def dim_sizes(self) -> list[int]:
        return [d.npus for d in self.dims]

    @cached_property
    def shared_hosts(self) -> tuple[int, list[int]] | None:
        """(cores of every host, host of every rank) when the ranks share their hosts' cores
        (`system.host_cores`); None when every rank computes on a device of its own."""
        cfg = SystemConfig.model_validate(self.system)
        return None if cfg.host_cores is None or cfg.hosts is None else (cfg.host_cores, list(cfg.hosts))

    @cached_property
    def _member_tuples(self) -> dict[str, tuple[int, ...]]:
        """Every group's ranks, and every rank's under "" and "0" (made once: a collective of every
        rank is issued by every rank, and a list of every rank each time is quadratic in ranks)."""
        everyone = tuple(range(self.npus))
        return {**{k: tuple(v) for k, v in self.groups.items()}, "": everyone, "0": everyone}

    def members(self, node: Node, rank: int) -> tuple[int, ...]:
        """The ranks a collective node runs on (its `pg_name` group, or all)."""
        pg = str(node.get("pg_name", "") or "")
        found = self._member_tuples.get(pg)
        if found is None:
            raise BackendError(
                f"{self.bundle.et_path(rank)}: node {node.id} uses communicator group {pg!r}, "
                "which the comm-group configuration does not define"
            )
        return found

    @classmethod
    def from_bundle(cls, bundle: Bundle) -> WorkloadInfo:
        bundle.check()
        net = bundle.network_config()
        dims = [NativeDim(*d) for d in zip(net.topology, net.npus_count, net.bandwidth, net.latency, strict=True)]
        npus = int(np.prod([d.npus for d in dims]))
        system = _read_json(bundle.system)
        if not isinstance(system, dict):
            raise BackendError(f"{bundle.system}: expected a JSON object")
        groups: dict[str, list[int]] = {}
        if bundle.comm_group is not None:
            raw = _read_json(bundle.comm_group)
            if not isinstance(raw, dict):
                raise BackendError(f"{bundle.comm_group}: expected a JSON object of group id -> ranks")
            groups = {str(k): [int(r) for r in v] for k, v in raw.items()}
        topology = read_topology(bundle.topology) if bundle.topology is not None else native_topology(dims)
        if topology.hosts != npus:
            raise BackendError(f"{bundle.topology}: the topology has {topology.hosts} hosts but {bundle.network} "
                               f"has {npus} NPUs")
        traces = bundle.traces if bundle.traces is not None else read_traces(bundle, npus)
        return cls(bundle, traces, dims, system, groups, topology)


def read_traces(bundle: Bundle, npus: int, *, compiled: bool = True) -> list[list[Node]]:
    """Every rank's nodes; ranks whose files hold the same bytes share one decoded list, and nodes of
    the same bytes are one Node (ranks of one stage or group share most of their nodes' bytes, and
    most of their dependencies and attributes). `compiled`: frames split and numbered by flowsim's
    compiled core where it is built (16,384 ranks' 5.3 GB of traces: most of the read was Python
    going frame by frame), else, and without it, by `chakra`'s reader (the same nodes)."""
    reader = chakra.Interner(_frame_index() if compiled else None)
    paths = [bundle.et_path(r) for r in range(npus)]
    return [reader.decode(path.read_bytes(), str(path)) for path in paths]


def _frame_index() -> Any:
    """The compiled core's frame index, or None where the core is not built."""
    try:
        from simstudy.backends.flowsim._core import FrameIndex
    except ImportError:
        return None
    return FrameIndex()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BackendError(f"{path}: cannot read JSON: {exc}") from None


@dataclass(frozen=True)
class TraceEvent:
    """One issue or callback line of ASTRA-SIM's trace."""

    issue: bool
    rank: int
    tick_ns: int
    node_id: int
    name: str


class TrafficBuilder:
    """Collects transfer rows (as numpy chunks) and makes the checked TrafficTable."""

    def __init__(self) -> None:
        self.cols: dict[str, list[np.ndarray]] = {
            k: [] for k in ("t_start_s", "t_end_s", "src", "dst", "bytes", "flow", "op", "iteration", "chunk", "step")
        }

    def add(self, **cols: Any) -> None:
        n = len(cols["src"])
        cols["op"] = OPS.index(cols["op"])
        for k, lst in self.cols.items():
            v = cols[k]
            lst.append(np.asarray(v) if np.ndim(v) else np.full(n, v))

    def add_pattern(
        self, pattern: Pattern, rank: int | None, starts_ns: np.ndarray, ends_ns: np.ndarray, *,
        flow: int, op: str, iteration: int, chunk: int,
    ) -> None:
        """Rows for a pattern's transfers (only those sent by `rank` when given), timed per step."""
        sel = pattern.src == rank if rank is not None else slice(None)
        step = pattern.step[sel]
        self.add(
            t_start_s=starts_ns[step] * 1e-9, t_end_s=ends_ns[step] * 1e-9, src=pattern.src[sel],
            dst=pattern.dst[sel], bytes=pattern.nbytes[sel], flow=flow, op=op, iteration=iteration,
            chunk=chunk, step=step,
        )

    def table(self) -> Any:
        if not self.cols["src"]:
            return make_table({k: np.empty(0, dtype=object if k == "op" else np.float64 if k.startswith("t_")
                                           else np.int64) for k in self.cols})
        data = {k: np.concatenate(v) for k, v in self.cols.items()}
        order = np.lexsort((data["dst"], data["src"], data["t_start_s"]))
        cols: dict[str, object] = {k: v[order] for k, v in data.items()}
        cols["op"] = pd.Categorical.from_codes(data["op"][order].astype(np.int8), categories=list(OPS))
        return make_table(cols)


Spans = dict[tuple[int, int], tuple[int, int]]


def spans_from_trace(trace: Sequence[TraceEvent]) -> Spans:
    """(rank, node id) -> (issue tick, callback tick) in ns."""
    issued: dict[tuple[int, int], int] = {}
    spans: Spans = {}
    for ev in trace:
        key = (ev.rank, ev.node_id)
        if ev.issue:
            issued[key] = ev.tick_ns
        elif key in issued:
            spans[key] = (issued[key], ev.tick_ns)
    return spans


_SPAN_KIND: dict[int, str] = {NodeType.COMP_NODE: "compute", NodeType.COMM_COLL_NODE: "collective",
                              NodeType.COMM_SEND_NODE: "send", NodeType.COMM_RECV_NODE: "recv"}


def span_kind(node: Node) -> str:
    """The `kind` of a node's span (compute, collective, send, recv, other: a CPU op, such as a
    framework's wait, is not the device's compute)."""
    return "other" if node.get("is_cpu_op", False) else _SPAN_KIND.get(int(node.type), "other")


def spans_table(info: WorkloadInfo, spans: Spans) -> Any:
    """The spans table of a run from its node spans (ASTRA-SIM's own timing). ASTRA-SIM logs no
    issue or callback for nodes it skips (compute nodes without duration or work): they get an
    empty span when their last dependency ended."""
    rows: list[tuple[int, int, str, str, int, int]] = []
    for r, nodes in enumerate(info.nodes):
        end: dict[int, int] = {}
        for n in sorted(nodes, key=lambda n: n.id):
            span = spans.get((r, n.id))
            if span is None:
                t = max((end.get(d, 0) for d in (*n.data_deps, *n.ctrl_deps)), default=0)
                span = (t, t)
            end[n.id] = span[1]
            rows.append((r, n.id, n.name, span_kind(n), span[0], span[1]))
    if not rows:
        return empty_spans()
    return make_spans(*zip(*rows, strict=True))


def by_rank(rank: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Each rank of a column of ranks with the places it holds there (ascending), in rank order:
    one sort for the whole column (a comparison per rank would be quadratic in ranks)."""
    if not len(rank):
        return []
    order = np.argsort(rank, kind="stable")
    ranked = rank[order]
    first = np.concatenate([[0], np.flatnonzero(ranked[1:] != ranked[:-1]) + 1])  # no second sort (np.unique)
    ranks = ranked[first].tolist()
    del ranked
    ends = [*first[1:].tolist(), len(order)]
    return [(r, order[a:b]) for r, a, b in zip(ranks, first.tolist(), ends, strict=True)]


def union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, -1
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def union_pairs_ns(flat: Sequence[int]) -> int:
    """`union_ns` of intervals given flat, (start, end, start, end, ...), in numpy: an interval adds
    what it reaches past every interval before it in (start, end) order."""
    pairs = np.asarray(flat, dtype=np.int64).reshape(-1, 2)
    if not len(pairs):
        return 0
    pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]
    start, end = pairs[:, 0], pairs[:, 1]
    reached = np.concatenate([[-1], np.maximum.accumulate(end)[:-1]])
    return int(np.maximum(0, end - np.maximum(start, reached)).sum())


def busy_times(info: WorkloadInfo, spans: Spans) -> dict[int, tuple[int, int]]:
    """Per rank: (ns spent computing, ns with communication in flight) from node spans."""
    comp: dict[int, list[tuple[int, int]]] = {r: [] for r in range(info.npus)}
    comm: dict[int, list[tuple[int, int]]] = {r: [] for r in range(info.npus)}
    types = [{n.id: n.type for n in nodes if not n.get("is_cpu_op", False)} for nodes in info.nodes]
    for (rank, node_id), span in spans.items():
        t = types[rank].get(node_id)
        if t == NodeType.COMP_NODE:
            comp[rank].append(span)
        elif t in (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
            comm[rank].append(span)
    return {r: (union_ns(comp[r]), union_ns(comm[r])) for r in range(info.npus)}


def build_traffic(info: WorkloadInfo, spans: Spans) -> Any:
    """The TrafficTable of a run from its node spans (ASTRA-SIM's own timing): each collective's
    messages (`patterns`) spread evenly over its interval on each rank, each send one transfer."""
    builder = TrafficBuilder()
    by_id = [{n.id: n for n in nodes} for nodes in info.nodes]
    cache: dict[tuple[str, tuple[int, ...], int, int], Pattern] = {}
    turns = [TreeTurns() for _ in range(info.npus)]  # each rank's trees, in the order it issues collectives
    for (rank, node_id), (t0, t1) in sorted(spans.items(), key=lambda kv: (kv[0][0], kv[1][0], kv[0][1])):
        node = by_id[rank].get(node_id)
        if node is None:
            continue
        if node.type == NodeType.COMM_COLL_NODE:
            ctype = CollectiveType(int(node.get("comm_type", 0)))
            kind = COLLECTIVE_KIND.get(ctype)
            if ctype == CollectiveType.BROADCAST:  # ASTRA-SIM waits its duration: its messages over that time
                members = tuple(info.members(node, rank))
                src = node.get("comm_src")
                chain = broadcast_messages(members, int(node.get("comm_size", 0)),
                                           broadcast_root(members, None if src is None else int(src)))
                meta = node_meta(node)
                edges = np.linspace(t0, t1, chain.steps + 1)
                builder.add_pattern(chain, rank, edges[:-1], edges[1:], flow=meta.flow * FLOWS_PER_COLLECTIVE,
                                    op=meta.op, iteration=meta.iteration, chunk=0)
                continue
            if kind is None:
                continue
            members = tuple(info.members(node, rank))
            group = len(members) < info.npus
            size = int(node.get("comm_size", 0))
            chunk_bytes, chunks = chunking(size, info.chunks, kind, info.npus)
            trees = uses_trees(info.collectives, kind, members, group)
            turn = turns[rank].take(kind, chunks) if trees else 0
            patterns: list[Pattern] = []
            for t in (turn, turn + 1) if trees else (0,):  # the two trees take turns, chunk after chunk
                key = (kind, members, chunk_bytes, t % 2)
                pattern = cache.get(key)
                if pattern is None:
                    pattern = cache[key] = chunk_messages(info.collectives, kind, members, chunk_bytes, group, t)
                patterns.append(pattern)
            slots = chunks * max(patterns[0].steps, 1)
            edges = np.linspace(t0, t1, slots + 1)
            meta = node_meta(node)
            for c in range(chunks):
                pattern = patterns[c % len(patterns)]
                s = edges[c * pattern.steps : (c + 1) * pattern.steps + 1]
                builder.add_pattern(pattern, rank, s[:-1], s[1:], flow=meta.flow * FLOWS_PER_COLLECTIVE + c,
                                    op=meta.op, iteration=meta.iteration, chunk=c)
        elif node.type == NodeType.COMM_SEND_NODE:
            meta = node_meta(node)
            builder.add(t_start_s=np.array([t0 * 1e-9]), t_end_s=np.array([t1 * 1e-9]), src=np.array([rank]),
                        dst=np.array([int(node.get("comm_dst", -1))]), bytes=np.array([int(node.get("comm_size", 0))]),
                        flow=meta.flow, op=meta.op, iteration=meta.iteration, chunk=meta.chunk, step=0)
    return builder.table()
