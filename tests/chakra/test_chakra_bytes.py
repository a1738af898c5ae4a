"""Hand-checked encodings of the cases the golden file does not cover (proto3 rules, oneof rules)."""

from __future__ import annotations

import pytest

from simstudy import chakra
from simstudy.chakra import Attr, AttrKind, GlobalMetadata, IOInfo, Node, NodeType


def node_bytes(node: Node) -> str:
    return chakra.encode_node(node).hex(" ")


def attr_in_node(attr: Attr) -> str:
    """The bytes of Node(id=1, attrs=[attr]) after the `08 01` of the id."""
    encoded = chakra.encode_node(Node(1, attrs=[attr]))
    assert encoded[:2] == b"\x08\x01"
    return encoded[2:].hex(" ")


def test_id_zero_and_defaults_are_omitted() -> None:
    assert node_bytes(Node(0)) == ""
    assert node_bytes(Node(0, "a", NodeType.COMP_NODE)) == "12 01 61 18 04"
    assert node_bytes(Node(0, type=NodeType.INVALID_NODE, start_time_micros=0, duration_micros=0)) == ""


def test_ids_times_and_big_values() -> None:
    assert node_bytes(Node(300)) == "08 ac 02"
    assert node_bytes(Node(1, start_time_micros=1, duration_micros=2**64 - 1)) == (
        "08 01 30 01 38 ff ff ff ff ff ff ff ff ff 01"
    )


def test_packed_deps() -> None:
    node = Node(1, ctrl_deps=[1, 300], data_deps=[0, 2])
    assert node_bytes(node) == "08 01 22 03 01 ac 02 2a 02 00 02"
    assert node_bytes(Node(1, data_deps=[5])) == "08 01 2a 01 05"


def test_zero_valued_oneof_is_written() -> None:
    assert attr_in_node(Attr.int64("n", 0)) == "52 05 0a 01 6e 48 00"
    assert attr_in_node(Attr.bool("b", False)) == "52 06 0a 01 62 d8 01 00"
    assert attr_in_node(Attr.string("s", "")) == "52 06 0a 01 73 ea 01 00"
    assert attr_in_node(Attr.double("d", 0.0)) == "52 0c 0a 01 64 19 00 00 00 00 00 00 00 00"


def test_attribute_without_name_still_writes_its_value() -> None:
    assert attr_in_node(Attr.int32("", 0)) == "52 02 38 00"


def test_two_byte_key_zigzag() -> None:
    assert attr_in_node(Attr.sint64("s", -3)) == "52 06 0a 01 73 88 01 05"
    assert attr_in_node(Attr.sint64("s", 3)) == "52 06 0a 01 73 88 01 06"
    assert attr_in_node(Attr.sint32("s", -1)) == "52 05 0a 01 73 78 01"


def test_negative_int32_takes_ten_bytes() -> None:
    assert attr_in_node(Attr.int32("i", -1)) == "52 0e 0a 01 69 38 ff ff ff ff ff ff ff ff ff 01"


def test_fixed_width_members() -> None:
    assert attr_in_node(Attr.double("d", 1.5)) == "52 0c 0a 01 64 19 00 00 00 00 00 00 f8 3f"
    assert attr_in_node(Attr.float("f", 1.5)) == "52 08 0a 01 66 2d 00 00 c0 3f"
    assert attr_in_node(Attr.fixed32("x", 1)) == "52 09 0a 01 78 9d 01 01 00 00 00"
    assert attr_in_node(Attr.sfixed64("x", -2)) == "52 0d 0a 01 78 c9 01 fe ff ff ff ff ff ff ff"


def test_bool_list() -> None:
    attr = chakra.involved_dim((True, False, True))
    assert attr == Attr("involved_dim", AttrKind.BOOL_LIST, (True, False, True))
    encoded = attr_in_node(Attr.bool_list("d", [True, False, True]))
    assert encoded == "52 0b 0a 01 64 e2 01 05 0a 03 01 00 01"


def test_empty_list_member_is_an_empty_wrapper() -> None:
    assert attr_in_node(Attr.bool_list("d", [])) == "52 06 0a 01 64 e2 01 00"


def test_string_list_is_not_packed() -> None:
    encoded = attr_in_node(Attr.string_list("l", ["ab", ""]))
    assert encoded == "52 0c 0a 01 6c f2 01 06 0a 02 61 62 0a 00"


def test_bytes_list_has_a_two_byte_key() -> None:
    assert attr_in_node(Attr.bytes_list("l", [b"\x00"])) == "52 09 0a 01 6c 82 02 03 0a 01 00"


def test_int64_list_packs_negative_numbers_as_ten_bytes() -> None:
    encoded = attr_in_node(Attr.int64_list("l", [1, -1]))
    assert encoded == "52 12 0a 01 6c 52 0d 0a 0b 01 ff ff ff ff ff ff ff ff ff 01"


def test_doc_string_follows_name() -> None:
    assert attr_in_node(Attr.int64("n", 1, doc_string="d")) == "52 08 0a 01 6e 12 01 64 48 01"


