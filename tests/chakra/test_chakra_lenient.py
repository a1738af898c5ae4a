"""What the reader accepts beyond our writer's output, as protobuf parsers and ASTRA-SIM do."""

from __future__ import annotations

import gzip
from pathlib import Path

from chakra_samples import GOLDEN, golden_node

from simstudy import chakra
from simstudy.chakra import Attr, AttrKind, GlobalMetadata, IOInfo, Node, NodeType


def node_from_hex(text: str) -> Node:
    return chakra.decode_node(bytes.fromhex(text))


def test_unpacked_and_mixed_deps() -> None:
    node = node_from_hex("08 01 20 05 20 07 28 03 22 01 09 20 ac 02")
    assert node.ctrl_deps == [5, 7, 9, 300]
    assert node.data_deps == [3]
    assert chakra.encode_node(node).hex(" ") == "08 01 22 05 05 07 09 ac 02 2a 01 03"


def test_unknown_fields_of_every_wire_type_are_skipped() -> None:
    unknown = (
        "58 01"  # field 11, varint
        " 61 01 02 03 04 05 06 07 08"  # field 12, fixed64
        " 6a 02 aa bb"  # field 13, LEN
        " 75 01 02 03 04"  # field 14, fixed32
        " 7b 08 01 83 01 0a 00 84 01 7c"  # field 15, a group holding a nested group
        " a0 06 ff ff ff ff ff ff ff ff ff 01"  # field 100, a 10-byte varint
    )
    node = node_from_hex(f"08 03 {unknown} 18 07 52 05 0a 01 78 48 01 {unknown}")
    assert node == Node(3, type=NodeType.COMM_COLL_NODE, attrs=[Attr.int64("x", 1)])
    meta = chakra.decode_metadata(bytes.fromhex(f"0a 01 76 {unknown} 12 03 c0 02 01"))  # field 40 in the attr: unknown
    assert meta == GlobalMetadata(version="v", attrs=[Attr("", AttrKind.NOT_SET, None)])
    attr_body = f"0a 01 78 {unknown} 48 01 88 02 01"  # field 33 is not a oneof member
    attr_len = len(bytes.fromhex(attr_body))
    assert node_from_hex(f"52 {attr_len:02x} {attr_body}").attrs == [Attr.int64("x", 1)]
    io = node_from_hex(f"42 {len(bytes.fromhex(unknown)) + 3:02x} 0a 01 76 {unknown}").inputs
    assert io == IOInfo(values="v")


def test_known_field_with_another_wire_type_is_unknown() -> None:
    assert node_from_hex("0a 01 00 08 02") == Node(2)  # id sent as LEN: skipped
    assert node_from_hex("52 05 0a 01 78 4a 00").attrs == [Attr("x", AttrKind.NOT_SET, None)]


def test_repeated_singular_fields_last_wins_and_messages_merge() -> None:
    node = node_from_hex("08 01 08 02 12 01 61 12 01 62 42 03 0a 01 76 42 03 1a 01 74")
    assert (node.id, node.name, node.inputs) == (2, "b", IOInfo(values="v", types="t"))
    switched = node_from_hex("52 08 0a 01 78 48 01 d8 01 01")  # int64 then bool: the bool wins
    assert switched.attrs == [Attr.bool("x", True)]
    merged = node_from_hex("52 0f 0a 01 78 e2 01 03 0a 01 01 e2 01 03 0a 01 00")
    assert merged.attrs == [Attr.bool_list("x", [True, False])]


def test_list_elements_packed_or_not() -> None:
    attr = node_from_hex("52 0c 0a 01 78 e2 01 06 08 01 08 00 0a 00").attrs[0]
    assert attr == Attr.bool_list("x", [True, False])
    doubles = node_from_hex("52 0e 0a 01 78 22 09 09 00 00 00 00 00 00 f8 3f").attrs[0]
    assert doubles == Attr.double_list("x", [1.5])


def test_non_canonical_varints_are_read() -> None:
    assert node_from_hex("08 81 80 00") == Node(1)
    assert node_from_hex("52 0e 0a 01 78 38 ff ff ff ff ff ff ff ff ff 01").attrs == [Attr.int32("x", -1)]
    assert node_from_hex("52 0e 0a 01 78 d8 01 80 80 80 80 80 80 80 80 01").attrs == [Attr.bool("x", True)]


def test_attribute_without_value_round_trips() -> None:
    node = node_from_hex("08 01 52 03 0a 01 78")
    assert node.attrs == [Attr("x", AttrKind.NOT_SET, None)]
    assert node.get("x", "default") is None
    assert chakra.encode_node(node).hex(" ") == "08 01 52 03 0a 01 78"


def test_zero_length_node_frames_do_not_end_the_trace() -> None:
    tail = chakra.frame(chakra.encode_node(Node(9, "after")))
    _, node_list = chakra.decode_trace(GOLDEN + b"\x00" + tail)
    assert node_list == [golden_node(), Node(0), Node(9, "after")]


def test_empty_metadata_frame() -> None:
    meta, node_list = chakra.decode_trace(b"\x00" + chakra.frame(chakra.encode_node(Node(1))))
    assert meta == GlobalMetadata(version="")
    assert node_list == [Node(1)]
    assert chakra.decode_trace(b"\x00") == (GlobalMetadata(version=""), [])


def test_gzip_input(tmp_path: Path) -> None:
    assert chakra.decode_trace(gzip.compress(GOLDEN)) == chakra.decode_trace(GOLDEN)
    path = tmp_path / "all_reduce.3.et.gz"
    path.write_bytes(gzip.compress(GOLDEN))
    assert chakra.read_trace(path) == (GlobalMetadata(), [golden_node()])
    assert list(chakra.iter_nodes(path)) == [golden_node()]


def test_bytes_like_input() -> None:
    assert chakra.decode_trace(bytearray(GOLDEN)) == chakra.decode_trace(GOLDEN)
    assert chakra.decode_trace(memoryview(GOLDEN)) == chakra.decode_trace(GOLDEN)
