"""The command line, run as a user runs it: a real subprocess."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from simstudy import chakra
from simstudy.backends.locate import find_astra_sim
from tests.conftest import run_cli


def simstudy(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, timeout=300)


def test_compile_example_bundle(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    res = simstudy("compile", "specs/examples/resnet50_dp8_ring.yaml", "-o", str(out), cwd=repo)
    assert res.returncode == 0, res.stderr
    assert "8 ranks" in res.stdout
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        [f"resnet50_dp8_ring.{r}.et" for r in range(8)]
        + ["network.yml", "system.json", "remote_memory.json", "scenario.json", "topology.json"]
    )
    meta, nodes = chakra.read_trace(out / "resnet50_dp8_ring.3.et")
    assert meta.version == "0.0.4"
    colls = [n for n in nodes if n.type == chakra.NodeType.COMM_COLL_NODE]
    # Two iterations of all-reduces whose sizes add up to ResNet-50's fp32 gradients.
    assert sum(int(n.get("comm_size")) for n in colls) == 2 * 25_557_032 * 4


def test_broken_spec_one_line_exit_2(repo: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: resnet50\nparallelism: {dp: 8}\ntopology: {kind: ring, npus: 8, latency_ns: fast}\n")
    res = simstudy("compile", str(bad), "-o", str(tmp_path / "out"), cwd=repo)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert str(bad) in lines[0] and "topology.latency_ns" in lines[0] and "valid number" in lines[0]
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_zoo_model_names_field(repo: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: resnet5\nparallelism: {dp: 2}\ntopology: {kind: ring, npus: 2}\n")
    res = simstudy("compile", str(bad), cwd=tmp_path)
    assert res.returncode == 2
    assert f"{bad}: model:" in res.stderr and "resnet50" in res.stderr


def test_models_lists_zoo(repo: Path) -> None:
    res = simstudy("models", cwd=repo)
    assert res.returncode == 0
    assert "resnet50" in res.stdout and "25,557,032" in res.stdout and "bert_base" in res.stdout


def test_missing_file_exit_2(repo: Path, tmp_path: Path) -> None:
    res = simstudy("compile", str(tmp_path / "nope.yaml"), cwd=repo)
    assert res.returncode == 2 and "file not found" in res.stderr


def test_run_writes_run_directory(repo: Path, tmp_path: Path) -> None:
    import json

    from simstudy.traffic import read_table

    out = tmp_path / "run"
    res = simstudy("run", "specs/examples/lstm_dp4_switch.yaml", "-o", str(out), "--et-files", cwd=repo)
    assert res.returncode == 0, res.stderr
    assert "flowsim" in res.stdout and "transfers" in res.stdout
    assert {"bundle", "run.json", "traffic.parquet", "timeline.png"} <= {p.name for p in out.iterdir()}
    assert len(list((out / "bundle").glob("*.et"))) == 4  # asked for: a bundle ASTRA-SIM can take
    summary = json.loads((out / "run.json").read_text())
    assert summary["backend"] == "flowsim" and len(summary["ranks"]) == 4
    table = read_table(out / "traffic.parquet")
    assert int(table["bytes"].sum()) == summary["bytes"] > 0
    # The same input set given as ASTRA-SIM inputs runs and gives the same finish time.
    b = out / "bundle"
    res2 = simstudy("run", "--workload", str(b / "lstm_dp4_switch"), "--network", str(b / "network.yml"),
                    "--system", str(b / "system.json"), "-o", str(tmp_path / "raw"), cwd=repo)
    assert res2.returncode == 0, res2.stderr
    assert json.loads((tmp_path / "raw" / "run.json").read_text())["finish_ns"] == summary["finish_ns"]


def test_run_failure_keeps_old_results(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert simstudy("run", "specs/examples/lstm_dp4_switch.yaml", "-o", str(out), cwd=repo).returncode == 0
    before = (out / "run.json").read_bytes()
    res = simstudy("run", "specs/examples/lstm_dp4_switch.yaml", "--backend", "astrasim",
                   "--astra-sim", str(tmp_path / "missing"), "-o", str(out), cwd=repo)
    assert res.returncode == 1 and "no ASTRA-SIM binary" in res.stderr
    assert (out / "run.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.astrasim
def test_astra_sim_path_relative_to_the_current_directory(repo: Path, tmp_path: Path) -> None:
    binary = find_astra_sim()
    if binary is None:
        pytest.skip("no ASTRA-SIM binary (set ASTRA_SIM_BIN)")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / binary.name).symlink_to(binary)
    spec = repo / "specs" / "examples" / "resnet50_dp8_ring.yaml"
    res = simstudy("run", str(spec), "--backend", "astrasim", "--astra-sim", f"./bin/{binary.name}", "-o",
                   str(tmp_path / "run"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "run" / "run.json").is_file()


SWEEP = """\
name: tiny_cli
base:
  model: small_cnn
  topology: {kind: ring, npus: 4, bandwidth_gbps: 10}
  training: {iterations: 1}
