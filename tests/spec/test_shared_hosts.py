"""`system.host_cores` and `system.rank_hosts`: a bad value is one error naming the file and the
field; unset, both are left out of the canonical JSON (run keys do not move)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from simstudy.spec import Cluster, Scenario, SpecError, load_spec
from simstudy.spec.scenario import canonical_json

BASE: dict[str, Any] = {"name": "k", "model": "small_cnn", "topology": {"kind": "switch", "npus": 4}}


@pytest.mark.parametrize(("system", "field", "words"), [
    ({"host_cores": 0}, "system.host_cores", "greater than or equal to 1"),
    ({"rank_hosts": [0, 0, 1, 1]}, "system.rank_hosts", "give host_cores"),
    ({"host_cores": 2, "rank_hosts": [0, 0, 1]}, "system.rank_hosts", "each of the 4 ranks, got 3"),
    ({"host_cores": 2, "rank_hosts": [0, -1, 1, 1]}, "system.rank_hosts", "host numbers >= 0"),
])
def test_bad_shared_hosts_name_file_and_field(tmp_path: Path, system: dict[str, Any], field: str,
                                              words: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "system": system}))
    with pytest.raises(SpecError) as err:
        load_spec(Scenario, path)
    assert (err.value.file, err.value.field) == (str(path), field) and words in err.value.message


@pytest.mark.parametrize(("own", "field"), [(True, "jobs.0.system.host_cores"), (False, "system.host_cores")])
def test_a_cluster_refuses_shared_hosts(tmp_path: Path, own: bool, field: str) -> None:
    data: dict[str, Any] = {"kind": "cluster", "topology": {"kind": "switch", "npus": 4},
                            "jobs": [{"name": "a", "model": "small_cnn", "gpus": 4}]}
    if own:
        data["jobs"][0]["system"] = {"host_cores": 2}
    else:
        data["system"] = {"host_cores": 2}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as err:
        load_spec(Cluster, path)
    assert err.value.field == field and "single job" in err.value.message


def test_a_scenario_without_shared_hosts_keeps_its_run_key() -> None:
    plain = Scenario.model_validate(BASE)
    assert "host_cores" not in canonical_json(plain) and "rank_hosts" not in canonical_json(plain)
    shared = Scenario.model_validate({**BASE, "system": {"host_cores": 2}})
    assert '"host_cores":2' in canonical_json(shared) and "rank_hosts" not in canonical_json(shared)
    listed = Scenario.model_validate({**BASE, "system": {"host_cores": 2, "rank_hosts": [0, 0, 1, 1]}})
    assert '"rank_hosts":[0,0,1,1]' in canonical_json(listed)
