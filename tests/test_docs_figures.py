"""The how-to pages' figures (made by the site's build from their studies' results, tools/docs_figures.py):
every figure a page shows is one its study's report draws, and every figure made is shown."""

from __future__ import annotations

import re
from pathlib import Path

from simstudy.spec import load_study
from simstudy.sweeps import expand
from tests.tool_modules import load_tool

ROOT = Path(__file__).resolve().parents[1]


def test_every_figure_is_a_plot_of_its_study_and_is_shown_on_a_page() -> None:
    tool = load_tool("docs_figures")
    shown = {f"how-to/{m}" for page in (ROOT / "docs" / "how-to").glob("*.md")
             for m in re.findall(r"!\[[^\]]*\]\((img/[^)]+\.png)\)", page.read_text(encoding="utf-8"))}
    made = {tool.figure_path(study, plot) for study, plots in tool.FIGURES.items() for plot in plots}
    assert shown == made
    for study, plots in tool.FIGURES.items():
        spec = load_study(ROOT / "specs" / f"{study}.yaml")
        drawn = {p.y for p in spec.plots or ()} | {"timelines"}
        assert set(plots) <= drawn, study
    assert "docs_figures" in (ROOT / "tools" / "mkdocs_hooks.py").read_text(encoding="utf-8")


def test_the_studies_are_as_small_as_their_pages_say() -> None:
    """gossip_vs_allreduce: 4 aggregations x 2 models x 2 worker counts x 2 link speeds; staleness: 3 x 2 x 2;
    in_network_aggregation: 5 aggregations x 2 models."""
    for study, runs, page in (("gossip_vs_allreduce", 32, "gossip"), ("staleness", 12, "staleness"),
                              ("in_network_aggregation", 10, "in-network-aggregation")):
        path = ROOT / "specs" / f"{study}.yaml"
        exp = expand(load_study(path), path)
        assert (len(exp.points), len(exp.skipped)) == (runs, 0), study
        assert f"{runs} runs" in (ROOT / "docs" / "how-to" / f"{page}.md").read_text(encoding="utf-8")
