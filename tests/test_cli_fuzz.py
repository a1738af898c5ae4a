"""The command line never shows a traceback: hypothesis drives every command with random flags and
mutated inputs (scenario, cluster and study specs, the bundle files ASTRA-SIM reads -- network.yml,
system.json, ET files -- and topology.json, run and capture directories), and each ends with exit
0, 1 or 2; a failure is one line naming what was wrong. In process (`simstudy.cli.main`) for speed;
tests/test_cli_errors.py runs the named cases as real subprocesses."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import textwrap
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simstudy.cli import main
from tests.mutations import mutate, paths

REPO = Path(__file__).resolve().parents[1]

SCENARIO = """\
name: fuzz
model: small_cnn
topology: {kind: ring, npus: 4, bandwidth_gbps: 10, latency_ns: 500}
system: {peak_tflops: 10, efficiency: 0.5}
training: {batch_size_per_worker: 16, iterations: 1}
parallelism: {aggregation: {kind: allreduce, algorithm: ring}}
"""
CLUSTER = """\
kind: cluster
name: fuzzjobs
topology: {kind: leaf_spine, leaves: 2, spines: 1, hosts_per_leaf: 2, gpus_per_host: 1, bandwidth_gbps: 100}
system: {peak_tflops: 10, efficiency: 0.5}
jobs:
  - {name: a, model: small_cnn, gpus: 2, placement: spread, training: {iterations: 1}}
  - {name: b, model: small_cnn, gpus: 2, start_ms: 1, training: {iterations: 1}}
"""
STUDY = """\
name: fuzzstudy
base:
  model: small_cnn
  topology: {kind: ring, npus: 4, bandwidth_gbps: 10, latency_ns: 500}
  training: {batch_size_per_worker: 16, iterations: 1}
axes:
  topology.npus: [2, 4]
  parallelism.aggregation.algorithm: [ring, halving_doubling]
