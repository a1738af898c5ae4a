"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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


def require_ns3() -> None:
    """Skip a test that needs ns-3's Python wheel when it is not installed, with the reason; under
    CI (CI=true), where .ci/run installs it, fail instead."""
    from simstudy.backends.packets import available

    if available():
        return
    reason = "ns-3's Python wheel is not installed (pip install '.[ns3]')"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}, but CI installs it")
    pytest.skip(reason)


@pytest.fixture
def ns3() -> None:
    """The packet network's ns-3 wheel (see `require_ns3`)."""
    require_ns3()
