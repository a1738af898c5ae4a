"""Shared samples: the annotated 83-byte all_reduce.3.et of docs/chakra-et-format.md."""

from __future__ import annotations

from simstudy import chakra
from simstudy.chakra import CollectiveType, Node, NodeType

# all_reduce.3.et, spelled by hand from the doc's table (ASCII strings as hex).
GOLDEN = bytes.fromhex(
    "07"  # frame length 7
    "0a 05 30 2e 30 2e 34"  # GlobalMetadata.version = "0.0.4"
    "4a"  # frame length 74
    "08 03"  # Node.id = 3
    "12 14 61 6c 6c 5f 72 65 64 75 63 65 5f 34 6e 70 75 73 5f 31 4d 42"  # name "all_reduce_4npus_1MB"
    "18 07"  # type = COMM_COLL_NODE
    "52 0e 0a 09 69 73 5f 63 70 75 5f 6f 70 d8 01 00"  # attr is_cpu_op: bool_val = false
    "52 0d 0a 09 63 6f 6d 6d 5f 74 79 70 65 48 00"  # attr comm_type: int64_val = 0
    "52 0f 0a 09 63 6f 6d 6d 5f 73 69 7a 65 48 80 80 40"  # attr comm_size: int64_val = 1048576
)


def golden_node() -> Node:
    return Node(
        id=3,
        name="all_reduce_4npus_1MB",
        type=NodeType.COMM_COLL_NODE,
        attrs=[
            chakra.is_cpu_op(False),
            chakra.comm_type(CollectiveType.ALL_REDUCE),
            chakra.comm_size(1048576),
        ],
    )
