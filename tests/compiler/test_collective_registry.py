"""Every entry of the collective registry has its transfers, and its properties say what they do."""

from __future__ import annotations

import numpy as np
import pytest

from simstudy.compiler.collectives import ALGORITHMS, PATTERNS, Pattern, registered
from simstudy.spec.collectives import ALGORITHMS as ENTRIES
from simstudy.spec.collectives import CollectiveAlgorithm


def rows(p: Pattern) -> list[tuple[int, int, int, int]]:
    return list(zip(p.step.tolist(), p.src.tolist(), p.dst.tolist(), p.nbytes.tolist(), strict=True))


def test_every_entry_has_its_transfers() -> None:
    assert list(ALGORITHMS) == list(ENTRIES)
    for name, algo in ALGORITHMS.items():
        assert vars(ENTRIES[name]).items() <= vars(algo).items()  # the entry, as the spec has it
        for kind in sorted(algo.kinds):
            p = algo.pattern(kind, np.arange(8), 8192)
            assert p.steps > 0 and p.total_bytes > 0 and set(p.src.tolist()) == set(range(8))
    with pytest.raises(RuntimeError, match=r"without both a registry entry .* and transfers .*: spiral"):
        registered({**ENTRIES, "spiral": CollectiveAlgorithm("spiral", "spiral")}, PATTERNS)
    with pytest.raises(RuntimeError, match=r": direct$"):
        registered(ENTRIES, {k: v for k, v in PATTERNS.items() if k != "direct"})


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_alternates_says_whether_chunks_take_turns(name: str) -> None:
    algo = ALGORITHMS[name]
    turns = [rows(algo.pattern("all_reduce", np.arange(8), 8192, variant=v)) for v in (0, 1, 2)]
    assert (turns[0] != turns[1]) == algo.alternates
    assert turns[0] == turns[2]  # two patterns, in turn


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_gated_collectives_run_two_steps(name: str) -> None:
    # the engine gates a phase's second step on the first one's reductions: two steps, the first reducing
    algo = ALGORITHMS[name]
    for kind in algo.gated:
        assert algo.pattern(kind, np.arange(4), 4096).steps == 2 and 0 in algo.processing(kind, 4, 4096)
