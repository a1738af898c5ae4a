"""The compiled walk's tables (`_core.CoreNodes`): every rank's graph as arrays, found once per
node object and once per sequence of what a rank's nodes give them."""

from __future__ import annotations

import operator
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from simstudy.backends.base import SPAN_KINDS
from simstudy.backends.traffic_build import span_kind
from simstudy.chakra import Node, NodeType
from simstudy.compiler.attributes import node_iteration

__all__ = ["EMPTY", "NODE_CODES", "NodeKind", "Refuse", "Table", "index_of", "node_kind", "rank_tables"]

#: `refuse(rank, trace)` raises the error of a trace the walk cannot take (`Engine._rank_state`'s)
Refuse = Callable[[int, list[Node]], Any]


#: A node's code in the compiled walk's tables (`_core.CoreNodes`): CPU 0, compute 1, collective 2,
#: send 3, receive 4, anything else 5
NODE_CODES = {NodeType.COMP_NODE: 1, NodeType.COMM_COLL_NODE: 2, NodeType.COMM_SEND_NODE: 3,
              NodeType.COMM_RECV_NODE: 4}


#: What a node gives the walk's tables and its spans (`node_kind`)
NodeKind = tuple[int, bool, int, tuple[int, ...], str, int, int]


_node_id = operator.attrgetter("id")


def node_kind(n: Node) -> NodeKind:
    """What a node gives the walk's tables: its code, whether it is a compute node of no time and no
    ops (done when issued), its time (ns) and its dependencies; and its spans: its name, its span
    kind (`SPAN_KINDS`) and its iteration."""
    c = 0 if n.get("is_cpu_op", False) else NODE_CODES.get(n.type, 5)
    z = c <= 1 and n.duration_micros == 0 and int(n.get("num_ops", 0) or 0) == 0
    return (c, z, int(n.duration_micros * 1000) if n.duration_micros else 1,
            tuple(sorted(set(n.data_deps) | set(n.ctrl_deps))), n.name, SPAN_KINDS.index(span_kind(n)),
            node_iteration(n))


@dataclass(frozen=True)
class Table:
    """One rank's part of the walk's tables (its `parent`: places within the rank)."""

    ids: NDArray[np.int64]
    code: NDArray[np.int8]
    zero: NDArray[np.int8]
    dur: NDArray[np.int64]
    pending: NDArray[np.int64]
    parent: NDArray[np.int64]
    kid: NDArray[np.int64]
    cpu: set[int]
    #: its nodes' names, span kinds (`SPAN_KINDS`) and iterations, in the order of `ids`
    names: list[str]
    span_kind: NDArray[np.int8]
    iteration: NDArray[np.int64]


_NONE, _NONE8 = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int8)
#: the part of a rank another stands for (`replicas`): no node
EMPTY = Table(_NONE, _NONE8, _NONE8, _NONE, _NONE, _NONE, _NONE, set(), [], _NONE8, _NONE)


def index_of(index: dict[int, int] | range, node_id: int) -> int | None:
    """A node's place in its rank's table (None: not in the trace)."""
    if isinstance(index, range):
        return node_id if 0 <= node_id < len(index) else None
    return index.get(node_id)


def rank_tables(traces: list[list[Node]], templates: list[int] | None = None, only: set[int] | None = None, *,
                refuse: Refuse) -> tuple[list[tuple[list[Node] | dict[int, Node], Table]], tuple[NDArray[Any], ...]]:
    """Each rank's nodes by id and its part of the tables, and the compiled walk's tables
    (`_core.CoreNodes`, see `_shared`: rank offsets, each rank's table, and per distinct table its
    node ids in ascending order, codes, no-time flags, times, dependencies, children), without the
    dictionaries of dependencies `Engine._rank_state` makes. What a node gives the tables is found
    once per node object (the traces of a bundle share the nodes they have alike), and a rank's
    tables once per sequence of what its nodes give (the ranks of a pipeline stage differ in their
    peers and groups, not in their graph: 16 tables, not 16,384). A trace that
    `Engine._rank_state` refuses is refused with its error (`refuse(rank, trace)` raises it).

    `templates` (a bundle compiled in memory: `Bundle.templates`): ranks of one number differ
    only in attributes no table takes, so a rank whose trace is dense takes the numbers of the
    first dense rank of its number, without looking at its nodes (the same tables: a test
    compares them with the tables found node by node). `only`: the ranks to table (the others,
    which other ranks stand for, get none, `EMPTY`: `replicas`)."""
    found: dict[int, int] = {}  # node object -> the number of what it gives the tables
    kinds: list[NodeKind] = []  # what a node gives, by that number
    numbers: dict[NodeKind, int] = {}
    tables: dict[tuple[int, ...], Table] = {}  # a dense trace's tables, by its nodes' numbers
    pieces: list[Table] = []
    ranks: list[tuple[list[Node] | dict[int, Node], Table]] = []
    numbered: dict[int, list[int]] = {}  # a template's first dense rank's numbers
    for r, nodes in enumerate(traces):
        if only is not None and r not in only:  # another rank stands for it: no table, never started
            pieces.append(EMPTY)
            ranks.append((nodes, EMPTY))
            continue
        dense = list(map(_node_id, nodes)) == list(range(len(nodes)))
        known = numbered.get(templates[r]) if templates is not None and dense else None
        nums = known if known is not None and len(known) == len(nodes) else _numbers(nodes, found, kinds,
                                                                                       numbers)
        if templates is not None and dense:
            numbered.setdefault(templates[r], nums)
        if dense:  # the trace is its own table of nodes by id; its tables may be another rank's
            sig = tuple(nums)
            table = tables.get(sig)
            if table is None:
                table = tables[sig] = _table(r, nodes, nodes, range(len(nodes)), [kinds[k] for k in sig], refuse)
            by_id: dict[int, Node] | list[Node] = nodes
        else:
            by_id = {}
            for n in nodes:
                by_id[n.id] = n
            order = sorted(by_id)
            table = _table(r, nodes, [by_id[i] for i in order], {nid: k for k, nid in enumerate(order)},
                           [kinds[found[id(by_id[i])]] for i in order], refuse, ids=order)
        pieces.append(table)
        ranks.append((by_id, table))
    return ranks, _shared(pieces)


