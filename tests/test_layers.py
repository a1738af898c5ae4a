"""The layers of DESIGN.md: a module may import only from its own layer or the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import simstudy

PACKAGE = Path(simstudy.__file__).parent

#: Top-level module or package of simstudy -> its layer (DESIGN.md, "Layers").
LAYERS: dict[str, int] = {
    # the package's own module is its public face: it re-exports the API (lazily, when first used)
    "__init__": 10,
    "__main__": 10,
    "table": 0,
    "linktable": 0,
    "layout": 0,
    "spec": 1,
    "zoo": 2,
    "chakra": 3,
    "compile": 4,
    "backends": 5,
    "traffic": 6,
    "sweep": 7,
    "validate": 7,
    "capture": 8,
    "report": 9,
    "dashboard": 9,
    "api": 10,
    "cli": 10,
}


def _part(module: str) -> str:
    """The top-level part of a dotted simstudy module name (`simstudy.spec.load` -> `spec`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "simstudy":
                out += [(node.lineno, f"simstudy.{a.name}") for a in node.names]
            elif node.module.startswith("simstudy."):
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("simstudy.")]
    return out


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_top_level_part_has_a_layer() -> None:
    parts = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in _modules()}
    assert parts <= set(LAYERS), f"give these a layer in tests/test_layers.py: {sorted(parts - set(LAYERS))}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path) -> None:
    own = LAYERS[path.relative_to(PACKAGE).parts[0].removesuffix(".py")]
    bad = []
    for line, module in _imports(path):
        target = _part(module)
        if target in LAYERS and LAYERS[target] > own:
            bad.append(f"line {line}: {module} (layer {LAYERS[target]})")
    assert not bad, f"{path.name} (layer {own}) imports from higher layers: {bad}"
