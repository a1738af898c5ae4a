"""The LLM studies expand without skips and every point compiles (their runs, as measured:
docs/how-to/llm-training.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simstudy.compiler import build_graph, resolve
from simstudy.spec import Scenario, load_study
from simstudy.sweeps.expand import expand

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["parallelism_llm", "moe_vs_dense"])
def test_llm_studies_compile(name: str) -> None:
    path = REPO / "specs" / f"{name}.yaml"
    exp = expand(load_study(path), path)
    assert not exp.skipped and len(exp.unique_keys) == len(exp.points) >= 11
    for point in exp.points:
        assert isinstance(point.scenario, Scenario)
        graph = build_graph(resolve(point.scenario, source=path))
        assert graph.npus == point.scenario.npus
        names = {t.name.split(".")[0] for r in graph.ranks[:1] for t in r.tasks}
        if point.scenario.parallelism.ep > 1:
            assert {"ep_dispatch", "ep_combine"} <= names, point.params
