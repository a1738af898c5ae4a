"""Turn per-rank execution graphs into Chakra ET files (through simstudy.chakra), or into the
Chakra nodes those files hold, in memory (`graph_traces`: what a backend that runs from memory
takes instead of writing and decoding the files)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from simstudy import chakra
from simstudy.chakra import CollectiveType, GlobalMetadata, Node, NodeType
from simstudy.compiler import attributes as meta
from simstudy.compiler.graph import Collective, ExecutionGraph, RankGraph, Task, TaskKind
from simstudy.files import write_bytes

#: Version string ASTRA-SIM's own example generators write (nothing reads it).
ET_VERSION = "0.0.4"

_COLLECTIVE = {
    Collective.ALL_REDUCE: CollectiveType.ALL_REDUCE,
    Collective.ALL_GATHER: CollectiveType.ALL_GATHER,
    Collective.REDUCE_SCATTER: CollectiveType.REDUCE_SCATTER,
    Collective.ALL_TO_ALL: CollectiveType.ALL_TO_ALL,
}


def task_node(task: Task, rank: int, group: int | None = None, peer: int | None = None) -> Node:
    """The Chakra node for one task, with ASTRA-SIM's canonical attribute member types, then
    simstudy's own attributes (see `attributes`). `group` and `peer`: the task's group and peer
    on this rank (default: the task's own)."""
    group = task.group if group is None else group
    peer = task.peer if peer is None else peer
    attrs = [chakra.is_cpu_op(task.kind is TaskKind.WAIT)]
    node = Node(id=task.id, name=task.name, data_deps=list(task.deps))
    if task.kind is TaskKind.COMPUTE or task.kind is TaskKind.WAIT:
        node.type = NodeType.COMP_NODE
        node.duration_micros = task.duration_us
        attrs += [chakra.num_ops(task.flops), chakra.tensor_size(task.tensor_bytes)]
    elif task.kind is TaskKind.COLLECTIVE:
        assert task.collective is not None
        node.type = NodeType.COMM_COLL_NODE
        ctype = _COLLECTIVE[task.collective]
        attrs += [chakra.comm_type(ctype), chakra.comm_size(task.size_bytes)]
        if group:
            attrs.append(chakra.pg_name(str(group)))
        attrs += [meta.op(meta.COLLECTIVE_OP[ctype]), meta.flow(task.id)]
        if task.in_network is not None:
            attrs += meta.in_network(*task.in_network)
    else:  # a send from this rank to its peer, or a receive from the peer
        send = task.kind is TaskKind.SEND
        node.type = NodeType.COMM_SEND_NODE if send else NodeType.COMM_RECV_NODE
        src, dst = (rank, peer) if send else (peer, rank)
        attrs += [
            chakra.comm_src(src),
            chakra.comm_dst(dst),
            chakra.comm_size(task.size_bytes),
            chakra.comm_tag(task.tag),
            meta.op(task.op or "p2p"),
        ]
        if send:
            attrs += [meta.flow(task.tag if task.flow is None else task.flow), meta.chunk(task.chunk)]
    attrs.append(meta.iteration(task.iteration))
    if task.job:
        attrs.append(meta.job(task.job))
    node.attrs = attrs
    return node


def _rank_independent(tasks: list[Task]) -> bool:
    """True when no node of these tasks mentions its own rank (only SEND/RECV do)."""
    return all(t.kind in (TaskKind.COMPUTE, TaskKind.WAIT, TaskKind.COLLECTIVE) for t in tasks)


def _frames(g: RankGraph, cache: dict[tuple[int, int], bytes]) -> Iterator[bytes]:
    """The framed nodes of a rank that shares its task list with others under its own groups and peers:
    a compute node's frame is the same on every rank, a collective's on every rank of its group
    (`cache`, keyed by task and group); sends and receives name the rank and are encoded for it."""
    for t in g.tasks:
        if t.kind is not TaskKind.SEND and t.kind is not TaskKind.RECV:
            group = g.group_of(t) if t.kind is TaskKind.COLLECTIVE else 0
            key = (id(t), group)
            data = cache.get(key)
            if data is None:
                data = cache[key] = chakra.frame(chakra.encode_node(task_node(t, g.rank, group)))
            yield data
        else:
            yield chakra.frame(chakra.encode_node(task_node(t, g.rank, peer=g.peer_of(t))))


def write_traces(graph: ExecutionGraph, prefix: Path) -> int:
    """Write `<prefix>.<rank>.et` for every rank; returns total bytes written.

    Ranks that share one task list and whose nodes do not name their rank are encoded once; ranks
    bound to a shared list (`RankGraph.groups`, `peers`) reuse every node frame another rank of the
    same groups encoded.
    """
    meta = GlobalMetadata(version=ET_VERSION)
    head = chakra.frame(chakra.encode_metadata(meta))
    cache: dict[int, bytes] = {}
    frames: dict[tuple[int, int], bytes] = {}
    total = 0
    for g in graph.ranks:
        if not g.tasks:
            raise ValueError(f"rank {g.rank} has no tasks; ASTRA-SIM rejects an empty trace")
        if g.bound:
            data = b"".join([head, *_frames(g, frames)])
        else:
            shared = _rank_independent(g.tasks)
            found = cache.get(id(g.tasks)) if shared else None
            if found is None:
                data = chakra.encode_trace(meta, (task_node(t, g.rank) for t in g.tasks))
                if shared:
                    cache[id(g.tasks)] = data
            else:
                data = found
        path = chakra.trace_path(prefix, g.rank)
        write_bytes(path, data)
        total += len(data)
    return total


def _value(node: Node) -> tuple[Any, ...]:
    """What a node's encoding is made of (`chakra.encode_node`: equal values, equal bytes)."""
    return (node.id, node.name, node.type, tuple(node.ctrl_deps), tuple(node.data_deps), node.start_time_micros,
            node.duration_micros, node.inputs, node.outputs, tuple(node.attrs))


class _Nodes:
    """The nodes of `graph_traces`, each made once: a compute task's node once, a collective's once
    per group, a send's or receive's once per rank. A task's first node is made by `task_node`; its
    others are that node with the attributes a group or a rank changes (`pg_name`; `comm_src`,
    `comm_dst`) put in their places, which is what `task_node` gives for them. Nodes of equal value
    are one object, as a reader interns them by their bytes."""

    def __init__(self) -> None:
        self.first: dict[int, tuple[Node, int, int]] = {}  # task -> its first node, where its group or ranks sit
        self.made: dict[int, Node] = {}  # task -> its node, where no rank changes it (`plain`)
        self.by_value: dict[tuple[Any, ...], Node] = {}
        # a collective's value but its group -> that value (one object: its identity keys `variants`)
        self.protos: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.variants: dict[tuple[int, int], Node] = {}  # (a proto's identity, group) -> the node
        self.ranks: dict[tuple[str, int], chakra.Attr] = {}  # ("comm_src" or "comm_dst", rank) -> the attribute

    def _intern(self, node: Node) -> Node:
        return self.by_value.setdefault(_value(node), node)

    def _like(self, base: Node, attrs: list[chakra.Attr]) -> Node:
        return Node(base.id, base.name, base.type, base.ctrl_deps, base.data_deps, base.start_time_micros,
                    base.duration_micros, base.inputs, base.outputs, attrs)

    def plain(self, t: Task, rank: int) -> Node:
        """The node of a task no rank changes: a compute task's, or a collective's on group 0 (no
        `pg_name` attribute)."""
        node = self.made.get(id(t))
        if node is None:
            node = self.made[id(t)] = self._intern(task_node(t, rank, 0))
        return node

    def on_group(self, tasks: list[Task], rank: int, group: int) -> list[Node]:
        """The nodes of collectives `tasks` on `group` (not 0), `rank` one of its members:
        collectives whose nodes are equal but for their group are one proto, and a proto's node on
        a group is made once."""
        pg = chakra.pg_name(str(group))
        out: list[Node] = []
        for t in tasks:
            first = self.first.get(id(t))
            if first is None:
                made = task_node(t, rank, group)
                at = [a.name for a in made.attrs].index("pg_name")
                value = _value(made)
                proto = self.protos.setdefault((*value[:-1], (*value[-1][:at], None, *value[-1][at + 1:])), value)
                first = self.first[id(t)] = (made, at, id(proto))
                self.variants.setdefault((id(proto), group), made)
            key = (first[2], group)
            node = self.variants.get(key)
            if node is None:
                attrs = list(first[0].attrs)
                attrs[first[1]] = pg
                node = self.variants[key] = self._like(first[0], attrs)
            out.append(node)
        return out

    def _rank(self, name: str, rank: int) -> chakra.Attr:
        attr = self.ranks.get((name, rank))
        if attr is None:
            attr = self.ranks[(name, rank)] = chakra.comm_src(rank) if name == "comm_src" else chakra.comm_dst(rank)
        return attr

    def peer(self, t: Task, rank: int, peer: int) -> Node:
        """A send's or receive's node on `rank`, to or from `peer` (no other rank has it)."""
        first = self.first.get(id(t))
        if first is None:
            node = task_node(t, rank, peer=peer)
            names = [a.name for a in node.attrs]
            self.first[id(t)] = (node, names.index("comm_src"), names.index("comm_dst"))
            return node
        src, dst = (rank, peer) if t.kind is TaskKind.SEND else (peer, rank)
        attrs = list(first[0].attrs)
        attrs[first[1]] = self._rank("comm_src", src)
        attrs[first[2]] = self._rank("comm_dst", dst)
        return self._like(first[0], attrs)


def graph_templates(graph: ExecutionGraph) -> list[int]:
    """Each rank's task list, numbered (by rank): `graph_traces` gives ranks of one list the same
    nodes but for their collectives' groups and their sends' and receives' peers (the `pg_name`,
    `comm_src` and `comm_dst` attributes)."""
    numbers: dict[int, int] = {}
    out = [0] * len(graph.ranks)
    for g in graph.ranks:
        out[g.rank] = numbers.setdefault(id(g.tasks), len(numbers))
    return out


def graph_traces(graph: ExecutionGraph) -> list[list[Node]]:
    """Every rank's Chakra nodes (by rank), equal to what `write_traces` writes and a bundle's reader
    decodes (`traffic_build.read_traces`), without encoding or decoding, and shared as that reader
    shares them: nodes of equal value are one Node object, and ranks whose lists hold the same
    nodes share one list (which is how a run finds identical ranks).

    Ranks of one task list (a pipeline stage's, bound to each rank's groups and peers) differ in
    their collectives' groups and in their sends and receives: the list's compute nodes are placed
    once, and each of its groups' collective nodes once per group they are bound to (`_Nodes`); a
    rank's list is those put together (numpy places them) and its own sends and receives."""
    paused = gc.isenabled()  # the collector would walk the graph's millions of objects again and
    gc.disable()  # again while the nodes are made (they make no cycles): more than half the time
    try:
        return _graph_traces(graph)
    finally:
        if paused:
            gc.enable()


def _graph_traces(graph: ExecutionGraph) -> list[list[Node]]:
    nodes_of = _Nodes()
    # per task list: its nodes where no rank changes them, its collectives' places by their group,
    # its sends' and receives' places
    templates: dict[int, tuple[np.ndarray, dict[int, tuple[np.ndarray, list[Task]]], list[tuple[int, Task]]]] = {}
    placed: dict[tuple[int, int, int], np.ndarray] = {}  # (task list, its group, the rank's group) -> nodes
    lists: dict[int, list[list[Node]]] = {}  # a list's hash (its nodes' identities) -> the lists of it
    out: list[list[Node] | None] = [None] * len(graph.ranks)
    for g in graph.ranks:
        if not g.tasks:
            raise ValueError(f"rank {g.rank} has no tasks; ASTRA-SIM rejects an empty trace")
        template = templates.get(id(g.tasks))
        if template is None:
            fixed = np.empty(len(g.tasks), dtype=object)
            colls: dict[int, tuple[list[int], list[Task]]] = {}
            p2p: list[tuple[int, Task]] = []
            for i, t in enumerate(g.tasks):
                if t.kind is TaskKind.COMPUTE or t.kind is TaskKind.WAIT:
                    fixed[i] = nodes_of.plain(t, g.rank)
                elif t.kind is TaskKind.COLLECTIVE:
                    at, tasks = colls.setdefault(t.group, ([], []))
                    at.append(i)
                    tasks.append(t)
                else:
                    p2p.append((i, t))
            template = templates[id(g.tasks)] = (
                fixed, {k: (np.array(at, dtype=np.int64), tasks) for k, (at, tasks) in colls.items()}, p2p)
        fixed, colls_at, p2p = template
        row = fixed.copy()
        for k, (places, tasks) in colls_at.items():
            group = k if g.groups is None else g.groups.get(k, k)
            nodes = placed.get((id(g.tasks), k, group))
            if nodes is None:
                made = [nodes_of.plain(t, g.rank) for t in tasks] if not group else \
                    nodes_of.on_group(tasks, g.rank, group)
                nodes = placed[(id(g.tasks), k, group)] = np.fromiter(made, dtype=object, count=len(made))
            row[places] = nodes
        for i, t in p2p:
            row[i] = nodes_of.peer(t, g.rank, g.peer_of(t))
        listed: list[Node] = row.tolist()
        key = hash(tuple(map(id, listed)))
        same = lists.setdefault(key, [])
        for other in same:
            if len(other) == len(listed) and all(a is b for a, b in zip(other, listed, strict=True)):
                listed = other
                break
        else:
            same.append(listed)
        out[g.rank] = listed
    missing = [r for r, nodes in enumerate(out) if nodes is None]
    if missing:
        raise ValueError(f"no graph for rank {missing[0]} ({len(missing)} of {len(out)} ranks)")
    return out  # type: ignore[return-value]  # every rank's, checked above
