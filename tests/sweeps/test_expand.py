"""Study expansion: products, zip groups, references, skipped combinations, run keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from simstudy.spec import Scenario, SpecError, Study, load_study
from simstudy.spec.paths import check_path
from simstudy.sweeps import expand, run_key
from simstudy.sweeps.expand import backend_id

BASE = {
    "model": "small_cnn",
    "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10},
    "training": {"iterations": 1},
}


def _study(**fields: object) -> Study:
    return Study.model_validate({"name": "t", "base": BASE, **fields})


def test_product_of_axes_in_order(tmp_path: Path) -> None:
    study = _study(axes={"topology.npus": [2, 4, 8], "parallelism.aggregation.algorithm": ["ring", "direct"]})
    exp = expand(study, tmp_path / "s.yaml")
    assert exp.total == 6 and not exp.skipped
    assert [p.params for p in exp.points[:2]] == [
        {"topology.npus": 2, "parallelism.aggregation.algorithm": "ring"},
        {"topology.npus": 2, "parallelism.aggregation.algorithm": "direct"},
    ]
    # dp left out fills the topology
    assert [p.scenario.parallelism.dp for p in exp.points] == [2, 2, 4, 4, 8, 8]
    assert len(set(p.key for p in exp.points)) == 6


def test_zip_groups_move_together(tmp_path: Path) -> None:
    study = _study(axes={"model": ["small_cnn", "mobilenetv2"]},
                   zip=[{"topology.npus": [2, 4], "topology.bandwidth_gbps": [10, 40]}])
    exp = expand(study, tmp_path / "s.yaml")
    assert exp.total == 4
    pairs = {(p.scenario.topology.total_npus, p.scenario.topology.bandwidth_gbps) for p in exp.points}  # type: ignore[union-attr]
    assert pairs == {(2, 10.0), (4, 40.0)}


def test_invalid_combinations_are_skipped_with_the_reason(tmp_path: Path) -> None:
    study = _study(axes={"parallelism.dp": [2, 4], "topology.npus": [4]})
    exp = expand(study, tmp_path / "s.yaml")
    assert len(exp.points) == 1 and len(exp.skipped) == 1
    skip = exp.skipped[0]
    assert skip.params == {"parallelism.dp": 2, "topology.npus": 4}
    assert "4 NPUs" in skip.reason and "needs 2" in skip.reason


@pytest.mark.parametrize(("axis", "words"), [
    ("topolgy.npus", "no 'topolgy' in scenario; scenario has: model, name, parallelism, system, topology, training"),
    ("topology.colour", "no 'colour' in topology"),
    ("training.iterations.x", "training.iterations is a plain value"),
])
def test_an_axis_the_schema_does_not_have_is_an_error_naming_file_and_axis(tmp_path: Path, axis: str,
                                                                           words: str) -> None:
    with pytest.raises(SpecError) as err:
        expand(_study(axes={axis: [1, 2]}), tmp_path / "s.yaml")
    assert err.value.file == str(tmp_path / "s.yaml")
    assert err.value.field == f"axes.{axis}"
    assert words in err.value.message


def test_paths_into_unions_lists_and_free_mappings_are_fields() -> None:
    for path in ("topology.k", "topology.dims.0.npus", "parallelism.aggregation.servers", "model.options.layers",
                 "system.measured.layers.conv1.forward_us"):
        check_path(Scenario, path)


def test_a_study_whose_every_combination_is_skipped_is_an_error(tmp_path: Path) -> None:
    study = Study.model_validate({"name": "t", "base": {**BASE, "parallelism": {"dp": 3}},
                                  "axes": {"training.iterations": [1, 2]}})
    with pytest.raises(SpecError) as err:
        expand(study, tmp_path / "s.yaml")
    assert err.value.field == "axes"
    assert "every one of the 2 combinations of training.iterations is skipped (for the same reason: " \
           "parallelism: topology has 4 NPUs but the parallelism needs 3" in err.value.message


def test_references_resolve_relative_to_the_study_and_label_by_stem(tmp_path: Path) -> None:
    (tmp_path / "topos").mkdir()
    (tmp_path / "topos" / "sw.yaml").write_text("kind: switch\nnpus: 4\nbandwidth_gbps: 25\n")
    (tmp_path / "topos" / "fc.yaml").write_text("kind: fully_connected\nnpus: 4\nbandwidth_gbps: 25\n")
    (tmp_path / "study.yaml").write_text(
        "name: refs\nbase: {model: small_cnn}\n"
        "axes:\n  topology: [topos/sw.yaml, topos/fc.yaml]\n  topology.bandwidth_gbps: [10, 100]\n")
    study = load_study(tmp_path / "study.yaml")
    exp = expand(study, tmp_path / "study.yaml")
    assert [p.params["topology"] for p in exp.points] == ["sw", "sw", "fc", "fc"]
    assert [p.scenario.topology.kind for p in exp.points] == ["switch", "switch", "fully_connected", "fully_connected"]
    assert exp.points[1].scenario.topology.bandwidth_gbps == 100  # type: ignore[union-attr]


def test_missing_reference_in_an_axis_is_skipped_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "study.yaml").write_text("name: r\nbase: {model: small_cnn, topology: {kind: ring, npus: 2}}\n"
                                         "axes: {topology: [nope.yaml, {kind: ring, npus: 2}]}\n")
    exp = expand(load_study(tmp_path / "study.yaml"), tmp_path / "study.yaml")
    assert "nope.yaml" in exp.skipped[0].reason and "not found" in exp.skipped[0].reason
    assert len(exp.points) == 1


def test_run_key_is_stable_and_depends_on_scenario_and_backend(tmp_path: Path) -> None:
    a = expand(_study(axes={"topology.npus": [2, 4]}), tmp_path / "s.yaml")
    b = expand(_study(axes={"topology.npus": [4, 2]}), tmp_path / "s.yaml")
    assert {p.params["topology.npus"]: p.key for p in a.points} == {p.params["topology.npus"]: p.key for p in b.points}
    s = a.points[0].scenario
    assert run_key(s, "flowsim:congestion=fluid") != run_key(s, "astrasim:aware=False")
    assert backend_id(_study(backend="astrasim")) == "astrasim:aware=False"
    assert backend_id(_study()) == "flowsim:congestion=fluid"
    assert backend_id(_study(backend_options={"congestion": "aware"})) == "flowsim:congestion=aware"
    # `--congestion aware` with astrasim is the aware binary: the same key as `aware: true`.
    assert backend_id(_study(backend="astrasim", backend_options={"congestion": "aware"})) == "astrasim:aware=True"


@pytest.mark.parametrize(("old", "mode"), [(True, "fluid"), (False, "unaware")])
def test_old_studies_saying_contention_still_load(old: bool, mode: str, tmp_path: Path) -> None:
    """Studies written before `congestion` said `contention: true|false` (links shared or not)."""
    study = _study(backend_options={"contention": old})
    assert study.backend_options.congestion == mode


def test_contention_and_a_different_congestion_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbase: {model: small_cnn, topology: {kind: ring, npus: 2}}\n"
                    "backend_options: {contention: false, congestion: aware}\n")
    with pytest.raises(SpecError, match="contention: false means congestion: unaware, but congestion is 'aware'"):
        load_study(path)


def test_duplicate_points_share_one_run(tmp_path: Path) -> None:
    exp = expand(_study(axes={"training.precision": ["fp32", "fp32"]}), tmp_path / "s.yaml")
    assert len(exp.points) == 2 and len(exp.unique_keys) == 1


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"axes": {"topology.npus": []}}, "has no values"),
        ({"zip": [{"topology.npus": [2, 4], "training.iterations": [1]}]}, "same number of values"),
        ({"axes": {"name": ["x"]}}, "cannot be swept"),
        ({"axes": {"topology..npus": [2]}}, "dotted scenario path"),
        ({"axes": {"topology.npus": [2]}, "zip": [{"topology.npus": [4]}]}, "appears twice"),
    ],
)
def test_bad_studies_name_the_file_and_the_problem(tmp_path: Path, fields: dict[str, object], expected: str) -> None:
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "bad", "base": BASE, **fields}))
    with pytest.raises(SpecError) as err:
        load_study(path)
    assert str(path) in str(err.value) and expected in str(err.value)


def test_shipped_studies_expand_without_skips(repo: Path) -> None:
    for name in ("cnn_vs_rnn", "ps_vs_allreduce", "topology_bandwidth", "regression_small"):
        path = repo / "specs" / f"{name}.yaml"
        exp = expand(load_study(path), path)
        assert not exp.skipped, (name, exp.skipped)
        assert len(exp.unique_keys) == len(exp.points) >= 10
