"""Pages of results: the HTML dashboard, a Chrome trace of a run, and runs and captures clustered by pattern."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from simstudy import layout
from simstudy.api.inputs import input_errors
from simstudy.api.runs import Run
from simstudy.report.chrome_trace import ChromeTrace, chrome_trace, write_trace
from simstudy.report.dashboard import load as load_page_data
from simstudy.report.dashboard import write as write_page
from simstudy.report.findings import study_findings

if TYPE_CHECKING:
    from simstudy.traffic.cluster import Clustering


def dashboard(path: str | Path, out: str | Path | None = None) -> Path:
    """Write the self-contained HTML dashboard of a study, run, capture or validation directory.

    Args:
        path: The directory to show.
        out: The HTML file (default ``<path>/dashboard.html``).

    Returns:
        The page written.

    Raises:
        InputError: `path` is none of the directories a dashboard shows.
    """
    path = Path(path)
    target = Path(out) if out is not None else path / layout.DASHBOARD_HTML
    with input_errors():
        kind, data = load_page_data(path, findings_for=study_findings)
        return write_page(kind, data, target)


def trace(
    run: str | Path | Run,
    out: str | Path | None = None,
    *,
    iterations: int = 2,
    ranks: int = 64,
    transfers: int = 20_000,
) -> ChromeTrace:
    """Export a run's per-rank timeline as a Chrome trace (for Perfetto or chrome://tracing).

    Args:
        run: The run directory (or a `Run`).
        out: The JSON file to write (default ``<run>/trace.json``).
        iterations: The first N iterations' time slots (0: all).
        ranks: At most this many ranks, the first ones (0: all).
        transfers: At most this many transfers drawn as flow arrows (0: none).

    Returns:
        The trace written, with its counts (``counts()``).

    Raises:
        InputError: `run` is not a run directory with spans.
    """
    path = run.path if isinstance(run, Run) else Path(run)
    with input_errors():
        result = chrome_trace(path, iterations=iterations, ranks=ranks, transfers=transfers)
    write_trace(result, Path(out) if out is not None else path / "trace.json")
    return result


def cluster(paths: Collection[str | Path], *, k: int | None = None) -> Clustering:
    """Group runs and captures by traffic pattern (k-means on their features).

    Args:
        paths: Sweep directories, run directories and analysed capture directories.
        k: The number of clusters (default: the best silhouette).

    Returns:
        Which items fall together, in which feature space, and why (``lines()`` describes it).

    Raises:
        InputError: A path holds nothing to cluster, or there are too few items.
    """
    # traffic.cluster loads scikit-learn, which no other command needs: imported when asked for
    from simstudy.traffic.cluster import cluster as cluster_items
    from simstudy.traffic.cluster import load_items

    with input_errors():
        return cluster_items(load_items([Path(p) for p in paths]), k=k)
