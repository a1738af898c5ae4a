"""`simstudy analyze` and `simstudy validate` end to end, on captures generated from real runs.

The captures are pcaps written from a flowsim run's transfers (`simstudy.traffic.pcap_write`),
so validating them against the same scenario must pass and against another must fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from simstudy.addresses import rank_address
from simstudy.traffic import read_table
from simstudy.traffic.pcap_write import write_pcap
from tests.conftest import run_cli

SPEC = {
    "name": "small",
    "model": "small_cnn",
    "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10, "latency_ns": 500},
    "system": {"peak_tflops": 2, "efficiency": 0.5},
    "training": {"batch_size_per_worker": 256, "iterations": 10},
}


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A capture directory: the packets of a simulated 4-worker job, with meta.json."""
    root = tmp_path_factory.mktemp("validate")
    (root / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    proc = run_cli("run", "spec.yaml", "-o", "run", cwd=root)
    assert proc.returncode == 0, proc.stderr
    cap = root / "cap"
    cap.mkdir()
    packets = write_pcap(read_table(root / "run" / "traffic.parquet"), cap / "all.pcap")
    assert packets > 10_000
    meta = {"scenario": SPEC, "ranks": {str(r): f"{rank_address(r)}" for r in range(4)}}
    (cap / "meta.json").write_text(json.dumps(meta))
    return root


def test_analyze_capture_and_run_agree(capture: Path) -> None:
    for target in ("cap", "run"):
        proc = run_cli("analyze", target, "--count", "ip", cwd=capture)
        assert proc.returncode == 0, proc.stderr
        out = capture / target / "analysis"
        assert (out / "analysis.md").is_file() and (out / "plots" / "timeline.png").stat().st_size > 1000
    real = json.loads((capture / "cap" / "analysis" / "features.json").read_text())
    sim = json.loads((capture / "run" / "analysis" / "features.json").read_text())
    assert real["total_bytes"] == sim["total_bytes"] > 0  # IP bytes of the packets = bytes of the transfers
    assert real["ranks"] == sim["ranks"] == [0, 1, 2, 3]


def test_validate_the_same_job_passes(capture: Path) -> None:
    proc = run_cli("validate", "--real", "cap", "-o", "v_same", "--count", "ip", cwd=capture)
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
    proc = run_cli("validate", "--real", "cap", "--spec", "fast.yaml", "-o", "v_fast", "--count", "ip",
                   cwd=capture)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines() if line.startswith("| ")}
    # 4x the bandwidth: the same iteration time (compute-bound) but the network busy for less of it
    assert "**no**" in rows["duty_cycle_iteration"]
    assert "| no |" in rows["burst_mean_s"]  # shorter bursts too, reported beside the verdict


def test_validate_without_a_scenario_is_bad_input(capture: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "all.pcap").write_bytes((capture / "cap" / "all.pcap").read_bytes())
    proc = run_cli("validate", "--real", str(bare), cwd=tmp_path)
    assert proc.returncode == 2
    assert "no scenario recorded with this capture; give one with --spec" in proc.stderr


def _unreadable(tmp: Path) -> dict[str, tuple[Path, str]]:
    """Inputs a user may point `analyze` at that cannot be read, and what the error must say."""
    cases: dict[str, tuple[Path, str]] = {"missing": (tmp / "missing", "no such file or directory"),
                                          "device": (Path("/dev/null"), "not a directory or a regular file")}
    (tmp / "empty").mkdir()
    cases["empty"] = (tmp / "empty", "neither a run directory")
    one = tmp / "one.pcap"
    one.write_bytes(b"\xd4\xc3\xb2\xa1" + bytes(20))
    cases["a file"] = (one, "give the directory that holds the capture files")
    for name, data, why in [
        ("zero", b"", "only 0 bytes long"),
        ("garbage", bytes(range(256)) * 8, "not a pcap or pcapng file"),
        ("header", b"\xd4\xc3\xb2\xa1\x02\x00", "pcap file header is truncated"),
        ("first record", b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00" + bytes(8) + b"\xff\xff\x00\x00\x01\x00\x00\x00"
         + bytes(10), "no whole packet record"),
        ("unknown blocks", b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x4d\x3c\x2b\x1a\x01\x00\x00\x00" + b"\xff" * 8
         + b"\x1c\x00\x00\x00" + b"\xad\x0b\x00\x40\x10\x00\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00",
         "hold no IPv4/IPv6 packets"),
    ]:
        d = tmp / name.replace(" ", "_")
        d.mkdir()
        (d / "capture.pcapng").write_bytes(data)
        cases[name] = (d, why)
    return cases


