"""Dotted paths into a spec (`topology.npus`, `jobs.1.start_ms`), checked against its schema.

A study sweeps paths into its base scenario, and `simstudy sweep --set PATH=VALUE` overrides one:
a path that names no field of the schema (a typo such as `topolgy.npus`) would make every
combination invalid, so it is refused up front with what the schema has at that point.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Union

from pydantic import BaseModel


def _members(annotation: Any) -> list[Any]:
    """The alternatives of a type: Optional/Union/Annotated unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [m for a in typing.get_args(annotation) for m in _members(a)]
    return [annotation]


def _step(annotation: Any, part: str) -> tuple[list[Any], list[str]]:
    """The types `part` can lead to from a value of `annotation`, and the names valid there."""
    nexts: list[Any] = []
    names: list[str] = []
    for member in _members(annotation):
        origin = typing.get_origin(member)
        if isinstance(member, type) and issubclass(member, BaseModel):
            fields = member.model_fields
            names += list(fields)
            if part in fields:
                nexts.append(fields[part].annotation)
        elif origin in (dict, typing.Mapping) or member is dict:
            kv = typing.get_args(member)
            nexts.append(kv[1] if len(kv) == 2 else Any)
            names.append("<any key>")
        elif origin in (list, tuple) or member in (list, tuple):
            args: list[Any] = [a for a in typing.get_args(member) if a is not Ellipsis]
            names.append("<index>")
            if part.isdigit():
                nexts.append(args[0] if args else Any)
        elif member is Any:
            nexts.append(Any)
            names.append("<anything>")
    return nexts, names


#: The alternatives of a type, and the types one step of a path leads to (for error messages).
path_members, path_step = _members, _step


def check_path(root: type[BaseModel], path: str) -> None:
    """Raise ValueError unless `path` (dot-separated; list items by index) names a field that a
    `root` can have, in any of the forms its unions allow."""
    current: list[Any] = [root]
    done: list[str] = []
    for part in path.split("."):
        nexts: list[Any] = []
        names: list[str] = []
        for annotation in current:
            n, v = _step(annotation, part)
            nexts += n
            names += v
        if not nexts:
            where = ".".join(done) or root.__name__.lower()
            valid = sorted(dict.fromkeys(names))
            hint = f"; {where} has: {', '.join(valid)}" if valid else f"; {where} is a plain value"
            raise ValueError(f"{path!r} is not a field of the {root.__name__.lower()}: no {part!r} in {where}{hint}")
        current = nexts
        done.append(part)
