"""Loading specs from YAML files, with references to other YAML files and clear errors.

Any string value that ends in `.yaml` or `.yml` is a reference to another file, resolved
relative to the file that names it (`model: ../workloads/resnet50.yaml`). A bad file gives one
`SpecError` that names the file, the field path and what was expected.
"""

from __future__ import annotations

import csv
import difflib
import re
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from simstudy.spec.base import FieldError, Spec
from simstudy.spec.cluster import Cluster
from simstudy.spec.paths import path_members, path_step
from simstudy.spec.scenario import Scenario
from simstudy.spec.study import Study

M = TypeVar("M", bound=BaseModel)
Loc = tuple[str | int, ...]


class SpecError(ValueError):
    """A spec that cannot be used: names the file, the field path and what was expected."""

    def __init__(self, file: str | Path | None, field: str, message: str) -> None:
        self.file = str(file) if file is not None else None
        self.field = field
        self.message = message
        where = f"{self.file}: " if self.file else ""
        what = f"{field}: " if field else ""
        # One line, whatever the user's keys hold (a YAML key may contain a newline).
        text = f"{where}{what}{message}".strip()
        super().__init__("".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text))


def is_reference(value: object) -> bool:
    """True when a spec value names another YAML file."""
    return isinstance(value, str) and value.endswith((".yaml", ".yml"))


def read_yaml(path: Path) -> Any:
    """Parse one YAML file; errors name the file and the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(path, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(path, "", f"cannot read file: {exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        problem = " ".join(str(problem).split())  # one line, whatever the parser's message looks like
        raise SpecError(path, "", f"invalid YAML: {where}{problem}") from None


#: Columns of a cluster's host table (the Alibaba Lingjun 2023 dataset's topo.csv): host, core,
#: aggregation and ToR switch.
HOST_COLUMNS = ("ip", "DSW", "PSW", "ASW")


def read_hosts_csv(path: Path, spec_file: Path) -> list[dict[str, str]]:
    """The hosts of a cluster CSV as `{tor, agg, core}` rows (see `ClosCsv`); errors name the CSV
    file, the column and what was expected (or the spec that names a missing file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(spec_file, "topology.file", f"host table {str(path)!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(path, "", f"cannot read the host table: {exc}") from None
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise SpecError(path, "", f"empty file; expected a header {','.join(HOST_COLUMNS)} and one row per host")
    header = [c.strip() for c in rows[0]]
    missing = [c for c in HOST_COLUMNS if c not in header]
    if missing:
        raise SpecError(path, missing[0], f"column {missing[0]!r} is missing; expected the columns "
                                          f"{','.join(HOST_COLUMNS)} (got {','.join(header) or 'none'})")
    col = {c: header.index(c) for c in HOST_COLUMNS}
    hosts: list[dict[str, str]] = []
    seen: set[str] = set()
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            raise SpecError(path, f"line {line}", f"{len(row)} fields, expected {len(header)} ({','.join(header)})")
        cells = {c: row[i].strip() for c, i in col.items()}
        empty = [c for c, v in cells.items() if not v]
        if empty:
            raise SpecError(path, f"line {line}", f"column {empty[0]!r} is empty")
        if cells["ip"] in seen:
            raise SpecError(path, f"line {line}", f"host {cells['ip']!r} appears twice")
        seen.add(cells["ip"])
        hosts.append({"tor": cells["ASW"], "agg": cells["PSW"], "core": cells["DSW"]})
    if not hosts:
        raise SpecError(path, "", "no hosts: the file has a header but no rows")
    return hosts


class _Origins:
    """Which file each part of a merged document came from."""

    def __init__(self, root: Path) -> None:
        self.files: dict[Loc, Path] = {(): root}

    def locate(self, loc: Loc) -> tuple[Path, Loc]:
        """The file holding `loc` and the location inside that file."""
        best: Loc = ()
        for prefix in self.files:
            if len(prefix) > len(best) and loc[: len(prefix)] == prefix:
                best = prefix
        return self.files[best], loc[len(best) :]


def _resolve(value: Any, base: Path, loc: Loc, origins: _Origins, stack: tuple[Path, ...]) -> Any:
    if is_reference(value):
        target = (base.parent / str(value)).resolve()
        if target in stack:
            chain = " -> ".join(p.name for p in (*stack, target))
            file, inner = origins.locate(loc)
            raise SpecError(file, _dotted(inner), f"circular reference: {chain}")
        if not target.is_file():
            file, inner = origins.locate(loc)
            raise SpecError(file, _dotted(inner), f"referenced file {value!r} not found ({target})")
        origins.files[loc] = target
        return _resolve(read_yaml(target), target, loc, origins, (*stack, target))
    if isinstance(value, Mapping):
        out = {k: _resolve(v, base, (*loc, str(k)), origins, stack) for k, v in value.items()}
        if out.get("kind") == "clos_csv" and isinstance(out.get("file"), str) and "hosts_table" not in out:
            out["hosts_table"] = read_hosts_csv(base.parent / out["file"], origins.locate(loc)[0])
        return out
    if isinstance(value, list):
        return [_resolve(v, base, (*loc, i), origins, stack) for i, v in enumerate(value)]
    return value


def load_document(path: str | Path) -> tuple[Any, _Origins]:
    """Read a YAML file and inline every referenced file, remembering where parts came from."""
    return resolve_references(read_yaml(Path(path)), path)


def resolve_references(data: Any, path: str | Path) -> tuple[Any, _Origins]:
    """Inline every file `data` references, relative to `path` (the file `data` came from)."""
    root = Path(path)
    origins = _Origins(root)
    return _resolve(data, root.resolve(), (), origins, (root.resolve(),)), origins


def _dotted(loc: Sequence[str | int]) -> str:
    return ".".join(str(p) for p in loc)


def _spec_class(title: str) -> type[BaseModel] | None:
    """The spec class a ValidationError's title names (its root model)."""
    todo: list[type[BaseModel]] = [Spec]
    while todo:
        cls = todo.pop()
        if cls.__name__ == title:
            return cls
        todo += cls.__subclasses__()
    return None


def _tags(model: type[BaseModel]) -> set[str]:
    """What pydantic calls `model` in the location of an error inside a union: its class name and
    the values of its literal fields (the discriminator, e.g. `ring` for `kind: ring`)."""
    out = {model.__name__}
    for f in model.model_fields.values():
        if typing.get_origin(f.annotation) is Literal:
            out |= {str(a) for a in typing.get_args(f.annotation)}
    return out


def _walk(root: type[BaseModel] | None, data: Any, loc: Loc) -> tuple[Loc, list[str], list[Any]]:
    """pydantic's location of an error as the user's field path (union tags dropped), the field
    names valid where its last part is (for "did you mean"), and the types the location can hold.
    Follows the schema of `root`; where that is unknown, guesses from the data."""
    if root is None:
        return _user_loc(data, loc), [], []
    current: list[Any] = [root]
    out: list[str | int] = []
    names: list[str] = []
    parts = [p for p in loc if not (isinstance(p, str) and p.startswith(_WRAPPERS))]
    i = 0
    while i < len(parts):
        part = parts[i]
        members = [m for a in current for m in path_members(a) if m is not type(None)]
        if len(members) > 1 and isinstance(part, str):  # a union: pydantic names the member
            models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel) and part in _tags(m)]
            others = [m for m in members if not (isinstance(m, type) and issubclass(m, BaseModel))]
            if models or (others and not any(isinstance(m, type) and issubclass(m, BaseModel) and part in m.model_fields
                                            for m in members)):
                current = models or others
                i += 1
                continue
        nexts: list[Any] = []
        names = []
        for annotation in members:
            n, v = path_step(annotation, str(part))
            nexts += n
            names += v
        out.append(part)
        current = nexts or [Any]
        i += 1
    return tuple(out), [n for n in dict.fromkeys(names) if not n.startswith("<")], current


