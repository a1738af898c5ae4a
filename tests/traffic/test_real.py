"""Small real captures (tests/data/real/, made by tests/data/make_real_captures.py with
`simstudy capture`): the pcaps alone, as a capture from elsewhere comes, give the roles, the
period (within 5%) and the payload bytes per iteration (within 2%) the workers logged. Where the
ranks are processes of one host (one address), each rank found holds the ports of one true rank,
and a rank map that names each rank by one port stands for its whole process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simstudy.traffic.features import analyze
from simstudy.traffic.meta import load_rank_map
from simstudy.traffic.sources import load_traffic
from simstudy.validation import payload_view

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
    if "endpoints" in truth:  # one host: every rank found is the sockets of one true rank
        owner = {e: int(r) for r, ends in truth["endpoints"].items() for e in ends}
        found = [e for e in f.roles.endpoints if e.role != "control"]
        held = [{owner[x] for x in e.endpoints} for e in found]
        assert all(len(h) == 1 for h in held), f.roles.lines()
        assert sorted(h.pop() for h in held) == sorted(set(owner.values()))


@pytest.mark.parametrize("name", [c for c in CASES if c.startswith("one_host")])
def test_a_rank_map_naming_one_port_per_rank(name: str, tmp_path: Path) -> None:
    """Each rank named by one port of its process (the last one the analysis lists for it)."""
    truth = json.loads((REAL / name / "truth.json").read_text())
    owner = {e: int(r) for r, ends in truth["endpoints"].items() for e in ends}
    found = load_traffic(REAL / name).roles
    assert found is not None
    first = {owner[e.endpoints[-1]]: e.endpoints[-1] for e in found.endpoints if e.role != "control"}
    (tmp_path / "map.yaml").write_text(yaml.safe_dump({"ranks": first, "servers": [truth["workers"]]
                                                       if truth["servers"] else []}))
    source = load_traffic(REAL / name, rank_map=load_rank_map(tmp_path / "map.yaml"))
    f = analyze(payload_view(source.table), boundaries=source.boundaries, roles=source.roles)
    assert f.bytes_per_iteration.total == pytest.approx(truth["payload_per_iteration"], rel=0.02)


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
