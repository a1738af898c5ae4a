"""Shared test fixtures, and CI's rule that a test needing a part CI installs must not skip."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ("pytester",)
REPO = Path(__file__).resolve().parents[1]
#: Markers of tests whose parts `.ci/run` installs: under CI=true such a test that skips fails.
MUST_RUN_UNDER_CI = ("astrasim",)


def under_ci() -> bool:
    """Whether the tests run under CI (`CI=true`, which `.ci/run` sets)."""
    return os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and under_ci()) or hasattr(report, "wasxfail"):
        return
    marker = next((m for m in MUST_RUN_UNDER_CI if item.get_closest_marker(m) is not None), None)
    if marker is None:
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    report.outcome = "failed"
    report.longrepr = (f"CI=true: a test marked `{marker}` may not skip (.ci/run installs what it needs), "
                       f"but it skipped: {reason}")


@pytest.fixture
def repo() -> Path:
    """The repository root."""
    return REPO


@pytest.fixture
def astra_sim_bin() -> Path:
    """The ASTRA-SIM congestion-unaware binary; skips the test with the reason when absent."""
    from simstudy.backends.locate import describe_search, find_astra_sim

    found = find_astra_sim()
    if found is None:
        pytest.skip(f"no ASTRA-SIM binary: {describe_search()}")
    return found