def _tag_values(types: Sequence[Any], field: str) -> list[str]:
    """The values the discriminator `field` takes over the models a location can hold."""
    out: list[str] = []
    for m in (m for a in types for m in path_members(a)):
        if isinstance(m, type) and issubclass(m, BaseModel) and field in m.model_fields:
            annotation = m.model_fields[field].annotation
            if typing.get_origin(annotation) is Literal:
                out += [str(a) for a in typing.get_args(annotation)]
    return list(dict.fromkeys(out))


_WRAPPERS = ("function-", "tagged-union", "chain[", "lax-or-strict", "json-or-python", "nullable[", "default[")


def _user_loc(data: Any, loc: Loc) -> Loc:
    """Drop the segments pydantic adds for union tags, keeping the user's own field path (a
    guess from the data, for errors of a model that is not a spec class)."""
    out: list[str | int] = []
    node = data
    for n, part in enumerate(loc):
        if isinstance(node, Mapping):
            if part in node:
                out.append(part)
                node = node[part]
            elif isinstance(part, str) and part.startswith(_WRAPPERS):
                continue
            elif isinstance(part, str) and n < len(loc) - 1 and ("kind" in node or "zoo" in node or "[" in part):
                continue  # a union tag such as 'ring' or 'zoo'
            else:
                out.append(part)
                node = None
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        elif isinstance(node, list | Mapping):
            continue
        else:
            out.append(part)
            node = None
    return tuple(out)


