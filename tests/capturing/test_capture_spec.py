"""Capture specs and the parameter-server plan the workers follow (no root or torch needed)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from simstudy.capturing import testbed
from simstudy.capturing.run import WORKER_PLANS, ps_plan
from simstudy.compiler.resolve import resolve
from simstudy.spec import Scenario, SpecError
from simstudy.spec.aggregation import AGGREGATIONS
from simstudy.spec.capture import CaptureSpec, Link
from simstudy.spec.framework import PRESETS
from simstudy.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted((ROOT / "specs" / "capture").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_capture_specs_load(path: Path) -> None:
    spec = load_spec(CaptureSpec, path)
    Scenario.model_validate(spec.scenario_dict(bandwidth_gbps=1.0, latency_ns=1000.0))


def test_training_steps_set_the_loaded_compute_mean_or_slowest() -> None:
    """On one host the training steps' own times replace calibration's: the workers' mean for DDP
    (the all-reduce in backward holds the faster ones), the slowest worker of each step for a
    synchronous parameter server (the workers meet only at the pull)."""
    from simstudy.capturing.run import loaded_compute

    measured = {"forward_us": 10.0, "backward_us": 20.0, "optimizer_us": 1.0,
                "layers": {"a": {"forward_us": 4.0, "backward_us": 5.0}, "b": {"forward_us": 6.0, "backward_us": 15.0}}}
    steps = [[(10, 20), (12, 30), (11, 20)], [(30, 40), (10, 20), (13, 22)]]  # per worker, per step: (fwd, bwd)
    results = [{"steps": [{"forward_us": f, "backward_us": b} for f, b in w]} for w in steps]
    mean = loaded_compute(measured, results)
    assert (mean["forward_us"], mean["backward_us"]) == (12.0, 25.0)  # step means (20,30), (11,25), (12,21)
    assert mean["layers"]["a"] == {"forward_us": 4.8, "backward_us": 6.25}  # scaled 1.2x and 1.25x
    slow = loaded_compute(measured, results, slowest=True)  # step picks: (30,40), (12,30), (13,22)
    assert (slow["forward_us"], slow["backward_us"]) == (13.0, 30.0)
    assert slow["optimizer_us"] == 1.0


def _assert_refused(tmp_path: Path, body: str, field: str, expected: str) -> None:
    """A capture spec of `body` is refused with an error naming the file, `field` and `expected`."""
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\nmodel: small_cnn\n{body}\n")
    with pytest.raises(SpecError) as err:
        load_spec(CaptureSpec, path)
    text = str(err.value)
    assert str(path) in text and field in text and expected in text


@pytest.mark.parametrize(("body", "field", "expected"), [
    ("parallelism: {dp: 2, tp: 2}", "", "data parallelism only"),
    ("parallelism: {dp: 2, aggregation: {algorithm: direct}}", "", "algorithm to ring"),
    ("parallelism: {dp: 2, aggregation: {servers: 1, placement: colocated}}", "", "dedicated"),
    ("parallelism: {dp: 2}\ntraining: {iterations: 4}", "", "capture.iterations"),
    ("parallelism: {dp: 2}\ncapture: {where: cloud}", "capture.where", "namespaces"),
    ("parallelism: {dp: 2}\ncapture: {link: {loss: 1.5}}", "capture.link.loss", "less than 1"),
])
def test_bad_capture_specs_name_file_and_field(tmp_path: Path, body: str, field: str, expected: str) -> None:
    _assert_refused(tmp_path, body, field, expected)


@pytest.mark.parametrize("servers", [1, 2, 3])
def test_ps_plan_covers_every_gradient_byte_once(servers: int) -> None:
    spec = CaptureSpec.model_validate({"model": "small_cnn",
                                       "parallelism": {"dp": 2, "aggregation": {"servers": servers},
                                                       "bucket_size_mib": 0.5}})
    scenario = resolve(Scenario.model_validate(spec.scenario_dict(bandwidth_gbps=1.0, latency_ns=0.0)))
    plan = ps_plan(scenario)
    ranges = sorted((p["lo"], p["hi"]) for p in plan["pieces"])
    assert ranges[0][0] == 0 and ranges[-1][1] == scenario.resolved_model.params
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert {p["host"] for p in plan["pieces"]} == set(range(2, 2 + servers))
    assert len(plan["buckets"]) > 1


def test_loopback_refuses_shaping() -> None:
    with pytest.raises(testbed.CaptureError, match="namespaces"), testbed.Testbed(2, "loopback", Link(rate_mbit=100)):
        pass


def test_synchronous_jobs_take_the_slowest_worker_of_each_calibration_pass() -> None:
    from simstudy.capturing.run import measured_compute

    def cal(passes: list[tuple[float, float]]) -> dict[str, object]:
        ps = [{"forward_us": f, "backward_us": b, "optimizer_us": 1.0,
               "layers": {"fc": {"forward_us": f, "backward_us": b}}} for f, b in passes]
        return {"calibration": {"forward_us": sum(f for f, _ in passes) / len(passes),
                                "backward_us": sum(b for _, b in passes) / len(passes), "optimizer_us": 1.0,
                                "layers": {"fc": {"forward_us": sum(f for f, _ in passes) / len(passes),
                                                  "backward_us": sum(b for _, b in passes) / len(passes)}},
                                "passes": ps}}

    workers = [cal([(10, 10), (30, 30)]), cal([(20, 20), (20, 20)])]
    slowest = measured_compute(workers, [], synchronous=True)  # pass 1: worker 1 (40), pass 2: worker 0 (60)
    assert (slowest["forward_us"], slowest["backward_us"]) == (25.0, 25.0)
    assert slowest["layers"]["fc"] == {"forward_us": 25.0, "backward_us": 25.0}
    mean = measured_compute(workers, [], synchronous=False)  # async workers do not wait for each other
    assert (mean["forward_us"], mean["backward_us"]) == (20.0, 20.0)


@pytest.mark.parametrize(("body", "field", "expected"), [
    ("framework: mxnet\nparallelism: {dp: 2}", "framework", "pytorch"),
    ("framework: tensorflow\nparallelism: {dp: 2, aggregation: {servers: 1}}", "parallelism.aggregation",
     "MultiWorkerMirroredStrategy"),
    ("framework: tensorflow\nparallelism: {dp: 2, aggregation: {algorithm: direct}}",
     "parallelism.aggregation.algorithm", "RingReduce"),
])
def test_bad_framework_specs_name_file_and_field(tmp_path: Path, body: str, field: str, expected: str) -> None:
    _assert_refused(tmp_path, body, field, expected)


def test_tensorflow_capture_needs_a_keras_model(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nframework: tensorflow\nmodel: resnet50\nparallelism: {dp: 2}\n")
    with pytest.raises(SpecError, match=r"model: 'resnet50' has no Keras version.*small_cnn, lstm_lm, encoder"):
        load_spec(CaptureSpec, path)


@pytest.mark.ci_may_skip("checks a framework that is absent; CI installs Horovod")
def test_capture_of_a_framework_that_is_not_installed_exits_2(tmp_path: Path) -> None:
    """Horovod does not build here (see simstudy.capturing.frameworks): one clear error, exit 2, no
    testbed made and no output written."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("horovod") is not None:
        pytest.skip("horovod is installed here")
    spec = tmp_path / "hvd.yaml"
    spec.write_text("name: hvd\nframework: horovod\nmodel: small_cnn\nparallelism: {dp: 2}\n")
    done = subprocess.run([sys.executable, "-m", "simstudy", "capture", str(spec), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]  # (progress bars aside)
    assert len(errors) == 1 and errors[0].startswith("simstudy: error: ")
    assert str(spec) in errors[0] and "framework: horovod needs horovod.torch" in errors[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_every_captured_kind_has_a_worker_strategy() -> None:
    """A preset whose captured framework runs an aggregation kind: the kind names the strategy its
    workers run, and the capture has a plan for it; a kind no preset captures is refused."""
    captured = {k for m in PRESETS.values() if m.captured_by for k in m.captured_aggregations}
    assert captured == {"allreduce", "parameter_server"}
    strategies = {AGGREGATIONS[k].capture_strategy for k in captured}
    assert strategies == set(WORKER_PLANS) == {"ddp", "ps"}


@pytest.mark.parametrize(("framework", "expected"), [
    ("horovod", "horovod has no parameter server"),  # the preset compiles none
    ("tensorflow", "a tensorflow capture runs MultiWorkerMirroredStrategy (collective all-reduce); parameter "
                   "servers are captured with framework: pytorch"),  # the preset does, its capture does not
])
def test_a_kind_the_captured_framework_does_not_run_is_refused(tmp_path: Path, framework: str,
                                                               expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\nmodel: small_cnn\nframework: {framework}\n"
                    "parallelism: {dp: 2, aggregation: {servers: 1}}\n")
    with pytest.raises(SpecError, match=r"parallelism\.aggregation") as err:
        load_spec(CaptureSpec, path)
    assert expected in str(err.value)
