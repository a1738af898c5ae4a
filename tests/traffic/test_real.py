"""Small real captures (tests/data/real/, made by tests/data/make_real_captures.py with
`simstudy capture`): the pcaps alone, as a capture from elsewhere comes, give the roles, the
period (within 5%) and the payload bytes per iteration (within 2%) the workers logged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simstudy.traffic.features import analyze
from simstudy.traffic.sources import load_traffic
from simstudy.validate import payload_view

REAL = Path(__file__).resolve().parents[1] / "data" / "real"
CASES = sorted(p.name for p in REAL.iterdir() if p.is_dir()) if REAL.is_dir() else []


@pytest.mark.parametrize("name", CASES)
def test_a_real_capture_without_metadata(name: str) -> None:
    truth = json.loads((REAL / name / "truth.json").read_text())
    source = load_traffic(REAL / name)
    assert source.meta is None  # the pcaps only
    f = analyze(payload_view(source.table), boundaries=source.boundaries, roles=source.roles)
    assert (len(f.roles.workers), len(f.roles.servers)) == (truth["workers"], truth["servers"]), f.roles.lines()
    assert any(e.endpoint.endswith(":29500") for e in f.roles.endpoints if e.role == "control")  # the store
    assert f.period.method == "traffic"
    assert f.period.period_s == pytest.approx(truth["period_s"], rel=0.05), f.period.reason
    assert f.bytes_per_iteration.total == pytest.approx(truth["payload_per_iteration"], rel=0.02), f.period.reason


@pytest.mark.parametrize("name", CASES)
def test_simstudy_analyze_finds_the_logged_period_and_payload(name: str, tmp_path: Path) -> None:
    """The command a user types on a bare capture directory (it analysed IP bytes once, where the
    ACKs between bursts took the period 12-20% off: 72.9 ms for a logged 91.3 ms)."""
    import re
    import subprocess
    import sys

    truth = json.loads((REAL / name / "truth.json").read_text())
    proc = subprocess.run([sys.executable, "-m", "simstudy", "analyze", str(REAL / name), "-o", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"period ([0-9.]+) ms .*?, ([0-9.]+) MB per iteration in all", proc.stdout)
    assert m, proc.stdout
    assert float(m.group(1)) * 1e-3 == pytest.approx(truth["period_s"], rel=0.05)
    assert float(m.group(2)) * 1e6 == pytest.approx(truth["payload_per_iteration"], rel=0.02)
