"""The documentation's reference pages, generated from the code when the site is built.

`pages()` returns {path under docs/: Markdown}; `docs/hooks.py` adds them to the mkdocs build, and
`python tools/docs_reference.py DIR` writes them to DIR to read without mkdocs. Every entry comes
from where the code declares it:

* CLI commands and options: the argparse parser of `simstudy.cli.build_parser`;
* spec fields: the JSON Schema of each spec kind (`simstudy.spec.schema`, = schemas/*.json);
* table columns: the schemas of the traffic table, the link table, spans and switch counters;
* analyses and metrics: the registry `simstudy.traffic.features.ANALYSES` (metrics with their
  tolerance and level) and the counters' tolerances;
* framework presets, topology kinds and zoo models: their models and the zoo's list.

tests/test_docs_reference.py fails when a CLI option, spec field, table column or metric has no
entry here.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, get_args

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from simstudy.backends.base import SPAN_COLUMNS, SPAN_MEANINGS  # noqa: E402
from simstudy.cli import build_parser  # noqa: E402
from simstudy.linktable import COLUMNS as LINK_COLUMNS  # noqa: E402
from simstudy.linktable import MEANINGS as LINK_MEANINGS  # noqa: E402
from simstudy.spec.framework import PRESETS  # noqa: E402
from simstudy.spec.schema import SCHEMA_KINDS, spec_schema  # noqa: E402
from simstudy.spec.topology import Topology  # noqa: E402
from simstudy.table import MEANINGS as TRAFFIC_MEANINGS  # noqa: E402
from simstudy.table import OPTIONAL, REQUIRED  # noqa: E402
from simstudy.traffic.counter_features import COUNTER_TOLERANCES  # noqa: E402
from simstudy.traffic.counters import COLUMNS as COUNTER_COLUMNS  # noqa: E402
from simstudy.traffic.counters import MEANINGS as COUNTER_MEANINGS  # noqa: E402
from simstudy.traffic.features import ANALYSES  # noqa: E402

#: Table name -> (file it is stored in, {column: dtype}, {column: meaning}).
TABLES: dict[str, tuple[str, Mapping[str, str], Mapping[str, str]]] = {
    "traffic table": ("traffic.parquet (runs), the ingest of pcaps", {**REQUIRED, **OPTIONAL}, TRAFFIC_MEANINGS),
    "link table": ("links.parquet (runs with traffic: links)", LINK_COLUMNS, LINK_MEANINGS),
    "spans": ("spans.parquet (runs)", SPAN_COLUMNS, SPAN_MEANINGS),
    "switch counters": ("Counters.table (simstudy.traffic.counters)", COUNTER_COLUMNS, COUNTER_MEANINGS),
}


def cell(text: object) -> str:
    """Text fit for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: object) -> str:
    return f"`{text}`".replace("|", "\\|")


# -- CLI -----------------------------------------------------------------------------------------------

def subcommands(parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.ArgumentParser]:
    parser = parser or build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def option_name(action: argparse.Action) -> str:
    """How the reference names an option: its flags (`-o, --output`), or a positional's name."""
    return ", ".join(action.option_strings) if action.option_strings else str(action.metavar or action.dest)


def cli_page() -> str:
    parser = build_parser()
    helps = {a.dest: a.help for a in parser._actions if isinstance(a, argparse._SubParsersAction)}
    out = ["# CLI reference", "", "Generated from `simstudy.cli.build_parser()` when the site is built.",
           "Exit codes: 0 success, 1 a check failed (a failed run, a regression, a validation), 2 bad input.", ""]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command_help = {c.dest: c.help for c in sub._choices_actions}
    del helps
    for name, command in subcommands(parser).items():
        out += [f"## `simstudy {name}`", "", cell(command_help.get(name, "")), "", "```text",
                command.format_usage().strip(), "```", "", "| option | default | choices | what |",
                "|---|---|---|---|"]
        for a in options(command):
            default = "" if a.default in (None, argparse.SUPPRESS, False, []) else code(a.default)
            choices = ", ".join(code(c) for c in a.choices) if a.choices else ""
            out.append(f"| {code(option_name(a))} | {default} | {choices} | {cell(a.help or '')} |")
        out.append("")
    return "\n".join(out)


