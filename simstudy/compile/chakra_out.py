"""Turn per-rank execution graphs into Chakra ET files (through simstudy.chakra)."""

from __future__ import annotations

import os
from pathlib import Path

from simstudy import chakra
from simstudy.chakra import CollectiveType, GlobalMetadata, Node, NodeType
from simstudy.compile import attributes as meta
from simstudy.compile.graph import Collective, ExecutionGraph, Task, TaskKind

#: Version string ASTRA-SIM's own example generators write (nothing reads it).
ET_VERSION = "0.0.4"

_COLLECTIVE = {
    Collective.ALL_REDUCE: CollectiveType.ALL_REDUCE,
    Collective.ALL_GATHER: CollectiveType.ALL_GATHER,
    Collective.REDUCE_SCATTER: CollectiveType.REDUCE_SCATTER,
    Collective.ALL_TO_ALL: CollectiveType.ALL_TO_ALL,
}


def task_node(task: Task, rank: int) -> Node:
    """The Chakra node for one task, with ASTRA-SIM's canonical attribute member types, then
    simstudy's own attributes (see `attributes`)."""
    attrs = [chakra.is_cpu_op(False)]
    node = Node(id=task.id, name=task.name, data_deps=list(task.deps))
    if task.kind is TaskKind.COMPUTE:
        node.type = NodeType.COMP_NODE
        node.duration_micros = task.duration_us
        attrs += [chakra.num_ops(task.flops), chakra.tensor_size(task.tensor_bytes)]
    elif task.kind is TaskKind.COLLECTIVE:
        assert task.collective is not None
        node.type = NodeType.COMM_COLL_NODE
        ctype = _COLLECTIVE[task.collective]
        attrs += [chakra.comm_type(ctype), chakra.comm_size(task.size_bytes)]
        if task.group:
            attrs.append(chakra.pg_name(str(task.group)))
        attrs += [meta.op(meta.COLLECTIVE_OP[ctype]), meta.flow(task.id)]
    elif task.kind is TaskKind.SEND:
        node.type = NodeType.COMM_SEND_NODE
        attrs += [
            chakra.comm_src(rank),
            chakra.comm_dst(task.peer),
            chakra.comm_size(task.size_bytes),
            chakra.comm_tag(task.tag),
            meta.op(task.op or "p2p"),
            meta.flow(task.tag if task.flow is None else task.flow),
            meta.chunk(task.chunk),
        ]
    else:
        node.type = NodeType.COMM_RECV_NODE
        attrs += [
            chakra.comm_src(task.peer),
            chakra.comm_dst(rank),
            chakra.comm_size(task.size_bytes),
            chakra.comm_tag(task.tag),
            meta.op(task.op or "p2p"),
        ]
    attrs.append(meta.iteration(task.iteration))
    if task.job:
        attrs.append(meta.job(task.job))
    node.attrs = attrs
    return node


def _rank_independent(tasks: list[Task]) -> bool:
    """True when no node of these tasks mentions its own rank (only SEND/RECV do)."""
    return all(t.kind in (TaskKind.COMPUTE, TaskKind.COLLECTIVE) for t in tasks)


def write_traces(graph: ExecutionGraph, prefix: Path) -> int:
    """Write `<prefix>.<rank>.et` for every rank; returns total bytes written.

    Ranks that share one task list and whose nodes do not name their rank are encoded once.
    """
    meta = GlobalMetadata(version=ET_VERSION)
    cache: dict[int, bytes] = {}
    total = 0
    for g in graph.ranks:
        if not g.tasks:
            raise ValueError(f"rank {g.rank} has no tasks; ASTRA-SIM rejects an empty trace")
        shared = _rank_independent(g.tasks)
        data = cache.get(id(g.tasks)) if shared else None
        if data is None:
            data = chakra.encode_trace(meta, (task_node(t, g.rank) for t in g.tasks))
            if shared:
                cache[id(g.tasks)] = data
        path = chakra.trace_path(prefix, g.rank)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        total += len(data)
    return total
