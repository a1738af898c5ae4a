"""Writing a report's files: text whole or not at all, figures made without pyplot and saved.

Figures are `matplotlib.figure.Figure` objects made here (`figure`), not through pyplot: saving
them needs no backend, so a report neither changes the process's matplotlib backend (a notebook
keeps its inline plots) nor leaves figures open in pyplot's registry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from simstudy.files import write_text

__all__ = ["figure", "save_figure", "write_text"]


def figure(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None,
           **subplots: Any) -> tuple[Figure, Any]:
    """A figure and its axes, as `pyplot.subplots` gives them, without pyplot."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **subplots)


def save_figure(fig: Figure, path: Path, *, dpi: int = 100) -> Path:
    """Lay the figure out and save it to `path`."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return path
