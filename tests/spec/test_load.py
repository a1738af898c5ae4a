"""Loading specs from YAML: references between files and one clear error per bad file."""

from __future__ import annotations

from pathlib import Path

import pytest

from simstudy.spec import (
    AllReduce,
    ParameterServer,
    Ring,
    Scenario,
    SpecError,
    ZooModel,
    canonical_json,
    load_runnable,
    load_scenario,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_example_with_references_loads(repo: Path) -> None:
    s = load_scenario(repo / "specs/examples/resnet50_dp8_ring.yaml")
    assert isinstance(s.model, ZooModel) and s.model.zoo == "resnet50"
    assert isinstance(s.topology, Ring) and s.topology.npus == 8
    assert s.parallelism.dp == 8 and isinstance(s.parallelism.aggregation, AllReduce)
    assert s.parallelism.bucket_size_bytes == 25 * 2**20
    assert s.training.iterations == 2


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(__file__).parents[2] / "specs/examples").glob("*.yaml")))
def test_every_example_loads(repo: Path, name: str) -> None:
    load_runnable(repo / "specs/examples" / name)


def test_short_model_forms() -> None:
    topo = {"kind": "ring", "npus": 2}
    a = Scenario.model_validate({"model": "resnet50", "parallelism": {"dp": 2}, "topology": topo})
    b = Scenario.model_validate({"model": {"zoo": "resnet50"}, "parallelism": {"dp": 2}, "topology": topo})
    assert a == b
    c = Scenario.model_validate(
        {
            "model": {"name": "m", "layers": [{"name": "l", "params": 1, "fwd_flops_per_sample": 2,
                                               "activation_bytes_per_sample": 4}]},
            "parallelism": {"dp": 2},
            "topology": topo,
        }
    )
    assert c.model.kind == "layers"


VGG4 = {"model": "vgg16", "parallelism": {"dp": 4}, "topology": {"kind": "switch", "npus": 4}}


def test_canonical_json_is_stable_and_complete() -> None:
    s = Scenario.model_validate(VGG4)
    text = canonical_json(s)
    assert text == canonical_json(Scenario.model_validate_json(text))
    assert '"bucket_size_mib":25.0' in text and '"endpoint_delay_ns":10' in text


def test_specs_are_frozen() -> None:
    s = Scenario.model_validate(VGG4)
    with pytest.raises(ValueError):
        s.name = "x"  # type: ignore[misc]


def test_error_in_referenced_file_names_that_file_and_field(tmp_path: Path) -> None:
    write(tmp_path / "topo/bad.yaml", "kind: ring\nnpus: 8\nbandwidth_gbps: -3\n")
    spec = write(tmp_path / "specs/s.yaml", "model: resnet50\nparallelism: {dp: 8}\ntopology: ../topo/bad.yaml\n")
    with pytest.raises(SpecError) as info:
        load_scenario(spec)
    err = info.value
    assert err.file is not None and err.file.endswith("topo/bad.yaml")
    assert err.field == "bandwidth_gbps"
    assert "greater than 0" in err.message and "-3" in err.message


def test_unknown_field_is_named(tmp_path: Path) -> None:
    text = "model: resnet50\nparallelism: {dp: 2, bucket_mb: 4}\ntopology: {kind: ring, npus: 2}\n"
    spec = write(tmp_path / "s.yaml", text)
    with pytest.raises(SpecError) as info:
        load_scenario(spec)
    assert info.value.field == "parallelism.bucket_mb"
    assert "unknown field" in info.value.message
    assert str(info.value).startswith(str(spec))


def test_nested_union_field_path_has_no_tag(tmp_path: Path) -> None:
    spec = write(
        tmp_path / "s.yaml",
        "model: resnet50\nparallelism: {dp: 2, aggregation: {kind: allreduce, algorithm: tree}}\n"
        "topology: {kind: ring, npus: 2}\n",
    )
    with pytest.raises(SpecError) as info:
        load_scenario(spec)
    assert info.value.field == "parallelism.aggregation.algorithm"
    assert "'ring'" in info.value.message and "'tree'" in info.value.message


def test_rank_count_mismatch(tmp_path: Path) -> None:
    spec = write(tmp_path / "s.yaml", "model: resnet50\nparallelism: {dp: 4}\ntopology: {kind: ring, npus: 8}\n")
    with pytest.raises(SpecError, match=r"topology has 8 NPUs but the parallelism needs 4"):
        load_scenario(spec)


def test_parameter_server_must_fit(tmp_path: Path) -> None:
    spec = write(
        tmp_path / "s.yaml",
        "model: resnet50\nparallelism: {dp: 2, aggregation: {kind: parameter_server, servers: 3, "
        "placement: colocated}}\ntopology: {kind: ring, npus: 2}\n",
    )
    with pytest.raises(SpecError, match="colocated servers do not fit") as info:
        load_scenario(spec)
    assert info.value.field == "parallelism"


def test_dedicated_servers_count_as_ranks() -> None:
    s = Scenario.model_validate(
        {"model": "resnet50", "parallelism": {"dp": 4, "aggregation": {"kind": "parameter_server", "servers": 2}},
         "topology": {"kind": "switch", "npus": 6}}
    )
    assert isinstance(s.parallelism.aggregation, ParameterServer)
    assert s.parallelism.total_ranks == 6


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    spec = write(tmp_path / "s.yaml", "model: resnet50\nparallelism: {dp: 4\n")
    with pytest.raises(SpecError, match=r"invalid YAML: line \d+"):
        load_scenario(spec)


def test_missing_reference_and_cycle(tmp_path: Path) -> None:
    spec = write(tmp_path / "s.yaml", "model: resnet50\nparallelism: {dp: 2}\ntopology: nope.yaml\n")
    with pytest.raises(SpecError, match=r"referenced file 'nope\.yaml' not found") as info:
        load_scenario(spec)
    assert info.value.field == "topology"
    write(tmp_path / "a.yaml", "kind: ring\nnpus: b.yaml\n")
    write(tmp_path / "b.yaml", "a.yaml\n")
    spec2 = write(tmp_path / "s2.yaml", "model: resnet50\nparallelism: {dp: 2}\ntopology: a.yaml\n")
    with pytest.raises(SpecError, match="circular reference"):
        load_scenario(spec2)


def test_empty_and_non_mapping_documents(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="empty document"):
        load_scenario(write(tmp_path / "e.yaml", ""))
    with pytest.raises(SpecError, match="expected a mapping"):
        load_scenario(write(tmp_path / "l.yaml", "- 1\n- 2\n"))
