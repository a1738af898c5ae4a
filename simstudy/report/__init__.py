"""Plots and reports built from typed analysis results (compute first, render second)."""

from simstudy.report.plots import plot_timeline, render_run
from simstudy.report.study import render_study

__all__ = ["plot_timeline", "render_run", "render_study"]
