"""Writing a report's files: text whole or not at all, figures laid out, saved and closed."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure


def write_text(path: Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically: a failed write never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def save_figure(fig: Figure, path: Path, *, dpi: int = 100) -> Path:
    """Lay the figure out, save it to `path` and close it."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
