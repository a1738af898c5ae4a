"""The compiled framing and numbering of traces (flowsim's core: `FrameIndex`) against `chakra`'s own
reader: random bundles of traces that share nodes, broken, gzipped and oddly framed ones among them,
must give the same nodes, shared the same way, or the same error."""

from __future__ import annotations

import gzip

import pytest
from chakra_strategies import nodes
from hypothesis import given, settings
from hypothesis import strategies as st

from simstudy import chakra
from simstudy.chakra import ChakraFormatError, GlobalMetadata, Node

core = pytest.importorskip("simstudy.backends.flowsim._core", reason="the compiled core is not built")


def _long_lengths(data: bytes) -> bytes:
    """The same frames, each length written as a varint of 6 bytes (valid protobuf, not canonical:
    the compiled framing leaves such a trace to the Python reader)."""
    frames = chakra.decode._frames(data, "<t>")
    out = bytearray()
    for start, end in frames:
        n = end - start
        out += bytes([(n >> (7 * k)) & 0x7F | 0x80 for k in range(5)]) + bytes([n >> 35])
        out += data[start:end]
    return bytes(out)


@st.composite
def bundles(draw: st.DrawFn) -> list[bytes]:
    """1-5 traces whose nodes come from one pool of 1-6 (so they repeat within and across traces),
    each plain, gzipped, framed with long lengths, cut short or with bytes changed."""
    pool = draw(st.lists(nodes(), min_size=1, max_size=6))
    traces = []
    for _ in range(draw(st.integers(1, 5))):
        picks = draw(st.lists(st.sampled_from(pool), max_size=8))
        data = chakra.encode_trace(GlobalMetadata(), picks)
        how = draw(st.sampled_from(["plain", "plain", "plain", "gzip", "long", "cut", "mutate", "empty"]))
        if how == "gzip":
            data = gzip.compress(data)
        elif how == "long":
            data = _long_lengths(data)
        elif how == "cut":
            data = data[: draw(st.integers(0, len(data)))]
        elif how == "mutate":
            b = bytearray(data)
            for _ in range(draw(st.integers(1, 3))):
                b[draw(st.integers(0, len(b) - 1))] = draw(st.integers(0, 255))
            data = bytes(b)
        elif how == "empty":
            data = b""
        traces.append(data)
    return traces


def _read(traces: list[bytes], compiled: bool) -> tuple[list[list[Node]], str | None]:
    """Each trace's nodes until the first error (an error ends a bundle's read), and that error."""
    reader = chakra.Interner(core.FrameIndex() if compiled else None)
    out: list[list[Node]] = []
    for i, data in enumerate(traces):
        try:
            out.append(reader.decode(data, f"t{i}"))
        except ChakraFormatError as exc:
            return out, str(exc)
    return out, None


def _sharing(traces: list[list[Node]]) -> list[int]:
    """Which nodes are one object: each node's number in order of first appearance."""
    ids: dict[int, int] = {}
    return [ids.setdefault(id(n), len(ids)) for nodes_ in traces for n in nodes_]


@given(bundles())
@settings(max_examples=400, deadline=None)
def test_compiled_framing_reads_as_the_python_reader(traces: list[bytes]) -> None:
    py, py_error = _read(traces, compiled=False)
    cc, cc_error = _read(traces, compiled=True)
    assert cc_error == py_error
    assert cc == py
    assert _sharing(cc) == _sharing(py)


def test_long_lengths_are_framed_by_python() -> None:
    data = chakra.encode_trace(GlobalMetadata(), [Node(1, "a"), Node(2, "b")])
    assert core.FrameIndex().frames(data) is not None
    long = _long_lengths(data)
    assert core.FrameIndex().frames(long) is None
    assert _read([long], True) == _read([data], False)