def test_io_info() -> None:
    node = Node(1, inputs=IOInfo(values="x", types="t"), outputs=IOInfo())
    assert node_bytes(node) == "08 01 42 06 0a 01 78 1a 01 74 4a 00"
    assert node_bytes(Node(1, outputs=IOInfo(shapes="s"))) == "08 01 4a 03 12 01 73"


def test_fields_in_number_order() -> None:
    node = Node(
        2,
        "n",
        NodeType.COMP_NODE,
        ctrl_deps=[1],
        data_deps=[1],
        start_time_micros=3,
        duration_micros=4,
        inputs=IOInfo(values="v"),
        outputs=IOInfo(values="w"),
        attrs=[chakra.is_cpu_op(True)],
    )
    assert node_bytes(node) == (
        "08 02 12 01 6e 18 04 22 01 01 2a 01 01 30 03 38 04"
        " 42 03 0a 01 76 4a 03 0a 01 77 52 0e 0a 09 69 73 5f 63 70 75 5f 6f 70 d8 01 01"
    )


def test_metadata_with_attributes() -> None:
    meta = GlobalMetadata(version="", attrs=[Attr.string("schema", "1.0.2-chakra.0.0.4")])
    expected = "12 1d 0a 06 73 63 68 65 6d 61 ea 01 12 " + b"1.0.2-chakra.0.0.4".hex(" ")
    assert chakra.encode_metadata(meta).hex(" ") == expected
    assert chakra.encode_metadata(GlobalMetadata(version="")) == b""
    assert chakra.encode_trace(GlobalMetadata(version=""), [Node(0)]) == b"\x00\x00"


def test_canonical_members() -> None:
    expected = {
        chakra.is_cpu_op(True): AttrKind.BOOL,
        chakra.num_ops(5): AttrKind.INT64,
        chakra.tensor_size(5): AttrKind.UINT64,
        chakra.comm_type(chakra.CollectiveType.REDUCE_SCATTER): AttrKind.INT64,
        chakra.comm_size(5): AttrKind.INT64,
        chakra.comm_priority(5): AttrKind.INT32,
        chakra.comm_src(5): AttrKind.INT32,
        chakra.comm_dst(5): AttrKind.INT32,
        chakra.comm_tag(5): AttrKind.INT32,
        chakra.pg_name("5"): AttrKind.STRING,
        chakra.involved_dim([True]): AttrKind.BOOL_LIST,
    }
    for attr, kind in expected.items():
        assert attr.kind is kind, attr
    assert chakra.comm_type(chakra.CollectiveType.REDUCE_SCATTER).value == 7
    assert type(chakra.comm_type(chakra.CollectiveType.REDUCE_SCATTER).value) is int


def test_canonical_helpers_validate() -> None:
    with pytest.raises(ValueError):
        chakra.comm_size(-1)
    with pytest.raises(ValueError):
        chakra.comm_type(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        chakra.pg_name(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        chakra.comm_size(1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        chakra.comm_tag(2**31)


def test_attr_values_are_checked_and_normalised() -> None:
    assert Attr.float("f", 0.1).value == pytest.approx(0.1, rel=1e-7)
    assert Attr.float("f", 0.1).value != 0.1  # rounded to float32 on construction
    assert Attr.int64_list("l", [1, 2]).value == (1, 2)
    assert Attr.bool("b", 1).value is True  # type: ignore[arg-type]
    assert type(Attr.int64("i", True).value) is int
    with pytest.raises(ValueError):
        Attr.int32("i", 2**31)
    with pytest.raises(ValueError):
        Attr.uint64("u", -1)
    with pytest.raises(ValueError):
        Attr.float("f", 1e300)
    with pytest.raises(TypeError):
        Attr.int64("i", 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Attr.bool("b", 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Attr.string_list("l", "abc")
    with pytest.raises(ValueError):
        Attr.string("s", "\ud800")


def test_kind_names() -> None:
    assert AttrKind.INT64.field_name == "int64_val"
    assert AttrKind.BOOL_LIST.field_name == "bool_list"
    assert AttrKind.BOOL_LIST.is_list and not AttrKind.BOOL.is_list
    assert len([k for k in AttrKind if k != AttrKind.NOT_SET]) == 30


def test_unencodable_nodes_raise_value_error() -> None:
    with pytest.raises(ValueError, match="node id=-1"):
        chakra.encode_node(Node(-1))
    with pytest.raises(ValueError):
        chakra.encode_node(Node(1, data_deps=[2**64]))
    with pytest.raises(ValueError):
        chakra.encode_node(Node(1, ctrl_deps=[-1]))
    with pytest.raises(ValueError):
        chakra.encode_node(Node(1, duration_micros=-5))
    with pytest.raises(ValueError):
        chakra.encode_node(Node(1, type=9))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        chakra.encode_node(Node(1, attrs=["x"]))  # type: ignore[list-item]