axes:
  topology.npus: [2, 4]
"""


def _keys(out: str) -> list[str]:
    return [line.split("(run ")[1].rstrip(")") for line in out.splitlines() if "(run " in line]


def test_sweep_backend_and_set_override_the_study(tmp_path: Path) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(SWEEP)
    plain = simstudy("sweep", str(study), "--dry-run", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert "backend flowsim:" in plain.stdout
    other = simstudy("sweep", str(study), "--dry-run", "--backend", "astrasim", "--aware", cwd=tmp_path)
    assert other.returncode == 0, other.stderr
    assert "backend astrasim:aware=True" in other.stdout
    # the same scenarios under another backend are other runs: both live side by side
    assert set(_keys(plain.stdout)).isdisjoint(_keys(other.stdout))
    fast = simstudy("sweep", str(study), "--dry-run", "--set", "topology.bandwidth_gbps=400", "--set",
                    "training.iterations=3", cwd=tmp_path)
    assert fast.returncode == 0, fast.stderr
    assert "bandwidth_gbps: 400" in fast.stdout and "iterations: 3" in fast.stdout
    assert set(_keys(plain.stdout)).isdisjoint(_keys(fast.stdout))


def test_sweep_runs_and_reports_its_wall_time(tmp_path: Path) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(SWEEP)
    res = simstudy("sweep", str(study), "-o", str(tmp_path / "out"), "--quiet", "--set", "training.iterations=2",
                   cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "wall time" in res.stdout and "the whole command" in res.stdout
    assert '"iterations": 2' in (tmp_path / "out" / "study.json").read_text()


@pytest.mark.parametrize(("args", "field"), [
    (["--set", "topolgy.npus=4"], "--set topolgy.npus=4"),
    (["--set", "topology.npus"], "--set topology.npus"),
])
def test_sweep_bad_set_is_one_clear_error(tmp_path: Path, args: list[str], field: str) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(SWEEP)
    res = simstudy("sweep", str(study), "--dry-run", *args, cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and f"{study}: {field}:" in res.stderr and "Traceback" not in res.stderr


def test_sweep_misspelled_axis_exits_2_naming_file_and_axis(tmp_path: Path) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(SWEEP.replace("topology.npus: [2, 4]", "topolgy.npus: [2, 4]"))
    for extra in ([], ["--quiet"]):
        res = simstudy("sweep", str(study), "-o", str(tmp_path / "out"), *extra, cwd=tmp_path)
        assert res.returncode == 2, res.stdout
        assert res.stderr.count("\n") == 1
        assert f"{study}: axes.topolgy.npus: 'topolgy.npus' is not a field of the scenario" in res.stderr
    assert not (tmp_path / "out" / "summary.parquet").exists()


def test_run_and_sweep_take_a_congestion_mode(repo: Path, tmp_path: Path) -> None:
    """`--congestion` picks flowsim's network model on `run` and on `sweep` (overriding the study's
    backend_options); on a switch, the aware model stores and forwards every message twice."""
    import json

    finish = {}
    for mode in ("unaware", "aware"):
        out = tmp_path / mode
        res = simstudy("run", "specs/examples/lstm_dp4_switch.yaml", "--congestion", mode, "-o", str(out), cwd=repo)
        assert res.returncode == 0, res.stderr
        summary = json.loads((out / "run.json").read_text())
        assert summary["details"]["congestion"] == mode
        finish[mode] = summary["finish_ns"]
    assert finish["aware"] > finish["unaware"]
    study = _two_run_study(tmp_path, "c", "contention: true")
    records = _sweep_records(repo, study, tmp_path / "sw", "--congestion", "aware")
    assert len(records) == 2 and {r["details"]["congestion"] for r in records} == {"aware"}


def _two_run_study(tmp_path: Path, name: str, options: str) -> Path:
    """A study of two small runs (10 and 100 Gbit/s) with these backend options."""
    study = tmp_path / "study.yaml"
    study.write_text(f"name: {name}\nbase: {{model: small_cnn, topology: {{kind: switch, npus: 4}}, "
                     "training: {batch_size_per_worker: 4, iterations: 1}}\n"
                     "axes: {topology.bandwidth_gbps: [10, 100]}\nanalyses: []\n"
                     f"backend_options: {{{options}}}\n")
    return study


def _sweep_records(repo: Path, study: Path, out: Path, *args: str) -> list[dict[str, Any]]:
    """`simstudy sweep` of the study into `out` (it must succeed): every run's run.json."""
    import json

    res = simstudy("sweep", str(study), "-o", str(out), "--quiet", "--no-report", *args, cwd=repo)
    assert res.returncode == 0, res.stdout + res.stderr
    return [json.loads(p.read_text()) for p in (out / "runs").glob("*/run.json")]


