"""The `AttributeProto.value` oneof: its 30 members, their Python values and wire codecs.

Members come in pairs: a scalar `<t>_val` with field number 3 + 2i and its list wrapper
`<t>_list` (a message whose only field `1 values` is repeated) with field number 4 + 2i, for
the 15 element types t below. Scalar element types are packed inside the list wrappers;
strings and bytes are written one `0a` entry per element.

Python values: bool for bool, int for the integer types, float for double and float (a float
member's value is rounded to float32 on construction, so it reads back equal), str, bytes, and
a tuple of those for list members. `NOT_SET` (no oneof member; value None) only arises when a
file holds an attribute without a value, which ASTRA-SIM rejects.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeAlias

from simstudy.chakra import wire
from simstudy.chakra.errors import WireError
from simstudy.chakra.wire import FIXED32, FIXED64, LEN, MASK32, MASK64, VARINT

Scalar: TypeAlias = bool | int | float | str | bytes
AttrValue: TypeAlias = Scalar | tuple[Scalar, ...] | None


class AttrKind(IntEnum):
    """Which member of the `AttributeProto.value` oneof holds the value (its field number)."""

    NOT_SET = 0
    DOUBLE = 3
    DOUBLE_LIST = 4
    FLOAT = 5
    FLOAT_LIST = 6
    INT32 = 7
    INT32_LIST = 8
    INT64 = 9
    INT64_LIST = 10
    UINT32 = 11
    UINT32_LIST = 12
    UINT64 = 13
    UINT64_LIST = 14
    SINT32 = 15
    SINT32_LIST = 16
    SINT64 = 17
    SINT64_LIST = 18
    FIXED32 = 19
    FIXED32_LIST = 20
    FIXED64 = 21
    FIXED64_LIST = 22
    SFIXED32 = 23
    SFIXED32_LIST = 24
    SFIXED64 = 25
    SFIXED64_LIST = 26
    BOOL = 27
    BOOL_LIST = 28
    STRING = 29
    STRING_LIST = 30
    BYTES = 31
    BYTES_LIST = 32

    @property
    def is_list(self) -> bool:
        """True for the `<t>_list` members."""
        return self != AttrKind.NOT_SET and self % 2 == 0

    @property
    def field_name(self) -> str:
        """The member's name in et_def.proto, e.g. `int64_val` or `bool_list`."""
        if self == AttrKind.NOT_SET:
            return "<not set>"
        return self.name.lower() if self.is_list else f"{self.name.lower()}_val"


@dataclass(frozen=True, slots=True)
class Element:
    """One element type: how to check a Python value and how to write and read it."""

    name: str
    wire_type: int
    check: Callable[[Any], Any]
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes, int], tuple[Any, int]]

    @property
    def packable(self) -> bool:
        """Numbers and bools are packed in list wrappers; strings and bytes are not."""
        return self.wire_type != LEN


# -- checks: validate one Python value and normalise it (plain int/float/bool/str/bytes) --


def _int_check(lo: int, hi: int, label: str) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if not isinstance(value, int):
            raise TypeError(f"{label} value must be an int, not {type(value).__name__}")
        if not lo <= value <= hi:
            raise ValueError(f"{value} is out of range for {label} [{lo}, {hi}]")
        return int(value)

    return check


_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")


def _check_double(value: Any) -> float:
    if not isinstance(value, int | float):
        raise TypeError(f"double value must be a float, not {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{value} is out of range for double") from None


def _check_float(value: Any) -> float:
    """Round to float32 now, so that the value reads back equal."""
    as_double = _check_double(value)
    try:
        result: float = _F32.unpack(_F32.pack(as_double))[0]
    except OverflowError:
        raise ValueError(f"{value} is out of range for float (float32)") from None
    return result


def _check_bool(value: Any) -> bool:
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"bool value must be a bool, not {value!r}")


def _check_string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"string value must be a str, not {type(value).__name__}")
    value.encode()  # UnicodeEncodeError (a ValueError) for lone surrogates
    return value


def _check_bytes(value: Any) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"bytes value must be bytes, not {type(value).__name__}")
    return bytes(value)


# -- decoders of one element at a position --


def _fixed_decoder(fmt: str) -> Callable[[bytes, int], tuple[Any, int]]:
    codec = struct.Struct(fmt)
    size = codec.size

    def decode(buf: bytes, pos: int) -> tuple[Any, int]:
        end = pos + size
        if end > len(buf):
            raise WireError(f"{size}-byte fixed-width value cut short", pos)
        return codec.unpack_from(buf, pos)[0], end

    return decode


def _varint_decoder(convert: Callable[[int], Any]) -> Callable[[bytes, int], tuple[Any, int]]:
    read = wire.read_varint

    def decode(buf: bytes, pos: int) -> tuple[Any, int]:
        raw, end = read(buf, pos)
        return convert(raw), end

    return decode


def _decode_string(buf: bytes, pos: int) -> tuple[str, int]:
    return wire.read_str(buf, pos, "string value")


def _decode_bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    start, end = wire.read_length(buf, pos, "bytes value")
    return buf[start:end], end


def _encode_bool(value: bool) -> bytes:
    return b"\x01" if value else b"\x00"


def _encode_string(value: str) -> bytes:
    return wire.length_prefixed(value.encode())


_I32 = (-(1 << 31), (1 << 31) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)
_U32 = (0, MASK32)
_U64 = (0, MASK64)


