"""The attributes ASTRA-SIM reads, each built with its canonical oneof member.

Chakra's older feeder reads exactly one member per name and sees any other as 0, so these
helpers are the only safe way to spell them (docs/chakra-et-format.md, section 3.3).
Results are memoised: a trace repeats the same few attributes on thousands of nodes, and an
`Attr` is immutable and carries its encoded bytes.
"""

from __future__ import annotations

from collections.abc import Iterable

from simstudy.chakra.model import Attr, CollectiveType
from simstudy.chakra.values import AttrKind, AttrValue

_MEMO_LIMIT = 1 << 14
_memo: dict[tuple[str, AttrKind, type, AttrValue], Attr] = {}


def memoised(name: str, kind: AttrKind, value: AttrValue) -> Attr:
    """The memoised `Attr(name, kind, value)` (keyed by type too: 1.0 must not pass for 1); the
    compiler's own attributes (`simstudy.compiler.attributes`) are built with it too."""
    memo_key = (name, kind, type(value), value)
    found = _memo.get(memo_key)
    if found is None:
        found = Attr(name, kind, value)
        if len(_memo) >= _MEMO_LIMIT:
            _memo.clear()
        _memo[memo_key] = found
    return found


def _non_negative(name: str, value: int) -> int:
    if isinstance(value, int) and value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")
    return value


def is_cpu_op(value: bool) -> Attr:
    """`is_cpu_op` as bool_val: a CPU op (replayed by duration; illegal on COMM nodes)."""
    return memoised("is_cpu_op", AttrKind.BOOL, value)


def num_ops(count: int) -> Attr:
    """`num_ops` as int64_val: operations (FLOPs) of a COMP node, for roofline mode."""
    return memoised("num_ops", AttrKind.INT64, _non_negative("num_ops", count))


def tensor_size(size_bytes: int) -> Attr:
    """`tensor_size` as uint64_val: bytes touched (COMP roofline, MEM_LOAD/MEM_STORE)."""
    return memoised("tensor_size", AttrKind.UINT64, size_bytes)


def comm_type(collective: CollectiveType) -> Attr:
    """`comm_type` as int64_val: the CollectiveCommType of a COMM_COLL node."""
    return memoised("comm_type", AttrKind.INT64, int(CollectiveType(collective)))


def comm_size(size_bytes: int) -> Attr:
    """`comm_size` as int64_val: bytes of a collective, send or receive."""
    return memoised("comm_size", AttrKind.INT64, _non_negative("comm_size", size_bytes))


def comm_priority(priority: int) -> Attr:
    """`comm_priority` as int32_val."""
    return memoised("comm_priority", AttrKind.INT32, priority)


def comm_src(rank: int) -> Attr:
    """`comm_src` as int32_val: the sending rank of a SEND/RECV pair."""
    return memoised("comm_src", AttrKind.INT32, _non_negative("comm_src", rank))


def comm_dst(rank: int) -> Attr:
    """`comm_dst` as int32_val: the receiving rank of a SEND/RECV pair."""
    return memoised("comm_dst", AttrKind.INT32, _non_negative("comm_dst", rank))


def comm_tag(tag: int) -> Attr:
    """`comm_tag` as int32_val: matches a SEND with its RECV."""
    return memoised("comm_tag", AttrKind.INT32, tag)


def pg_name(group: str) -> Attr:
    """`pg_name` as string_val: a decimal comm-group id; "" or "0" means all ranks."""
    if not isinstance(group, str):
        raise TypeError(f"pg_name must be a str (a decimal group id), not {type(group).__name__}")
    return memoised("pg_name", AttrKind.STRING, group)


def involved_dim(dims: Iterable[bool]) -> Attr:
    """`involved_dim` as bool_list: which network dimensions a collective uses."""
    return memoised("involved_dim", AttrKind.BOOL_LIST, tuple(dims))
