"""Cluster specs: tiered topologies, the Lingjun host table, jobs and their placement."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simstudy.spec import Cluster, LeafSpine, SpecError, host_tors, load_spec, npu_hosts
from simstudy.spec.load import load_document

ROOT = Path(__file__).resolve().parents[2]


def _leafspine(**kw: object) -> dict[str, object]:
    return {"kind": "leaf_spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2, "gpus_per_host": 2,
            "bandwidth_gbps": 100, **kw}


def _cluster(tmp_path: Path, jobs: list[dict[str, object]], topology: dict[str, object] | None = None) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"kind": "cluster", "name": "c", "topology": topology or _leafspine(),
                                    "jobs": jobs}))
    return path


def test_leaf_spine_structure_and_uplink_speed() -> None:
    t = LeafSpine.model_validate(_leafspine(spines=2, oversubscription=2.0, nics_per_host=2))
    assert (t.hosts, t.total_npus) == (4, 8)
    assert npu_hosts(t) == (0, 0, 1, 1, 2, 2, 3, 3)
    assert host_tors(t) == (0, 0, 1, 1)
    # 2 hosts x 2 NICs x 100 Gbit/s below a leaf, halved by 2:1 oversubscription, over 2 spines
    assert t.uplink_gbps == pytest.approx(2 * 2 * 100 / 2 / 2)


def test_lingjun_import_counts_hosts_and_switches_per_tier() -> None:
    data, _ = load_document(ROOT / "topologies" / "lingjun.yaml")
    hosts = data["hosts_table"]
    assert len(hosts) == 847
    assert len({(h["agg"], h["tor"]) for h in hosts}) == 119
    assert len({h["agg"] for h in hosts}) == 3
    assert len({h["core"] for h in hosts}) == 1
    topo = load_spec(Cluster, _lingjun_cluster()).topology
    assert (topo.total_npus, len(set(host_tors(topo)))) == (847 * 8, 119)


def _lingjun_cluster() -> Path:
    return ROOT / "tests" / "data" / "lingjun_two_jobs.yaml"


def test_placement_policies(tmp_path: Path) -> None:
    jobs = [{"name": "a", "model": "small_cnn", "gpus": 4, "placement": "spread"},
            {"name": "b", "model": "small_cnn", "gpus": 2},
            {"name": "c", "model": "small_cnn", "gpus": 2, "placement": {"npus": [6, 7]}}]
    c = load_spec(Cluster, _cluster(tmp_path, jobs, _leafspine(hosts_per_leaf=4)))
    # explicit first (c on host 3), then spread over the free hosts one leaf at a time: hosts 0 and 4
    # (leaf 0 and leaf 1), then packed: the lowest free host (1)
    assert c.placed == [(0, 1, 8, 9), (2, 3), (6, 7)]
    assert c.jobs[0].parallelism.dp == 4
    alone = c.alone(0)
    assert [j.name for j in alone.jobs] == ["a"] and alone.placed == [(0, 1, 8, 9)]


def test_random_placement_is_seeded(tmp_path: Path) -> None:
    def placed(seed: int) -> list[tuple[int, ...]]:
        jobs = [{"name": "a", "model": "small_cnn", "gpus": 4, "placement": {"policy": "random", "seed": seed}}]
        return load_spec(Cluster, _cluster(tmp_path, jobs, _leafspine(leaves=4))).placed

    assert placed(1) == placed(1)
    assert len({placed(s)[0] for s in range(6)}) > 1


@pytest.mark.parametrize(("jobs", "field", "words"), [
    ([{"name": "a", "model": "small_cnn", "gpus": 2, "placement": [0, 1]},
      {"name": "b", "model": "small_cnn", "gpus": 2, "placement": [1, 2]}],
     "jobs.1.placement.npus", "already uses"),
    ([{"name": "a", "model": "small_cnn", "gpus": 12}], "jobs.0.gpus", "needs 12 NPUs"),
    ([{"name": "a", "model": "small_cnn", "gpus": 2}, {"name": "a", "model": "small_cnn", "gpus": 2}],
     "jobs.1.name", "is used by jobs 0 and 1"),
    ([{"name": "a", "model": "small_cnn", "gpus": 2, "placement": [0, 99]}], "jobs.0.placement.npus",
     "not in the topology"),
])
def test_bad_placements_name_file_and_field(tmp_path: Path, jobs: list[dict[str, object]], field: str,
                                            words: str) -> None:
    path = _cluster(tmp_path, jobs)
    with pytest.raises(SpecError) as err:
        load_spec(Cluster, path)
    assert err.value.file == str(path)
    assert err.value.field == field
    assert words in err.value.message


def test_csv_with_a_missing_column_names_the_csv_and_column(tmp_path: Path) -> None:
    (tmp_path / "hosts.csv").write_text("ip,DSW,ASW\nh1,G1,S1\n")
    path = _cluster(tmp_path, [{"name": "a", "model": "small_cnn", "gpus": 2}],
                    {"kind": "clos_csv", "file": "hosts.csv", "gpus_per_host": 2})
    with pytest.raises(SpecError) as err:
        load_spec(Cluster, path)
    assert err.value.file == str(tmp_path / "hosts.csv")
    assert err.value.field == "PSW"
    assert "missing" in err.value.message


def test_csv_that_does_not_exist_names_the_spec(tmp_path: Path) -> None:
    path = _cluster(tmp_path, [{"name": "a", "model": "small_cnn", "gpus": 2}],
                    {"kind": "clos_csv", "file": "nowhere.csv", "gpus_per_host": 2})
    with pytest.raises(SpecError, match=r"nowhere\.csv"):
        load_spec(Cluster, path)
