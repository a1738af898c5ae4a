"""The straggler study's finding: the throughput each configuration of stragglers and jitter loses
against the one without, from a real (small) sweep; and the shipped study specs/stragglers.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from simstudy.report import render_study
from simstudy.report.findings import findings
from simstudy.spec import load_study
from simstudy.sweeps import LocalExecutor, run_study
from simstudy.sweeps.expand import expand

REPO = Path(__file__).resolve().parents[2]

STUDY = """
name: small_stragglers
base:
  model: small_cnn
  topology: {kind: switch, npus: 5, bandwidth_gbps: 100}
  system: {measured: {forward_us: 2000, backward_us: 4000}, variability: {jitter: {cv: 0, seed: 1}}}
  training: {batch_size_per_worker: 8, iterations: 3}
axes:
  parallelism.aggregation:
    - {kind: allreduce, algorithm: ring}
    - {kind: parameter_server, servers: 1, mode: async}
  system.variability.stragglers: [[], [{ranks: [1], slowdown: 3}]]
  system.variability.jitter.cv: [0, 0.2]
analyses: []
plots:
  - {y: samples_per_s, x: system.variability.stragglers, hue: parallelism.aggregation}
  - {y: samples_per_s, x: system.variability.jitter.cv, hue: parallelism.aggregation}
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("stragglers")
    path = tmp / "study.yaml"
    path.write_text(STUDY)
    return run_study(load_study(path), path, tmp / "out", executor=LocalExecutor(2), progress=False)


def test_each_configuration_states_the_throughput_it_loses(small) -> None:  # type: ignore[no-untyped-def]
    s = small.summary
    assert (s["status"] == "ok").all()
    found = [f for f in findings(s, small.expansion.param_names) if f.kind == "variability"]
    assert [f.values["group"] for f in found] == [
        "parallelism.aggregation=allreduce(algorithm=ring)", "parallelism.aggregation=parameter_server(servers=1,"
                                                             "mode=async)"]
    for f in found:
        agg = f.values["group"].split("=", 1)[1]
        rows = s[s["parallelism.aggregation"] == agg]
        plain = rows[(rows["system.variability.stragglers"] == "[]") & (rows["system.variability.jitter.cv"] == 0)]
        base = float(plain["samples_per_s"].iloc[0])
        assert f.values["reference"] == base
        assert set(f.values["loss"]) == {"cv=0.2", 'stragglers=[{"ranks":[1],"slowdown":3}]',
                                         'stragglers=[{"ranks":[1],"slowdown":3}], cv=0.2'}
        for what, loss in f.values["loss"].items():
            strag = "[]" if "stragglers" not in what else '[{"ranks":[1],"slowdown":3}]'
            cv = 0.2 if "cv=" in what else 0
            row = rows[(rows["system.variability.stragglers"] == strag) & (rows["system.variability.jitter.cv"] == cv)]
            assert loss == pytest.approx(1 - float(row["samples_per_s"].iloc[0]) / base)
            assert f"{what} loses {loss:.1%}" in f.sentence or f"{what} gains {-loss:.1%}" in f.sentence
    ring, ps = (f.values["loss"]['stragglers=[{"ranks":[1],"slowdown":3}]'] for f in found)
    # compute sets the pace: the ring waits for its 3x straggler every iteration (loses about 2/3),
    # the asynchronous server's other workers do not wait (one worker of four runs at a third)
    assert 0.55 < ring < 0.67
    assert ps < 0.5 * ring


def test_a_metric_plotted_twice_gets_one_file_per_axis(small) -> None:  # type: ignore[no-untyped-def]
    report = render_study(small).read_text()
    plots = {p.name for p in (small.out / "plots").iterdir()}
    assert {"samples_per_s_by_system.variability.stragglers.png",
            "samples_per_s_by_system.variability.jitter.cv.png"} <= plots
    assert "without stragglers or jitter, throughput" in report


def test_without_a_reference_configuration_nothing_is_claimed(small) -> None:  # type: ignore[no-untyped-def]
    s = small.summary
    varied = s[s["system.variability.jitter.cv"] > 0]
    assert not [f for f in findings(varied, small.expansion.param_names) if f.kind == "variability"]


def test_the_shipped_study_expands_to_every_configuration() -> None:
    path = REPO / "specs" / "stragglers.yaml"
    exp = expand(load_study(path), path)
    assert not exp.skipped and len(exp.unique_keys) == len(exp.points) == 2 * 5 * 3
    npus = {p.scenario.npus for p in exp.points}
    assert npus == {64}


def test_samples_per_s_counts_each_worker_at_its_own_pace(small) -> None:  # type: ignore[no-untyped-def]
    """Ring, no variability: every rank finishes together, so 5 workers x 8 samples x 3 iterations over
    the finish. Asynchronous server with a 3x straggler: the straggler finishes last, and the job's
    rate is more than 5 workers' samples over that finish (the other workers count at their pace)."""
    s = small.summary
    ring = s[s["parallelism.aggregation"].str.startswith("allreduce")
             & (s["system.variability.stragglers"] == "[]") & (s["system.variability.jitter.cv"] == 0)].iloc[0]
    assert ring["finish_min_ms"] == ring["finish_ms"]
    assert ring["samples_per_s"] == pytest.approx(5 * 8 * 3 / ring["finish_ms"] * 1e3, rel=1e-12)
    ps = s[s["parallelism.aggregation"].str.startswith("parameter_server")
           & (s["system.variability.stragglers"] != "[]") & (s["system.variability.jitter.cv"] == 0)].iloc[0]
    assert ps["samples_per_s"] > 1.5 * 4 * 8 * 3 / ps["finish_ms"] * 1e3
