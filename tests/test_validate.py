"""`simstudy analyze` and `simstudy validate` end to end, on captures generated from real runs.

The captures are pcaps written from a flowsim run's transfers (`simstudy.traffic.pcap_write`),
so validating them against the same scenario must pass and against another must fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simstudy.traffic import read_table
from simstudy.traffic.pcap_write import rank_ip, write_pcap

SPEC = {
    "name": "small",
    "model": "small_cnn",
    "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10, "latency_ns": 500},
    "system": {"peak_tflops": 2, "efficiency": 0.5},
    "training": {"batch_size_per_worker": 256, "iterations": 10},
}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simstudy", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A capture directory: the packets of a simulated 4-worker job, with meta.json."""
    root = tmp_path_factory.mktemp("validate")
    (root / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    proc = _cli("run", "spec.yaml", "-o", "run", cwd=root)
    assert proc.returncode == 0, proc.stderr
    cap = root / "cap"
    cap.mkdir()
    packets = write_pcap(read_table(root / "run" / "traffic.parquet"), cap / "all.pcap")
    assert packets > 10_000
    meta = {"scenario": SPEC, "ranks": {str(r): f"{rank_ip(r)}" for r in range(4)}}
    (cap / "meta.json").write_text(json.dumps(meta))
    return root


def test_analyze_capture_and_run_agree(capture: Path) -> None:
    for target in ("cap", "run"):
        proc = _cli("analyze", target, cwd=capture)
        assert proc.returncode == 0, proc.stderr
        out = capture / target / "analysis"
        assert (out / "analysis.md").is_file() and (out / "plots" / "timeline.png").stat().st_size > 1000
    real = json.loads((capture / "cap" / "analysis" / "features.json").read_text())
    sim = json.loads((capture / "run" / "analysis" / "features.json").read_text())
    assert real["total_bytes"] == sim["total_bytes"] > 0  # IP bytes of the packets = bytes of the transfers
    assert real["ranks"] == sim["ranks"] == [0, 1, 2, 3]


def test_validate_the_same_job_passes(capture: Path) -> None:
    proc = _cli("validate", "--real", "cap", "-o", "v_same", "--count", "ip", cwd=capture)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # a progress bar through the stages (on stderr, as tqdm draws it)
    assert "reading the capture cap" in proc.stderr and "simulating" in proc.stderr and "4/4" in proc.stderr
    text = (capture / "v_same" / "validation.md").read_text()
    assert "**PASS**" in text and "| period_s |" in text and "| bytes_per_iter_mean |" in text
    assert (capture / "v_same" / "plots" / "throughput.png").stat().st_size > 1000
    assert (capture / "v_same" / "sim" / "run.json").is_file()


def test_validate_another_job_fails_and_names_the_metrics(capture: Path) -> None:
    other = {**SPEC, "topology": {**SPEC["topology"], "bandwidth_gbps": 40}}  # type: ignore[dict-item]
    (capture / "fast.yaml").write_text(yaml.safe_dump(other))
    proc = _cli("validate", "--real", "cap", "--spec", "fast.yaml", "-o", "v_fast", "--count", "ip",
                cwd=capture)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines() if line.startswith("| ")}
    assert "**no**" in rows["burst_mean_s"]  # 4x the bandwidth: shorter bursts


def test_validate_without_a_scenario_is_bad_input(capture: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "all.pcap").write_bytes((capture / "cap" / "all.pcap").read_bytes())
    proc = _cli("validate", "--real", str(bare), cwd=tmp_path)
    assert proc.returncode == 2
    assert "no scenario recorded with this capture; give one with --spec" in proc.stderr


def test_analyze_bad_paths_are_bad_input(tmp_path: Path) -> None:
    proc = _cli("analyze", str(tmp_path / "missing"), cwd=tmp_path)
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = _cli("analyze", str(tmp_path / "empty"), cwd=tmp_path)
    assert proc.returncode == 2 and "neither a run directory" in proc.stderr


def test_cluster_command_groups_runs_and_captures(capture: Path) -> None:
    for target in ("cap", "run"):
        assert _cli("analyze", target, cwd=capture).returncode == 0
    proc = _cli("cluster", "cap", "run", "-o", "clusters.png", cwd=capture)
    assert proc.returncode == 0, proc.stderr
    assert "[real]" in proc.stdout and "[sim]" in proc.stdout
    assert (capture / "clusters.png").stat().st_size > 1000