def test_unreadable_inputs_are_one_clear_error(tmp_path: Path) -> None:
    for name, (path, why) in _unreadable(tmp_path).items():
        proc = run_cli("analyze", str(path), cwd=tmp_path)
        assert proc.returncode == 2, (name, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("simstudy: error: "), (name, proc.stderr)
        assert why in lines[0], (name, lines[0])


def test_cluster_command_groups_runs_and_captures(capture: Path) -> None:
    for target in ("cap", "run"):
        assert run_cli("analyze", target, cwd=capture).returncode == 0
    proc = run_cli("cluster", "cap", "run", "-o", "clusters.png", cwd=capture)
    assert proc.returncode == 0, proc.stderr
    assert "[real]" in proc.stdout and "[sim]" in proc.stdout
    assert (capture / "clusters.png").stat().st_size > 1000


def test_a_bare_capture_of_one_pack_all_reduced_by_two_workers(tmp_path: Path) -> None:
    """TensorFlow MWMS's default: one pack of every gradient, all-reduced by a ring of two after
    backward. Its reduce-scatter runs straight into its all-gather with the same bytes, so half an
    iteration repeats its bytes per cycle nearly as well as the iteration; but every other
    boundary of that half cuts through traffic. The capture (the run's packets, no meta.json) and
    the simulation must both be found at the iteration the run logged (before, validate judged
    the simulation at half of it and failed 4 of 7 metrics on the same job)."""
    # the scenario `simstudy capture` recorded for a 2-worker MWMS job of the small CNN at 200 Mbit/s
    spec = {"name": "mwms2", "model": "small_cnn",
            "topology": {"kind": "switch", "npus": 2, "bandwidth_gbps": 0.191281, "latency_ns": 30452},
            "system": {"measured": {"forward_us": 3974, "backward_us": 7379, "optimizer_us": 1210}},
            "parallelism": {"dp": 2, "framework": {"name": "tensorflow_mwms"}},
            "training": {"batch_size_per_worker": 16, "iterations": 5}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    proc = run_cli("run", "spec.yaml", "-o", "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    table = read_table(tmp_path / "run" / "traffic.parquet")
    per_iter = table.groupby("iteration")["t_start_s"].min().diff().dropna()
    assert per_iter.std() < 1e-3 * per_iter.mean()  # a steady job: its iteration time is exact
    steps = table.groupby(["iteration", "src"])["bytes"].agg(["count", "min", "max"])
    assert (steps["count"] == 2).all() and (steps["min"] == steps["max"]).all()  # two equal halves
    cap = tmp_path / "cap"
    cap.mkdir()
    write_pcap(table, cap / "all.pcap")
    # a pcap written from the simulated transfers has one connection per pair, not gRPC's two
    proc = run_cli("validate", "--real", "cap", "--spec", "spec.yaml", "-o", "v", "--count", "ip",
                   "--skip", "flows_per_pair", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split("|")[1].strip(): line.split("|")[2:4] for line in proc.stdout.splitlines()
            if line.startswith("| ")}
    for side in rows["period_s"]:
        assert float(side) == pytest.approx(per_iter.mean(), rel=0.03)
    for side in rows["bytes_per_iter_total"]:
        assert float(side) == pytest.approx(table["bytes"].sum() / table["iteration"].nunique(), rel=0.02)


def test_grpc_pull_connections_in_the_simulated_table() -> None:
    """TensorFlow's collectives over gRPC: the receiver of every chunk pulls it on its own
    connection to the sender. A capture of 2 workers then sees each worker's payload to the other
    on two flows (chunks as responses on the peer's connection, requests on its own); in a ring of
    4 a worker sends chunks to one neighbour and requests to the other, one flow each."""
    from types import SimpleNamespace

    from simstudy.table import check_table, make_table
    from simstudy.traffic.features import flow_stats
    from simstudy.validation import comparable_sim

    def ring(n: int, iterations: int = 3) -> pd.DataFrame:  # a ring all-reduce's steps, one pack
        rows = [(it * 1.0 + step * 0.1, r, (r + 1) % n) for it in range(iterations)
                for step in range(2 * (n - 1)) for r in range(n)]
        t, src, dst = (np.array(c) for c in zip(*rows, strict=True))
        return make_table({"t_start_s": t, "t_end_s": t + 0.09, "src": src, "dst": dst,
                           "bytes": np.full(len(t), 1000), "flow": np.arange(len(t)),
                           "op": np.full(len(t), "allreduce")})

    bare = SimpleNamespace(boundaries=())
    neighbours = {f"{a}->{b}": 1 for a in range(4) for b in ((a + 1) % 4, (a - 1) % 4)}
    for n, want in ((2, {"0->1": 2, "1->0": 2}), (4, neighbours)):
        table = ring(n)
        gloo = comparable_sim(table, bare)  # type: ignore[arg-type]
        assert set(flow_stats(gloo).per_pair.values()) == {1}
        grpc = comparable_sim(table, bare, grpc_pull=True)  # type: ignore[arg-type]
        check_table(grpc)
        assert flow_stats(grpc).per_pair == want
        assert grpc["bytes"].sum() == table["bytes"].sum() and len(grpc) == 2 * len(table)


def test_the_testbed_scenario_is_the_recorded_link() -> None:
    """`validate --backend ns3` (and `--testbed`) simulate the testbed `simstudy capture` recorded in
    meta.json (a real one: 2 DDP workers at 200 Mbit/s and 1% loss): a star of veths, losses only as
    hosts receive, a quarter of the probed round trip a link; for the packet network the veths at
    memory speed behind tc-tbf-like token buckets at the recorded rate, for flowsim the recorded goodput."""
    from simstudy.compiler.topology_file import topology_of
    from simstudy.spec import Scenario
    from simstudy.spec.capture import TBF_BURST_S
    from simstudy.traffic.meta import read_meta
    from simstudy.validation import VETH_GBPS, testbed_scenario

    case = Path(__file__).parent / "data" / "testbed_meta" / "ddp_cnn_w2_200mbit_loss1"
    meta = read_meta(case)
    assert meta is not None and meta.link is not None and meta.scenario is not None
    recorded = Scenario.model_validate(meta.scenario)
    rtt_ns = float(meta.link.probe["rtt_s"]) * 1e9
    packets = testbed_scenario(recorded, meta, packets=True)
    flows = testbed_scenario(recorded, meta, packets=False)
    for sc in (packets, flows):
        topo = sc.topology
        assert topo.kind == "star" and sc.npus == 2 and topo.loss == pytest.approx(0.01)
        assert topo.latency_ns == pytest.approx(rtt_ns / 4, abs=0.1) and topo.transport.mss_bytes == 1448
        assert sc.model == recorded.model and sc.training == recorded.training and sc.system == recorded.system
        net = topology_of(topo)
        assert [link.loss for link in net.links if link.dst.startswith("h")] == pytest.approx([0.01, 0.01])
        assert {link.loss for link in net.links if not link.dst.startswith("h")} == {0.0}
    bucket = packets.topology.token_bucket
    assert packets.topology.bandwidth_gbps == VETH_GBPS and bucket is not None
    # this meta.json predates the bucket's record: the testbed's default
    assert meta.link.burst_kib is None
    assert bucket.rate_gbps == pytest.approx(0.2)
    assert bucket.burst_kib == pytest.approx(200e6 / 8 * TBF_BURST_S / 1024)
    assert all(link.tbf_bytes_per_ns == pytest.approx(0.025) for link in topology_of(packets.topology).links)
    # a capture that recorded its bucket is simulated with it
    recorded_bucket = meta.model_copy(update={"link": meta.link.model_copy(update={"burst_kib": 24.4})})
    bucket = testbed_scenario(recorded, recorded_bucket, packets=True).topology.token_bucket
    assert bucket is not None and bucket.burst_kib == pytest.approx(24.4)
    assert flows.topology.token_bucket is None
    assert flows.topology.bandwidth_gbps == pytest.approx(recorded.topology.bandwidth_gbps)
    # a capture on the loopback has no testbed link to simulate: its recorded scenario stays
    loopback = meta.model_copy(update={"link": meta.link.model_copy(update={"where": "loopback"})})
    assert testbed_scenario(recorded, loopback, packets=True) == recorded


def test_a_capture_that_recorded_its_cores_shares_them() -> None:
    """meta.json's `host_cores` puts the recorded job's ranks on hosts by their addresses: in one
    namespace each (this capture), a host apiece, whose one worker keeps its measured times; on the
    loopback, one host of both workers, which computed together on one core (half speed) while
    they were timed, so their times are halved back to a rank's alone. `capture.threads` ranks'
    worth of cores make one; a capture from before simstudy recorded cores keeps its scenario."""
    from simstudy.spec import Scenario
    from simstudy.traffic.meta import Endpoint, read_meta
    from simstudy.validation import capture_hosts, shared_hosts_scenario

    meta = read_meta(Path(__file__).parent / "data" / "testbed_meta" / "ddp_cnn_w2_200mbit_loss1")
    assert meta is not None and meta.scenario is not None and meta.host_cores is None
    recorded = Scenario.model_validate(meta.scenario)
    assert shared_hosts_scenario(recorded, meta) is recorded
    two = meta.model_copy(update={"host_cores": 1})
    apart = shared_hosts_scenario(recorded, two)
    assert (apart.system.host_cores, apart.system.rank_hosts) == (1, (0, 1))
    assert apart.system.measured == recorded.system.measured
    lo = two.model_copy(update={"ranks": {r: [Endpoint.parse(f"127.0.0.1:{40000 + r}")] for r in range(2)}})
    assert capture_hosts(lo, 2) == (0, 0) and capture_hosts(lo, 3) is None
    together = shared_hosts_scenario(recorded, lo)
    assert (together.system.host_cores, together.system.rank_hosts) == (1, (0, 0))
    before, after = recorded.system.measured, together.system.measured
    assert before is not None and after is not None and before.backward_us is not None
    assert after.backward_us == pytest.approx(before.backward_us / 2)
    name, layer = next(iter(before.layers.items()))
    assert after.layers[name].forward_us == pytest.approx(layer.forward_us / 2)
    assert shared_hosts_scenario(recorded, lo.model_copy(update={"host_cores": 2})).system.measured == before
    spec = {**(lo.spec or {}), "capture": {**((lo.spec or {}).get("capture") or {}), "threads": 2}}
    threaded = shared_hosts_scenario(recorded, lo.model_copy(update={"host_cores": 4, "spec": spec}))
    assert threaded.system.host_cores == 2
