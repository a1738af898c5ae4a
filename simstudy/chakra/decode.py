"""Reading Chakra ET: frames, GlobalMetadata, Nodes; plain or gzip-compressed.

Accepted beyond what our writer produces, as protobuf parsers do: unpacked as well as packed
repeated dependencies and list elements, unknown fields of any wire type (skipped; a known
field number with an unexpected wire type is treated as unknown), repeated occurrences of
singular fields (the last wins; messages merge), gzip input (magic `1f 8b`).

Zero-length Node frames: Chakra's Python readers take a zero length as end of file and drop
every later node; ASTRA-SIM's FeederV3 reads on. We read on too, so such a frame decodes to
an all-default `Node(id=0)` and the nodes after it are kept.

Anything else malformed raises `ChakraFormatError` naming the source, the absolute byte
offset (into the decompressed data for gzip input) and the problem. An empty input is an
error: every ET file starts with a GlobalMetadata frame.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeAlias

import numpy as np

from simstudy.chakra import wire
from simstudy.chakra.errors import ChakraFormatError, WireError
from simstudy.chakra.model import Attr, GlobalMetadata, IOInfo, Node, NodeType
from simstudy.chakra.values import MEMBERS, AttrValue, Member, decode_member
from simstudy.chakra.wire import LEN, read_key, read_length, read_str, read_varint, skip_field

GZIP_MAGIC = b"\x1f\x8b"

BytesLike: TypeAlias = bytes | bytearray | memoryview

_NODE_TYPES: dict[int, NodeType] = {t.value: t for t in NodeType}
#: NodeTypes by value (0, 1, ... without a gap)
_TYPES: list[NodeType] = [_NODE_TYPES[v] for v in range(len(_NODE_TYPES))]


#: Decoded attributes by their encoded bytes: traces repeat a few attributes on every node.
_ATTR_CACHE_LIMIT = 1 << 16
_attr_cache: dict[bytes, Attr] = {}


def decode_trace(data: BytesLike, *, source: str = "<bytes>", intern: dict[bytes, Node] | None = None,
                 lists: dict[tuple[Any, ...], list[Any]] | None = None) -> tuple[GlobalMetadata, list[Node]]:
    """Parse a whole trace held in memory (gzip-compressed or not).

    `intern`: nodes by their serialised bytes, shared between the traces of one bundle: a node whose
    bytes were decoded before (the same compute node on every rank of a pipeline stage, the same
    collective on every rank of its group) is that same Node object, decoded once. `lists`: with
    `intern`, a new node's dependencies and attributes are the lists of an earlier node that holds
    the same (the collectives of two groups differ in one attribute, their dependencies not at all:
    three lists per node were 40% of a bundle's decoded nodes). Treat the nodes as read-only then."""
    data, source = _uncompressed(bytes(data), source)
    frames = _frames(data, source)
    meta = _first_metadata(frames, data, source)
    if intern is None:
        return meta, [_node_at(data, start, end, index, source) for index, (start, end) in enumerate(frames)]
    nodes = []
    for index, (start, end) in enumerate(frames):
        key = data[start:end]
        node = intern.get(key)
        if node is None:
            node = intern[key] = _node_at(data, start, end, index, source)
            if lists is not None:
                node.ctrl_deps = _shared(lists, node.ctrl_deps)
                node.data_deps = _shared(lists, node.data_deps)
                node.attrs = _shared_attrs(lists, node.attrs)
        nodes.append(node)
    return meta, nodes


class FrameNumbers(Protocol):
    """Framing and numbering of frames in compiled code (flowsim's core has one: `FrameIndex`)."""

    def frames(self, data: bytes) -> Any:
        """Flat (start, end) of every frame (int64), or None: let the Python reader frame it."""

    def number(self, data: bytes, spans: Any) -> tuple[Any, Any]:
        """Each frame's number (a new one where its bytes were not seen before), and the new ones'
        (frame, start, end), flat."""

    def plain_nodes(self, data: bytes, fresh: Any, node: type[Node], types: list[NodeType],
                    attrs: dict[bytes, Attr], attr_of: Callable[[bytes], Attr | None]) -> list[Node | None]:
        """The nodes of the new frames (`fresh`) that are plain (as a trace writer writes them), as
        `_decode_node` reads them, their attributes found in `attrs` by their bytes or else decoded
        by `attr_of`; None for the others."""


class Interner:
    """The traces of one bundle decoded with their nodes shared, as `decode_trace`'s `intern` and
    `lists` share them: a node whose bytes were decoded before is that same Node object.

    `numbers`: framing and numbering in compiled code (one pass over a trace's bytes in C++, a
    node decoded in Python only where its bytes are new); None, or a trace it cannot frame: this
    module's own reader. Both give the same nodes, the same sharing and the same errors (a property
    test runs both on random traces, broken ones among them). Traces that hold the same frames (the
    same bytes, without `numbers`) give one list. An error ends a bundle's read: the interner is not
    used after one."""

    def __init__(self, numbers: FrameNumbers | None = None) -> None:
        self.numbers = numbers
        self.intern: dict[bytes, Node] = {}
        self.lists: dict[tuple[Any, ...], list[Any]] = {}
        self.nodes: list[Node] = []  # by number
        self.metadata: set[bytes] = set()  # metadata frames decoded already (they are only checked)
        self.traces: dict[bytes, list[Node]] = {}  # each distinct trace's list, by what it holds

    def decode(self, data: BytesLike, source: str = "<bytes>") -> list[Node]:
        """The nodes of one trace (its metadata checked, not kept)."""
        if self.numbers is None:
            key = hashlib.blake2b(data, digest_size=16).digest()
            found = self.traces.get(key)
            if found is None:
                found = self.traces[key] = decode_trace(data, source=source, intern=self.intern, lists=self.lists)[1]
            return found
        data, source = _uncompressed(bytes(data), source)
        spans = self.numbers.frames(data)
        if spans is None:  # anything but plain framing: this module finds the frames, or the error
            spans = [x for pair in _frames(data, source) for x in pair]
        head = data[spans[0]:spans[1]]
        if head not in self.metadata:
            _first_metadata([(int(spans[0]), int(spans[1]))], data, source)
            self.metadata.add(head)
        numbers, fresh = self.numbers.number(data, np.ascontiguousarray(spans[2:], dtype=np.int64))
        # the same metadata and the same frames in the same order: the same list
        key = len(head).to_bytes(8, "little") + head + numbers.tobytes()
        if key in self.traces:
            return self.traces[key]
        nodes = self.nodes
        found = fresh.tolist()
        plain = self.numbers.plain_nodes(data, fresh, Node, _TYPES, _attr_cache, _plain_attr)
        for k, node in enumerate(plain):
            if node is None:  # anything but plain, or an attribute not seen yet: decoded here
                index, start, end = found[3 * k:3 * k + 3]
                node = _node_at(data, start, end, index, source)
            node.ctrl_deps = _shared(self.lists, node.ctrl_deps)
            node.data_deps = _shared(self.lists, node.data_deps)
            node.attrs = _shared_attrs(self.lists, node.attrs)
            nodes.append(node)
        trace = self.traces[key] = list(map(nodes.__getitem__, numbers.tolist()))
        return trace


def _shared(lists: dict[tuple[Any, ...], list[Any]], items: list[Any]) -> list[Any]:
    """The list of `lists` that holds what `items` holds (by equality of its items), kept there."""
    return lists.setdefault(tuple(items), items)


def _shared_attrs(lists: dict[tuple[Any, ...], list[Any]], attrs: list[Attr]) -> list[Any]:
    """`_shared` for attributes, found by their encodings (a bytes object keeps its hash; an Attr
    hashes its fields at every lookup): the same list for the same encodings."""
    return lists.setdefault(tuple([a.encoded for a in attrs]), attrs)


def read_trace(path: str | os.PathLike[str]) -> tuple[GlobalMetadata, list[Node]]:
    """Read and parse a trace file (read once, whole)."""
    return decode_trace(Path(path).read_bytes(), source=str(path))


def iter_nodes(path: str | os.PathLike[str]) -> Iterator[Node]:
    """The nodes of a trace file, one at a time (the metadata frame is checked and skipped).

    Framing problems are found before the first node is yielded; a malformed node raises
    when it is reached.
    """
    data, source = _uncompressed(Path(path).read_bytes(), str(path))
    frames = _frames(data, source)
    _first_metadata(frames, data, source)
    for index, (start, end) in enumerate(frames):
        yield _node_at(data, start, end, index, source)


# -- framing --


def _uncompressed(data: bytes, source: str) -> tuple[bytes, str]:
    """`data` and `source`, or the gunzipped content and "<source> (gunzipped)" for gzip input."""
    if not data.startswith(GZIP_MAGIC):
        return data, source
    try:
        return gzip.decompress(data), f"{source} (gunzipped)"
    except (OSError, EOFError, zlib.error) as exc:
        raise ChakraFormatError(source, "bad gzip stream", 0, str(exc) or type(exc).__name__) from None


def _frames(data: bytes, source: str) -> list[tuple[int, int]]:
    """`(start, end)` of every frame's message, metadata first; checks the framing only."""
    if not data:
        raise ChakraFormatError(source, "empty trace", 0, "no GlobalMetadata frame")
    frames: list[tuple[int, int]] = []
    pos = 0
    size = len(data)
    while pos < size:
        what = "GlobalMetadata frame" if not frames else f"node frame #{len(frames) - 1}"
        try:
            length, start = read_varint(data, pos)
        except WireError as exc:
            raise ChakraFormatError(source, f"bad length of {what}", pos, exc.detail) from None
        end = start + length
        if end > size:
            raise ChakraFormatError(source, f"truncated {what}", pos, f"length {length} but {size - start} bytes left")
        frames.append((start, end))
        pos = end
    return frames


def _first_metadata(frames: list[tuple[int, int]], data: bytes, source: str) -> GlobalMetadata:
    """Decode the metadata frame and remove it from `frames`."""
    start, end = frames.pop(0)
    try:
        return _decode_metadata(data[start:end])
    except WireError as exc:
        raise ChakraFormatError(source, "malformed GlobalMetadata", exc.shift(start).offset, exc.detail) from None


def _node_at(data: bytes, start: int, end: int, index: int, source: str) -> Node:
    try:
        return _decode_node(data[start:end])
    except WireError as exc:
        raise ChakraFormatError(source, f"malformed node #{index}", exc.shift(start).offset, exc.detail) from None


# -- messages; offsets in WireError are relative to the buffer passed in --


def _decode_metadata(buf: bytes) -> GlobalMetadata:
    meta = GlobalMetadata(version="")
    pos = 0
    while pos < len(buf):
        key_pos = pos
        tag, pos = read_key(buf, pos)
        if tag == 0x0A:
            meta.version, pos = read_str(buf, pos, "GlobalMetadata.version")
        elif tag == 0x12:
            attr, pos = _read_attr(buf, pos)
            meta.attrs.append(attr)
        else:
            pos = skip_field(buf, pos, tag, key_pos)
    return meta


def decode_node(data: BytesLike, *, source: str = "<bytes>") -> Node:
    """Parse one serialised Node message (unframed, as `encode_node` returns it)."""
    return _node_at(bytes(data), 0, len(data), 0, source)


def decode_metadata(data: BytesLike, *, source: str = "<bytes>") -> GlobalMetadata:
    """Parse one serialised GlobalMetadata message (unframed)."""
    try:
        return _decode_metadata(bytes(data))
    except WireError as exc:
        raise ChakraFormatError(source, "malformed GlobalMetadata", exc.offset, exc.detail) from None


def _decode_node(buf: bytes) -> Node:
    """Parse one serialised Node message; raises WireError.

    The hot loop of every reader: one-byte keys and lengths are read inline, and an attribute
    whose bytes were seen before is taken from the cache without parsing.
    """
    node = Node(0)
    attrs = node.attrs
    cache = _attr_cache
    pos = 0
    size = len(buf)
    try:
        while pos < size:
            key_pos = pos
            tag = buf[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = read_varint(buf, pos)
            if tag == 0x52:
                length = buf[pos]
                if length < 0x80:
                    end = pos + 1 + length
                    attr = cache.get(buf[pos + 1 : end]) if end <= size else None
                    if attr is not None:
                        attrs.append(attr)
                        pos = end
                        continue
                attr, pos = _read_attr(buf, pos)
                attrs.append(attr)
            elif tag == 0x08:
                node.id, pos = read_varint(buf, pos)
            elif tag == 0x12:
                node.name, pos = read_str(buf, pos, "Node.name")
            elif tag == 0x18:
                node.type, pos = _read_node_type(buf, pos)
            elif tag == 0x2A or tag == 0x28:
                pos = _read_deps(buf, pos, tag, node.data_deps)
            elif tag == 0x38:
                node.duration_micros, pos = read_varint(buf, pos)
            elif tag == 0x22 or tag == 0x20:
                pos = _read_deps(buf, pos, tag, node.ctrl_deps)
            elif tag == 0x30:
                node.start_time_micros, pos = read_varint(buf, pos)
            elif tag == 0x42:
                node.inputs, pos = _read_io(buf, pos, node.inputs)
            elif tag == 0x4A:
                node.outputs, pos = _read_io(buf, pos, node.outputs)
            else:
                pos = skip_field(buf, pos, tag, key_pos)
    except IndexError:
        raise WireError("message ends inside a field", size) from None
    return node


def _read_node_type(buf: bytes, pos: int) -> tuple[NodeType, int]:
    raw, end = read_varint(buf, pos)
    node_type = _NODE_TYPES.get(raw)
    if node_type is None:
        raise WireError(f"unknown NodeType {wire.to_int64(raw)}", pos)
    return node_type, end


def _read_deps(buf: bytes, pos: int, tag: int, out: list[int]) -> int:
    """Append one unpacked dependency, or a packed run of them; return the new position."""
    if tag & 7 != LEN:
        value, pos = read_varint(buf, pos)
        out.append(value)
        return pos
    start, end = read_length(buf, pos, "packed dependencies")
    run = buf[start:end]
    if not run or max(run) < 0x80:  # all one-byte varints: the common case
        out.extend(run)
        return end
    cur = start
    while cur < end:
        value, cur = read_varint(buf, cur)
        out.append(value)
    if cur != end:
        raise WireError("packed dependencies: last varint runs past the length", start)
    return end


def _read_io(buf: bytes, pos: int, into: IOInfo | None) -> tuple[IOInfo, int]:
    """Parse an IOInfo; a repeated occurrence merges into the earlier one, as in protobuf."""
    info = IOInfo() if into is None else into
    start, end = read_length(buf, pos, "IOInfo")
    cur = start
    while cur < end:
        key_pos = cur
        tag, cur = read_key(buf, cur)
        if tag == 0x0A:
            info.values, cur = read_str(buf, cur, "IOInfo.values")
        elif tag == 0x12:
            info.shapes, cur = read_str(buf, cur, "IOInfo.shapes")
        elif tag == 0x1A:
            info.types, cur = read_str(buf, cur, "IOInfo.types")
        else:
            cur = skip_field(buf, cur, tag, key_pos)
        if cur > end:
            raise WireError("IOInfo: a field runs past the message's length", key_pos)
    return info, end


def _read_attr(buf: bytes, pos: int) -> tuple[Attr, int]:
    """Read a length-prefixed AttributeProto at `pos` (decoded once per distinct encoding)."""
    start, end = read_length(buf, pos, "AttributeProto")
    try:
        return _attr_of(buf[start:end]), end
    except WireError as exc:
        raise exc.shift(start) from None


def _attr_of(body: bytes) -> Attr:
    """The AttributeProto `body` encodes, decoded once per distinct encoding (kept in `_attr_cache`)."""
    attr = _attr_cache.get(body)
    if attr is None:
        attr = _decode_attr(body)
        if len(_attr_cache) >= _ATTR_CACHE_LIMIT:
            _attr_cache.clear()
        _attr_cache[body] = attr
    return attr


def _plain_attr(body: bytes) -> Attr | None:
    """`_attr_of`, or None where `body` is malformed (the node is then decoded here, which says why)."""
    try:
        return _attr_of(body)
    except WireError:
        return None


def _decode_attr(buf: bytes) -> Attr:
    name = doc_string = ""
    member: Member | None = None
    value: AttrValue = None
    pos = 0
    while pos < len(buf):
        key_pos = pos
        tag, pos = read_key(buf, pos)
        if tag == 0x0A:
            name, pos = read_str(buf, pos, "AttributeProto.name")
        elif tag == 0x12:
            doc_string, pos = read_str(buf, pos, "AttributeProto.doc_string")
        else:
            found = MEMBERS.get(tag >> 3)
            if found is None or found.wire_type != tag & 7:
                pos = skip_field(buf, pos, tag, key_pos)
                continue
            found_value, pos = decode_member(found, buf, pos)
            if found is member and isinstance(value, tuple) and isinstance(found_value, tuple):
                found_value = value + found_value  # a repeated list member merges
            member, value = found, found_value
    return Attr._from_decoder(name, member, value, doc_string)
