"""`system.variability`: a bad jitter or straggler is one error naming the file and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from simstudy.spec import Cluster, Scenario, SpecError, load_spec
from simstudy.spec.scenario import canonical_json


def _scenario(tmp_path: Path, variability: dict[str, Any], **extra: Any) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"model": "small_cnn", "topology": {"kind": "switch", "npus": 4},
                                    "training": {"iterations": 3},
                                    "system": {"variability": variability}, **extra}))
    return path


@pytest.mark.parametrize(("variability", "field", "words"), [
    ({"jitter": {"cv": -0.1}}, "system.variability.jitter.cv", "greater than or equal to 0"),
    ({"jitter": {"distribution": "normal"}}, "system.variability.jitter.cv", "needs cv"),
    ({"jitter": {"distribution": "empirical"}}, "system.variability.jitter.samples", "needs samples"),
    ({"jitter": {"distribution": "empirical", "samples": [1, 2], "cv": 0.1}}, "system.variability.jitter.cv",
     "leave cv out"),
    ({"jitter": {"distribution": "empirical", "samples": [1, 0]}}, "system.variability.jitter.samples",
     "times > 0"),
    ({"jitter": {"cv": 0.1, "samples": [1.0]}}, "system.variability.jitter.samples", "distribution: empirical"),
    ({"jitter": {"distribution": "uniform", "cv": 0.1}}, "system.variability.jitter.distribution", "normal"),
    ({"rank_jitter": {"cv": 0.1, "correlated": True}}, "system.variability.rank_jitter.correlated",
     "drawn per rank"),
    ({"stragglers": [{"ranks": [4], "slowdown": 2}]}, "system.variability.stragglers.0.ranks",
     "rank 4 is not in the job: it has 4 ranks"),
    ({"stragglers": [{"ranks": [1], "slowdown": 2}, {"ranks": [1, 1], "slowdown": 2}]},
     "system.variability.stragglers.1.ranks", "listed twice"),
    ({"stragglers": [{"ranks": [1], "slowdown": 0}]}, "system.variability.stragglers.0.slowdown", "greater than 0"),
    ({"stragglers": [{"ranks": [], "slowdown": 2}]}, "system.variability.stragglers.0.ranks", "at least 1"),
    ({"stragglers": [{"ranks": [0], "slowdown": 2, "iterations": [2, 1]}]},
     "system.variability.stragglers.0.iterations", "first <= last"),
    ({"stragglers": [{"ranks": [0], "slowdown": 2, "iterations": [1, 3]}]},
     "system.variability.stragglers.0.iterations", "training.iterations is 3"),
])
def test_bad_variability_names_file_and_field(tmp_path: Path, variability: dict[str, Any], field: str,
                                              words: str) -> None:
    path = _scenario(tmp_path, variability)
    with pytest.raises(SpecError) as err:
        load_spec(Scenario, path)
    assert (err.value.file, err.value.field) == (str(path), field) and words in err.value.message


def test_good_variability_loads_with_its_defaults(tmp_path: Path) -> None:
    s = load_spec(Scenario, _scenario(tmp_path, {"jitter": {"cv": 0.2}, "stragglers": [{"ranks": [3], "slowdown": 3}]}))
    v = s.system.variability
    assert v is not None and v.jitter is not None
    assert (v.jitter.distribution, v.jitter.seed, v.jitter.correlated) == ("normal", 0, False)
    assert v.stragglers[0].iterations is None


def test_a_dedicated_server_is_a_rank_of_the_job(tmp_path: Path) -> None:
    """The job's ranks include dedicated parameter servers: 4 workers + 1 server are ranks 0-4."""
    ps = {"parallelism": {"aggregation": {"kind": "parameter_server", "servers": 1}},
          "topology": {"kind": "switch", "npus": 5}}
    assert load_spec(Scenario, _scenario(tmp_path, {"stragglers": [{"ranks": [4], "slowdown": 2}]}, **ps))
    with pytest.raises(SpecError, match="it has 5 ranks"):
        load_spec(Scenario, _scenario(tmp_path, {"stragglers": [{"ranks": [5], "slowdown": 2}]}, **ps))


@pytest.mark.parametrize(("own", "field"), [(True, "jobs.1.system.variability.stragglers.0.ranks"),
                                            (False, "system.variability.stragglers.0.ranks")])
def test_cluster_checks_stragglers_against_each_jobs_ranks(tmp_path: Path, own: bool, field: str) -> None:
    """Ranks are the job's own: rank 2 is in a 4-rank job, not in a 2-rank one."""
    variability = {"variability": {"stragglers": [{"ranks": [2], "slowdown": 2}]}}
    jobs: list[dict[str, Any]] = [{"name": "a", "model": "small_cnn", "gpus": 4},
                                  {"name": "b", "model": "small_cnn", "gpus": 2}]
    data: dict[str, Any] = {"kind": "cluster", "topology": {"kind": "switch", "npus": 8}, "jobs": jobs}
    if own:
        jobs[1]["system"] = variability
    else:
        data["system"] = variability
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as err:
        load_spec(Cluster, path)
    assert err.value.field == field
    assert "rank 2 is not in the job: it has 2 ranks" in err.value.message
    jobs[1]["gpus"] = 4
    path.write_text(yaml.safe_dump(data))
    assert load_spec(Cluster, path).jobs[1].ranks == 4


def test_a_scenario_without_variability_keeps_its_run_key() -> None:
    """`variability` unset is left out of the canonical JSON (as parallelism's later fields are), so
    that the run keys of scenarios written before it do not change; set, it is in."""
    base = {"name": "k", "model": "small_cnn", "parallelism": {"dp": 2}, "topology": {"kind": "switch", "npus": 2}}
    plain = Scenario.model_validate(base)
    assert "variability" not in canonical_json(plain)
    varied = Scenario.model_validate({**base, "system": {"variability": {"jitter": {"cv": 0.1}}}})
    assert '"variability":' in canonical_json(varied)
