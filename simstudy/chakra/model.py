"""The Chakra ET messages as Python values: Node, GlobalMetadata, IOInfo, Attr and the enums.

Field names, numbers and defaults follow `schema/protobuf/et_def.proto` (see
docs/chakra-et-format.md). `Attr` is immutable and serialises itself once, on construction:
attributes are shared between nodes, so a trace encoder only concatenates their bytes.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from simstudy.chakra import wire
from simstudy.chakra.values import (
    AttrKind,
    AttrValue,
    Member,
    as_tuple,
    encode_member,
    member_of,
    normalize,
)


class NodeType(IntEnum):
    """`ChakraProtoMsg.NodeType`."""

    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollectiveType(IntEnum):
    """`ChakraProtoMsg.CollectiveCommType`, carried as the int64 attribute `comm_type`."""

    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


@dataclass(frozen=True, slots=True)
class Attr:
    """One `AttributeProto`: a name and a value in exactly one oneof member (`kind`).

    The value is checked against the kind and normalised on construction (ints stay ints,
    float members are rounded to float32, lists become tuples); a bad value raises
    TypeError or ValueError. `encoded` is the serialised message with its length prefix,
    ready to follow a `Node.attr` / `GlobalMetadata.attr` key; it takes no part in equality.
    """

    name: str
    kind: AttrKind
    value: AttrValue
    doc_string: str = ""
    encoded: builtins.bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not isinstance(self.doc_string, str):
            raise TypeError("attribute name and doc_string must be str")
        member = member_of(self.kind)
        self._freeze(member, normalize(member, self.value))

    def _freeze(self, member: Member | None, value: AttrValue) -> None:
        """Store the canonical kind and value, and the encoding they give."""
        object.__setattr__(self, "kind", AttrKind.NOT_SET if member is None else member.kind)
        object.__setattr__(self, "value", value)
        body = _attr_body(self.name, self.doc_string, member, value)
        object.__setattr__(self, "encoded", wire.length_prefixed(body))

    @classmethod
    def _from_decoder(cls, name: str, member: Member | None, value: AttrValue, doc_string: str) -> Attr:
        """For the decoder: the value is already checked and normalised, so it is not checked again."""
        attr = object.__new__(cls)
        object.__setattr__(attr, "name", name)
        object.__setattr__(attr, "doc_string", doc_string)
        attr._freeze(member, value)
        return attr

    # -- one constructor per oneof member (the element type's name, without `_val`) --

    @classmethod
    def double(cls, name: str, value: builtins.float, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.DOUBLE, value, doc_string)

    @classmethod
    def double_list(cls, name: str, values: Iterable[builtins.float], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.DOUBLE_LIST, as_tuple(AttrKind.DOUBLE_LIST, values), doc_string)

    @classmethod
    def float(cls, name: str, value: builtins.float, *, doc_string: str = "") -> Attr:
        """A float (float32) member; the value is rounded to float32."""
        return cls(name, AttrKind.FLOAT, value, doc_string)

    @classmethod
    def float_list(cls, name: str, values: Iterable[builtins.float], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.FLOAT_LIST, as_tuple(AttrKind.FLOAT_LIST, values), doc_string)

    @classmethod
    def int32(cls, name: str, value: int, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.INT32, value, doc_string)

    @classmethod
    def int32_list(cls, name: str, values: Iterable[int], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.INT32_LIST, as_tuple(AttrKind.INT32_LIST, values), doc_string)

    @classmethod
    def int64(cls, name: str, value: int, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.INT64, value, doc_string)

    @classmethod
    def int64_list(cls, name: str, values: Iterable[int], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.INT64_LIST, as_tuple(AttrKind.INT64_LIST, values), doc_string)

    @classmethod
    def uint32(cls, name: str, value: int, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.UINT32, value, doc_string)

    @classmethod
    def uint32_list(cls, name: str, values: Iterable[int], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.UINT32_LIST, as_tuple(AttrKind.UINT32_LIST, values), doc_string)

    @classmethod
    def uint64(cls, name: str, value: int, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.UINT64, value, doc_string)

    @classmethod
    def uint64_list(cls, name: str, values: Iterable[int], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.UINT64_LIST, as_tuple(AttrKind.UINT64_LIST, values), doc_string)

    @classmethod
    def sint32(cls, name: str, value: int, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.SINT32, value, doc_string)

    @classmethod
    def sint32_list(cls, name: str, values: Iterable[int], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.SINT32_LIST, as_tuple(AttrKind.SINT32_LIST, values), doc_string)

    @classmethod
    def sint64(cls, name: str, value: int, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.SINT64, value, doc_string)

    @classmethod
    def sint64_list(cls, name: str, values: Iterable[int], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.SINT64_LIST, as_tuple(AttrKind.SINT64_LIST, values), doc_string)

    @classmethod
    def fixed32(cls, name: str, value: int, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.FIXED32, value, doc_string)

    @classmethod
    def fixed32_list(cls, name: str, values: Iterable[int], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.FIXED32_LIST, as_tuple(AttrKind.FIXED32_LIST, values), doc_string)

    @classmethod
    def fixed64(cls, name: str, value: int, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.FIXED64, value, doc_string)

    @classmethod
    def fixed64_list(cls, name: str, values: Iterable[int], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.FIXED64_LIST, as_tuple(AttrKind.FIXED64_LIST, values), doc_string)

    @classmethod
    def sfixed32(cls, name: str, value: int, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.SFIXED32, value, doc_string)

    @classmethod
    def sfixed32_list(cls, name: str, values: Iterable[int], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.SFIXED32_LIST, as_tuple(AttrKind.SFIXED32_LIST, values), doc_string)

    @classmethod
    def sfixed64(cls, name: str, value: int, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.SFIXED64, value, doc_string)

    @classmethod
    def sfixed64_list(cls, name: str, values: Iterable[int], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.SFIXED64_LIST, as_tuple(AttrKind.SFIXED64_LIST, values), doc_string)

    @classmethod
    def bool(cls, name: str, value: builtins.bool, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.BOOL, value, doc_string)

    @classmethod
    def bool_list(cls, name: str, values: Iterable[builtins.bool], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.BOOL_LIST, as_tuple(AttrKind.BOOL_LIST, values), doc_string)

    @classmethod
    def string(cls, name: str, value: str, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.STRING, value, doc_string)

    @classmethod
    def string_list(cls, name: str, values: Iterable[str], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.STRING_LIST, as_tuple(AttrKind.STRING_LIST, values), doc_string)

    @classmethod
    def bytes(cls, name: str, value: builtins.bytes, *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.BYTES, value, doc_string)

    @classmethod
    def bytes_list(cls, name: str, values: Iterable[builtins.bytes], *, doc_string: str = "") -> Attr:
        return cls(name, AttrKind.BYTES_LIST, as_tuple(AttrKind.BYTES_LIST, values), doc_string)


def _attr_body(name: str, doc_string: str, member: Member | None, value: AttrValue) -> bytes:
    """The AttributeProto message: name (1), doc_string (2), then the oneof member, always."""
    parts = []
    if name:
        parts.append(b"\x0a" + wire.length_prefixed(name.encode()))
    if doc_string:
        parts.append(b"\x12" + wire.length_prefixed(doc_string.encode()))
    parts.append(encode_member(member, value))
    return b"".join(parts)


@dataclass(slots=True)
class IOInfo:
    """`ChakraProtoMsg.IOInfo`: free-form strings (METADATA nodes carry their groups in `values`)."""

    values: str = ""
    shapes: str = ""
    types: str = ""


@dataclass(slots=True)
class Node:
    """`ChakraProtoMsg.Node`. Times are microseconds; `inputs`/`outputs` None means absent."""

    id: int
    name: str = ""
    type: NodeType = NodeType.INVALID_NODE
    ctrl_deps: list[int] = field(default_factory=list)
    data_deps: list[int] = field(default_factory=list)
    start_time_micros: int = 0
    duration_micros: int = 0
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None
    attrs: list[Attr] = field(default_factory=list)

    def attr(self, name: str) -> Attr | None:
        """The first attribute called `name` (ASTRA-SIM's lookup rule), or None."""
        for candidate in self.attrs:
            if candidate.name == name:
                return candidate
        return None

    def get(self, name: str, default: Any = None) -> Any:
        """The value of the first attribute called `name`, or `default`."""
        found = self.attr(name)
        return default if found is None else found.value


@dataclass(slots=True)
class GlobalMetadata:
    """`ChakraProtoMsg.GlobalMetadata`, the first message of every ET file.

    The default version is the one ASTRA-SIM's example traces carry; nothing reads it.
    A file whose metadata has no version decodes to `version=""`.
    """

    version: str = "0.0.4"
    attrs: list[Attr] = field(default_factory=list)
