"""Plots and reports built from typed analysis results (compute first, render second)."""

from simstudy.report.plots import plot_timeline, render_run

__all__ = ["plot_timeline", "render_run"]
