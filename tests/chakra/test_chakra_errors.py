"""Malformed input: always ChakraFormatError naming the source, the byte offset and the problem."""

from __future__ import annotations

import contextlib
import gzip
import os
from pathlib import Path

import pytest
from chakra_samples import GOLDEN
from chakra_strategies import nodes
from hypothesis import example, given, settings
from hypothesis import strategies as st

from simstudy import chakra
from simstudy.chakra import Attr, ChakraFormatError, GlobalMetadata, IOInfo, Node, NodeType


def small_trace() -> tuple[bytes, list[int], list[Node]]:
    """A trace touching most decoder paths, the offsets at which its frames end, and its nodes."""
    node_list = [
        Node(1, "comp", NodeType.COMP_NODE, duration_micros=1234, attrs=[chakra.num_ops(10**9)]),
        Node(
            300,
            "coll",
            NodeType.COMM_COLL_NODE,
            ctrl_deps=[1],
            data_deps=[1, 2**40],
            inputs=IOInfo("v", "s", "t"),
            attrs=[
                chakra.comm_type(chakra.CollectiveType.ALL_GATHER),
                chakra.involved_dim([True, False]),
                Attr.string_list("l", ["a", "bc"]),
                Attr.double("d", 2.5),
                Attr.sint64("z", -7),
            ],
        ),
        Node(0),
    ]
    meta = GlobalMetadata(attrs=[Attr.string("schema", "x")])
    frames = [chakra.frame(chakra.encode_metadata(meta))]
    frames += [chakra.frame(chakra.encode_node(n)) for n in node_list]
    ends = [sum(len(f) for f in frames[: i + 1]) for i in range(len(frames))]
    return b"".join(frames), ends, node_list


def test_every_cut_either_ends_on_a_frame_or_raises() -> None:
    data, ends, node_list = small_trace()
    for cut in range(len(data) + 1):
        prefix = data[:cut]
        if cut in ends:
            _, decoded = chakra.decode_trace(prefix, source="cut.et")
            assert decoded == node_list[: ends.index(cut)]
        else:
            with pytest.raises(ChakraFormatError, match=r"^cut\.et: .* at byte \d+: "):
                chakra.decode_trace(prefix, source="cut.et")


def error_of(data: bytes, source: str = "t.0.et") -> ChakraFormatError:
    with pytest.raises(ChakraFormatError) as info:
        chakra.decode_trace(data, source=source)
    return info.value


def test_message_names_file_offset_and_problem() -> None:
    err = error_of(GOLDEN[:50], "trace.0.et")
    assert str(err) == "trace.0.et: truncated node frame #0 at byte 8: length 74 but 41 bytes left"
    assert (err.source, err.offset) == ("trace.0.et", 8)
    assert isinstance(err, ValueError)


def test_empty_input() -> None:
    assert str(error_of(b"")) == "t.0.et: empty trace at byte 0: no GlobalMetadata frame"


def test_garbage() -> None:
    assert str(error_of(b"\xff" * 20)) == (
        "t.0.et: bad length of GlobalMetadata frame at byte 0: varint longer than 10 bytes"
    )
    assert str(error_of(b"hello world")) == (
        "t.0.et: truncated GlobalMetadata frame at byte 0: length 104 but 10 bytes left"
    )
    assert "invalid wire type 7" in str(error_of(b"\x02\xff\x07"))


def test_varint_longer_than_ten_bytes_inside_a_node() -> None:
    node = bytes.fromhex("08" + "ff" * 10 + "01")
    err = error_of(GOLDEN[:8] + chakra.frame(node))
    assert str(err) == "t.0.et: malformed node #0 at byte 10: varint longer than 10 bytes"


def test_over_long_lengths() -> None:
    err = error_of(GOLDEN[:8] + chakra.frame(bytes.fromhex("08 01 12 7f 61")))
    assert str(err) == "t.0.et: malformed node #0 at byte 12: Node.name: length 127 but 1 bytes left"
    attr = error_of(GOLDEN[:8] + chakra.frame(bytes.fromhex("52 05 0a 09 78 48 00")))
    assert str(attr) == "t.0.et: malformed node #0 at byte 12: AttributeProto.name: length 9 but 3 bytes left"
    frame = error_of(GOLDEN + b"\xff\xff\xff\xff\x0f")
    assert str(frame) == "t.0.et: truncated node frame #1 at byte 83: length 4294967295 but 0 bytes left"


def test_truncated_varints() -> None:
    assert "truncated varint" in str(error_of(GOLDEN + b"\x80"))
    assert "message ends where a varint should start" in str(error_of(GOLDEN[:8] + chakra.frame(b"\x08")))
    assert "message ends inside a field" in str(error_of(GOLDEN[:8] + chakra.frame(b"\x52")))
    assert "message ends" in str(error_of(GOLDEN[:8] + chakra.frame(b"\x08\x80")))


