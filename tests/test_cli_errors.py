"""Bad input, one line: each case a user met (issue 22) gives exit 2 and one line naming the file
and the field, as a real subprocess where it matters (argument parsing, serving) and in process
elsewhere (`simstudy.cli.main`, for speed)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from simstudy.cli import main
from simstudy.spec import SpecError, load_scenario
from tests.conftest import run_cli, sigint_default

REPO = Path(__file__).resolve().parents[1]
SCENARIO = {"name": "s", "model": "small_cnn", "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10,
                                                            "latency_ns": 500},
            "system": {"peak_tflops": 10, "efficiency": 0.5},
            "training": {"batch_size_per_worker": 16, "iterations": 1}}


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def subprocess_cli(*argv: str, cwd: Path) -> tuple[int, str, str]:
    proc = run_cli(*argv, cwd=cwd, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def one_line(code: int, err: str) -> str:
    """The error line of a command that must have failed on bad input."""
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("simstudy") and "error:" in lines[0]
    return lines[0]


def write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bundle")
    code, _, err = cli("compile", str(write(d / "s.yaml", SCENARIO)), "-o", str(d / "b"))
    assert code == 0, err
    return d / "b"


def _bundle_args(b: Path, **files: Path) -> list[str]:
    paths = {"network": b / "network.yml", "system": b / "system.json", "topology": b / "topology.json", **files}
    return ["--workload", str(b / "s"), *(a for k, v in paths.items() for a in (f"--{k}", str(v)))]


# -- flags -------------------------------------------------------------------------------------


def test_run_timeout_0_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    spec = write(tmp_path / "s.yaml", SCENARIO)
    line = one_line(*subprocess_cli("run", str(spec), "--timeout", "0", "-o", "r", cwd=tmp_path)[::2])
    assert "--timeout: Input should be greater than 0 (got 0.0)" in line
    assert not (tmp_path / "r").exists()


def test_run_traffic_bin_0_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    spec = write(tmp_path / "s.yaml", SCENARIO)
    code, _, err = cli("run", str(spec), "--traffic-bin", "0", "--timeout", "-1", "-o", str(tmp_path / "r"))
    line = one_line(code, err)
    assert "--traffic-bin: Input should be greater than 0" in line and "--timeout:" in line  # both, by flag


def test_a_flag_argparse_refuses_is_one_line_too(tmp_path: Path) -> None:
    line = one_line(*subprocess_cli("run", "x.yaml", "--timeout", "soon", cwd=tmp_path)[::2])
    assert line == "simstudy run: error: argument --timeout: invalid float value: 'soon' (see simstudy run --help)"


# -- specs -------------------------------------------------------------------------------------


def test_double_binary_tree_on_a_non_power_of_two_dp_fails_at_spec_validation(tmp_path: Path) -> None:
    spec = write(tmp_path / "s.yaml", {**SCENARIO, "topology": {**SCENARIO["topology"], "npus": 6},
                                       "parallelism": {"aggregation": {"algorithm": "double_binary_tree"}}})
    with pytest.raises(SpecError) as info:
        load_scenario(spec)
    assert info.value.field == "parallelism.aggregation.algorithm" and "not dp = 6" in info.value.message
    line = one_line(*cli("run", str(spec), "-o", str(tmp_path / "r"))[::2])
    assert f"{spec}: parallelism.aggregation.algorithm: double_binary_tree" in line
    # a smaller group's all-reduce runs as a ring: dp 6 with tp 2 stays valid
    ok = dict(SCENARIO, topology={**SCENARIO["topology"], "npus": 12}, model="bert_base",
              parallelism={"dp": 6, "tp": 2, "aggregation": {"algorithm": "double_binary_tree"}})
    load_scenario(write(tmp_path / "ok.yaml", ok))


def test_multi_dim_dimension_written_with_kind_names_type_and_every_problem(tmp_path: Path) -> None:
    dims = [{"kind": "ring", "npus": 2, "bandwidth_gbps": 10, "latency_ns": 500},
            {"kind": "switch", "npus": 2, "bandwidth_gbps": 10, "latency_ns": 500}]
    spec = write(tmp_path / "s.yaml", {**SCENARIO, "topology": {"kind": "multi_dim", "dims": dims}})
    line = one_line(*cli("compile", str(spec), "-o", str(tmp_path / "b"))[::2])
    assert line == (f"simstudy: error: {spec}: topology.dims.0.type: required field is missing; "
                    "topology.dims.0.kind: unknown field; did you mean 'type'?; "
                    "topology.dims.1.type: required field is missing; "
                    "topology.dims.1.kind: unknown field; did you mean 'type'?")
    assert "more problem" not in line


def test_a_missing_field_is_named_and_a_misspelt_one_gets_the_closest_known_name(tmp_path: Path) -> None:
    spec = write(tmp_path / "s.yaml", {**SCENARIO, "topology": {"kind": "ring", "npu": 4, "bandwidth_gbps": 10}})
    line = one_line(*cli("run", str(spec), "-o", str(tmp_path / "r"))[::2])
    assert line.endswith(f"{spec}: topology.npus: required field is missing; "
                         "topology.npu: unknown field; did you mean 'npus'?")
    spec = write(tmp_path / "s.yaml", {**SCENARIO, "topology": {"npus": 4}})
    line = one_line(*cli("run", str(spec), "-o", str(tmp_path / "r"))[::2])
    assert f"{spec}: topology.kind: required field is missing; expected one of 'ring', 'fully_connected'" in line
    spec = write(tmp_path / "s.yaml", {**SCENARIO, "topology": {**SCENARIO["topology"], "kind": "rung"}})
    line = one_line(*cli("run", str(spec), "-o", str(tmp_path / "r"))[::2])
    assert f"{spec}: topology: 'rung' is not one of 'ring'," in line and line.endswith("did you mean 'ring'?")


def test_compile_accepts_every_spec_run_accepts(repo: Path, tmp_path: Path) -> None:
    """`compile` on a cluster said '(top level): required field is missing (and 2 more problems)'."""
    specs = sorted((repo / "specs" / "examples").glob("*.yaml"))
    assert any(yaml.safe_load(p.read_text()).get("kind") == "cluster" for p in specs)
    for spec in specs:
        code, _, err = cli("compile", str(spec), "-o", str(tmp_path / spec.stem))
        assert code == 0, err
        assert (tmp_path / spec.stem / "scenario.json").is_file()
    assert (tmp_path / "two_jobs_leafspine" / "jobs.json").is_file()


# -- ASTRA-SIM input sets ----------------------------------------------------------------------


def test_network_yml_with_a_non_numeric_bandwidth(bundle: Path, tmp_path: Path) -> None:
    net = yaml.safe_load((bundle / "network.yml").read_text())
    bad = write(tmp_path / "network.yml", {**net, "bandwidth": ["fast"]})
    line = one_line(*cli("run", *_bundle_args(bundle, network=bad), "-o", str(tmp_path / "r"))[::2])
    assert line == (f"simstudy: error: {bad}: bandwidth.0: Input should be a valid number, unable to parse string "
                    "as a number (got 'fast')")


def test_system_json_naming_an_unknown_algorithm(bundle: Path, tmp_path: Path) -> None:
    system = json.loads((bundle / "system.json").read_text())
    bad = tmp_path / "system.json"
    bad.write_text(json.dumps({**system, "all-reduce-implementation": ["spiral"]}))
    line = one_line(*cli("run", *_bundle_args(bundle, system=bad), "-o", str(tmp_path / "r"))[::2])
    assert f"{bad}: all-reduce-implementation.0: unknown collective algorithm 'spiral'; known: direct" in line
    bad.write_text(json.dumps({**system, "all-reduce-implementation": ["doubleBinaryTree"]}))
    net = yaml.safe_load((bundle / "network.yml").read_text())  # 4 NPUs: a tree is fine
    assert net["npus_count"] == [4]
    code, _, err = cli("run", *_bundle_args(bundle, system=bad), "-o", str(tmp_path / "r"), "--quiet")
    assert code == 0, err


def test_a_broken_file_of_an_input_set_is_named_as_the_user_gave_it(bundle: Path, tmp_path: Path) -> None:
    """The run copies the input set into its directory first: errors named the copy
    (`.r.tmp-HOST-PID/bundle/...`), which is gone when the user reads the message."""
    et = tmp_path / "s.2.et"
    et.write_bytes((bundle / "s.2.et").read_bytes()[:-7])
    for r in (0, 1, 3):
        (tmp_path / f"s.{r}.et").write_bytes((bundle / f"s.{r}.et").read_bytes())
    args = _bundle_args(bundle)
    args[1] = str(tmp_path / "s")
    line = one_line(*cli("run", *args, "-o", str(tmp_path / "r"))[::2])
    assert line.startswith(f"simstudy: error: {et}: truncated node frame") and ".tmp-" not in line
    topo = json.loads((bundle / "topology.json").read_text())
    topo["links"][1]["bytes_per_ns"] = "fast"
    (tmp_path / "topology.json").write_text(json.dumps(topo))
    line = one_line(*cli("run", *_bundle_args(bundle, topology=tmp_path / "topology.json"), "-o",
                         str(tmp_path / "r"))[::2])
    assert line.startswith(f"simstudy: error: {tmp_path / 'topology.json'}: links.1.bytes_per_ns: Input should be "
                           "a valid number")


# -- other commands ----------------------------------------------------------------------------


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    code, _, err = cli("run", str(write(tmp_path / "s.yaml", SCENARIO)), "-o", str(tmp_path / "run"), "--quiet")
    assert code == 0, err
    return tmp_path / "run"


def test_dashboard_serve_on_a_port_in_use_fails_before_any_work(run_dir: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line(*subprocess_cli("dashboard", str(run_dir), "--serve", "--port", str(port), cwd=tmp_path)[::2])
    assert line.startswith(f"simstudy: error: --port: cannot serve on 127.0.0.1:{port}: Address already in use")
    assert not (run_dir / "dashboard.html").exists()
    line = one_line(*cli("dashboard", str(run_dir), "--serve", "--port", "70000")[::2])
    assert "--port: cannot serve on 127.0.0.1:70000" in line


def test_dashboard_serve_serves_the_page_until_ctrl_c(run_dir: Path, tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "simstudy", "dashboard", str(run_dir), "--serve"], cwd=tmp_path,
                            preexec_fn=sigint_default,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        url = lines[1].split()[1]
        assert lines[1].startswith("serving http://127.0.0.1:") and url.endswith("/dashboard.html"), lines
        with urllib.request.urlopen(url, timeout=30) as page:
            assert page.status == 200 and b"<html" in page.read(2000).lower()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_cluster_of_a_directory_that_is_not_there(tmp_path: Path) -> None:
    line = one_line(*cli("cluster", str(tmp_path / "nope"), "-o", str(tmp_path / "c.png"))[::2])
    assert line.startswith(f"simstudy: error: {tmp_path / 'nope'}: no such directory; expected a sweep directory")


def test_validate_bad_tolerance_names_the_flag_once(tmp_path: Path) -> None:
    line = one_line(*cli("validate", "--real", str(REPO / "tests" / "data" / "captures" / "ring4_allreduce"),
                         "--tolerance", "period_s=x", "-o", str(tmp_path / "v"))[::2])
    assert line == "simstudy: error: --tolerance: expected METRIC=VALUE, got 'period_s=x'"


def test_an_error_without_a_file_of_its_own_names_the_command_inputs(tmp_path: Path) -> None:
    """A ValueError that reaches the command line unnamed (a library check that knows no file) is
    one line prefixed with the inputs; SIMSTUDY_TRACEBACK=1 shows the traceback instead."""
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"name": "st", "base": SCENARIO, "axes": {"topology.npus": [2, 4]}}))
    (tmp_path / "base.parquet").write_text("not parquet")
    code, _, err = cli("sweep", str(study), "--baseline", str(tmp_path / "base.parquet"), "-o", str(tmp_path / "o"))
    line = one_line(code, err)
    assert str(study) in line or str(tmp_path / "base.parquet") in line
    env = {**os.environ, "SIMSTUDY_TRACEBACK": "1"}
    proc = subprocess.run([sys.executable, "-m", "simstudy", "sweep", str(study), "--baseline",
                           str(tmp_path / "base.parquet"), "-o", "o"], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 1 and "Traceback" in proc.stderr
