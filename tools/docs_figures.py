"""The how-to pages' figures, made by the site's build from their studies' own results.

`FIGURES` names, per study of `specs/`, the plots its how-to page shows. `figures()` sweeps each
study into `results/<study>` (the directory `simstudy sweep` writes; finished runs are reused, so
a second build simulates nothing), renders its report and returns {path under docs/: PNG}, which
tools/mkdocs_hooks.py adds to the site. By hand, `simstudy sweep specs/<study>.yaml` writes the
same plots to `results/<study>/plots/`.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: study -> the plots (`plots/<name>.png` of its results) its how-to page shows
FIGURES: dict[str, tuple[str, ...]] = {
    "gossip_vs_allreduce": ("iteration_ms", "bytes_per_iter_rank_max", "peak_to_mean", "timelines"),
    "staleness": ("iteration_ms", "exposed_comm_frac", "timelines"),
    "sharing_policies": ("slowdown_mean", "slowdown_max", "timelines"),
    "in_network_aggregation": ("iteration_ms", "bytes_per_iter_rank_max", "slowdown_mean", "timelines"),
}


def figure_path(study: str, plot: str) -> str:
    """Where the site serves a study's plot, under docs/ (a page of how-to/ links `img/<study>/<plot>.png`)."""
    return f"how-to/img/{study}/{plot}.png"


def figures(root: Path = ROOT, workers: int = 2) -> dict[str, bytes]:
    """Every figure of `FIGURES`, from a sweep of its study (reusing finished runs)."""
    from simstudy import layout
    from simstudy.api import sweep
    from simstudy.report import render_study

    out: dict[str, bytes] = {}
    for study, plots in FIGURES.items():
        result = sweep(root / "specs" / f"{study}.yaml", root / "results" / study, workers=workers)
        if result.sweep is None or not result.all_ok:
            raise RuntimeError(f"specs/{study}.yaml: not every run finished; see {result.path}")
        render_study(result.sweep)
        for plot in plots:
            out[figure_path(study, plot)] = (result.path / layout.PLOTS_DIR / f"{plot}.png").read_bytes()
    return out


if __name__ == "__main__":
    for path in figures():
        print(path)