@pytest.mark.parametrize(
    ("node_hex", "problem"),
    [
        ("12 02 c3 28", "Node.name: invalid UTF-8"),
        ("18 08", "unknown NodeType 8"),
        ("18 ff ff ff ff ff ff ff ff ff 01", "unknown NodeType -1"),
        ("00 01", "invalid field number 0"),
        ("5c", "end-group key for field 11 without a start-group"),
        ("5b 08 01", "group of field 11 never ends"),
        ("5b 64", "end-group key for field 12 does not match"),
        ("5e", "invalid wire type 6"),
        ("22 01 80 08", "packed dependencies: last varint runs past the length"),
        ("52 06 0a 01 78 21 00 00", "fixed-width value cut short"),
        ("52 07 0a 01 78 e2 01 01 0a", "message ends where a varint should start"),
        ("52 07 0a 01 78 22 02 0a 01", "packed double list: length 1 but 0 bytes left"),
        ("52 0b 0a 01 78 22 06 0a 04 00 00 00 00", "8-byte fixed-width value cut short"),
        (
            "52 14 0a 01 78 22 0f 0a 04 00 00 00 00 09 00 00 00 00 00 00 f0 3f",
            "packed double list: last element runs past its length",
        ),
        ("42 02 0a 05", "IOInfo.values: length 5"),
        ("42 02 58 ff", "truncated varint"),
        ("52 09 0a 01 78", "AttributeProto: length 9 but 3 bytes left"),
        ("52 06 0a 01 78 ea 01 01 ff", "string value: length 1 but 0 bytes left"),
        ("52 07 0a 01 78 ea 01 01 ff", "string value: invalid UTF-8"),
    ],
)
def test_malformed_nodes(node_hex: str, problem: str) -> None:
    err = error_of(GOLDEN[:8] + chakra.frame(bytes.fromhex(node_hex)))
    assert err.what == "malformed node #0"
    assert problem in err.detail
    assert 9 <= err.offset <= 9 + len(bytes.fromhex(node_hex))  # the node starts at byte 9


def test_deep_groups_are_bounded() -> None:
    err = error_of(GOLDEN[:8] + chakra.frame(b"\x5b" * 100))
    assert "nested deeper than 64" in err.detail


def test_bad_gzip() -> None:
    assert error_of(b"\x1f\x8b\x08\x00garbage").what == "bad gzip stream"
    assert error_of(gzip.compress(GOLDEN)[:-3]).what == "bad gzip stream"


def test_offsets_of_gzip_input_are_into_the_decompressed_bytes() -> None:
    err = error_of(gzip.compress(GOLDEN[:50]))
    assert err.offset == 8
    assert str(err).startswith("t.0.et (gunzipped): truncated node frame #0 at byte 8")


def test_read_trace_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "trace.0.et"
    path.write_bytes(GOLDEN[:-1])
    with pytest.raises(ChakraFormatError, match=r"trace\.0\.et: truncated node frame #0 at byte 8"):
        chakra.read_trace(path)
    with pytest.raises(ChakraFormatError, match=r"trace\.0\.et"):
        list(chakra.iter_nodes(path))


@given(st.binary(max_size=64))
@example(b"\x01\x00")
@example(b"\x00\x03\x52\x01\x5b")
@settings(max_examples=500)
def test_random_bytes_never_raise_anything_else(data: bytes) -> None:
    with contextlib.suppress(ChakraFormatError):
        chakra.decode_trace(data)


@given(st.lists(nodes(), min_size=1, max_size=3), st.data())
@settings(max_examples=200)
def test_mutated_traces_never_raise_anything_else(node_list: list[Node], data: st.DataObject) -> None:
    encoded = bytearray(chakra.encode_trace(GlobalMetadata(), node_list))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(encoded) - 1))
        encoded[position] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ChakraFormatError):
        chakra.decode_trace(bytes(encoded))


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.0.et"
    path.write_bytes(GOLDEN)
    with pytest.raises(ValueError):
        chakra.write_trace(path, GlobalMetadata(), [Node(1), Node(-1)])
    assert path.read_bytes() == GOLDEN
    assert os.listdir(tmp_path) == ["t.0.et"]


def test_failed_replace_removes_the_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "a_directory.0.et"
    target.mkdir()
    (target / "keep").write_text("x")
    with pytest.raises(OSError):
        chakra.write_trace(target, GlobalMetadata(), [Node(1)])
    assert sorted(os.listdir(tmp_path)) == ["a_directory.0.et"]