def _elements() -> tuple[Element, ...]:
    """The 15 element types, in field-number order (scalar member 3 + 2i, list member 4 + 2i)."""

    def fixed(name: str, fmt: str, bounds: tuple[int, int]) -> Element:
        pack = struct.Struct(fmt).pack
        wire_type = FIXED32 if struct.calcsize(fmt) == 4 else FIXED64
        return Element(name, wire_type, _int_check(*bounds, name), pack, _fixed_decoder(fmt))

    def varint(name: str, bounds: tuple[int, int], enc: Callable[[int], bytes], dec: Callable[[int], int]) -> Element:
        return Element(name, VARINT, _int_check(*bounds, name), enc, _varint_decoder(dec))

    return (
        Element("double", FIXED64, _check_double, _F64.pack, _fixed_decoder("<d")),
        Element("float", FIXED32, _check_float, _F32.pack, _fixed_decoder("<f")),
        varint("int32", _I32, wire.svarint, wire.to_int32),
        varint("int64", _I64, wire.svarint, wire.to_int64),
        varint("uint32", _U32, wire.uvarint, lambda v: v & MASK32),
        varint("uint64", _U64, wire.uvarint, lambda v: v),
        varint("sint32", _I32, lambda v: wire.uvarint(wire.zigzag(v)), lambda v: wire.unzigzag(v & MASK32)),
        varint("sint64", _I64, lambda v: wire.uvarint(wire.zigzag(v)), wire.unzigzag),
        fixed("fixed32", "<I", _U32),
        fixed("fixed64", "<Q", _U64),
        fixed("sfixed32", "<i", _I32),
        fixed("sfixed64", "<q", _I64),
        Element("bool", VARINT, _check_bool, _encode_bool, _varint_decoder(bool)),
        Element("string", LEN, _check_string, _encode_string, _decode_string),
        Element("bytes", LEN, _check_bytes, wire.length_prefixed, _decode_bytes),
    )


ELEMENTS = _elements()


def element_of(kind: AttrKind) -> Element:
    """The element type of a scalar or list member."""
    return ELEMENTS[(kind - 3) // 2]


@dataclass(frozen=True, slots=True)
class Member:
    """A oneof member, precomputed: its element type, whether it is a list, its key bytes."""

    kind: AttrKind
    element: Element
    is_list: bool
    wire_type: int
    key: bytes


def _members() -> dict[int, Member]:
    members = {}
    for kind in AttrKind:
        if kind != AttrKind.NOT_SET:
            elem = element_of(kind)
            wire_type = LEN if kind.is_list else elem.wire_type
            members[kind.value] = Member(kind, elem, kind.is_list, wire_type, wire.key(kind, wire_type))
    return members


#: Every oneof member by field number (an AttrKind works as the key too).
MEMBERS = _members()


def member_of(kind: AttrKind) -> Member | None:
    """The member `kind` names; None for NOT_SET. Raises ValueError for a number that is no member."""
    member = MEMBERS.get(kind)
    if member is None and kind != AttrKind.NOT_SET:
        raise ValueError(f"{kind!r} is not an AttributeProto oneof member")
    return member


def normalize(member: Member | None, value: Any) -> AttrValue:
    """Check `value` against the member and return it in canonical Python form (lists -> tuples)."""
    if member is None:
        if value is not None:
            raise ValueError("an attribute without a oneof member has value None")
        return None
    check = member.element.check
    if not member.is_list:
        result: AttrValue = check(value)
        return result
    return tuple([check(item) for item in as_tuple(member.kind, value)])


def as_tuple(kind: AttrKind, values: Any) -> tuple[Any, ...]:
    """The elements of a list member's value; a str or bytes is not taken as a sequence."""
    if isinstance(values, str | bytes | bytearray) or not isinstance(values, Iterable):
        raise TypeError(f"{kind.field_name} value must be a sequence, not {type(values).__name__}")
    return tuple(values)


def encode_member(member: Member | None, value: Any) -> bytes:
    """The oneof member as written: key and value; a list member as its wrapper message."""
    if member is None:
        return b""
    elem = member.element
    if not member.is_list:
        return member.key + elem.encode(value)
    if not elem.packable:
        body = b"".join([b"\x0a" + elem.encode(item) for item in value])
    elif value:
        body = b"\x0a" + wire.length_prefixed(b"".join([elem.encode(item) for item in value]))
    else:
        body = b""
    return member.key + wire.length_prefixed(body)


def decode_member(member: Member, buf: bytes, pos: int) -> tuple[AttrValue, int]:
    """Read the value of `member` whose key ends at `pos` (the caller checked the wire type)."""
    elem = member.element
    if not member.is_list:
        value: AttrValue
        value, end = elem.decode(buf, pos)
        return value, end
    start, end = wire.read_length(buf, pos, member.kind.field_name)
    try:
        return decode_list(elem, buf[start:end]), end
    except WireError as exc:
        raise exc.shift(start) from None


def decode_list(elem: Element, buf: bytes) -> tuple[Scalar, ...]:
    """Parse a list wrapper message; packed and unpacked elements may be mixed, as in protobuf."""
    items: list[Scalar] = []
    single_key = (1 << 3) | elem.wire_type
    pos = 0
    end = len(buf)
    while pos < end:
        key_pos = pos
        tag, pos = wire.read_key(buf, pos)
        if tag == single_key:
            item, pos = elem.decode(buf, pos)
            items.append(item)
        elif tag == 0x0A:  # a packed run of scalars
            pos = _decode_packed(elem, buf, pos, items)
        else:
            pos = wire.skip_field(buf, pos, tag, key_pos)
    return tuple(items)


def _decode_packed(elem: Element, buf: bytes, pos: int, items: list[Scalar]) -> int:
    """Append the elements of the packed run whose length prefix is at `pos`; return its end."""
    start, end = wire.read_length(buf, pos, f"packed {elem.name} list")
    decode = elem.decode
    cur = start
    while cur < end:
        item, cur = decode(buf, cur)
        items.append(item)
    if cur != end:
        raise WireError(f"packed {elem.name} list: last element runs past its length", start)
    return end
