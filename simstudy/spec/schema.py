"""JSON Schema of the spec files, generated from the pydantic models, for editors.

`spec_schema(kind)` is what `simstudy schema KIND` prints and what `schemas/KIND.json` ships: the
model's own JSON Schema (descriptions with their units, defaults, enums, `additionalProperties:
false` wherever the model forbids extra fields) widened to the YAML a user writes, which the
loader accepts before pydantic sees it:

* any value may name another YAML file (`topology: ../topologies/ring8_25g.yaml`), resolved
  relative to the file that names it (`simstudy.spec.load`);
* the short forms of the models' `mode="before"` validators, declared once in `SHORT_FORMS`
  (`model: resnet50`, `framework: horovod`, `placement: spread`, `dp: auto`...);
* a study's `base` is a scenario or a cluster of which any field may be left out (the axes fill
  them in), so an editor completes and checks it too;
* a discriminated union is `anyOf`, since a tag with a default (`kind: allreduce`) may be left out.

Pure function of the models: no I/O.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Literal, get_args

from pydantic import BaseModel

from simstudy.spec.capture import CaptureSpec
from simstudy.spec.cluster import Cluster
from simstudy.spec.framework import PRESETS
from simstudy.spec.scenario import Scenario
from simstudy.spec.study import Study

SchemaKind = Literal["scenario", "study", "cluster", "capture"]
SCHEMA_KINDS: tuple[SchemaKind, ...] = get_args(SchemaKind)
MODELS: dict[SchemaKind, type[BaseModel]] = {
    "scenario": Scenario,
    "study": Study,
    "cluster": Cluster,
    "capture": CaptureSpec,
}
DIALECT = "https://json-schema.org/draft/2020-12/schema"

#: A value naming another YAML file, which the loader reads in its place.
FILE_REFERENCE: dict[str, Any] = {
    "type": "string",
    "pattern": r"\.ya?ml$",
    "description": "another YAML file holding this value, relative to this file",
}

#: (definition, field) -> the short forms the model's `mode="before"` validator turns into the full
#: form; a definition of None is the root model. Each entry is checked against the loader by
#: tests/spec/test_schema.py.
SHORT_FORMS: dict[tuple[str | None, str], list[dict[str, Any]]] = {
    # Scenario, Job, CaptureSpec: tag_model (simstudy/spec/scenario.py)
    (None, "model"): [{"type": "string", "description": "a zoo model name (`simstudy models`)"}],
    ("Job", "model"): [{"type": "string", "description": "a zoo model name (`simstudy models`)"}],
    # Parallelism._framework_name: a preset's name alone
    ("Parallelism", "framework"): [{"enum": list(PRESETS), "description": "a framework preset at its defaults"}],
    # fill_dp (simstudy/spec/parallelism.py): dp left out or `auto` fills the topology's (or the job's) NPUs
    ("Parallelism", "dp"): [{"const": "auto", "description": "fill the NPUs left after tp, pp and servers"}],
    # Placement._short: a policy name, or explicit NPUs
    ("Job", "placement"): [
        {"enum": ["packed", "spread", "random"], "description": "a placement policy"},
        {"type": "array", "items": {"type": "integer", "minimum": 0}, "description": "explicit NPUs"},
    ],
}


def _accepts_strings(schema: dict[str, Any]) -> bool:
    if schema.get("type") == "string" and "enum" not in schema and "pattern" not in schema:
        return True
    return any(_accepts_strings(s) for s in schema.get("anyOf", []))


def _widen(schema: dict[str, Any], alternatives: list[dict[str, Any]]) -> dict[str, Any]:
    """`schema` or any of `alternatives`, keeping its description, default and title on top."""
    keep: dict[str, Any] = {k: schema[k] for k in ("title", "description", "default") if k in schema}
    core = {k: v for k, v in schema.items() if k not in keep}
    options = core["anyOf"] if set(core) == {"anyOf"} else [core]
    return {**keep, "anyOf": [*options, *alternatives]}


def _one_of_to_any_of(node: Any) -> None:
    if isinstance(node, dict):
        if "oneOf" in node:
            node["anyOf"] = node.pop("oneOf")
            node.pop("discriminator", None)
        for value in node.values():
            _one_of_to_any_of(value)
    elif isinstance(node, list):
        for value in node:
            _one_of_to_any_of(value)


def _widen_object(obj: dict[str, Any], name: str | None) -> None:
    for field, prop in obj.get("properties", {}).items():
        extra = list(SHORT_FORMS.get((name, field), []))
        if not _accepts_strings(prop):
            extra.append({"$ref": "#/$defs/FileReference"})
        if extra:
            obj["properties"][field] = _widen(prop, extra)


def _editor_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(mode="validation")
    _one_of_to_any_of(schema)
    defs: dict[str, Any] = schema.setdefault("$defs", {})
    for name, definition in defs.items():
        _widen_object(definition, name)
    _widen_object(schema, None)
    defs["FileReference"] = dict(FILE_REFERENCE)
    return schema


def _partial(schema: dict[str, Any], title: str, description: str) -> dict[str, Any]:
    """A root schema as a definition of another: its `$defs` lifted out, no field required."""
    part = {k: v for k, v in schema.items() if k not in ("$defs", "required")}
    return {**part, "title": title, "description": description}


def spec_schema(kind: SchemaKind) -> dict[str, Any]:
    """The JSON Schema of a spec file of `kind` (scenario, study, cluster or capture)."""
    if kind not in MODELS:
        raise ValueError(f"unknown spec kind {kind!r}; expected one of {', '.join(SCHEMA_KINDS)}")
    schema = _editor_schema(MODELS[kind])
    if kind == "study":
        defs = schema["$defs"]
        parts: tuple[tuple[SchemaKind, str], ...] = (("scenario", "ScenarioBase"), ("cluster", "ClusterBase"))
        for part, title in parts:
            other = _editor_schema(MODELS[part])
            defs.update(copy.deepcopy(other.pop("$defs")))
            defs[title] = _partial(other, title, f"a {part} of which any field may be left out for the axes to fill")
        base = schema["properties"]["base"]
        schema["properties"]["base"] = {
            k: base[k] for k in ("title", "description") if k in base
        } | {"anyOf": [{"$ref": "#/$defs/ScenarioBase"}, {"$ref": "#/$defs/ClusterBase"},
                      {"$ref": "#/$defs/FileReference"}]}
    schema["$schema"] = DIALECT
    schema["title"] = f"simstudy {kind} spec"
    return dict(sorted(schema.items(), key=lambda kv: kv[0] != "$schema"))


def spec_kind(data: Any) -> SchemaKind:
    """Which schema a loaded spec document follows (what the loaders would read it as)."""
    if isinstance(data, dict):
        if data.get("kind") == "cluster":
            return "cluster"
        if "base" in data or "axes" in data:
            return "study"
        if "capture" in data or ("framework" in data and "topology" not in data):
            return "capture"
    return "scenario"


def schema_text(kind: SchemaKind) -> str:
    """`spec_schema(kind)` as the text of schemas/KIND.json (indented, sorted keys, final newline)."""
    return json.dumps(spec_schema(kind), indent=2, sort_keys=True) + "\n"


HEADER_PREFIX = "# yaml-language-server: $schema="


def schema_header(kind: SchemaKind, schemas_dir: str) -> str:
    """The first line of a spec file that tells yaml-language-server (VS Code's YAML extension,
    Neovim, Helix...) its schema; `schemas_dir` is the schemas/ directory relative to the spec."""
    return f"{HEADER_PREFIX}{schemas_dir.rstrip('/')}/{kind}.json"
