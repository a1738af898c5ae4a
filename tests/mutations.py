"""Mutations of parsed YAML/JSON documents, shared by the fuzz tests (tests/spec/test_fuzz_loaders.py,
tests/test_cli_fuzz.py): every path into a document, and one edit at one of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into `data` (keys and list indices), the root first."""
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += paths(v, (*prefix, i))
    return out


def suffixed(key: Any) -> str:
    """A misspelled field: the key with an `x` after it."""
    return f"{key}x"


def mutate(data: Any, path: tuple[Any, ...], how: str, value: Any,
           rename: Callable[[Any], str] = suffixed) -> Any:
    """A copy of `data` with one edit at `path`: `replace` it by `value`, `delete` it, `rename` its
    key (by `rename`), or `add` (a mapping: a field `<key>_extra`; a list: `value` appended)."""
    if not path:
        return value if how == "replace" else data
    head, rest = path[0], path[1:]
    if isinstance(data, dict):
        data = dict(data)
        if not rest and how == "delete":
            data.pop(head, None)
        elif not rest and how == "rename":
            data[rename(head)] = data.pop(head)
        elif not rest and how == "add":
            data[f"{head}_extra"] = value
        else:
            data[head] = mutate(data[head], rest, how, value, rename)
    elif isinstance(data, list):
        data = list(data)
        if not rest and how == "delete":
            data.pop(head)
        elif not rest and how == "add":
            data.append(value)
        else:
            data[head] = mutate(data[head], rest, how, value, rename)
    return data
