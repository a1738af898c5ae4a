"""The traffic plots of `simstudy.report.traffic` on traces they cannot lay over each other."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from simstudy.report.traffic import plot_per_iteration
from simstudy.traffic.features import analyze, iteration_profile


def test_the_per_iteration_plot_says_when_no_trace_has_a_whole_iteration(tmp_path: Path) -> None:
    """Two workers' transfers whose bytes never repeat: no whole iteration to lay over the others.
    The plot is written, without warnings, and says so in place of a legend of nothing."""
    rng = np.random.default_rng(0)
    t, rows = 0.0, []
    for _ in range(40):
        for src in (0, 1):
            size = int(rng.integers(100_000, 2_000_000))
            rows.append((t, t + size / 1.25e9, src, 1 - src, size))
        t += float(rng.uniform(5e-3, 50e-3))
    table = pd.DataFrame(rows, columns=["t_start_s", "t_end_s", "src", "dst", "bytes"])
    table["flow"], table["op"] = np.arange(len(table)), "tcp"
    features = analyze(table)
    assert len(iteration_profile(features).curves) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = plot_per_iteration({"real": features}, tmp_path / "per_iteration.png")
    assert path.stat().st_size > 0
