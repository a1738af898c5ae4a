"""Captures from elsewhere, generated with known truth (`jobgen`): per-host pcaps without
meta.json, snap length 100, ACKs between the data segments, and what real captures hold besides
the training job. Each test asserts the endpoint roles, the iteration period (within 5% of the
generated one) and the bytes per iteration (within 1%) that `analyze` finds from the traffic alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from simstudy.traffic.features import Features, analyze
from simstudy.traffic.iterations import interquartile_mean
from simstudy.traffic.sources import load_traffic
from simstudy.validation import payload_view

from .jobgen import Job, Truth, write


def _analyse(directory: Path) -> Features:
    source = load_traffic(directory)
    return analyze(payload_view(source.table), boundaries=source.boundaries, roles=source.roles)


def _check(f: Features, truth: Truth, *, workers: int, servers: int = 0) -> None:
    assert f.roles.source == "traffic"
    assert (len(f.roles.workers), len(f.roles.servers)) == (workers, servers), f.roles.lines()
    assert f.period.method == "traffic", f.period.reason
    assert f.period.period_s == pytest.approx(truth.period_s, rel=0.05), f.period.reason
    b = f.bytes_per_iteration
    assert b.total == pytest.approx(truth.total, rel=0.01), f.period.reason
    assert b.mean == pytest.approx(truth.sent[0], rel=0.01)


def test_a_control_connection_and_a_host_that_only_talks_to_it(tmp_path: Path) -> None:
    truth = write(Job(control=True, extra_hosts=1), tmp_path)
    f = _analyse(tmp_path)
    _check(f, truth, workers=4)
    control = {e.endpoint: e for e in f.roles.endpoints if e.role == "control"}
    assert set(control) == {"10.0.0.1:29500", "10.0.0.5"}  # the store, and the login node
    assert "4 host(s)" in control["10.0.0.1:29500"].evidence
    assert control["10.0.0.5"].rank == -1 and f.ranks == (0, 1, 2, 3)


def test_a_parameter_broadcast_at_the_start_is_not_an_iteration(tmp_path: Path) -> None:
    truth = write(Job(broadcast=True, gradient_bytes=3_000_000), tmp_path)
    f = _analyse(tmp_path)
    _check(f, truth, workers=4)
    assert f.bytes_per_iteration.iterations == 8
    assert f.period.window_s[0] > 0.2  # the steady window starts after the broadcast


def test_a_stall_longer_than_an_iteration_does_not_end_the_count(tmp_path: Path) -> None:
    """Descheduled ranks (a busy machine) pause the training traffic for several periods: every
    iteration on both sides of the pause is counted, and the period is the typical iteration."""
    truth = write(Job(iterations=12, stall_after=7, stall_s=0.5, jitter=0.03, broadcast=True), tmp_path)
    f = _analyse(tmp_path)
    assert f.bytes_per_iteration.iterations == 12, f.period.reason
    assert f.bytes_per_iteration.total == pytest.approx(truth.total, rel=0.01), f.period.reason
    typical = interquartile_mean(np.diff(truth.starts_s))
    assert typical < truth.period_s * 0.8  # the stall is in the mean, not in the typical iteration
    assert f.period.period_s == pytest.approx(typical, rel=0.05), f.period.reason


def test_two_buckets_of_half_the_gradient_each_are_not_two_iterations(tmp_path: Path) -> None:
    """A link-bound parameter server whose gradient is two equal buckets: each sender's bytes reach
    half an iteration's worth at the silence between the buckets, but that silence is short and
    the one before the next forward pass long (it was read as twice the iterations at half the
    period, as real 200 Mbit/s captures of a Transformer and a 4-worker CNN were)."""
    truth = write(Job(workers=4, strategy="ps", buckets=(0.5, 0.5), iterations=6, compute_s=0.05, jitter=0.02),
                  tmp_path)
    f = _analyse(tmp_path)
    _check(f, truth, workers=4, servers=1)
    assert f.bytes_per_iteration.iterations == 6, f.period.reason


def test_a_pacing_qdisc_is_not_the_iteration(tmp_path: Path) -> None:
    job = Job(pacing_packets=38)  # a token bucket: 38 packets at once every 2.4 ms
    truth = write(job, tmp_path)
    f = _analyse(tmp_path)
    _check(f, truth, workers=4)
    pacing = 38 * (job.mss + 66) * 8 / job.rate_bps  # its bursts do not repeat an iteration's bytes
    near = [c for c in f.period.candidates if abs(c.period_s / pacing - 1) < 0.1]
    assert all(c.verdict != "chosen" for c in near), [(c.period_s, c.verdict) for c in near]
    assert abs(f.period.period_s / pacing - 1) > 0.5


def test_a_truncated_last_iteration_is_left_out(tmp_path: Path) -> None:
    truth = write(Job(cut_at=0.5, jitter=0.03), tmp_path)
    f = _analyse(tmp_path)
    _check(f, truth, workers=4)
    assert f.bytes_per_iteration.iterations == 7  # 8 started, the last one cut in half


def test_a_parameter_server_job_captured_on_every_host_in_both_directions(tmp_path: Path) -> None:
    """The public dataset's layout: one pcap per host, each holding what the host sent and received."""
    truth = write(Job(strategy="ps", both_directions=True, control=True, broadcast=True, jitter=0.05), tmp_path)
    source = load_traffic(tmp_path)
    f = analyze(payload_view(source.table), boundaries=source.boundaries, roles=source.roles)
    _check(f, truth, workers=4, servers=1)  # bytes per iteration as sent: every packet once, not twice
    assert f.roles.servers == (4,)  # numbered after the workers, as the compiler numbers them