def _shared(pieces: list[Table]) -> tuple[NDArray[Any], ...]:
    """The walk's tables from each rank's part: every rank's offset in the per-rank state (`base`:
    dependencies left, issue times, gathered keys), its table's number (`table_of`), and the
    distinct tables once each (`tbase` their offsets; ids, codes, no-time flags, times,
    dependencies, children: indices within a rank). Ranks of one table share its arrays: 16
    distinct tables stand for 16,384 ranks' 30 M nodes."""
    sizes = np.fromiter((len(t.ids) for t in pieces), dtype=np.int64, count=len(pieces))
    base = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    number: dict[int, int] = {}
    distinct: list[Table] = []
    table_of = np.empty(len(pieces), dtype=np.int64)
    for r, t in enumerate(pieces):
        k = number.get(id(t))
        if k is None:
            k = number[id(t)] = len(distinct)
            distinct.append(t)
        table_of[r] = k
    tsizes = np.fromiter((len(t.ids) for t in distinct), dtype=np.int64, count=len(distinct))
    tbase = np.concatenate([[0], np.cumsum(tsizes)]).astype(np.int64)
    ids, code, zero, dur, pending = (
        np.concatenate([getattr(t, f) for t in distinct]) if distinct else np.empty(0, dtype=np.int64)
        for f in ("ids", "code", "zero", "dur", "pending"))
    par = np.concatenate([t.parent + b for t, b in zip(distinct, tbase[:-1].tolist(), strict=True)]) \
        if distinct else np.empty(0, dtype=np.int64)
    kids = np.concatenate([t.kid for t in distinct]) if distinct else np.empty(0, dtype=np.int64)
    child_ptr = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(np.bincount(par, minlength=len(ids)), out=child_ptr[1:])
    child = kids[np.argsort(par, kind="stable")]
    return (base, table_of, tbase, ids, code.astype(np.int8, copy=False), zero.astype(np.int8, copy=False), dur,
            pending, child_ptr, child)


def _numbers(nodes: list[Node], found: dict[int, int], kinds: list[NodeKind], numbers: dict[NodeKind, int]
             ) -> list[int]:
    """Each node's number of what it gives the tables (`node_kind`), in trace order: found by
    node object without a Python step per node (most were met on another rank), and found for
    each node object not met before (`found`, `kinds` and `numbers` grow)."""
    looked: list[int | None] = list(map(found.get, map(id, nodes)))
    i = -1
    while True:  # each node object not met before (or met earlier in this trace)
        try:
            i = looked.index(None, i + 1)
        except ValueError:
            break
        n = nodes[i]
        k = found.get(id(n))
        if k is None:
            kind = node_kind(n)
            k = found[id(n)] = numbers.setdefault(kind, len(kinds))
            if k == len(kinds):
                kinds.append(kind)
        looked[i] = k
    return cast("list[int]", looked)  # every one numbered now

def _table(r: int, trace: list[Node], nodes: list[Node], index: dict[int, int] | range,
           kinds: list[NodeKind], refuse: Refuse, ids: list[int] | None = None) -> Table:
    """One rank's tables: its `nodes` in ascending id (`index`: a node id's place among them) and
    what each gives them (`node_kind`); the errors of `_rank_state` for `trace`."""
    n = len(nodes)
    code = np.fromiter((k[0] for k in kinds), dtype=np.int8, count=n)
    zero = np.fromiter((k[1] for k in kinds), dtype=np.int8, count=n)
    dur = np.fromiter((k[2] for k in kinds), dtype=np.int64, count=n)
    pending = np.fromiter((len(k[3]) for k in kinds), dtype=np.int64, count=n)
    parent, kid = array("q"), array("q")
    for k, kind in enumerate(kinds):
        for dep in kind[3]:
            j = index_of(index, dep)
            if j is None:  # the reference's error, found its way
                refuse(r, trace)
            parent.append(j)  # type: ignore[arg-type]
            kid.append(k)
    if not n or not (pending == 0).any():
        refuse(r, trace)  # raises: no nodes, or no node free of dependencies
    ids_arr = np.arange(n, dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
    cpu = {int(ids_arr[k]) for k in np.flatnonzero(code == 0).tolist()}
    return Table(ids_arr, code, zero, dur, pending, np.array(parent, dtype=np.int64),
                  np.array(kid, dtype=np.int64), cpu, [k[4] for k in kinds],
                  np.fromiter((k[5] for k in kinds), dtype=np.int8, count=n),
                  np.fromiter((k[6] for k in kinds), dtype=np.int64, count=n))
