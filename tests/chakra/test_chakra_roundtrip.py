"""decode(encode(x)) == x for random traces holding every node type and attribute member."""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

import pytest
from chakra_strategies import MEMBERS, attrs, metadata, nodes
from hypothesis import given, settings
from hypothesis import strategies as st

from simstudy import chakra
from simstudy.chakra import Attr, AttrKind, GlobalMetadata, Node


@given(metadata(), st.lists(nodes(), max_size=8))
@settings(max_examples=300)
def test_trace_round_trip(meta: GlobalMetadata, node_list: list[Node]) -> None:
    data = chakra.encode_trace(meta, node_list)
    assert chakra.decode_trace(data) == (meta, node_list)


@given(nodes())
@settings(max_examples=300)
def test_node_round_trip_is_byte_stable(node: Node) -> None:
    data = chakra.encode_node(node)
    decoded = chakra.decode_node(data)
    assert decoded == node
    assert chakra.encode_node(decoded) == data


@pytest.mark.parametrize("kind", MEMBERS, ids=lambda k: k.field_name)
@given(data=st.data())
@settings(max_examples=25)
def test_every_member_round_trips(kind: AttrKind, data: st.DataObject) -> None:
    attr = data.draw(attrs([kind]))
    node = Node(1, attrs=[attr])
    assert chakra.decode_node(chakra.encode_node(node)).attrs == [attr]


@given(st.lists(nodes(), min_size=1, max_size=4))
@settings(max_examples=30)
def test_file_round_trip(tmp_path_factory: pytest.TempPathFactory, node_list: list[Node]) -> None:
    path = tmp_path_factory.mktemp("rt") / "t.0.et"
    size = chakra.write_trace(path, GlobalMetadata(), node_list)
    assert path.stat().st_size == size
    assert chakra.read_trace(path) == (GlobalMetadata(), node_list)
    assert list(chakra.iter_nodes(path)) == node_list


def test_nan_survives_bit_for_bit() -> None:
    weird_nan = struct.unpack("<d", bytes.fromhex("0100000000 00f8ff".replace(" ", "")))[0]
    node = Node(1, attrs=[Attr.double("d", weird_nan), Attr.float("f", math.nan)])
    data = chakra.encode_node(node)
    decoded = chakra.decode_node(data)
    assert chakra.encode_node(decoded) == data
    assert all(math.isnan(a.value) for a in decoded.attrs if isinstance(a.value, float))


def test_shared_attrs_are_reused_by_the_decoder(tmp_path: Path) -> None:
    node_list = [Node(i, attrs=[chakra.is_cpu_op(False), chakra.comm_size(64)]) for i in range(3)]
    _, decoded = chakra.decode_trace(chakra.encode_trace(GlobalMetadata(), node_list))
    assert decoded == node_list
    assert decoded[0].attrs[1] is decoded[2].attrs[1]


@given(metadata(), st.lists(st.lists(nodes(), max_size=6), min_size=1, max_size=4), st.data())
@settings(max_examples=200)
def test_interned_decoding_equals_plain(meta: GlobalMetadata, traces: list[list[Node]], data: st.DataObject) -> None:
    """Traces sharing nodes (drawn from a common pool) decode to the same nodes with a shared intern table
    as without one, and a node's bytes seen twice give one object."""
    pool = [n for t in traces for n in t]
    if pool:
        traces = [t + data.draw(st.lists(st.sampled_from(pool), max_size=4)) for t in traces]
    table: dict[bytes, Node] = {}
    lists: dict[tuple[Any, ...], list[Any]] = {}
    for t in traces:
        encoded = chakra.encode_trace(meta, t)
        plain = chakra.decode_trace(encoded)
        interned = chakra.decode_trace(encoded, intern=table)
        shared = chakra.decode_trace(encoded, intern={}, lists=lists)
        assert interned == plain == shared == (meta, t)
    for node in table.values():
        assert table[chakra.encode_node(node)] is node


def test_nodes_alike_but_one_attribute_share_their_lists() -> None:
    """Two collectives of different groups (one attribute apart) are two nodes, whose dependencies
    are one list."""
    a = Node(5, data_deps=[4], ctrl_deps=[2], attrs=[chakra.comm_size(64), chakra.pg_name("1")])
    b = Node(5, data_deps=[4], ctrl_deps=[2], attrs=[chakra.comm_size(64), chakra.pg_name("2")])
    table: dict[bytes, Node] = {}
    lists: dict[tuple[Any, ...], list[Any]] = {}
    _, [x] = chakra.decode_trace(chakra.encode_trace(GlobalMetadata(), [a]), intern=table, lists=lists)
    _, [y] = chakra.decode_trace(chakra.encode_trace(GlobalMetadata(), [b]), intern=table, lists=lists)
    assert (x, y) == (a, b) and x is not y
    assert x.data_deps is y.data_deps and x.ctrl_deps is y.ctrl_deps and x.attrs is not y.attrs
