"""Golden captures: ingesting and analysing the committed tiny pcaps gives the committed features.

Regenerate with `python tests/data/make_golden_captures.py` (only when a change means to move them).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simstudy.traffic.features import analyze
from simstudy.traffic.sources import load_traffic

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "captures"


@pytest.mark.parametrize("name", sorted(p.name for p in CAPTURES.iterdir() if p.is_dir()))
def test_golden_capture_features(name: str) -> None:
    expected = json.loads((CAPTURES / name / "expected.json").read_text())
    got = analyze(load_traffic(CAPTURES / name).table).scalars()
    assert set(got) == set(expected)
    for metric, value in expected.items():
        if value is None or (isinstance(value, float) and math.isnan(value)):
            assert math.isnan(got[metric]), metric
        else:
            assert got[metric] == pytest.approx(value, rel=1e-9, abs=1e-12), metric
