"""The spec schema (schemas/*.json, `simstudy schema`): equal to the models, on every shipped spec,
and as strict as the loader where an editor can tell (an unknown field, a wrong enum value)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

from simstudy.cli import main
from simstudy.spec import SpecError, load_runnable, load_study
from simstudy.spec.load import load_document
from simstudy.spec.schema import HEADER_PREFIX, SCHEMA_KINDS, SHORT_FORMS, schema_text, spec_kind, spec_schema
from tests.tool_modules import load_tool

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "specs").rglob("*.yaml"))


def tool() -> ModuleType:
    return load_tool("spec_schemas")


def shipped(kind: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "schemas" / f"{kind}.json").read_text(encoding="utf-8"))
    return data


def errors(kind: str, document: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(shipped(kind))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


@pytest.mark.parametrize("kind", SCHEMA_KINDS)
def test_shipped_schema_is_what_the_models_give(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "schemas" / f"{kind}.json").read_text(encoding="utf-8")
    assert text == schema_text(kind), f"schemas/{kind}.json is stale: run python tools/spec_schemas.py"
    jsonschema.Draft202012Validator.check_schema(json.loads(text))
    assert main(["schema", kind, "-o", str(tmp_path / "s.json")]) == 0
    assert (tmp_path / "s.json").read_text(encoding="utf-8") == text
    assert main(["schema", kind]) == 0
    assert capsys.readouterr().out == text


def test_schema_keeps_descriptions_defaults_enums_and_forbids_extra_fields() -> None:
    s = spec_schema("scenario")
    ring = s["$defs"]["Ring"]
    assert ring["additionalProperties"] is False
    assert "Gbit/s" in ring["properties"]["bandwidth_gbps"]["description"] or "gbps" in json.dumps(ring)
    par = s["$defs"]["Parallelism"]["properties"]
    assert par["schedule"]["default"] == "1f1b"
    assert set(json.dumps(par["sharding"]).split('"')) >= {"none", "zero1", "zero3", "fsdp"}
    assert s["additionalProperties"] is False
    with pytest.raises(ValueError, match="unknown spec kind"):
        spec_schema("nonsense")  # type: ignore[arg-type]


def test_every_spec_starts_with_its_schema_line_and_the_tool_has_nothing_to_do() -> None:
    assert SPECS, "no specs found"
    for path in SPECS:
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith(HEADER_PREFIX), f"{path}: no schema line; run python tools/spec_schemas.py"
        target = (path.parent / first[len(HEADER_PREFIX):]).resolve()
        assert target.parent == ROOT / "schemas" and target.is_file(), f"{path}: {first}"
    assert tool().main(["--check"]) == 0


@pytest.mark.parametrize("path", SPECS, ids=[str(p.relative_to(ROOT)) for p in SPECS])
def test_every_spec_validates_as_written_and_resolved(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    kind = spec_kind(data)
    assert path.read_text(encoding="utf-8").startswith(HEADER_PREFIX + "../" * (len(path.relative_to(ROOT).parts) - 1)
                                                       + f"schemas/{kind}.json")
    assert errors(kind, data) == []
    resolved, _ = load_document(path)  # the referenced workloads/ and topologies/ files in place
    assert errors(kind, resolved) == []


def _loader_rejects(tmp_path: Path, kind: str, data: dict[str, Any], field: str) -> None:
    (tmp_path / "workloads").mkdir(exist_ok=True)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(SpecError, match=field):
        load_study(spec) if kind == "study" else load_runnable(spec)


def test_misspelled_topology_is_flagged_by_the_schema_as_by_the_loader(tmp_path: Path) -> None:
    scenario = yaml.safe_load((ROOT / "specs/examples/resnet50_ps4_switch.yaml").read_text(encoding="utf-8"))
    scenario["topolgy"] = scenario.pop("topology")
    found = errors("scenario", scenario)
    assert any("topolgy" in e and "not allowed" in e for e in found), found
    resolved, _ = load_document(ROOT / "specs/examples/resnet50_ps4_switch.yaml")
    resolved["topolgy"] = resolved.pop("topology")
    _loader_rejects(tmp_path, "scenario", resolved, "topolgy")

    study = yaml.safe_load((ROOT / "specs/cnn_vs_rnn.yaml").read_text(encoding="utf-8"))
    study["base"]["topolgy"] = study["base"].pop("topology")
    assert any("topolgy" in e for e in errors("study", study)), errors("study", study)

    cluster = yaml.safe_load((ROOT / "specs/examples/two_jobs_leafspine.yaml").read_text(encoding="utf-8"))
    cluster["topology"]["spins"] = cluster["topology"].pop("spines")
    assert errors("cluster", cluster)
    _loader_rejects(tmp_path, "cluster", cluster, "spins")


def test_wrong_values_are_flagged_where_the_loader_rejects_them(tmp_path: Path) -> None:
    base = {"name": "x", "model": "small_cnn", "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10}}
    for bad, field in (({"parallelism": {"aggregation": {"kind": "allreduce", "algorithm": "rnig"}}}, "algorithm"),
                       ({"parallelism": {"schedule": "gpipe2"}}, "schedule"),
                       ({"topology": {"kind": "rign", "npus": 4, "bandwidth_gbps": 10}}, "topology"),
                       ({"parallelism": {"framework": "horovd"}}, "framework"),
                       ({"training": {"iterations": "two"}}, "iterations")):
        doc = base | bad
        assert errors("scenario", doc), doc
        _loader_rejects(tmp_path, "scenario", doc, field)


SHORT: dict[tuple[str | None, str], tuple[str, dict[str, Any]]] = {
    (None, "model"): ("scenario", {"name": "s", "model": "small_cnn",
                                   "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10}}),
    ("Job", "model"): ("cluster", {"kind": "cluster", "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10},
                                   "jobs": [{"name": "a", "model": "small_cnn", "gpus": 4}]}),
    ("Parallelism", "framework"): ("scenario", {"model": "small_cnn", "parallelism": {"framework": "horovod"},
                                                "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10}}),
    ("Parallelism", "dp"): ("scenario", {"model": "small_cnn", "parallelism": {"dp": "auto"},
                                         "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10}}),
    ("Job", "placement"): ("cluster", {"kind": "cluster", "topology": {
        "kind": "leaf_spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2, "bandwidth_gbps": 100},
        "jobs": [{"name": "a", "model": "small_cnn", "gpus": 2, "placement": "spread"},
                 {"name": "b", "model": "small_cnn", "gpus": 2, "placement": [1, 3]}]}),
}


@pytest.mark.parametrize("where", list(SHORT_FORMS), ids=[f"{d}.{f}" for d, f in SHORT_FORMS])
def test_every_short_form_in_the_schema_is_one_the_loader_takes(where: tuple[str | None, str], tmp_path: Path) -> None:
    assert where in SHORT, f"no example of the short form {where}"
    kind, doc = SHORT[where]
    assert errors(kind, doc) == []
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc), encoding="utf-8")
    load_runnable(spec)


def test_cli_schema_kinds_are_the_schema_kinds() -> None:
    from simstudy.cli import build_parser

    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    kinds = next(a.choices for a in subparsers.choices["schema"]._actions if a.dest == "kind")
    assert tuple(kinds or ()) == SCHEMA_KINDS
