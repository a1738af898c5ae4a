"""Writing Chakra ET: messages, frames, whole traces and atomic trace files.

Bytes equal those of Chakra's protobuf writer for the same content: fields in field-number
order, proto3 defaults omitted, repeated uint64 dependencies packed, `attr` entries in list
order, and an attribute's oneof member always written (even 0 or false). A trace is the
varint-framed GlobalMetadata followed by one varint-framed Node per node.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from simstudy.chakra.model import Attr, GlobalMetadata, IOInfo, Node, NodeType
from simstudy.chakra.wire import SMALL_VARINTS, encode_varint, length_prefixed, uvarint
from simstudy.files import write_bytes

#: Node.type (field 3) as written; INVALID_NODE, the default, is omitted.
_TYPE_FIELD: dict[int, bytes] = {t: (b"\x18" + uvarint(t) if t else b"") for t in NodeType}


def frame(message: bytes) -> bytes:
    """One ET frame: the message preceded by its length as a varint."""
    return length_prefixed(message)


def encode_node(node: Node) -> bytes:
    """The serialised Node message (unframed). Raises ValueError for unencodable content.

    An all-default node (id 0, INVALID_NODE, nothing else) serialises to zero bytes, a
    zero-length frame that ASTRA-SIM accepts but Chakra's Python tools read as end of file.
    """
    try:
        return _encode_node(node)
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ValueError(f"cannot encode node id={node.id!r} name={node.name!r}: {exc}") from exc


def encode_metadata(meta: GlobalMetadata) -> bytes:
    """The serialised GlobalMetadata message (unframed)."""
    parts = []
    if meta.version:
        parts.append(b"\x0a" + length_prefixed(meta.version.encode()))
    parts.extend(b"\x12" + _check_attr(attr).encoded for attr in meta.attrs)
    return b"".join(parts)


def encode_trace(meta: GlobalMetadata, nodes: Iterable[Node]) -> bytes:
    """A whole ET file: framed metadata, then one frame per node, in the given order."""
    meta_bytes = encode_metadata(meta)
    parts = [uvarint(len(meta_bytes)), meta_bytes]
    append = parts.append
    for node in nodes:
        body = encode_node(node)
        append(SMALL_VARINTS.get(len(body)) or encode_varint(len(body)))
        append(body)
    return b"".join(parts)


def write_trace(path: str | os.PathLike[str], meta: GlobalMetadata, nodes: Iterable[Node]) -> int:
    """Encode and write a trace atomically; return the number of bytes written.

    The bytes go to a temporary file in the same directory, which then replaces `path`, so a
    failure (including an encoding error) never leaves a partial trace behind.
    """
    data = encode_trace(meta, nodes)
    write_bytes(path, data)
    return len(data)


def _encode_node(node: Node) -> bytes:
    """Node fields 1..10 in order; the hot path of a compile, hence the flat style."""
    small = SMALL_VARINTS
    parts: list[bytes] = []
    append = parts.append
    value = node.id
    if value:
        append(b"\x08")
        append(small.get(value) or encode_varint(value))
    if node.name:
        name = node.name.encode()
        append(b"\x12")
        append(small.get(len(name)) or encode_varint(len(name)))
        append(name)
    if node.type:
        type_field = _TYPE_FIELD.get(node.type)
        if type_field is None:
            raise ValueError(f"unknown NodeType {node.type!r}")
        append(type_field)
    if node.ctrl_deps:
        append(b"\x22")
        append(_packed(node.ctrl_deps))
    if node.data_deps:
        append(b"\x2a")
        append(_packed(node.data_deps))
    value = node.start_time_micros
    if value:
        append(b"\x30")
        append(small.get(value) or encode_varint(value))
    value = node.duration_micros
    if value:
        append(b"\x38")
        append(small.get(value) or encode_varint(value))
    if node.inputs is not None:
        append(b"\x42" + _encode_io(node.inputs))
    if node.outputs is not None:
        append(b"\x4a" + _encode_io(node.outputs))
    for attr in node.attrs:
        append(b"\x52")
        append(attr.encoded)
    return b"".join(parts)


def _packed(values: list[int]) -> bytes:
    """A packed repeated uint64 payload with its length prefix."""
    if max(values) < 0x80 and min(values) >= 0:
        payload = bytes(values)
    else:
        small = SMALL_VARINTS
        payload = b"".join([small.get(v) or encode_varint(v) for v in values])
    return (SMALL_VARINTS.get(len(payload)) or encode_varint(len(payload))) + payload


def _encode_io(info: IOInfo) -> bytes:
    """An IOInfo message with its length prefix (present even when all three strings are empty)."""
    parts = []
    for key, text in ((b"\x0a", info.values), (b"\x12", info.shapes), (b"\x1a", info.types)):
        if text:
            parts.append(key + length_prefixed(text.encode()))
    return length_prefixed(b"".join(parts))


def _check_attr(attr: Attr) -> Attr:
    if not isinstance(attr, Attr):
        raise TypeError(f"GlobalMetadata.attrs holds a {type(attr).__name__}, not an Attr")
    return attr
