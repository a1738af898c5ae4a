"""Shared hosts (`system.host_cores`) as flowsim runs them: processor sharing worked out by hand
(two ranks on one core, four on two, staggered starts, an end that falls between two
nanoseconds), the shortcuts giving the full path's result on random bundles whose ranks share
hosts, compiled scenarios (the topology's hosts, `rank_hosts`) and ASTRA-SIM's refusal."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simstudy import chakra
from simstudy.backends import AstraSimBackend, BackendError, FlowsimBackend, RunResult
from simstudy.chakra import Node, NodeType
from simstudy.compiler import Bundle, BundleError, compile_scenario
from simstudy.compiler.bundle import HOST_CORES, HOSTS
from simstudy.spec import Scenario
from tests.backends.bundles import write_bundle
from tests.backends.fastpaths import MODES, Case, assert_same, cases, run_paths

MS = 1_000_000  # ns


def share(bundle: Bundle, cores: int, hosts: list[int]) -> Bundle:
    """The bundle with its ranks on `hosts` of `cores` cores each."""
    system = json.loads(bundle.system.read_text())
    bundle.system.write_text(json.dumps({**system, HOST_CORES: cores, HOSTS: hosts}))
    return bundle


def compute(node_id: int, us: int, deps: tuple[int, ...] = (), *, cpu: bool = False) -> Node:
    return Node(node_id, f"{'wait' if cpu else 'compute'}{node_id}", NodeType.COMP_NODE, data_deps=list(deps),
                duration_micros=us, attrs=[chakra.is_cpu_op(cpu), chakra.num_ops(0 if cpu else 1)])


def run_traces(tmp: Path, traces: list[list[Node]], cores: int | None, hosts: list[int] | None = None) -> RunResult:
    bundle = write_bundle(tmp / "b", [("Switch", len(traces), 12.5, 0.0)], traces)
    if cores is not None:
        share(bundle, cores, hosts if hosts is not None else [0] * len(traces))
    return FlowsimBackend(congestion="unaware").run(bundle, tmp / "run")


def ends(result: RunResult) -> list[int]:
    return [r.finish_ns for r in result.ranks]


def test_two_ranks_on_one_core_each_take_twice_as_long(tmp_path: Path) -> None:
    """10 ms of compute each, together on one core at half speed: both end at 20 ms."""
    result = run_traces(tmp_path, [[compute(0, 10_000)]] * 2, cores=1)
    assert ends(result) == [20 * MS, 20 * MS]
    assert [r.compute_ns for r in result.ranks] == [20 * MS, 20 * MS]  # the time they spent computing


def test_four_ranks_on_two_cores_and_a_host_alone(tmp_path: Path) -> None:
    """Four ranks of 10 ms on a host of 2 cores end at 20 ms; a fifth rank alone on its own host
    (and two ranks on 2 cores) keeps its speed."""
    result = run_traces(tmp_path, [[compute(0, 10_000)]] * 7, cores=2, hosts=[0, 0, 0, 0, 1, 2, 2])
    assert ends(result) == [20 * MS] * 4 + [10 * MS] * 3


def test_staggered_starts_share_only_while_both_compute(tmp_path: Path) -> None:
    """One core; rank 0 computes 10 ms from 0, rank 1 waits 4 ms (a CPU op, which takes no core) and
    then computes 10 ms. [0, 4): rank 0 alone does 4 ms; from 4 both at half speed, so rank 0's last
    6 ms end at 16 ms, when rank 1 has done 6; its last 4 ms alone end at 20 ms."""
    result = run_traces(tmp_path, [[compute(0, 10_000)], [compute(0, 4_000, cpu=True), compute(1, 10_000, (0,))]],
                        cores=1)
    assert ends(result) == [16 * MS, 20 * MS]
    spans = result.spans[result.spans["name"].astype(str) == "compute1"]
    assert (int(spans["start_ns"].iloc[0]), int(spans["end_ns"].iloc[0])) == (4 * MS, 20 * MS)


def test_uneven_work_and_an_end_between_nanoseconds(tmp_path: Path) -> None:
    """Three ranks on 2 cores, 1, 1 and 2 us: at 2/3 speed the short ones end at 1500 ns, the long
    one has 1000 ns left, alone: 2500 ns. Seven ranks of 1 us on 3 cores: 7000/3 ns, rounded up."""
    result = run_traces(tmp_path / "a", [[compute(0, 1)], [compute(0, 1)], [compute(0, 2)]], cores=2)
    assert ends(result) == [1500, 1500, 2500]
    result = run_traces(tmp_path / "b", [[compute(0, 1)]] * 7, cores=3)
    assert ends(result) == [2334] * 7


def test_no_more_ranks_than_cores_is_the_run_without_shared_hosts(tmp_path: Path) -> None:
    traces = [[compute(0, 3), compute(1, 5, (0,))], [compute(0, 7)], [compute(0, 2)], [compute(0, 4)]]
    plain = run_traces(tmp_path / "a", traces, cores=None)
    shared = run_traces(tmp_path / "b", traces, cores=2, hosts=[0, 0, 1, 1])
    assert ends(shared) == ends(plain) and shared.spans.equals(plain.spans)


@st.composite
def shared_cases(draw: st.DrawFn) -> tuple[Case, int, list[int]]:
    """A random bundle of computes and collectives (`fastpaths.cases`), its ranks on 1-3 hosts of 1-2 cores:
    consecutive ranks per host, or every host the same number of ranks (the identical shortcut's case)."""
    case = draw(cases(max_npus=8, max_ops=5, groups=True, sends=True, computes=True))
    n = case.npus
    per = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
    hosts = [r // per for r in range(n)] if draw(st.booleans()) else sorted(draw(st.lists(
        st.integers(0, 2), min_size=n, max_size=n)))
    return case, draw(st.integers(1, 2)), hosts


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(shared_cases())
def test_shortcuts_give_the_full_path_on_shared_hosts(drawn: tuple[Case, int, list[int]]) -> None:
    """Every shortcut (lanes, isolated collectives, identical ranks where the hosts run alike) gives
    the full path's finish times, spans and rows when ranks share their hosts' cores."""
    case, cores, hosts = drawn
    with tempfile.TemporaryDirectory() as tmp:
        bundle = share(case.bundle(Path(tmp) / "b"), cores, hosts)
        for mode in MODES:
            assert_same(run_paths(bundle, Path(tmp), mode))