"""

#: Examples per run (FUZZ_N=1000 for a longer, random search).
EXAMPLES = int(os.environ.get("FUZZ_N", "120"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize="FUZZ_N" not in os.environ,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


def cli(*argv: str) -> tuple[int, str, str]:
    """Run the command line in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def assert_clean(code: int, out: str, err: str, argv: tuple[str, ...]) -> None:
    """Exit 0, 1 or 2, no traceback; a failure says so on one line."""
    what = f"simstudy {' '.join(argv)}\n--- stdout\n{out[-2000:]}\n--- stderr\n{err[-2000:]}"
    assert code in (0, 1, 2), what
    assert "Traceback" not in err and "Traceback" not in out, what
    errors = [line for line in err.splitlines() if "error:" in line]
    if code == 2:
        assert len(errors) == 1 and errors[0].startswith("simstudy"), what
    if code == 0:
        assert not errors, what


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Inputs as a user has them: specs, a compiled bundle, a run directory, a capture directory."""
    d = tmp_path_factory.mktemp("pristine")
    for name, text in (("scenario.yaml", SCENARIO), ("cluster.yaml", CLUSTER), ("study.yaml", STUDY)):
        (d / name).write_text(text)
    for argv in (("compile", str(d / "scenario.yaml"), "-o", str(d / "bundle")),
                 ("run", str(d / "scenario.yaml"), "-o", str(d / "run"), "--quiet")):
        code, _, err = cli(*argv)
        assert code == 0, err
    shutil.copytree(REPO / "tests" / "data" / "captures" / "ring4_allreduce", d / "capture")
    code, _, err = cli("analyze", str(d / "capture"))  # so that `cluster` takes it
    assert code == 0, err
    return d


_counter = count()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scratch")


@contextlib.contextmanager
def workdir(pristine: Path, scratch: Path) -> Iterator[Path]:
    """A fresh copy of the inputs for one example."""
    d = scratch / f"ex{next(_counter)}"
    shutil.copytree(pristine, d)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# -- mutations ---------------------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=12),
                    st.sampled_from(["ring", "Ring", "Switch", "doubleBinaryTree", "halvingDoubling", "fast", "0",
                                     "-1", "../nope.yaml", "auto", "", "h0", "dimension_order", "shortest_path"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=10), inner, max_size=3)),
                      max_leaves=8)


def _kind_or_type(key: Any) -> str:
    """The rename a user makes: `kind` where a dimension says `type` (and back), else a typo."""
    return {"kind": "type", "type": "kind"}.get(str(key), f"{key}x")


def mutate_file(draw: st.DrawFn, path: Path) -> str:
    """Mutate one file in place the way a user or a broken tool would; says what was done."""
    raw = path.read_bytes()
    if path.suffix == ".et" or draw(st.integers(0, 9)) == 0:  # bytes: cut short or overwritten
        if draw(st.booleans()):
            cut = draw(st.integers(0, max(len(raw) - 1, 0)))
            path.write_bytes(raw[:cut])
            return f"{path.name} cut at {cut}"
        at = draw(st.integers(0, max(len(raw) - 1, 0)))
        junk = draw(st.binary(min_size=1, max_size=8))
        path.write_bytes(raw[:at] + junk + raw[at + len(junk):])
        return f"{path.name} overwritten at {at}"
    is_json = path.suffix == ".json"
    data = json.loads(raw) if is_json else yaml.safe_load(raw)
    where = draw(st.sampled_from(paths(data)))
    how = draw(st.sampled_from(["replace", "delete", "rename", "add"]))
    value = draw(values)
    mutated = mutate(data, where, how, value, _kind_or_type)
    if is_json:
        path.write_text(json.dumps(mutated, allow_nan=True))
    else:
        path.write_text(yaml.safe_dump(mutated, sort_keys=False))
    return f"{path.name}: {how} {where} with {value!r}"


numbers = st.sampled_from(["0", "-1", "1e-9", "nan", "inf", "2", "0.5", "abc", "1e400", "3"])


@st.composite
def commands(draw: st.DrawFn, d: Path) -> tuple[str, ...]:
    """A command line on the inputs in `d`, with some input mutated and some flags drawn."""
    out = str(d / "out")
    command = draw(st.sampled_from(["compile", "run-spec", "run-bundle", "sweep", "analyze", "trace", "dashboard",
                                    "cluster", "validate", "garbage"]))
    if command == "compile":
        spec = d / draw(st.sampled_from(["scenario.yaml", "cluster.yaml"]))
        mutate_file(draw, spec)
        return ("compile", str(spec), "-o", out)
    if command == "run-spec":
        spec = d / draw(st.sampled_from(["scenario.yaml", "cluster.yaml"]))
        if draw(st.booleans()):
            mutate_file(draw, spec)
        flags = draw(st.lists(st.sampled_from(["--timeout", "--traffic-bin", "--traffic", "--congestion"]),
                              max_size=2, unique=True))
        argv = ["run", str(spec), "-o", out, "--quiet"]
        for f in flags:
            choices = {"--traffic": st.sampled_from(["rows", "links", "none", "all"]),
                       "--congestion": st.sampled_from(["fluid", "unaware", "aware", "none"])}
            argv += [f, draw(choices.get(f, numbers))]
        return tuple(argv)
    if command == "run-bundle":
        b = d / "bundle"
        target = draw(st.sampled_from(["network.yml", "system.json", "topology.json", "fuzz.0.et", "fuzz.3.et"]))
        mutate_file(draw, b / target)
        return ("run", "--workload", str(b / "fuzz"), "--network", str(b / "network.yml"), "--system",
                str(b / "system.json"), "--topology", str(b / "topology.json"), "-o", out, "--quiet")
    if command == "sweep":
        mutate_file(draw, d / "study.yaml")
        argv = ["sweep", str(d / "study.yaml"), "-o", out, "--dry-run", "--quiet"]
        if draw(st.booleans()):
            path = draw(st.sampled_from(["topology.npus", "topology.bandwidth_gbps", "training.iterations",
                                         "parallelism.dp", "topology.kind", "nope", "topology..x"]))
            argv += ["--set", f"{path}={draw(st.sampled_from(['0', '-3', 'x', '[1, 2]', '{a: 1}', '8', '']))}"]
        return tuple(argv)
    if command in ("analyze", "trace", "dashboard"):
        target = d / draw(st.sampled_from(["run", "capture"] if command != "trace" else ["run"]))
        victims = sorted(p for p in target.rglob("*") if p.is_file() and p.suffix in (".json", ".yml", ".yaml")
                         and p.name != "dashboard.html")
        if victims and draw(st.booleans()):
            mutate_file(draw, draw(st.sampled_from(victims)))
        if command == "analyze":
            return ("analyze", str(target), "-o", out, *draw(st.sampled_from([(), ("--count", "ip")])))
        if command == "trace":
            flag = draw(st.sampled_from(["--iterations", "--ranks", "--transfers"]))
            return ("trace", str(target), "-o", f"{out}.json", flag, draw(st.sampled_from(["0", "-1", "1", "x"])))
        return ("dashboard", str(target), "-o", f"{out}.html")
    if command == "cluster":
        return ("cluster", str(d / "run"), str(d / "capture"), "-o", f"{out}.png",
                *draw(st.sampled_from([(), ("-k", "0"), ("-k", "5"), ("-k", "-1")])))
    if command == "validate":
        mutate_file(draw, d / "scenario.yaml")
        return ("validate", "--real", str(d / "capture"), "--spec", str(d / "scenario.yaml"), "-o", out, "--quiet",
                *draw(st.sampled_from([(), ("--tolerance", "period_s=x"), ("--skip", "nope"),
                                       ("--tolerance", "nope=0.1")])))
    name = draw(st.sampled_from(["compile", "run", "sweep", "analyze", "validate", "capture", "cluster", "dashboard",
                                 "trace", "models", "nope"]))
    return (name, *draw(st.lists(st.text(alphabet="-abcdefgkorstu0123456789 ./=", max_size=12), max_size=4)))


@given(data=st.data())
@SETTINGS
def test_every_command_on_mutated_inputs_exits_0_1_or_2_with_one_line(pristine: Path, scratch: Path,
                                                                     data: st.DataObject) -> None:
    with workdir(pristine, scratch) as d:
        argv = data.draw(commands(d))
        if argv[0] == "capture":  # a valid capture spec would start a real job: only the argument checks here
            argv = ("capture", "--nope")
        code, out, err = cli(*argv)
        assert_clean(code, out, err, argv)


def test_the_pristine_inputs_work(pristine: Path, scratch: Path) -> None:
    """The fuzz starts from inputs every command accepts (so its mutations are what fails)."""
    with workdir(pristine, scratch) as d:
        b = d / "bundle"
        runs = [("compile", str(d / "cluster.yaml"), "-o", str(d / "o1")),
                ("run", "--workload", str(b / "fuzz"), "--network", str(b / "network.yml"), "--system",
                 str(b / "system.json"), "--topology", str(b / "topology.json"), "-o", str(d / "o2"), "--quiet"),
                ("sweep", str(d / "study.yaml"), "--dry-run", "-o", str(d / "o3")),
                ("trace", str(d / "run"), "-o", str(d / "t.json")),
                ("dashboard", str(d / "capture"), "-o", str(d / "c.html")),
                ("cluster", str(d / "run"), str(d / "capture"), "-o", str(d / "c.png"))]
        for argv in runs:
            code, _, err = cli(*argv)
            assert code == 0, textwrap.shorten(err, 500)
