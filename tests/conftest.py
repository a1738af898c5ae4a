"""Shared test fixtures."""

from __future__ import annotations

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
