"""Directories of the four kinds the dashboard shows, made the way users make them (the CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simstudy.addresses import rank_address
from simstudy.table import read_table
from simstudy.traffic.pcap_write import write_pcap
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[3]

STUDY = """
name: tiny_dash
base:
  model: {zoo: decoder, options: {layers: 1, hidden: 48, heads: 3, seq_len: 8, vocab: 64}}
  topology: {kind: ring, npus: 4, bandwidth_gbps: 10, latency_ns: 500}
  system: {peak_tflops: 10, efficiency: 0.5}
  training: {batch_size_per_worker: 16, iterations: 3}
axes:
  parallelism.tp: [1, 2]
  topology.bandwidth_gbps: [1, 10, 100]
"""

JOB = {
    "name": "dash_job",
    "model": "small_cnn",
    "parallelism": {"dp": 4},
    "topology": {"kind": "switch", "npus": 4, "bandwidth_gbps": 1, "latency_ns": 1000},
    "system": {"peak_tflops": 1, "efficiency": 0.5},
    "training": {"batch_size_per_worker": 256, "iterations": 16},
}


@pytest.fixture(scope="session")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """study (one of whose axes fails: tp=2 cannot split 3 heads), run, cluster run, capture
    (real pcaps without metadata), validation."""
    root = tmp_path_factory.mktemp("dash")
    (root / "study.yaml").write_text(STUDY)
    proc = run_cli("sweep", "study.yaml", "-o", "study", "--quiet", cwd=root)
    assert proc.returncode == 1, proc.stderr  # the tp=2 points fail; the others finish
    (root / "job.yaml").write_text(yaml.safe_dump(JOB))
    proc = run_cli("run", "job.yaml", "-o", "run", "--quiet", cwd=root)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("run", str(REPO / "specs" / "examples" / "two_jobs_leafspine.yaml"), "-o", "jobs", "--quiet",
                   cwd=root)
    assert proc.returncode == 0, proc.stderr
    cap = root / "cap"
    cap.mkdir()
    write_pcap(read_table(root / "run" / "traffic.parquet"), cap / "all.pcap")
    (cap / "meta.json").write_text(json.dumps({"scenario": JOB, "ranks": {str(r): rank_address(r) for r in range(4)}}))
    proc = run_cli("validate", "--real", "cap", "-o", "val", "--count", "ip", "--quiet", cwd=root)
    # the simulator's own traffic, written as packets: every judged metric agrees
    assert proc.returncode == 0 and "**PASS**" in proc.stdout, proc.stdout + proc.stderr
    return {"study": root / "study", "run": root / "run", "jobs": root / "jobs",
            "capture": REPO / "tests" / "data" / "real" / "ddp_w2", "validation": root / "val", "root": root}