def test_ranks_given_by_the_user_replace_the_roles_found(tmp_path: Path) -> None:
    write(Job(strategy="ps"), tmp_path / "cap")
    ranks = tmp_path / "map.yaml"
    ranks.write_text(yaml.safe_dump({"ranks": {0: "10.0.0.5", 1: "10.0.0.1", 2: "10.0.0.2", 3: "10.0.0.3",
                                               4: "10.0.0.4"}, "servers": [0]}))
    proc = subprocess.run([sys.executable, "-m", "simstudy", "analyze", str(tmp_path / "cap"), "--ranks", str(ranks),
                           "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "roles (rank map)" in proc.stdout
    doc = json.loads((tmp_path / "out" / "features.json").read_text())
    roles = {e["endpoint"]: (e["role"], e["rank"]) for e in doc["roles"]["endpoints"]}
    assert roles["10.0.0.5"] == ("server", 0) and roles["10.0.0.1"] == ("worker", 1)
    assert "Who is who" in (tmp_path / "out" / "analysis.md").read_text()


def test_validate_a_public_dataset_experiment_with_a_given_spec(tmp_path: Path) -> None:
    """`framework-model-optimizer-batchsize-backend-delay-topology`, one pcap per worker, no meta.json:
    `validate --real DIR --spec S` reads the experiment from the name and the roles from the traffic."""
    exp = tmp_path / "pytorch-small_cnn-sgd-8-gloo-0ms-star"
    truth = write(Job(both_directions=True, control=True), exp)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "small", "model": "small_cnn", "parallelism": {"dp": 4},
        "topology": {"kind": "switch", "npus": 4, "bandwidth_gbps": 0.2, "latency_ns": 50000},
        "system": {"peak_tflops": 0.05, "efficiency": 0.5}, "training": {"batch_size_per_worker": 8, "iterations": 4}}))
    proc = subprocess.run([sys.executable, "-m", "simstudy", "validate", "--real", str(exp), "--spec", str(spec),
                           "-o", str(tmp_path / "v")], capture_output=True, text=True, timeout=600)
    # The generated job sends 3 MB per worker per iteration, every 0.158 s; small_cnn's all-reduce is
    # 2.1 MB, every 0.093 s on this spec: the verdict is FAIL on exactly those, from the truth.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Judged (what the training job does)" in proc.stdout
    judged = proc.stdout[proc.stdout.index("Judged"):proc.stdout.index("Reported")]
    failed = {line.split("|")[1].strip() for line in judged.splitlines() if line.endswith("| **no** |")}
    assert failed == {"period_s", "bytes_per_iter_mean", "bytes_per_iter_total", "throughput_mean_bps"}, judged
    assert "**FAIL (4 of 7 judged metrics)**" in judged
    real = json.loads((tmp_path / "v" / "features_real.json").read_text())
    assert real["period"]["period_s"] == pytest.approx(truth.period_s, rel=0.05)
    assert real["bytes_per_iteration"]["mean"] == pytest.approx(truth.sent[0], rel=0.01)
    text = (tmp_path / "v" / "validation.md").read_text()
    assert "Experiment (from the directory name): pytorch, small_cnn, sgd, batch 8, gloo, delay 0ms, star." in text
    assert "4 workers exchanging training traffic" in text and "10.0.0.1:29500: control" in text
    assert (tmp_path / "v" / "plots" / "per_iteration.png").stat().st_size > 1000
