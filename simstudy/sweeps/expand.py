"""Expand a study into scenarios: the product of its axes, invalid points skipped with the reason."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from simstudy.backends.estimate import refused
from simstudy.backends.registry import backend_key, check_network
from simstudy.spec import (
    BackendSpec,
    Cluster,
    Scenario,
    SpecError,
    Study,
    canonical_json,
    resolve_references,
    spec_error,
)
from simstudy.spec.load import is_reference
from simstudy.spec.paths import check_path
from simstudy.spec.scenario import tag_model
from simstudy.version import __version__


@dataclass(frozen=True)
class Point:
    """One valid scenario of a study: its place in the expansion, the swept values and its run key."""

    index: int
    params: dict[str, Any]
    scenario: Scenario | Cluster
    key: str


@dataclass(frozen=True)
class Skipped:
    """A combination of axis values that is not a valid scenario, and why."""

    index: int
    params: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class Expansion:
    """Every combination of a study's axes: the valid points and the skipped ones."""

    study: Study
    points: list[Point]
    skipped: list[Skipped]

    @property
    def total(self) -> int:
        return len(self.points) + len(self.skipped)

    @property
    def param_names(self) -> list[str]:
        return self.study.axis_paths

    @property
    def unique_keys(self) -> list[str]:
        """Run keys in expansion order, each once (two points may be the same scenario)."""
        return list(dict.fromkeys(p.key for p in self.points))


def label(value: Any) -> Any:
    """How a swept value is shown in the summary: scalars as they are, a file by its stem, a
    mapping by its `name`, else as `kind(field=value,...)` (or `zoo(...)`) in the file's order."""
    if is_reference(value):
        return Path(str(value)).stem
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, dict):
        if isinstance(value.get("name"), str):
            return value["name"]
        head = next((str(value[k]) for k in ("kind", "zoo") if isinstance(value.get(k), str)), "")
        rest = [f"{k}={_compact(v)}" for k, v in value.items() if not (head and k in ("kind", "zoo"))]
        return f"{head}({','.join(rest)})"
    return _compact(value)


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def backend_id(study: Study, source: str | Path | None = None) -> str:
    """The part of a run key that names the simulator and its result-changing options; an option
    the backend does not take is a SpecError naming the study file (`source`) and the option."""
    try:
        return backend_key(study.backend_spec)
    except SpecError as exc:
        raise SpecError(source, f"backend_options.{exc.field}", exc.message) from None


def run_key(scenario: Scenario | Cluster, backend: str) -> str:
    """The run directory name: a hash of the canonical scenario, the backend and simstudy's version."""
    text = "\n".join([canonical_json(scenario), backend, f"simstudy {__version__}"])
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set `path` (dotted; a numeric part indexes a list, as in `jobs.1.start_ms`) in `data`."""
    parts = path.split(".")
    node: Any = data
    for i, part in enumerate(parts):
        where = ".".join(parts[: i + 1])
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ValueError(f"cannot set {path}: {'.'.join(parts[:i]) or 'the scenario'} has {len(node)} "
                                 f"items, so there is no {where}")
            if last:
                node[int(part)] = value
                return
            child = node[int(part)]
        else:
            if last:
                node[part] = value
                return
            child = node.get(part)
        if part == "model":
            child = tag_model(child)
        if child is None:
            child = {}
        if not isinstance(child, dict | list):
            raise ValueError(f"cannot set {path}: {where} is {child!r}, not a mapping")
        if isinstance(node, list):
            node[int(part)] = child
        else:
            node[part] = child
        node = child


def root_model(base: Any) -> type[Scenario] | type[Cluster]:
    """What a study's base describes: a cluster (`kind: cluster`) or a scenario."""
    return Cluster if isinstance(base, dict) and base.get("kind") == "cluster" else Scenario


def _combinations(study: Study) -> list[list[tuple[str, Any]]]:
    groups: list[list[list[tuple[str, Any]]]] = [[[(path, v)] for v in values] for path, values in study.axes.items()]
    for group in study.zip:
        n = len(next(iter(group.values())))
        groups.append([[(path, values[i]) for path, values in group.items()] for i in range(n)])
    return [[pair for part in combo for pair in part] for combo in itertools.product(*groups)]


