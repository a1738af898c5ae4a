"""`simstudy dashboard`: one self-contained HTML page for a study, a run, a capture or a
validation (compute in `data`, render in `page`)."""

from simstudy.report.dashboard.data import DashboardError, Kind, detect, load
from simstudy.report.dashboard.page import render, write

__all__ = ["DashboardError", "Kind", "detect", "load", "render", "write"]
