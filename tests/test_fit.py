"""`simstudy fit` and `validate --fit`: the compute model fitted to a real capture.

The capture in tests/data/fit/ddp_lstm_w2_namespace is a real 2-worker DDP job of a small LSTM,
both workers processes of one host (`simstudy capture`, kept with its meta.json): its training
steps ran slower than its calibration passes, so its recorded scenario misses the period by 12%.
The one in tests/data/fit/ps_lstm_w2_namespace is a real parameter server of the same LSTM, 2
workers and the server processes of one host of 2 cores: its workers' pushes spread over the step.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

import simstudy as s
from simstudy.spec import Scenario
from simstudy.traffic.meta import CaptureMeta, read_meta
from simstudy.validation.fitting import (
    MIN_PACE,
    PERIOD_TOLERANCE,
    STRAGGLER_RATIO,
    Simulated,
    compute_only_keys,
    find_stragglers,
    fit_system,
    jitter_of,
    rank_jitter_of,
)
from tests.conftest import run_cli

CAPTURE = Path(__file__).parent / "data" / "fit" / "ddp_lstm_w2_namespace"
PS_CAPTURE = Path(__file__).parent / "data" / "fit" / "ps_lstm_w2_namespace"


def _row(verdict: s.Verdict, metric: str) -> dict[str, object]:
    return dict(verdict.table.set_index("metric").loc[metric])


def test_the_fit_brings_a_slow_jobs_period_within_tolerance(tmp_path: Path) -> None:
    """Compute ran slower than calibrated: the recorded scenario misses the period (FAIL); fitted
    to the logged iterations, the period is within tolerance, marked as set by the fit, and every
    judged metric passes."""
    plain = s.validate(CAPTURE, out=tmp_path / "plain")
    period = _row(plain, "period_s")
    assert not period["passed"] and float(period["simulated"]) < float(period["real"])  # type: ignore[arg-type]
    fitted = s.validate(CAPTURE, out=tmp_path / "fit", fit=True)
    fit = fitted.validation.fit
    assert fit is not None and fit.converged and fit.pace > 1.1  # slower than calibrated
    period = _row(fitted, "period_s")
    assert period["passed"] and float(period["distance"]) <= PERIOD_TOLERANCE * 1.5  # type: ignore[arg-type]
    assert period["fitted"] and not _row(fitted, "bytes_per_iter_mean")["fitted"]
    assert fitted.passed, fitted.report.to_markdown()
    assert fitted.validation.scenario.system == fit.system
    assert (tmp_path / "fit" / "fit" / "run0").is_dir()


def _variant(kind: str, capture: Path = CAPTURE) -> Scenario:
    meta = read_meta(capture)
    assert meta is not None and meta.scenario is not None
    data = copy.deepcopy(meta.scenario)
    if kind == "another model":
        data["model"] = "small_cnn"
        del data["system"]["measured"]
    elif kind == "2x the bandwidth":
        data["topology"]["bandwidth_gbps"] *= 2
    else:
        data["topology"]["npus"] += data["parallelism"]["dp"]
        data["parallelism"]["dp"] *= 2
    return Scenario.model_validate(data)


@pytest.mark.parametrize("capture", [CAPTURE, PS_CAPTURE], ids=["ddp", "ps"])
@pytest.mark.parametrize("fit", [False, True], ids=["recorded", "fitted"])
@pytest.mark.parametrize("kind", ["another model", "2x the bandwidth", "2x the workers"])
def test_a_wrong_scenario_still_fails(kind: str, fit: bool, capture: Path, tmp_path: Path) -> None:
    """The fit sets the compute's pace and spread, not the network: a scenario with another model
    (bytes per iteration), twice the bandwidth (the duty cycle of the iteration) or twice the workers
    (bytes and who talks with whom) fails with and without it (the right one passes with it)."""
    verdict = s.validate(capture, _variant(kind, capture), out=tmp_path, fit=fit)
    assert not verdict.passed
    failed = {r.metric for r in verdict.report.failures}
    network = {"bytes_per_iter_mean", "traffic_matrix:jensen_shannon_undirected", "duty_cycle_iteration"}
    assert failed & network, failed


def test_workers_sharing_cores_spread_as_the_logged_ones(tmp_path: Path) -> None:
    """The parameter server's 2 workers and its server on 2 cores: the fit draws each worker's own
    variation within a step (rank jitter, from its forward and backward) on top of the job's, and
    the duty cycle of the iteration passes. The same capture as if its host had 8 cores (no rank
    contends for one) is fitted without it: its workers push together and the duty cycle fails."""
    fitted = s.validate(PS_CAPTURE, out=tmp_path / "fit", fit=True)
    fit = fitted.validation.fit
    assert fit is not None and fit.converged
    v = fit.system.variability
    assert v is not None and v.jitter is not None and v.jitter.correlated
    assert v.rank_jitter is not None and not v.rank_jitter.correlated and len(v.rank_jitter.samples) >= 20
    assert any(line.startswith("rank jitter: empirical from forward_us + backward_us") for line in fit.lines())
    assert fitted.passed, fitted.report.to_markdown()
    cores = tmp_path / "cores"
    shutil.copytree(PS_CAPTURE, cores)
    meta = json.loads((cores / "meta.json").read_text())
    meta["host_cores"] = 8
    (cores / "meta.json").write_text(json.dumps(meta))
    together = s.validate(cores, out=tmp_path / "together", fit=True)
    assert together.validation.fit is not None and together.validation.fit.converged
    variability = together.validation.fit.system.variability
    assert variability is not None and variability.rank_jitter is None
    assert any(line == "rank jitter: none (no host holds more ranks than cores)"
               for line in together.validation.fit.lines())
    duty = _row(together, "duty_cycle_iteration")
    assert not duty["passed"] and float(duty["simulated"]) < float(duty["real"])  # type: ignore[arg-type]


def test_on_shared_hosts_the_fit_is_a_ranks_time_alone(tmp_path: Path) -> None:
    """The capture's two workers on one host of one core: validate halves their measured times back
    to a rank's alone (min(1, C/k) = 1/2) and the simulation shares the core again. The fit keeps
    that: it makes the same period with measured times half those it fits without shared cores."""
    shared = tmp_path / "shared"
    shutil.copytree(CAPTURE, shared)
    meta = json.loads((shared / "meta.json").read_text())
    meta["host_cores"] = 1
    (shared / "meta.json").write_text(json.dumps(meta))
    alone, sharing = s.fit(CAPTURE), s.fit(shared)
    assert alone.converged and sharing.converged
    assert (sharing.system.host_cores, sharing.system.rank_hosts) == (1, (0, 0))
    a, b = alone.system.measured, sharing.system.measured
    assert a is not None and b is not None and a.backward_us and b.backward_us
    assert b.backward_us == pytest.approx(a.backward_us / 2, rel=0.02)
    assert sharing.sharing == 2 and any("shared (x2" in line for line in sharing.lines())


def test_fit_command_writes_a_system_a_scenario_takes(tmp_path: Path) -> None:
    proc = run_cli("fit", str(CAPTURE), "-o", "system.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "pace" in proc.stdout and "jitter: empirical" in proc.stdout and "stragglers:" in proc.stdout
    system = yaml.safe_load((tmp_path / "system.yaml").read_text())
    meta = read_meta(CAPTURE)
    assert meta is not None and meta.scenario is not None
    scenario = Scenario.model_validate({**meta.scenario, "system": system})
    assert scenario.system.variability is not None and scenario.system.variability.jitter is not None
    assert scenario.system.variability.jitter.correlated  # DDP: the ranks wait for each other
    proc = run_cli("validate", "--real", str(CAPTURE), "-o", "v", "--fit", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Fitted compute:" in proc.stdout and "| pass | fit |" in proc.stdout


def test_a_capture_without_meta_json_cannot_be_fitted(tmp_path: Path) -> None:
    real = Path(__file__).parent / "data" / "real" / "ddp_w2"
    proc = run_cli("fit", str(real), "--spec", str(tmp_path / "x.yaml"), cwd=tmp_path)
    assert proc.returncode == 2
    shutil.copytree(real, tmp_path / "cap")
    meta = read_meta(CAPTURE)
    assert meta is not None and meta.scenario is not None
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({**meta.scenario, "name": "x"}))
    proc = run_cli("fit", "cap", "--spec", "spec.yaml", cwd=tmp_path)
    assert proc.returncode == 2 and "meta.json" in proc.stderr and "iterations" in proc.stderr, proc.stderr


# -- the rules, on hand-computed cases -------------------------------------------------------------


def test_what_each_framework_logs_without_communication() -> None:
    assert compute_only_keys({"forward_us": 1, "backward_us": 2, "optimizer_us": 3}) == ("forward_us",)
    assert compute_only_keys({"forward_us": 1, "backward_us": 2, "exchange_us": 3}) == ("forward_us", "backward_us")
    assert compute_only_keys({"step_us": 5}) == ()


def test_a_straggler_is_consistently_slower() -> None:
    times = {0: [1.0, 1.1, 0.9, 1.0], 1: [1.0, 0.9, 1.1, 1.0], 2: [1.5, 1.6, 1.4, 0.8]}
    found = {f.rank: f for f in find_stragglers(times)}
    assert found[2].ratio == pytest.approx(1.45 / 1.0) and found[2].above == 0.75 and found[2].straggles
    assert found[2].excess_s == pytest.approx(0.45)
    assert not found[0].straggles and not found[1].straggles
    assert STRAGGLER_RATIO == 1.25
    assert find_stragglers({0: [1.0]}) == ()


def test_jitter_factors_and_their_correlation() -> None:
    together = {0: [1.0, 2.0, 1.0, 2.0], 1: [2.0, 4.0, 2.0, 4.0]}  # rank 1 twice as slow, same moves
    jitter, rho = jitter_of(together)
    assert rho == pytest.approx(1.0) and jitter is not None and jitter.correlated
    assert jitter.samples == pytest.approx((2 / 3, 4 / 3, 2 / 3, 4 / 3), abs=1e-4)
    apart = {0: [1.0, 2.0, 1.0, 2.0], 1: [2.0, 1.0, 2.0, 1.0]}
    jitter, rho = jitter_of(apart)
    assert rho == pytest.approx(-1.0) and jitter is not None and not jitter.correlated and len(jitter.samples) == 8
    synchronous, _ = jitter_of(apart, synchronous=True)
    assert synchronous is not None and synchronous.correlated and synchronous.samples == (1.0,) * 4


def test_rank_jitter_is_how_the_ranks_of_a_step_differ() -> None:
    """Each rank's time over the step's mean over ranks, over that ratio's median for the rank: a
    step the whole job was slow in and a rank slow in every step (a straggler) vary nothing."""
    jitter = rank_jitter_of({0: [1.0, 2.0, 1.0], 1: [3.0, 2.0, 1.0]})
    assert jitter is not None and not jitter.correlated and jitter.distribution == "empirical"
    assert jitter.samples == pytest.approx((0.5, 1.0, 1.0, 1.5, 1.0, 1.0))
    steady = rank_jitter_of({0: [1.0, 3.0, 1.0], 1: [2.0, 6.0, 2.0]})  # rank 1 twice as slow, the job in step 1
    assert steady is not None and steady.samples == (1.0,) * 6
    assert rank_jitter_of({0: [1.0, 2.0]}) is None and rank_jitter_of({0: [1.0], 1: [2.0]}) is None


def test_the_ddp_capture_on_cores_of_its_own_gets_no_rank_jitter() -> None:
    """2 DDP workers on 2 cores: no host holds more ranks than cores, and DDP's forward is a part of
    the compute: no rank jitter."""
    fit = s.fit(CAPTURE)
    assert fit.system.variability is not None and fit.system.variability.rank_jitter is None


def _meta(intervals: list[float]) -> CaptureMeta:
    starts = [sum(intervals[:i]) for i in range(len(intervals) + 1)]
    spans = [[t, t + 0.5 * d] for t, d in zip(starts, [*intervals, intervals[-1]], strict=True)]
    return CaptureMeta.model_validate({"iterations": {0: spans, 1: spans}})


def test_the_pace_on_a_job_whose_period_is_compute_plus_exposed_communication() -> None:
    """A job whose period is C x pace + E (E = 10 ms exposed): the first step is exact."""
    meta = read_meta(CAPTURE)
    assert meta is not None and meta.scenario is not None
    scenario = Scenario.model_validate(meta.scenario)
    runs: list[float] = []

    def simulate(sc: Scenario, k: int) -> Simulated:
        m = sc.system.measured
        assert m is not None and m.forward_us is not None and m.backward_us is not None
        compute = (m.forward_us + m.backward_us + (m.optimizer_us or 0)) / 1e6
        runs.append(compute)
        return Simulated(compute + 0.010, compute)

    m = scenario.system.measured
    assert m is not None
    c0 = ((m.forward_us or 0) + (m.backward_us or 0) + (m.optimizer_us or 0)) / 1e6
    fit = fit_system(_meta([c0 * 1.5 + 0.010] * 6), scenario, simulate)
    assert fit.pace == pytest.approx(1.5) and fit.converged and len(fit.runs) == 2
    assert fit.exposed_s == pytest.approx(0.010)
    # the communication alone is longer than the logged iteration: no compute explains it
    short = fit_system(_meta([0.005] * 6), scenario, simulate)
    assert short.pace == MIN_PACE and not short.converged
    assert any("communication alone" in n for n in short.notes)
