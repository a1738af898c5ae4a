"""Hypothesis strategies for Chakra ET values: every attribute member, random nodes and traces."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from simstudy.chakra import Attr, AttrKind, GlobalMetadata, IOInfo, Node, NodeType

U64 = st.integers(0, 2**64 - 1)

_ELEMENTS: dict[str, st.SearchStrategy[Any]] = {
    "DOUBLE": st.floats(allow_nan=False),
    "FLOAT": st.floats(width=32, allow_nan=False),
    "INT32": st.integers(-(2**31), 2**31 - 1),
    "INT64": st.integers(-(2**63), 2**63 - 1),
    "UINT32": st.integers(0, 2**32 - 1),
    "UINT64": U64,
    "SINT32": st.integers(-(2**31), 2**31 - 1),
    "SINT64": st.integers(-(2**63), 2**63 - 1),
    "FIXED32": st.integers(0, 2**32 - 1),
    "FIXED64": U64,
    "SFIXED32": st.integers(-(2**31), 2**31 - 1),
    "SFIXED64": st.integers(-(2**63), 2**63 - 1),
    "BOOL": st.booleans(),
    "STRING": st.text(max_size=12),
    "BYTES": st.binary(max_size=12),
}

MEMBERS = [k for k in AttrKind if k != AttrKind.NOT_SET]


def values_of(kind: AttrKind) -> st.SearchStrategy[Any]:
    """Valid Python values of one oneof member."""
    if kind == AttrKind.NOT_SET:
        return st.none()
    if kind.is_list:
        return st.lists(_ELEMENTS[kind.name.removesuffix("_LIST")], max_size=5).map(tuple)
    return _ELEMENTS[kind.name]


@st.composite
def attrs(draw: st.DrawFn, kinds: list[AttrKind] | None = None) -> Attr:
    kind = draw(st.sampled_from(kinds or [*MEMBERS, AttrKind.NOT_SET]))
    doc = draw(st.one_of(st.just(""), st.text(max_size=4)))
    return Attr(draw(st.text(max_size=12)), kind, draw(values_of(kind)), doc)


def io_infos() -> st.SearchStrategy[IOInfo | None]:
    text = st.text(max_size=8)
    return st.none() | st.builds(IOInfo, text, text, text)


def deps() -> st.SearchStrategy[list[int]]:
    return st.lists(st.one_of(st.integers(0, 200), U64), max_size=6)


def nodes() -> st.SearchStrategy[Node]:
    times = st.one_of(st.just(0), st.integers(0, 10**6), U64)
    return st.builds(
        Node,
        id=st.one_of(st.integers(0, 1000), U64),
        name=st.text(max_size=20),
        type=st.sampled_from(NodeType),
        ctrl_deps=deps(),
        data_deps=deps(),
        start_time_micros=times,
        duration_micros=times,
        inputs=io_infos(),
        outputs=io_infos(),
        attrs=st.lists(attrs(), max_size=6),
    )


def metadata() -> st.SearchStrategy[GlobalMetadata]:
    return st.builds(GlobalMetadata, version=st.text(max_size=8), attrs=st.lists(attrs(), max_size=3))