# -- specs ---------------------------------------------------------------------------------------------

def type_text(schema: Mapping[str, Any]) -> str:
    """A short type of a JSON Schema: `integer`, `ring | switch`, `Topology`, `list of Layer`..."""
    if "$ref" in schema:  # a link to the definition's section on the same page
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "const" in schema:
        return code(schema["const"])
    if "enum" in schema:
        return " \\| ".join(code(v) for v in schema["enum"])
    if "anyOf" in schema:  # a file reference is possible everywhere: the page says so once
        kinds = [type_text(s) for s in schema["anyOf"] if s.get("$ref") != "#/$defs/FileReference"]
        return " or ".join(dict.fromkeys(kinds))
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items") or (schema.get("prefixItems") or [{}])[0]
        return f"list of {type_text(items)}" if items else "list"
    if kind == "object":
        extra = schema.get("additionalProperties")
        return f"map to {type_text(extra)}" if isinstance(extra, dict) and extra else "map"
    return str(kind or "any")


def spec_definitions() -> dict[str, dict[str, Any]]:
    """Every object of every spec schema by name (the root of each kind as `<kind> spec`)."""
    found: dict[str, dict[str, Any]] = {}
    for kind in SCHEMA_KINDS:
        schema = spec_schema(kind)
        found[f"{kind} spec"] = schema
        for name, definition in schema.get("$defs", {}).items():
            if "properties" in definition:
                found.setdefault(name, definition)
    return found


def spec_page() -> str:
    out = ["# Spec reference", "",
           "Every field of every spec file, generated from the JSON Schema of the pydantic models "
           "(`simstudy schema KIND`, shipped as `schemas/KIND.json`). Units are in the field names "
           "(`bandwidth_gbps`, `latency_ns`, `start_ms`). Any value may instead name another YAML file, "
           "relative to the file that names it.", ""]
    defs = spec_definitions()
    order = [f"{k} spec" for k in SCHEMA_KINDS] + sorted(n for n in defs if not n.endswith(" spec"))
    for name in order:
        d = defs[name]
        out += [f"## {name}", "", cell(d.get("description", "")), ""]
        if d.get("additionalProperties") is False:
            out += ["Unknown fields are an error.", ""]
        required = set(d.get("required", []))
        out += ["| field | type | default | what |", "|---|---|---|---|"]
        for field, prop in d.get("properties", {}).items():
            default = code(json.dumps(prop["default"])) if "default" in prop else ""
            default = "required" if field in required else default
            out.append(f"| {code(field)} | {type_text(prop)} | {default} | {cell(prop.get('description', ''))} |")
        out.append("")
    return "\n".join(out)


# -- tables, analyses, presets ---------------------------------------------------------------------------

def tables_page() -> str:
    out = ["# Table reference", "", "Every column of the tables simstudy writes and reads, from the schema that "
           "declares it (dtypes as pandas names them).", ""]
    for name, (where, columns, meanings) in TABLES.items():
        out += [f"## {name}", "", f"Stored in {where}.", "", "| column | dtype | what |", "|---|---|---|"]
        for column, dtype in columns.items():
            required = " (required)" if name == "traffic table" and column in REQUIRED else ""
            out.append(f"| {code(column)} | {dtype} | {cell(meanings.get(column, ''))}{required} |")
        out.append("")
    return "\n".join(out)


def metrics() -> dict[str, tuple[float, str, str]]:
    """Every metric a validation compares: name -> (tolerance, level, why)."""
    found = {m.name: (m.tolerance, m.level, m.why) for a in ANALYSES for m in a.metrics}
    for name, tolerance in COUNTER_TOLERANCES.items():
        found.setdefault(name, (tolerance, "job", "switch counters: compared port by port or tier by tier"))
    return found


