"""The typed meta.json (`CaptureMeta`), experiment names and rank maps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simstudy.traffic.meta import CaptureMeta, Endpoint, MetaError, load_rank_map, read_meta, write_meta


def test_endpoints_in_every_written_form() -> None:
    meta = CaptureMeta.model_validate({
        "ranks": {"0": "10.0.0.1", "1": "10.0.0.2:29500", "2": {"ip": "fe80::1", "port": 80},
                  "3": ["127.0.0.1:40001", {"ip": "127.0.0.1", "port": 40002}]},
        "control": ["10.0.0.1:29400"],
    })
    assert meta.rank_of == {"10.0.0.1": 0, "10.0.0.2:29500": 1, "[fe80::1]:80": 2, "127.0.0.1:40001": 3,
                            "127.0.0.1:40002": 3}
    assert meta.control_keys == ["10.0.0.1:29400"]
    assert Endpoint.parse("[fe80::1]:80") == Endpoint(ip="fe80::1", port=80)
    # written back as text, and read back equal
    data = json.loads(meta.model_dump_json())
    assert data["ranks"]["1"] == ["10.0.0.2:29500"] and data["control"] == ["10.0.0.1:29400"]
    assert CaptureMeta.model_validate(data) == meta


def test_iteration_spans_without_an_end(tmp_path: Path) -> None:
    meta = CaptureMeta.model_validate({"iterations": {"0": [[1.0, 1.5], [1.5]], "1": [[1.0, None]]}})
    assert meta.iterations[0][0] == (1.0, 1.5) and math.isnan(meta.iterations[0][1][1])
    assert meta.iteration_durations_s() == [0.5]
    assert meta.start_intervals_s() == [0.5]  # rank 0's two starts; rank 1 logged one
    write_meta(meta, tmp_path / "meta.json")
    again = read_meta(tmp_path)
    assert again is not None and math.isnan(again.iterations[1][0][1])  # NaN written as null, read as NaN


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"ranks": {"zero": "10.0.0.1"}}', "ranks.zero"),
    ('{"ranks": {"0": "10.0.0.300"}}', "ranks.0"),
    ('{"iterations": {"0": [["a", 1]]}}', "iterations.0.0"),
    ('{"strategy": "horovod"}', "strategy"),
])
def test_bad_meta_names_the_file_and_field(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "meta.json").write_text(content)
    with pytest.raises(MetaError, match=message) as err:
        read_meta(tmp_path)
    assert str(tmp_path / "meta.json") in str(err.value)


def test_rank_map(tmp_path: Path) -> None:
    path = tmp_path / "map.yaml"
    path.write_text("ranks: {0: 10.0.0.1, 1: 10.0.0.2, 2: 10.0.0.3}\nservers: [2]\ncontrol: ['10.0.0.1:29500']\n")
    m = load_rank_map(path)
    assert m.rank_of == {"10.0.0.1": 0, "10.0.0.2": 1, "10.0.0.3": 2}
    assert m.servers == [2] and m.control_keys == ["10.0.0.1:29500"]
    path.write_text("ranks: {0: nowhere}\n")
    with pytest.raises(MetaError, match=r"map\.yaml: ranks\.0"):
        load_rank_map(path)
    path.write_text("servers: [1]\n")
    with pytest.raises(MetaError, match="ranks"):
        load_rank_map(path)
    with pytest.raises(MetaError, match="cannot read"):
        load_rank_map(tmp_path / "missing.yaml")
