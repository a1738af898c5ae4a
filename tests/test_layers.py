"""The layers of DESIGN.md as a contract: import-linter's contracts in pyproject.toml hold, cover every
top-level part of the package, and are the list that docs/development.md shows."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import simstudy

PACKAGE = Path(simstudy.__file__).parent
REPO = PACKAGE.parent


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _layers() -> list[list[str]]:
    """The layers contract, top first, each layer the list of its modules (without `simstudy.`)."""
    (layers,) = [c["layers"] for c in _contracts() if c["type"] == "layers"]
    assert isinstance(layers, list)
    return [[m.strip().removeprefix("simstudy.") for m in re.split(r"[|:]", layer)] for layer in layers]


def test_lint_imports_keeps_every_contract() -> None:
    exe = shutil.which("lint-imports") or pytest.fail("lint-imports is missing: pip install -e '.[dev]'")
    proc = subprocess.run([exe, "--no-cache"], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_every_top_level_part_has_a_layer() -> None:
    parts = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in PACKAGE.rglob("*.py")}
    parts -= {"__init__", "__main__"}  # the root re-exports the API; __main__ runs the CLI; nothing imports either
    placed = {m for layer in _layers() for m in layer}
    assert parts == placed, f"give these a layer in pyproject.toml's contract: {sorted(parts - placed)}"


def test_the_layers_page_is_the_contract() -> None:
    text = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    page = [re.findall(r"`simstudy\.([\w.]+)`", line) for line in section.splitlines() if re.match(r"\d+\. ", line)]
    assert page == list(reversed(_layers())), "docs/development.md's layer list differs from pyproject.toml's"


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    """The contract can fail: a copy of the package whose spec layer imports the sweeps is refused."""
    exe = shutil.which("lint-imports") or pytest.fail("lint-imports is missing: pip install -e '.[dev]'")
    shutil.copytree(PACKAGE, tmp_path / "simstudy", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / "simstudy" / "spec" / "paths.py").open("a", encoding="utf-8") as f:
        f.write("\nfrom simstudy.sweeps import errors  # noqa: E402\n")
    env = {"PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, exe, "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                          check=False, env=env)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "simstudy.spec.paths -> simstudy.sweeps.errors" in proc.stdout


#: The sizes a newcomer can read (issue 33): lines per module, lines per function.
MODULE_LINES, FUNCTION_LINES = 800, 80


def test_no_room_is_too_big_to_read() -> None:
    """No module of the package over `MODULE_LINES` lines, no function over `FUNCTION_LINES`."""
    too_big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        name = path.relative_to(PACKAGE.parent)
        if source.count("\n") > MODULE_LINES:
            too_big.append(f"{name}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    too_big.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not too_big, "split these (docs/development.md): " + "; ".join(too_big)