def _closest(word: str, candidates: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def _message(err: Mapping[str, Any], *, missing_beside: Sequence[str] = (), known: Sequence[str] = ()) -> str:
    """One problem in words. An unknown field suggests what was meant: a required field missing
    beside it (the user wrote `kind` where `type` is wanted), else the closest known field."""
    msg = str(err.get("msg", "invalid value"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    kind = err.get("type")
    if kind == "extra_forbidden":
        name = str(err["loc"][-1]) if err.get("loc") else ""
        guess = _closest(name, missing_beside) or (missing_beside[0] if len(missing_beside) == 1 else None)
        guess = guess or _closest(name, known)
        if guess is not None:
            msg = f"unknown field; did you mean {guess!r}?"
        elif known:
            msg = f"unknown field; expected one of: {', '.join(known)}"
        else:
            msg = "unknown field (not allowed here; check the spelling)"
    elif kind == "missing":
        msg = msg if msg.startswith("required field") else "required field is missing"
    elif kind in ("union_tag_invalid", "literal_error"):
        ctx = err.get("ctx") or {}
        got = ctx.get("tag", err.get("input"))
        options = ctx.get("expected_tags") or ctx.get("expected") or ""
        choices = re.findall(r"'([^']*)'", str(options))
        guess = _closest(str(got), choices) if isinstance(got, str) else None
        msg = f"{got!r} is not one of {', '.join(map(repr, choices))}" if choices else msg
        if guess is not None:
            msg += f"; did you mean {guess!r}?"
    elif ("input" in err and kind not in ("model_type", "dict_type") and not isinstance(err["input"], Mapping | list)
          and repr(err["input"]) not in msg):
        msg += f" (got {err['input']!r})"
    return msg


def _consequence(err: Mapping[str, Any], errors: Sequence[Mapping[str, Any]]) -> bool:
    """An error that only follows from others: a tuple 'too short' after its items failed."""
    loc = tuple(err["loc"])
    return err.get("type") in ("too_short", "too_long") and any(
        len(o["loc"]) > len(loc) and tuple(o["loc"][: len(loc)]) == loc for o in errors)


def spec_error(exc: ValidationError, data: Any, origins: _Origins | None, file: Path | None,
               root: type[BaseModel] | None = None, fields: Mapping[str, str] | None = None) -> SpecError:
    """Turn a pydantic ValidationError into one SpecError naming the file and the field of every
    problem, on one line: the first is the error's file and field, the others follow after `;`.
    `fields` renames fields (e.g. to the command-line flags that set them)."""
    root = root or _spec_class(exc.title)
    errors = [e for e in exc.errors() if not _consequence(e, exc.errors())]
    walked = [_walk(root, data, tuple(e["loc"])) for e in errors]
    missing: dict[Loc, list[str]] = {}
    for e, (loc, _, _) in zip(errors, walked, strict=True):
        if e.get("type") == "missing" and loc:
            missing.setdefault(loc[:-1], []).append(str(loc[-1]))
    problems: list[tuple[Path | None, str, str]] = []
    for e, (loc, known, types) in zip(errors, walked, strict=True):
        ctx = e.get("ctx") or {}
        cause = ctx.get("error")
        if isinstance(cause, FieldError):
            loc = (*loc, *cause.field.split("."))
        if e.get("type") == "union_tag_not_found":  # `kind: ...` left out: name it and what it can be
            field = str(ctx.get("discriminator", "kind")).strip("'\"")
            tags = _tag_values(types, field)
            loc = (*loc, field)
            e = {**e, "type": "missing", "msg": ""}
            if tags:
                e["msg"] = f"required field is missing; expected one of {', '.join(map(repr, tags))}"
        where: Path | None = file
        inner = loc
        if origins is not None:
            where, inner = origins.locate(loc)
        msg = _message(e, missing_beside=missing.get(loc[:-1], []), known=known)
        dotted = _dotted(inner)
        if fields is not None:
            dotted = fields.get(dotted, dotted)
        problem = (where, dotted or "(top level)", msg)
        if problem not in problems:
            problems.append(problem)
    first_file, first_field, text = problems[0]
    for where, field, msg in problems[1:]:
        text += f"; {f'{where}: ' if where != first_file and where is not None else ''}{field}: {msg}"
    return SpecError(first_file, first_field, text)


def validate_as(cls: type[M], data: Any, *, file: str | Path | None = None, origins: _Origins | None = None) -> M:
    """Validate `data` as `cls`, mapping errors to a SpecError."""
    if data is None:
        raise SpecError(file, "", f"empty document; expected a {cls.__name__} mapping")
    if not isinstance(data, Mapping):
        raise SpecError(file, "", f"expected a mapping of {cls.__name__} fields, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, data, origins, Path(file) if file else None, cls) from None


def load_spec(cls: type[M], path: str | Path) -> M:
    """Load a YAML file (and the files it references) as a spec of type `cls`."""
    data, origins = load_document(path)
    return validate_as(cls, data, file=path, origins=origins)


def load_scenario(path: str | Path) -> Scenario:
    """Load a scenario YAML file."""
    return load_spec(Scenario, path)


def load_runnable(path: str | Path) -> Scenario | Cluster:
    """Load what `simstudy run` runs: a scenario, or a cluster (`kind: cluster`: several jobs)."""
    data, origins = load_document(path)
    if isinstance(data, Mapping) and data.get("kind") == "cluster":
        return validate_as(Cluster, data, file=path, origins=origins)
    return validate_as(Scenario, data, file=path, origins=origins)


def load_study(path: str | Path) -> Study:
    """Load a study YAML file. References inside it stay as written (they are resolved relative
    to the study file when the study is expanded), so labels can name the files."""
    return validate_as(Study, read_yaml(Path(path)), file=path)
