"""Chakra execution-trace (ET) codec: write and read the files ASTRA-SIM replays.

A pure-Python proto3 encoder/decoder for exactly the `ChakraProtoMsg` schema
(docs/chakra-et-format.md); nothing else in simstudy touches the wire format. Written bytes
equal those of Chakra's protobuf-based writer for the same content.

    meta = GlobalMetadata()
    node = Node(3, "all_reduce", NodeType.COMM_COLL_NODE,
                attrs=[is_cpu_op(False), comm_type(CollectiveType.ALL_REDUCE), comm_size(1 << 20)])
    write_trace(trace_path("out/all_reduce", 3), meta, [node])
    meta, nodes = read_trace("out/all_reduce.3.et")
"""

from __future__ import annotations

from simstudy.chakra.canonical import (
    comm_dst,
    comm_priority,
    comm_size,
    comm_src,
    comm_tag,
    comm_type,
    involved_dim,
    is_cpu_op,
    num_ops,
    pg_name,
    tensor_size,
)
from simstudy.chakra.decode import Interner, decode_metadata, decode_node, decode_trace, iter_nodes, read_trace
from simstudy.chakra.encode import encode_metadata, encode_node, encode_trace, frame, write_trace
from simstudy.chakra.errors import ChakraFormatError
from simstudy.chakra.files import find_trace_files, trace_path
from simstudy.chakra.model import Attr, CollectiveType, GlobalMetadata, IOInfo, Node, NodeType
from simstudy.chakra.values import AttrKind, AttrValue

__all__ = [
    "Attr",
    "AttrKind",
    "AttrValue",
    "ChakraFormatError",
    "CollectiveType",
    "GlobalMetadata",
    "IOInfo",
    "Interner",
    "Node",
    "NodeType",
    "comm_dst",
    "comm_priority",
    "comm_size",
    "comm_src",
    "comm_tag",
    "comm_type",
    "decode_metadata",
    "decode_node",
    "decode_trace",
    "encode_metadata",
    "encode_node",
    "encode_trace",
    "find_trace_files",
    "frame",
    "involved_dim",
    "is_cpu_op",
    "iter_nodes",
    "num_ops",
    "pg_name",
    "read_trace",
    "tensor_size",
    "trace_path",
    "write_trace",
]
