"""Turn per-rank execution graphs into Chakra ET files (through simstudy.chakra)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from simstudy import chakra
from simstudy.chakra import CollectiveType, GlobalMetadata, Node, NodeType
from simstudy.compiler import attributes as meta
from simstudy.compiler.graph import Collective, ExecutionGraph, RankGraph, Task, TaskKind

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
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        total += len(data)
    return total
