"""Protobuf wire-format primitives: varints, zigzag, keys, length-delimited reads, skipping.

Only what the Chakra ET schema needs. Decoding functions take a `bytes` buffer and a
position and return `(value, new_position)`; they raise `WireError` with the offset of the
offending byte, relative to that buffer.
"""

from __future__ import annotations

from simstudy.chakra.errors import WireError

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF
MAX_VARINT_BYTES = 10
MAX_GROUP_DEPTH = 64

VARINT = 0
FIXED64 = 1
LEN = 2
START_GROUP = 3
END_GROUP = 4
FIXED32 = 5


def encode_varint(value: int) -> bytes:
    """The unsigned base-128 varint of `value`, which must be in [0, 2**64)."""
    if value < 0 or value > MASK64:
        raise ValueError(f"{value} does not fit in an unsigned 64-bit varint")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: Pre-encoded varints of small numbers (ids, dependencies, lengths): most lookups hit here.
SMALL_VARINTS: dict[int, bytes] = {i: encode_varint(i) for i in range(1 << 14)}


def uvarint(value: int) -> bytes:
    """`encode_varint`, served from a table for values below 2**14."""
    return SMALL_VARINTS.get(value) or encode_varint(value)


def svarint(value: int) -> bytes:
    """The varint of a signed int32/int64 (negative numbers take ten bytes, as in protobuf)."""
    return SMALL_VARINTS.get(value) or encode_varint(value & MASK64)


def zigzag(value: int) -> int:
    """The zigzag mapping of sint32/sint64: 0, -1, 1, -2 ... -> 0, 1, 2, 3 ..."""
    return value << 1 if value >= 0 else (-value << 1) - 1


def unzigzag(value: int) -> int:
    """The inverse of `zigzag`."""
    return (value >> 1) ^ -(value & 1)


def to_int32(value: int) -> int:
    """The low 32 bits of a varint, as a signed int32 (what protobuf does for int32 fields)."""
    value &= MASK32
    return value - (1 << 32) if value >= 1 << 31 else value


def to_int64(value: int) -> int:
    """A 64-bit varint value as a signed int64."""
    return value - (1 << 64) if value >= 1 << 63 else value


def key(field: int, wire_type: int) -> bytes:
    """The encoded key (tag) of a field."""
    return encode_varint((field << 3) | wire_type)


def length_prefixed(payload: bytes) -> bytes:
    """`payload` preceded by its length as a varint (a protobuf LEN value or an ET frame)."""
    return uvarint(len(payload)) + payload


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode the varint at `pos`; values are truncated to 64 bits like protobuf does."""
    try:
        byte = buf[pos]
    except IndexError:
        raise WireError("message ends where a varint should start", pos) from None
    if byte < 0x80:
        return byte, pos + 1
    return _read_long_varint(buf, pos)


def _read_long_varint(buf: bytes, start: int) -> tuple[int, int]:
    """The multi-byte case of `read_varint`."""
    result = 0
    shift = 0
    pos = start
    end = len(buf)
    while pos < end:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & MASK64, pos
        shift += 7
        if shift >= 7 * MAX_VARINT_BYTES:
            raise WireError(f"varint longer than {MAX_VARINT_BYTES} bytes", start)
    raise WireError(f"truncated varint: message ends after {pos - start} bytes of it", start)


def read_length(buf: bytes, pos: int, what: str) -> tuple[int, int]:
    """Read a LEN prefix at `pos`; return `(start, end)` of the payload, checked against the buffer."""
    length, start = read_varint(buf, pos)
    end = start + length
    if end > len(buf):
        raise WireError(f"{what}: length {length} but {len(buf) - start} bytes left", pos)
    return start, end


def read_str(buf: bytes, pos: int, what: str) -> tuple[str, int]:
    """Read a LEN-delimited UTF-8 string at `pos` (protobuf rejects invalid UTF-8 in proto3)."""
    start, end = read_length(buf, pos, what)
    try:
        return buf[start:end].decode(), end
    except UnicodeDecodeError as exc:
        raise WireError(f"{what}: invalid UTF-8 ({exc.reason})", start + exc.start) from None


def read_key(buf: bytes, pos: int) -> tuple[int, int]:
    """Read a field key at `pos`, rejecting field number 0."""
    tag, new_pos = read_varint(buf, pos)
    if tag >> 3 == 0:
        raise WireError(f"invalid field number 0 (key {tag:#x})", pos)
    return tag, new_pos


def skip_field(buf: bytes, pos: int, tag: int, key_pos: int) -> int:
    """Skip the value of an unknown field whose key `tag` (read at `key_pos`) ends at `pos`."""
    if tag >> 3 == 0:
        raise WireError(f"invalid field number 0 (key {tag:#x})", key_pos)
    wire_type = tag & 7
    if wire_type == VARINT:
        return read_varint(buf, pos)[1]
    if wire_type == LEN:
        return read_length(buf, pos, f"field {tag >> 3}")[1]
    if wire_type in (FIXED64, FIXED32):
        end = pos + (8 if wire_type == FIXED64 else 4)
        if end > len(buf):
            raise WireError(f"field {tag >> 3}: fixed-width value cut short", pos)
        return end
    if wire_type == START_GROUP:
        return _skip_group(buf, pos, tag >> 3, key_pos)
    if wire_type == END_GROUP:
        raise WireError(f"end-group key for field {tag >> 3} without a start-group", key_pos)
    raise WireError(f"invalid wire type {wire_type} (key {tag:#x})", key_pos)


def _skip_group(buf: bytes, pos: int, field: int, key_pos: int) -> int:
    """Skip a (deprecated) group up to its matching end-group key; nesting is bounded."""
    open_fields = [field]
    while open_fields:
        if pos >= len(buf):
            raise WireError(f"group of field {open_fields[-1]} never ends", key_pos)
        inner_pos = pos
        tag, pos = read_key(buf, pos)
        wire_type = tag & 7
        if wire_type == END_GROUP:
            if tag >> 3 != open_fields.pop():
                raise WireError(f"end-group key for field {tag >> 3} does not match", inner_pos)
        elif wire_type == START_GROUP:
            if len(open_fields) >= MAX_GROUP_DEPTH:
                raise WireError(f"groups nested deeper than {MAX_GROUP_DEPTH}", inner_pos)
            open_fields.append(tag >> 3)
        else:
            pos = skip_field(buf, pos, tag, inner_pos)
    return pos