def test_sweep_takes_an_engine(repo: Path, tmp_path: Path) -> None:
    """`--engine` on `sweep` overrides the study's backend_options.engine; the engine is not part of
    a run's key (both give the same results), so the second sweep finds every run done."""
    from simstudy.backends.flowsim import CORE_MISSING

    if CORE_MISSING is not None:
        pytest.skip(f"{CORE_MISSING} (CI builds it)")
    study = _two_run_study(tmp_path, "e", "engine: compiled")
    records = _sweep_records(repo, study, tmp_path / "sw", "--engine", "python")
    assert len(records) == 2 and {r["details"]["engine"] for r in records} == {"python"}
    again = simstudy("sweep", str(study), "-o", str(tmp_path / "sw"), "--quiet", "--no-report", cwd=repo)
    assert again.returncode == 0 and "2 cached" in again.stdout + again.stderr, again.stdout + again.stderr


def test_run_keeps_links_instead_of_rows_and_shows_progress(repo: Path, tmp_path: Path) -> None:
    """`--traffic links` writes links.parquet (per-link bins) and no traffic.parquet; the plot comes
    from the busiest links; a progress bar goes to stderr unless --quiet, with the simulated time and
    transfers reached and their rates."""
    import json

    from simstudy.linktable import read_links

    out = tmp_path / "run"
    res = simstudy("run", "specs/examples/lstm_dp4_switch.yaml", "--traffic", "links", "--traffic-bin", "0.0005",
                   "-o", str(out), cwd=repo)
    assert res.returncode == 0, res.stderr
    assert "simulating" in res.stderr and "100%" in res.stderr
    # the simulation's phases in order (compiling and routing show once a run has lasted a second)
    at = [res.stderr.find(f"{w}:") for w in ("simulating", "writing")]
    assert -1 not in at and at == sorted(at), res.stderr
    assert " sim " in res.stderr and "ms/s" in res.stderr and " transfers at " in res.stderr  # rates as it goes
    names = {p.name for p in out.iterdir()}
    assert {"links.parquet", "run.json", "spans.parquet", "timeline.png"} <= names and "traffic.parquet" not in names
    links = read_links(out / "links.parquet")
    summary = json.loads((out / "run.json").read_text())
    assert summary["traffic"] == "links" and summary["transfers"] > 0
    # Every transfer on a switch crosses two links: the links carry twice the bytes sent.
    assert links["bytes"].sum() == pytest.approx(2 * summary["bytes"], rel=1e-9)
    assert (links["bin_s"] == 0.0005).all() and set(links["tier"]) == {"switch"}
    quiet = simstudy("run", "specs/examples/lstm_dp4_switch.yaml", "--traffic", "none", "--quiet", "-o",
                     str(tmp_path / "q"), cwd=repo)
    assert quiet.returncode == 0 and "simulating" not in quiet.stderr


@pytest.mark.parametrize(("jobs", "topology", "words"), [
    ("[{name: a, model: small_cnn, gpus: 2, placement: [0, 1]}, {name: b, model: small_cnn, gpus: 2, "
     "placement: [1, 2]}]", "{kind: switch, npus: 4}", "jobs.1.placement.npus: job 'b' is placed on NPU 1"),
    ("[{name: a, model: small_cnn, gpus: 8}]", "{kind: switch, npus: 4}", "jobs.0.gpus: job 'a' needs 8 NPUs"),
    ("[{name: a, model: small_cnn, gpus: 2}]", "{kind: clos_csv, file: hosts.csv}", "hosts.csv: PSW: column 'PSW'"),
])
def test_bad_cluster_specs_are_one_clear_error(tmp_path: Path, jobs: str, topology: str, words: str) -> None:
    (tmp_path / "hosts.csv").write_text("ip,DSW,ASW\nh1,G1,S1\nh2,G1,S1\n")
    spec = tmp_path / "cluster.yaml"
    spec.write_text(f"kind: cluster\nname: c\ntopology: {topology}\njobs: {jobs}\n")
    res = simstudy("run", str(spec), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert res.returncode == 2, res.stdout
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert words in res.stderr
    assert not (tmp_path / "out").exists()
