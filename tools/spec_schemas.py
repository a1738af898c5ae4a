"""Write schemas/KIND.json from the spec models and give every spec under specs/ its schema line.

    python tools/spec_schemas.py            # rewrite schemas/*.json and the first line of specs/**/*.yaml
    python tools/spec_schemas.py --check    # exit 1 and name what is out of date, change nothing

Run it after changing a spec model or adding a spec: tests/spec/test_schema.py fails until the
shipped schemas equal `simstudy schema KIND` and every spec starts with

    # yaml-language-server: $schema=<schemas/ relative to the spec>/<kind>.json

the line yaml-language-server (VS Code's YAML extension, Neovim, Helix, ...) reads to validate and
complete the file. A spec's kind is what the loaders read it as (`simstudy.spec.schema.spec_kind`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simstudy.spec.schema import HEADER_PREFIX, SCHEMA_KINDS, schema_header, schema_text, spec_kind  # noqa: E402


def annotated(path: Path, schemas: Path) -> str:
    """The text of spec `path` with its schema line first (an older schema line replaced)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    if lines and lines[0].startswith(HEADER_PREFIX):
        lines = lines[1:]
    kind = spec_kind(yaml.safe_load("".join(lines)))
    relative = Path(os.path.relpath(schemas, path.parent)).as_posix()
    return schema_header(kind, relative) + "\n" + "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="report what is out of date, change nothing")
    parser.add_argument("--specs", default=str(ROOT / "specs"), help="directory of specs (recursively)")
    args = parser.parse_args(argv)
    schemas = ROOT / "schemas"
    stale: list[Path] = []
    wanted = {schemas / f"{kind}.json": schema_text(kind) for kind in SCHEMA_KINDS}
    wanted |= {p: annotated(p, schemas) for p in sorted(Path(args.specs).rglob("*.y*ml"))}
    for path, text in wanted.items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'out of date' if args.check else 'wrote'}: {path.relative_to(ROOT)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