def analyses_page() -> str:
    out = ["# Analyses and metrics", "",
           "`analyze` runs every analysis of the registry `simstudy.traffic.features.ANALYSES` in this order; "
           "each is a field of `Features` and a key of features.json. `validate` compares the metrics they "
           "declare; job-level metrics decide the verdict, transport-level ones are reported beside it "
           "(`--judge-transport` judges them too).", "",
           "## Analyses", "", "| analysis | result | metrics |", "|---|---|---|"]
    for a in ANALYSES:
        kind = getattr(a.kind, "__name__", None) or str(a.kind).replace("simstudy.traffic.", "")
        names = ", ".join(code(m.name) for m in a.metrics)
        out.append(f"| {code(a.name)} | {cell(kind)} | {names} |")
    out += ["", "## Metrics", "",
            "A scalar's distance is its relative error; `<distribution>:wasserstein` is the 1-Wasserstein "
            "distance over the real mean, `:ks` the Kolmogorov-Smirnov statistic, "
            "`traffic_matrix:jensen_shannon[_undirected]` the Jensen-Shannon distance of the normalised matrices.",
            "", "| metric | tolerance | level | what it says, or why it may differ |", "|---|---|---|---|"]
    for name, (tolerance, level, why) in metrics().items():
        out.append(f"| {code(name)} | {tolerance:g} | {level} | {cell(why)} |")
    out.append("")
    return "\n".join(out)


def _fields(model: Any) -> Iterable[tuple[str, Any]]:
    return ((n, f) for n, f in model.model_fields.items())


def presets_page() -> str:
    from simstudy import zoo

    out = ["# Framework presets, topology kinds and models", "",
           "## Framework presets", "", "`parallelism.framework`: a name, or `{name: ..., knob: value}`.", ""]
    for name, model in PRESETS.items():
        out += [f"### `{name}`", "", cell(inspect.getdoc(model) or ""), "", "| knob | default | what |",
                "|---|---|---|"]
        knobs = [(f, info) for f, info in _fields(model) if f != "name"]
        for field, info in knobs:
            out.append(f"| {code(field)} | {code(info.default)} | {cell(info.description or '')} |")
        if not knobs:
            out.append("| (none of its own) | | its bucket size is `parallelism.bucket_size_mib` |")
        out.append("")
    out += ["## Topology kinds", "", "`topology: {kind: ..., ...}`; the fields of each kind are in the "
            "[spec reference](spec.md).", "", "| kind | model | what |", "|---|---|---|"]
    for model in get_args(get_args(Topology)[0]):
        kind = get_args(model.model_fields["kind"].annotation)[0]
        out.append(f"| {code(kind)} | {model.__name__} | {cell(inspect.getdoc(model) or '')} |")
    out += ["", "## Zoo models", "", "`model: NAME` (the output of `simstudy models`).", "",
            "| model | family | parameters | GFLOPs per sample | what |", "|---|---|---|---|---|"]
    for row in zoo.list_models():
        out.append(f"| {code(row.name)} | {row.family} | {row.params:,} | {row.gflops:.3f} | {cell(row.description)} |")
    out.append("")
    return "\n".join(out)


def api_page() -> str:
    """Every name of `simstudy.__all__`, rendered by mkdocstrings from `simstudy.api` (the package's
    attributes `compile`, `sweep` and `validate` share their names with subpackages, which a static
    analysis of the package would render instead)."""
    import simstudy

    out = ["# Python API", "",
           "What `import simstudy` exports (`simstudy.__all__`), with its docstrings. Bad input raises",
           "`InputError`, whose message is the line the CLI prints before exiting with code 2.", "",
           "```python", "import simstudy as s", "",
           "result = s.sweep(s.load_study(\"specs/cnn_vs_rnn.yaml\"))", "result.summary.shape", "```", ""]
    for name in simstudy.__all__:
        if name.startswith("_"):
            continue
        out += [f"::: simstudy.api.{name}", "    options:", "      show_root_heading: true",
                "      show_root_full_path: false", "      show_source: false", "      heading_level: 2", ""]
    return "\n".join(out)


def pages() -> dict[str, str]:
    """{path under docs/: Markdown} of every generated reference page."""
    return {
        "reference/cli.md": cli_page(),
        "reference/spec.md": spec_page(),
        "reference/tables.md": tables_page(),
        "reference/analyses.md": analyses_page(),
        "reference/presets.md": presets_page(),
        "reference/api.md": api_page(),
    }


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "site-reference")
    for path, text in pages().items():
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_text(text, encoding="utf-8")
        print(f"wrote {target / path}")