def scenario(system: dict[str, Any], topology: dict[str, Any] | None = None, **parts: Any) -> Scenario:
    return Scenario.model_validate({
        "name": "shared", "model": "small_cnn", "system": system, "training": {"iterations": 2},
        "topology": topology or {"kind": "leaf_spine", "leaves": 2, "hosts_per_leaf": 1, "gpus_per_host": 2},
        **parts})


def compute_spans(result: RunResult) -> list[int]:
    s = result.spans[(result.spans["rank"] == 0) & (result.spans["kind"].astype(str) == "compute")]
    return (s["end_ns"] - s["start_ns"]).tolist()


def test_the_topologys_hosts_share_their_cores(tmp_path: Path) -> None:
    """A leaf-spine of 2 hosts of 2 GPUs, 1 core each: the system.json names each rank's host
    (rank // gpus_per_host); both GPUs of a host compute in lock-step at half speed, so every
    compute node takes twice its time (a node of 0 us takes 1 ns alone, 2 shared)."""
    plain = FlowsimBackend().run(compile_scenario(scenario({}), tmp_path / "p").bundle, tmp_path / "pr")
    bundle = compile_scenario(scenario({"host_cores": 1}), tmp_path / "s").bundle
    assert json.loads(bundle.system.read_text())[HOSTS] == [0, 0, 1, 1]
    shared = FlowsimBackend().run(bundle, tmp_path / "sr")
    assert compute_spans(shared) == [2 * d for d in compute_spans(plain)]


def test_identical_ranks_on_hosts_alike_keep_the_shortcut(tmp_path: Path) -> None:
    """4 ranks on a switch, 2 per host of 1 core (`rank_hosts`): rank 0 stands for all of them, at
    half speed, and every path gives the full path's result."""
    s = scenario({"host_cores": 1, "rank_hosts": [0, 0, 1, 1]}, {"kind": "switch", "npus": 4})
    bundle = compile_scenario(s, tmp_path / "b").bundle
    plain = FlowsimBackend().run(compile_scenario(scenario({}, {"kind": "switch", "npus": 4}), tmp_path / "p").bundle,
                                 tmp_path / "pr")
    shared = FlowsimBackend().run(bundle, tmp_path / "r")
    assert plain.details["identical_ranks"] and shared.details["identical_ranks"]
    assert compute_spans(shared) == [2 * d for d in compute_spans(plain)]
    for mode in MODES:
        assert_same(run_paths(bundle, tmp_path, mode))


def test_rank_hosts_of_uneven_hosts_refuse_the_identical_shortcut(tmp_path: Path) -> None:
    """3 ranks on one host of 1 core and 1 alone: the lone rank computes at full speed and waits for
    the others in every all-reduce; no rank stands for the others."""
    s = scenario({"host_cores": 1, "rank_hosts": [0, 0, 0, 1]}, {"kind": "switch", "npus": 4})
    bundle = compile_scenario(s, tmp_path / "b").bundle
    result = FlowsimBackend().run(bundle, tmp_path / "r")
    assert not result.details["identical_ranks"]
    fast, slow = compute_spans(result), [int(x) for x in (result.spans[(result.spans["rank"] == 3) & (
        result.spans["kind"].astype(str) == "compute")].eval("end_ns - start_ns"))]
    assert sum(fast) > 2.5 * sum(slow)
    assert_same(run_paths(bundle, tmp_path, "unaware"))


def test_astrasim_refuses_shared_hosts_naming_the_field(tmp_path: Path) -> None:
    bundle = compile_scenario(scenario({"host_cores": 1}), tmp_path / "b").bundle
    with pytest.raises(BackendError) as err:
        AstraSimBackend("/nonexistent/astra").run(bundle, tmp_path / "a")
    assert "system.host_cores" in str(err.value) and "flowsim only" in str(err.value)
    assert len(str(err.value).splitlines()) == 1


def test_a_bad_host_list_names_the_file_and_the_key(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b", [("Switch", 2, 12.5, 0.0)], [[compute(0, 1)]] * 2)
    share(bundle, 1, [0, 0, 0])
    with pytest.raises(BundleError, match=f"system.json: {HOSTS}: expected the host of each of the 2 NPUs"):
        FlowsimBackend().run(bundle, tmp_path / "r")
