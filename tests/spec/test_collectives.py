"""The collective registry: one entry per algorithm, with its names, constraints and properties;
no other module names an algorithm."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, get_args

import pytest

from simstudy.spec import Scenario, SpecError, validate_as
from simstudy.spec.collectives import (
    ALGORITHMS,
    DEFAULT_FOR,
    FALLBACK,
    KINDS,
    NAMES,
    CollectiveAlgorithm,
    PowerOfTwo,
    collective_algorithm,
    system_implementations,
)
from simstudy.spec.parallelism import AllReduce, AllReduceAlgorithm

PACKAGE = Path(__file__).resolve().parents[2] / "simstudy"
#: The modules that may name an algorithm: the registry's entries and their transfers.
REGISTRY = {PACKAGE / "spec" / "collectives.py", PACKAGE / "compiler" / "collectives.py"}


def scenario(algorithm: str, npus: int, tp: int = 1) -> dict[str, Any]:
    return {"name": "s", "model": {"zoo": "bert_base"}, "topology": {"kind": "switch", "npus": npus},
            "training": {"batch_size_per_worker": 4, "iterations": 1},
            "parallelism": {"dp": npus // tp, "tp": tp, "aggregation": {"algorithm": algorithm}}}


def spec_error(algorithm: str, npus: int, tp: int = 1) -> SpecError | None:
    try:
        validate_as(Scenario, scenario(algorithm, npus, tp))
    except SpecError as e:
        return e
    return None


def test_the_spec_offers_the_registry_names_in_order() -> None:
    assert get_args(AllReduceAlgorithm) == NAMES == tuple(ALGORITHMS)
    assert AllReduce().algorithm == FALLBACK.name
    assert all(name in (AllReduce.model_fields["algorithm"].description or "") for name in NAMES)
    with pytest.raises(ValueError, match=r"unknown collective algorithm 'spiral'; known: .*halvingDoubling"):
        collective_algorithm("spiral")
    for algo in ALGORITHMS.values():
        assert all(collective_algorithm(n) is algo for n in (algo.name, algo.astra, *algo.variants))


@pytest.mark.parametrize(("algorithm", "npus", "tp", "message"), [
    ("halving_doubling", 6, 1,
     "halving_doubling all-reduce needs a power-of-two number of data-parallel ranks, not dp = 6"),
    ("halving_doubling", 12, 2,
     "halving_doubling all-reduce needs a power-of-two number of data-parallel ranks, not dp = 6"),
    ("double_binary_tree", 6, 1, "double_binary_tree all-reduce over every rank needs a power-of-two number of "
                                 "ranks (ASTRA-SIM's two trees span 2^k ranks), not dp = 6"),
    ("double_binary_tree", 12, 2, None),  # a smaller group's all-reduce runs as a ring
    ("double_binary_tree", 8, 1, None),
    ("ring", 6, 1, None),
    ("direct", 6, 1, None),
])
def test_power_of_two_constraints_give_the_spec_error(algorithm: str, npus: int, tp: int,
                                                      message: str | None) -> None:
    error = spec_error(algorithm, npus, tp)
    if message is None:
        assert error is None
    else:
        assert error is not None and error.field == "parallelism.aggregation.algorithm"
        assert error.message == message


def test_a_constraint_is_data_on_the_entry() -> None:
    loose = CollectiveAlgorithm("spiral", "spiral")
    assert loose.scenario_error(6, True) is None and loose.fits_dimension(6)
    strict = CollectiveAlgorithm("spiral", "spiral", power_of_two=PowerOfTwo("every_rank", " (why)", dimensions=True))
    assert strict.scenario_error(6, True) == ("spiral all-reduce over every rank needs a power-of-two number of "
                                              "ranks (why), not dp = 6")
    assert strict.scenario_error(6, False) is None and strict.scenario_error(4, True) is None
    assert not strict.fits_dimension(6) and strict.fits_dimension(4)
    # only the tree's constraint binds a bundle's dimensions (as ASTRA-SIM needs)
    assert [a.name for a in ALGORITHMS.values() if not a.fits_dimension(6)] == ["double_binary_tree"]


def test_defaults_and_system_json() -> None:
    assert set(DEFAULT_FOR) == set(KINDS) and FALLBACK is DEFAULT_FOR["all_reduce"]
    assert {kind: DEFAULT_FOR[kind].astra for kind in KINDS} == system_implementations(FALLBACK.name)
    for algo in ALGORITHMS.values():
        impl = system_implementations(algo.name)
        assert impl["all_reduce"] == algo.astra  # every algorithm configures all-reduce
        assert all(impl[k] == (algo if k in algo.configured else DEFAULT_FOR[k]).astra for k in KINDS)
        assert algo.configured <= algo.kinds and algo.gated <= algo.kinds


def _named_algorithms(path: Path, names: set[str]) -> list[str]:
    """String constants of `path` that are an algorithm's name."""
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]


def test_no_module_outside_the_registry_names_an_algorithm() -> None:
    # "ring" is also a topology kind (and the ring a real framework runs): left out of the search
    names = {n for a in ALGORITHMS.values() for n in (a.name, a.astra, *a.variants)} - {"ring"}
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path not in REGISTRY
             for hit in _named_algorithms(path, names)]
    assert found == []
    assert _named_algorithms(PACKAGE / "spec" / "collectives.py", names)  # the search finds names where they are
