"""simstudy's own Chakra node attributes: what a backend needs to know about a node.

The compiler writes them on every node it emits, so that no backend reads meaning back out of
task names. ASTRA-SIM looks attributes up by name and ignores any it does not ask for (both
analytical binaries of c459ab6 run bundles carrying them: tests/compiler/test_astrasim_bundles.py).

* `simstudy.op` (string_val, communication nodes): the TrafficTable `op` of its transfers
  (`allreduce`, `allgather`, `reducescatter`, `alltoall`, `push`, `pull`, `p2p`);
* `simstudy.iteration` (int64_val, every node): the training iteration it belongs to;
* `simstudy.flow` (int64_val, communication nodes): the flow its transfers belong to. A send's
  flow (the slices of one message share it); a collective's base flow: chunk c of the
  collective is flow `base * FLOWS_PER_COLLECTIVE + c`;
* `simstudy.chunk` (int64_val, sends): which slice of its flow a send carries;
* `simstudy.job` (int64_val, every node of a job other than 0): the job a node belongs to on a
  shared cluster;
* `simstudy.in_network.slots` and `simstudy.in_network.chunk_bytes` (int64_val, collectives of
  in-network aggregation only): the switches sum this all-reduce, in chunks of that many bytes, with
  that many slots per switch (`in_network_of`; flowsim runs it, ASTRA-SIM cannot).

Bundles written by other tools (ASTRA-SIM's own examples) carry none of them: `node_meta` then
falls back to what the node itself says (a collective's op from its `comm_type`, a send's flow
from its tag), iteration 0 and job 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simstudy.chakra import Attr, CollectiveType, Node, NodeType
from simstudy.chakra.canonical import memoised
from simstudy.chakra.values import AttrKind

OP = "simstudy.op"
ITERATION = "simstudy.iteration"
FLOW = "simstudy.flow"
CHUNK = "simstudy.chunk"
JOB = "simstudy.job"
IN_NETWORK_SLOTS = "simstudy.in_network.slots"
IN_NETWORK_CHUNK = "simstudy.in_network.chunk_bytes"

#: Chunks of one collective are flows `base * FLOWS_PER_COLLECTIVE + chunk`.
FLOWS_PER_COLLECTIVE = 4096

#: The TrafficTable op of each collective type ASTRA-SIM simulates.
COLLECTIVE_OP: dict[CollectiveType, str] = {
    CollectiveType.ALL_REDUCE: "allreduce",
    CollectiveType.ALL_GATHER: "allgather",
    CollectiveType.REDUCE_SCATTER: "reducescatter",
    CollectiveType.ALL_TO_ALL: "alltoall",
    CollectiveType.BROADCAST: "broadcast",
}

def op(value: str) -> Attr:
    return memoised(OP, AttrKind.STRING, value)


def iteration(value: int) -> Attr:
    return memoised(ITERATION, AttrKind.INT64, value)


def flow(value: int) -> Attr:
    return memoised(FLOW, AttrKind.INT64, value)


def chunk(value: int) -> Attr:
    return memoised(CHUNK, AttrKind.INT64, value)


def job(value: int) -> Attr:
    return memoised(JOB, AttrKind.INT64, value)


def in_network(slots: int, chunk_bytes: int) -> list[Attr]:
    return [memoised(IN_NETWORK_SLOTS, AttrKind.INT64, slots), memoised(IN_NETWORK_CHUNK, AttrKind.INT64, chunk_bytes)]


def in_network_of(node: Node) -> tuple[int, int] | None:
    """(slots per switch, chunk bytes) of a collective the switches aggregate; None for any other node."""
    if node.type != NodeType.COMM_COLL_NODE:
        return None
    slots: Any = None
    chunk: Any = None
    for a in node.attrs:  # the last of each name, as a dictionary of them would keep
        if a.name == IN_NETWORK_SLOTS:
            slots = a.value
        elif a.name == IN_NETWORK_CHUNK:
            chunk = a.value
    if slots is None:
        return None
    return int(slots), int(chunk or 0)


@dataclass(frozen=True, slots=True)
class NodeMeta:
    """What a backend knows about a node beyond ASTRA-SIM's own attributes."""

    op: str
    iteration: int
    flow: int
    chunk: int
    job: int


def node_iteration(node: Node) -> int:
    """`node_meta(node).iteration`, without the rest (the last such attribute, else 0)."""
    found: Any = 0
    for a in node.attrs:
        if a.name == ITERATION:
            found = a.value
    return int(found)


def node_meta(node: Node) -> NodeMeta:
    """The simstudy attributes of a node, with the fallbacks for bundles that lack them."""
    found: dict[str, Any] = {a.name: a.value for a in node.attrs if a.name.startswith("simstudy.")}
    op_value = found.get(OP)
    if op_value is None:
        op_value = "p2p"
        if node.type == NodeType.COMM_COLL_NODE:
            op_value = COLLECTIVE_OP.get(CollectiveType(int(node.get("comm_type", 0))), "p2p")
    flow_value = found.get(FLOW)
    if flow_value is None:
        flow_value = int(node.get("comm_tag", 0)) if node.type == NodeType.COMM_SEND_NODE else node.id
    return NodeMeta(str(op_value), int(found.get(ITERATION, 0)), int(flow_value), int(found.get(CHUNK, 0)),
                    int(found.get(JOB, 0)))