def override(study: Study, source: str | Path, *, backend: str | None = None, aware: bool | None = None,
             congestion: str | None = None, sets: Sequence[str] = (), engine: str | None = None) -> Study:
    """The study with command-line overrides: another backend or congestion mode (part of every run
    key, so the results of both live side by side), flowsim's engine (not part of the key: both
    engines give the same results) and base values (`PATH=VALUE`, VALUE parsed as YAML, PATH a
    scenario field). Errors name the study file and the override."""
    update: dict[str, Any] = {}
    if backend is not None:
        update["backend"] = backend
    options: dict[str, Any] = {}
    if congestion is not None:
        options["congestion"] = congestion
    if engine is not None:
        options["engine"] = engine
    if aware:
        if congestion not in (None, "aware"):
            raise SpecError(source, "--aware", f"means --congestion aware, but --congestion is {congestion}")
        options["congestion"] = "aware"
    if options:
        update["backend_options"] = {**study.backend_options.model_dump(), **options}
    if sets:
        base = copy.deepcopy(study.base)
        for item in sets:
            path, eq, text = item.partition("=")
            field = f"--set {item}"
            if not eq or not path:
                raise SpecError(source, field, "expected PATH=VALUE, e.g. topology.bandwidth_gbps=100")
            try:
                check_path(root_model(study.base), path)
                value = yaml.safe_load(text) if text else None
                _set_path(base, path, value)
            except yaml.YAMLError as exc:
                raise SpecError(source, field, f"VALUE is not YAML: {exc}") from None
            except ValueError as exc:
                raise SpecError(source, field, str(exc)) from None
        update["base"] = base
    if not update:
        return study
    try:
        return Study.model_validate({**study.model_dump(), **update})
    except ValidationError as exc:
        raise spec_error(exc, study.model_dump(), None, Path(source)) from None


def axis_fields(study: Study) -> list[tuple[str, str]]:
    """(study field, scenario path) of every swept path: `axes.<path>` or `zip.<i>.<path>`."""
    return [*((f"axes.{p}", p) for p in study.axes),
            *((f"zip.{i}.{p}", p) for i, group in enumerate(study.zip) for p in group)]


def check_axes(study: Study, source: str | Path) -> None:
    """Every swept path must name a field of the scenario schema: a typo would otherwise skip
    every combination. Raises SpecError naming the study file and the axis."""
    for field, path in axis_fields(study):
        try:
            check_path(root_model(study.base), path)
        except ValueError as exc:
            raise SpecError(source, field, str(exc)) from None


def expand(study: Study, source: str | Path) -> Expansion:
    """Every combination of the study's axes over its base scenario, as valid points with run
    keys and skipped combinations with the reason. References resolve relative to `source`.

    A swept path that the scenario schema does not have, or a study whose every combination is
    skipped, raises SpecError naming the study file (there would be nothing to run)."""
    check_axes(study, source)
    base, _ = resolve_references(study.base, source)
    if not isinstance(base, dict):
        raise SpecError(source, "base", "expected a mapping of scenario fields")
    bid = backend_id(study, source)
    points: list[Point] = []
    skipped: list[Skipped] = []
    for index, combo in enumerate(_combinations(study)):
        params = {path: label(value) for path, value in combo}
        data = copy.deepcopy(base)
        try:
            for path, value in combo:
                resolved, _ = resolve_references(value, source)
                _set_path(data, path, resolved)
        except (ValueError, SpecError) as exc:
            skipped.append(Skipped(index, params, str(exc)))
            continue
        data["name"] = study.name
        try:
            scenario = root_model(data).model_validate(data)
        except ValidationError as exc:
            err = spec_error(exc, data, None, None)
            skipped.append(Skipped(index, params, f"{err.field}: {err.message}"))
            continue
        check_network(scenario, study.backend_spec, source)  # the study's backend for every point
        points.append(Point(index, params, scenario, run_key(scenario, bid)))
    if skipped and not points:
        reasons = list(dict.fromkeys(s.reason for s in skipped))
        why = reasons[0] if len(reasons) == 1 else "; ".join(reasons[:3]) + ("; ..." if len(reasons) > 3 else "")
        axes = ", ".join(p for _, p in axis_fields(study)) or "(no axes)"
        raise SpecError(source, "axes", f"every one of the {len(skipped)} combinations of {axes} is skipped "
                                        f"({'for the same reason' if len(reasons) == 1 else 'for these reasons'}: "
                                        f"{why}); nothing would run")
    return Expansion(study, points, skipped)


def admit(expansion: Expansion, backend: BackendSpec) -> Expansion:
    """The expansion with every point whose run would not fit in this machine's memory (its estimate,
    `simstudy.backends.estimate`) moved to the skipped ones, with the reason."""
    points: list[Point] = []
    skipped = list(expansion.skipped)
    verdicts: dict[str, str | None] = {}
    for p in expansion.points:
        if p.key not in verdicts:
            verdicts[p.key] = refused(p.scenario, backend)
        reason = verdicts[p.key]
        if reason is None:
            points.append(p)
        else:
            skipped.append(Skipped(p.index, p.params, reason))
    if len(points) == len(expansion.points):
        return expansion
    skipped.sort(key=lambda s: s.index)
    return Expansion(expansion.study, points, skipped)
