"""Aggregation kinds as one registry entry each (simstudy.spec.aggregation and
simstudy.compiler.aggregation), and `dp: auto` as one rule for scenarios and cluster jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pandas as pd
import pytest

from simstudy.backends.astrasim import AstraSimBackend
from simstudy.backends.base import BackendError
from simstudy.compiler import compile_scenario
from simstudy.compiler.aggregation import COMPILE, astra_sim_refusal
from simstudy.compiler.frameworks import PRESETS as COMPILED_PRESETS
from simstudy.compiler.registry import require_complete
from simstudy.spec import Cluster, Job, ParameterServer, Scenario
from simstudy.spec.aggregation import AGGREGATIONS, Aggregation, AllReduce
from simstudy.spec.framework import PRESETS, FrameworkSpec
from simstudy.validation import scenario_roles


def test_every_kind_of_the_union_has_one_compile_step_in_the_spec_order() -> None:
    union = [get_args(m.model_fields["kind"].annotation)[0] for m in get_args(get_args(Aggregation)[0])]
    assert list(AGGREGATIONS) == union == list(COMPILE) == ["allreduce", "parameter_server", "gossip", "in_network"]
    presets = [get_args(m.model_fields["name"].annotation)[0] for m in get_args(get_args(FrameworkSpec)[0])]
    assert list(PRESETS) == presets == list(COMPILED_PRESETS)


def test_an_incomplete_compiler_table_is_refused_by_name() -> None:
    with pytest.raises(ImportError, match=r"COMPILE: the compiler has \['allreduce'\], the spec "
                                          r"\['allreduce', 'parameter_server', 'gossip', 'in_network'\]"):
        require_complete({"allreduce": None}, AGGREGATIONS, "COMPILE")
    require_complete(dict(COMPILE), AGGREGATIONS, "COMPILE")


def test_keys_that_imply_a_kind_are_its_own_fields() -> None:
    for kind, model in AGGREGATIONS.items():
        assert set(model.implied_by) <= set(model.model_fields) - {"kind"}, kind
    first = next(iter(AGGREGATIONS))
    assert AGGREGATIONS[first].implied_by == ()  # the default kind is what no key names


@pytest.mark.parametrize(("aggregation", "kind"), [
    ({}, "allreduce"), ({"algorithm": "direct"}, "allreduce"), ({"servers": 2}, "parameter_server"),
    ({"mode": "async"}, "parameter_server"), ({"placement": "colocated"}, "parameter_server"),
])
def test_a_kind_left_out_is_the_one_its_keys_imply(aggregation: dict[str, Any], kind: str) -> None:
    s = Scenario.model_validate({"model": "small_cnn", "parallelism": {"dp": 4, "aggregation": aggregation},
                                 "topology": {"kind": "switch", "npus": 4 + (aggregation == {"servers": 2}) * 2
                                              + (aggregation == {"mode": "async"})}})
    assert s.parallelism.aggregation.kind == kind


def test_roles_of_the_ranks() -> None:
    assert AllReduce().server_hosts(4) == () and AllReduce().extra_ranks == 0
    dedicated = ParameterServer(servers=2)
    assert (dedicated.server_hosts(4), dedicated.extra_ranks) == ((4, 5), 2)
    colocated = ParameterServer(servers=2, placement="colocated")
    assert (colocated.server_hosts(4), colocated.extra_ranks) == ((0, 1), 0)
    s = Scenario.model_validate({"model": "small_cnn", "parallelism": {"aggregation": {"servers": 2}},
                                 "topology": {"kind": "switch", "npus": 6}})
    assert s.parallelism.dp == 4  # the servers' ranks are left out of dp: auto, kind inferred or not
    roles = scenario_roles(s, pd.DataFrame())
    assert (roles.workers, roles.servers) == ((0, 1, 2, 3), (4, 5))
    colocated_job = s.model_copy(update={"parallelism": s.parallelism.model_copy(update={"aggregation": colocated})})
    assert scenario_roles(colocated_job, pd.DataFrame()).servers == ()  # servers on workers count as workers


@pytest.mark.parametrize("par", [
    {"tp": 2, "cp": 2}, {"pp": 2, "cp": 2, "microbatches": 2}, {"cp": 4}, {"tp": 2},
    {"aggregation": {"servers": 2}}, {"aggregation": {"kind": "parameter_server", "servers": 1}},
    {"aggregation": {"servers": 2, "placement": "colocated"}},
])
def test_dp_auto_is_one_rule_for_scenarios_and_cluster_jobs(par: dict[str, Any]) -> None:
    """A job's `gpus` and a scenario's topology give the same data-parallel degree: NPUs left after
    dedicated servers, over tp x pp x cp (a job's used to leave cp out)."""
    scenario = Scenario.model_validate({"model": "gpt2", "parallelism": par,
                                        "topology": {"kind": "switch", "npus": 8}})
    job = Job.model_validate({"name": "j", "model": "gpt2", "gpus": 8, "parallelism": par})
    assert job.parallelism.dp == scenario.parallelism.dp
    assert job.parallelism.total_ranks == scenario.parallelism.total_ranks == 8


def test_cluster_job_with_context_parallelism_gets_its_data_parallel_degree() -> None:
    cluster = Cluster.model_validate({
        "kind": "cluster", "topology": {"kind": "switch", "npus": 16},
        "jobs": [{"name": "cp", "model": "gpt2", "gpus": 8, "parallelism": {"tp": 2, "cp": 2}},
                 {"name": "dp", "model": "small_cnn", "gpus": 8}]})
    p = cluster.jobs[0].parallelism
    assert (p.dp, p.tp, p.cp, p.compute_ranks) == (2, 2, 2, 8)  # 8 / (tp x cp), not 8 / tp = 4
    assert cluster.placed[0] == tuple(range(8))


def _ps_bundle(tmp_path: Path) -> Path:
    s = Scenario.model_validate({"name": "ps", "model": "small_cnn", "parallelism": {"dp": 2, "aggregation":
                                 {"servers": 1}}, "topology": {"kind": "switch", "npus": 3},
                                 "training": {"iterations": 1, "batch_size_per_worker": 4}})
    return compile_scenario(s, tmp_path / "bundle").bundle.directory


def test_astrasim_refuses_a_kind_that_says_it_cannot_run_there(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from simstudy.compiler import Bundle

    bundle = Bundle.from_dir(_ps_bundle(tmp_path))
    assert astra_sim_refusal(bundle) is None
    monkeypatch.setattr(ParameterServer, "astra_sim", False)
    assert "parameter_server (parameter server) runs on flowsim only" in (astra_sim_refusal(bundle) or "")
    with pytest.raises(BackendError, match="astrasim: aggregation kind parameter_server"):
        AstraSimBackend(binary=tmp_path / "no-such-binary").run(bundle, tmp_path / "run")
