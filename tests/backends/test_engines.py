"""flowsim's two engines: the compiled core (`_core.pyx`) equals the Python engine, its reference.

* model by model: random messages (random routes over random links, multiplicities as link orbits
  give them, starts at shared instants, components of 1 to 60 flows: both of the filling's
  arithmetics; flows alone on links of their own, with rates equal, within the fill's tolerance
  and just beyond it) on the compiled fluid model, each of its shortcuts on and off, and on
  `FastFluidNet`: every arrival to the nanosecond;
* run by run, the random bundles of `fastpaths` in every congestion mode (fluid's equality on
  graphs with ECMP, jobs, shortcuts and sharing is also `test_fluid_solver`'s, which compares the
  compiled solver wherever it is built);
* the choice: `--engine`, `backend_options.engine`, run.json's `details.engine`, and the one line
  a missing build gives (a Python whose import of the core fails, in a process of its own).

Under CI, which builds the core, nothing here skips.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simstudy.backends import BackendError, FlowsimBackend, RunResult
from simstudy.backends.flowsim import CORE_MISSING
from simstudy.backends.flowsim.netmodels import CORE_NETMODELS, FLUID_SOLVERS, Msg, core_scheduler
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.flowsim.shortcuts import FULL
from simstudy.spec import Congestion
from tests.backends.fastpaths import PATHS, Case, assert_same, cases
from tests.backends.test_fluid_solver import graph_cases

ROOT = Path(__file__).resolve().parents[2]

needs_core = pytest.mark.skipif(CORE_MISSING is not None and not os.environ.get("CI"),
                                reason=f"{CORE_MISSING} (CI builds it)")


#: A message on a model: (start ns, link keys, multiplicities or None, bytes).
Message = tuple[int, tuple[int, ...], tuple[int, ...] | None, int]


@st.composite
def traffic(draw: st.DrawFn) -> tuple[list[float], list[Message]]:
    """Link capacities and messages (start ns, link keys, multiplicities or None, bytes)."""
    links = draw(st.integers(1, 12))
    cap = [draw(st.sampled_from([0.5, 1.0, 3.0, 12.5, 100.0 / 3])) for _ in range(links)]
    msgs = []
    for _ in range(draw(st.integers(1, 70))):
        keys = tuple(draw(st.lists(st.integers(0, links - 1), min_size=1, max_size=4, unique=True)))
        mult = tuple(draw(st.integers(1, 3)) for _ in keys) if draw(st.booleans()) else None
        msgs.append((draw(st.sampled_from([0, 0, 0, 5, 100, 1000, 2500])), keys, mult,
                     draw(st.sampled_from([1, 1000, 4096, 65536, 1 << 20]))))
    return cap, msgs


def arrivals(solver: str, cap: list[float], msgs: list[Message], latency: float) -> list[tuple[int, int]]:
    compiled = solver.startswith("compiled")
    sched = core_scheduler() if compiled else Scheduler()
    model = CORE_NETMODELS[Congestion.FLUID] if compiled else FLUID_SOLVERS[solver]
    net = model(sched, cap, [latency] * len(cap))
    if solver == "compiled-heap":  # every component's flows merged through the heap, never placed by seq
        net.dense_merge = False
    if solver == "compiled-fill":  # flows alone on their links filled with the rest, never given their own rates
        net.alone_rates = False
    if solver == "compiled-search":  # every component searched through its links, even where no link is shared
        net.apart_search = False
    out: list[tuple[int, int]] = []
    for i, (t, keys, mult, size) in enumerate(msgs):
        msg = Msg(i, i, size, keys, mult, latency * len(keys), 0, lambda m: out.append((m.src, m.t_arrive)))
        sched.at(t, net.send, msg)
    sched.run_before(math.inf)
    return out


@needs_core
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic(), st.sampled_from([0.0, 250.0]))
def test_compiled_fluid_model_equals_python(data: tuple[list[float], list[Message]], latency: float) -> None:
    assert_solvers_agree(*data, latency)


def assert_solvers_agree(cap: list[float], msgs: list[Message], latency: float) -> None:
    """The compiled fluid model (merging each component's flows both ways) arrives every message
    when the fast and the reference Python solvers do."""
    want = arrivals("fast", cap, msgs, latency)
    assert len(want) == len(msgs)
    assert arrivals("compiled", cap, msgs, latency) == want
    assert arrivals("compiled-heap", cap, msgs, latency) == want
    assert arrivals("compiled-fill", cap, msgs, latency) == want
    assert arrivals("compiled-search", cap, msgs, latency) == want
    assert arrivals("reference", cap, msgs, latency) == want


@st.composite
def apart(draw: st.DrawFn) -> tuple[list[float], list[Message]]:
    """Waves of flows on routes that share no link (a component of flows alone on their links),
    with capacities equal, 1e-13 apart (the fill freezes both at the smaller in one round), 3e-12
    or 1e-11 apart (two rounds), and now and then a flow across two routes' links (then they share)."""
    base = draw(st.sampled_from([1.0, 12.5, 100.0 / 3]))
    factors = [1.0, 1 + 1e-13, 1 + 3e-12, 1 + 1e-11, 2.0]
    cap: list[float] = []
    routes: list[tuple[int, ...]] = []
    for _ in range(draw(st.integers(2, 16))):
        n = draw(st.integers(1, 3))
        routes.append(tuple(range(len(cap), len(cap) + n)))
        cap += [base * draw(st.sampled_from(factors)) for _ in range(n)]
    msgs: list[Message] = []
    start = 0
    for _ in range(draw(st.integers(1, 4))):
        start += draw(st.sampled_from([0, 300, 10**6]))
        for keys in routes:
            if draw(st.booleans()):
                mult = tuple(draw(st.integers(1, 2)) for _ in keys) if draw(st.booleans()) else None
                msgs.append((start, keys, mult, draw(st.sampled_from([1000, 4096, 65536]))))
        if draw(st.integers(0, 3)) == 0:  # one flow over two routes' links
            a, b = draw(st.permutations(range(len(routes))))[:2]
            msgs.append((start, (routes[a][0], routes[b][-1]), None, 4096))
    return cap, msgs or [(0, routes[0], None, 1000)]


@needs_core
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(apart(), st.sampled_from([0.0, 250.0]))
def test_compiled_fluid_model_equals_python_on_flows_apart(data: tuple[list[float], list[Message]],
                                                          latency: float) -> None:
    assert_solvers_agree(*data, latency)


@needs_core
def test_flows_of_a_route_alone_take_the_fills_share() -> None:
    """Three flows on one route alone (multiplicity 3 on its link), beside a route of one flow: each
    takes the fill's share, the link's capacity over 3 x 3, not its route's rate alone over 3, a
    different double (12.5 / 9 = 1.3888888888888888, 12.5 / 3 / 3 = 1.388888888888889: a 1,000-byte
    flow drains at 720 or at 719 ns)."""
    msgs: list[Message] = [(0, (0,), (3,), 1000)] * 3 + [(0, (1,), None, 1000)]
    assert_solvers_agree([12.5, 12.5], msgs, 0.0)


@st.composite
def crowds(draw: st.DrawFn) -> tuple[list[float], list[Message]]:
    """Many messages on a few routes, started in waves: components of more than 12 flows that come
    back as the same routes with the same number of flows each, in another order of sending (the
    compiled model keeps a large component's rates by that multiset)."""
    cap = [draw(st.sampled_from([1.0, 3.0, 12.5])) for _ in range(4)]
    routes = draw(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True).map(tuple),
                           min_size=2, max_size=4, unique=True))
    mults = [tuple(draw(st.integers(1, 2)) for _ in keys) if draw(st.booleans()) else None for keys in routes]
    msgs: list[Message] = []
    start = 0
    for _ in range(draw(st.integers(2, 5))):
        start += draw(st.sampled_from([0, 40, 700, 10**6]))  # 10**6: after the last wave has drained
        order = draw(st.permutations(range(len(routes))))
        for _ in range(draw(st.integers(4, 8))):
            for r in order:
                msgs.append((start, routes[r], mults[r], draw(st.sampled_from([1000, 4096, 65536]))))
    return cap, msgs


@needs_core
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(crowds(), st.sampled_from([0.0, 250.0]))
def test_compiled_fluid_model_equals_python_on_crowded_routes(data: tuple[list[float], list[Message]],
                                                              latency: float) -> None:
    assert_solvers_agree(*data, latency)


@needs_core
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.one_of(cases(max_npus=12, max_ops=5), graph_cases()), st.sampled_from(["fluid", "unaware", "aware"]),
       st.sampled_from(["full", "all"]))
def test_engines_agree_in_every_congestion_mode(case: Case, mode: str, path: str) -> None:
    """Random bundles (every collective algorithm, sends, two communicator groups as jobs, staggered
    starts; ASTRA-SIM dimensions, and leaf-spine, fat-tree and Clos fabrics with ECMP per flow or
    per pair), message by message and with every shortcut: the same ranks, spans and traffic rows."""
    with tempfile.TemporaryDirectory() as tmp:
        bundle = case.bundle(Path(tmp) / "b")
        out: dict[str, RunResult | BackendError] = {}
        for engine in ("python", "compiled"):
            try:
                out[engine] = FlowsimBackend(congestion=mode, engine=engine, shortcuts=PATHS[path]).run(
                    bundle, Path(tmp) / engine)
            except BackendError as exc:
                out[engine] = exc
        assert_same(out, "python")
        for engine, result in out.items():
            if isinstance(result, RunResult):
                assert result.details["engine"] == engine


@st.composite
def walks(draw: st.DrawFn) -> tuple[int, list[list[tuple[str, int, tuple[int, ...], bool]]]]:
    """Per rank, a random graph of every kind of node the walk treats apart: compute nodes (some of
    no time and no ops: done when issued), CPU nodes, metadata nodes (done when issued), an
    all-reduce of every rank, and a send to the next rank with its receive from the previous one,
    each on random data or control dependencies (a node's id above its dependencies', ids not in
    dependency order): (ranks, per rank [(kind, microseconds, dependencies, control)], whether the
    ids are dense). Ranks may differ, so a collective or a receive may wait for good: a deadlock.
    A rank may copy the one before it: with dense ids, ranks alike share the walk's tables (their
    sends and receives with other peers)."""
    npus = draw(st.integers(2, 4))
    dense = draw(st.booleans())
    shape = [draw(st.sampled_from(["comp", "zero", "cpu", "meta", "coll", "send", "recv"]))
             for _ in range(draw(st.integers(1, 9)))]
    ranks = []
    for _ in range(npus):
        if ranks and draw(st.booleans()):
            ranks.append(list(draw(st.sampled_from(ranks))))
            continue
        kinds = shape if draw(st.booleans()) or not ranks else draw(st.permutations(shape))
        nodes = []
        for i, kind in enumerate(kinds):
            deps = tuple(sorted(set(draw(st.lists(st.integers(0, i - 1), max_size=3))))) if i else ()
            nodes.append((kind, draw(st.sampled_from([1, 3, 10])), deps, draw(st.booleans())))
        ranks.append(nodes)
    return npus, ranks, dense


def walk_bundle(out: Path, npus: int, ranks: list[list[tuple[str, int, tuple[int, ...], bool]]],
                dense: bool = False) -> Any:
    from simstudy import chakra
    from simstudy.chakra import Node, NodeType
    from tests.backends.bundles import collective_node, write_bundle

    traces = []
    for r, spec in enumerate(ranks):
        nodes = []
        for i, (kind, us, deps, ctrl) in enumerate(spec):
            nid = i if dense else 3 * i + 7  # ids 0.. (in order in the file for even ranks), or not
            dep_ids = [d if dense else 3 * d + 7 for d in deps]
            where = {"ctrl_deps": dep_ids} if ctrl else {"data_deps": dep_ids}
            if kind == "coll":
                node = collective_node(nid, "all_reduce", 4096)
                node.data_deps, node.ctrl_deps = (list(where.get("data_deps", [])), list(where.get("ctrl_deps", [])))
            elif kind in ("send", "recv"):
                peer = (r + 1) % npus if kind == "send" else (r - 1) % npus
                attrs = [chakra.is_cpu_op(False), chakra.comm_size(2048), chakra.comm_tag(i)]
                attrs.append(chakra.comm_dst(peer) if kind == "send" else chakra.comm_src(peer))
                node = Node(nid, f"{kind}{i}", NodeType.COMM_SEND_NODE if kind == "send" else NodeType.COMM_RECV_NODE,
                            attrs=attrs, **where)
            elif kind == "meta":
                node = Node(nid, f"meta{i}", NodeType.METADATA_NODE, attrs=[chakra.is_cpu_op(False)], **where)
            else:
                zero = kind == "zero"
                node = Node(nid, f"{kind}{i}", NodeType.COMP_NODE, duration_micros=0 if zero else us,
                            attrs=[chakra.is_cpu_op(kind == "cpu"), chakra.num_ops(0 if zero else 1)], **where)
            nodes.append(node)
        traces.append(nodes[::-1] if r % 2 else nodes)
    return write_bundle(out, [("Ring", npus, 1.0, 500.0)], traces)


@needs_core
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(walks(), st.sampled_from(["fluid", "unaware"]))
def test_compiled_walk_equals_python(walk: tuple[int, list[Any], bool], mode: str) -> None:
    """The compiled walk of each rank's graph (`_core.CoreNodes`) against the Python engine's, on
    random graphs of every kind of node: the same ranks, spans and rows, or the same deadlock,
    naming the same rank and nodes. The walk gathers each collective's members itself (at once,
    or some now and the others later, as ranks that differ issue them). Ranks alike share one
    table of the walk's (`tables.rank_tables`), each with its own state."""
    npus, ranks, dense = walk
    with tempfile.TemporaryDirectory() as tmp:
        bundle = walk_bundle(Path(tmp) / "b", npus, ranks, dense)
        out: dict[str, RunResult | BackendError] = {}
        for engine in ("python", "compiled"):
            try:
                out[engine] = FlowsimBackend(congestion=mode, engine=engine).run(bundle, Path(tmp) / engine)
            except BackendError as exc:
                out[engine] = exc
        assert_same(out, "python")
        if isinstance(out["python"], BackendError):
            assert str(out["compiled"]) == str(out["python"])
        elif any(kind == "coll" for kind, *_ in ranks[0]):  # the walk gathered the members of each
            compiled = out["compiled"]  # (unless rank 0 stood for every rank: no member to gather)
            assert isinstance(compiled, RunResult)
            assert compiled.details["identical_ranks"] or compiled.details["events"]["gather"] > 0


@needs_core
def test_ranks_alike_share_one_table(tmp_path: Path) -> None:
    """Ranks whose graphs are alike (dense ids, the same nodes) share one table
    of the walk's: its arrays hold one rank's nodes, not every rank's, and both walks agree."""
    from simstudy.backends.flowsim.engine import Engine
    from simstudy.backends.flowsim.tables import rank_tables
    from simstudy.backends.traffic_build import WorkloadInfo

    spec = [("comp", 3, (), False), ("cpu", 1, (), False), ("coll", 1, (0,), False), ("comp", 10, (1, 2), True)]
    bundle = walk_bundle(tmp_path / "b", 4, [spec] * 4, dense=True)
    traces = WorkloadInfo.from_bundle(bundle).nodes
    _, (base, table_of, tbase, ids, *_rest) = rank_tables(traces, refuse=object.__new__(Engine)._rank_state)
    assert base.tolist() == [0, 4, 8, 12, 16]  # every rank's state
    # the odd ranks' files list their nodes backwards (not dense): a table each
    assert table_of.tolist() == [0, 1, 0, 2]
    assert tbase.tolist() == [0, 4, 8, 12] and len(ids) == 12
    out = {engine: FlowsimBackend(engine=engine).run(bundle, tmp_path / engine) for engine in ("python", "compiled")}
    assert_same(out, "python")


@needs_core
@pytest.mark.parametrize("defect", ["missing", "cycle"])
def test_both_walks_refuse_a_broken_graph_alike(defect: str, tmp_path: Path) -> None:
    """A node that depends on a node not in its file, or a graph with no node free of
    dependencies: one error naming the file and the node, the same from both walks."""
    from simstudy import chakra
    from simstudy.chakra import Node, NodeType
    from tests.backends.bundles import write_bundle

    def comp(nid: int, deps: list[int]) -> Node:
        return Node(nid, f"c{nid}", NodeType.COMP_NODE, duration_micros=1, data_deps=deps,
                    attrs=[chakra.is_cpu_op(False), chakra.num_ops(1)])

    bad = [comp(1, [9]), comp(2, [])] if defect == "missing" else [comp(1, [2]), comp(2, [1])]
    bundle = write_bundle(tmp_path / "b", [("Ring", 2, 1.0, 500.0)], [[comp(1, []), comp(2, [1])], bad])
    errors = []
    for engine in ("python", "compiled"):
        with pytest.raises(BackendError) as exc:
            FlowsimBackend(engine=engine).run(bundle, tmp_path / engine)
        errors.append(str(exc.value))
    assert errors[0] == errors[1]
    assert "node 1 depends on node 9" in errors[0] if defect == "missing" else "a cycle" in errors[0]
    assert ".1.et" in errors[0]


#: Shipped examples whose traffic is not a random bundle's: a parameter server, two jobs on a
#: leaf-spine, LLaMA-2 with ZeRO on Zhejiang Lab's fabric.
EXAMPLES = ("resnet50_ps4_switch", "two_jobs_leafspine", "lstm_dp4_switch")


@needs_core
@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("mode", ["fluid", "unaware", "aware"])
def test_engines_agree_on_the_examples(name: str, mode: str, tmp_path: Path) -> None:
    from simstudy.compiler import compile_any
    from simstudy.spec.load import load_runnable

    spec = load_runnable(ROOT / "specs" / "examples" / f"{name}.yaml")
    bundle = compile_any(spec, tmp_path / "b").bundle
    out: dict[str, RunResult | BackendError] = {
        engine: FlowsimBackend(congestion=mode, engine=engine).run(bundle, tmp_path / engine)
        for engine in ("python", "compiled")}
    assert_same(out, "python")


@needs_core
@pytest.mark.parametrize("name", EXAMPLES)
def test_engines_count_alike_without_rows(name: str, tmp_path: Path) -> None:
    """Where a run keeps no rows the compiled collectives count their messages themselves: the
    same transfers, bytes and bytes sent per rank as the Python engine's."""
    from simstudy.compiler import compile_any
    from simstudy.spec.load import load_runnable

    spec = load_runnable(ROOT / "specs" / "examples" / f"{name}.yaml")
    bundle = compile_any(spec, tmp_path / "b").bundle
    out = {engine: FlowsimBackend(engine=engine, traffic="none", shortcuts=FULL).run(bundle, tmp_path / engine)
           for engine in ("python", "compiled")}
    py, core = out["python"].output, out["compiled"].output
    assert py.transfers > 0
    assert (core.transfers, core.total_bytes) == (py.transfers, py.total_bytes)
    assert core.sent is not None and py.sent is not None and core.sent.tolist() == py.sent.tolist()
    assert [r.finish_ns for r in out["compiled"].ranks] == [r.finish_ns for r in out["python"].ranks]


@needs_core
def test_run_json_says_which_engine_ran(tmp_path: Path) -> None:
    spec = ROOT / "specs" / "examples" / "resnet50_dp8_ring.yaml"
    for engine in ("python", "compiled"):
        done = subprocess.run([sys.executable, "-m", "simstudy", "run", str(spec), "-o", str(tmp_path / engine),
                               "--engine", engine, "--quiet", "--traffic", "none"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert f"{engine} engine" in done.stdout
        run = json.loads((tmp_path / engine / "run.json").read_text())
        details = run["details"]
        assert details["engine"] == engine
        # each phase's wall seconds, in the order they ran, together the run's wall time
        phases = details["phases_s"]
        assert list(phases) == ["read", "build", "simulate", "write"]
        assert all(v >= 0 for v in phases.values()) and phases["simulate"] > 0
        assert sum(phases.values()) == pytest.approx(run["wall_time_s"], abs=0.01)
    a, b = (json.loads((tmp_path / e / "run.json").read_text()) for e in ("python", "compiled"))
    assert [r["finish_ns"] for r in a["ranks"]] == [r["finish_ns"] for r in b["ranks"]]


#: A Python whose import of the compiled core fails, as on a machine where it was never built.
NO_CORE = "import sys; sys.modules['simstudy.backends.flowsim._core'] = None; from simstudy.cli import main; " \
          "sys.exit(main(sys.argv[1:]))"


def test_without_the_build(tmp_path: Path) -> None:
    """`--engine compiled` is one error line naming the option, exit 2; auto says once why it runs
    Python, and runs."""
    spec = ROOT / "specs" / "examples" / "resnet50_dp8_ring.yaml"
    bad = subprocess.run([sys.executable, "-c", NO_CORE, "run", str(spec), "-o", str(tmp_path / "c"),
                          "--engine", "compiled", "--quiet"], capture_output=True, text=True)
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "--engine" in lines[0] and "compiled core is not built" in lines[0], bad.stderr
    assert not (tmp_path / "c" / "run.json").exists()
    ok = subprocess.run([sys.executable, "-c", NO_CORE, "run", str(spec), "-o", str(tmp_path / "a"), "--quiet",
                         "--traffic", "none"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    told = [line for line in ok.stderr.splitlines() if "compiled core" in line]
    assert len(told) == 1 and "Python engine" in told[0]
    assert json.loads((tmp_path / "a" / "run.json").read_text())["details"]["engine"] == "python"


@needs_core
@pytest.mark.parametrize("mode", ["unaware", "aware", "fluid"])
def test_isolated_members_are_told_by_the_walk(mode: str, tmp_path: Path) -> None:
    """Where links are not shared (unaware), the members of a collective timed alone hear that
    they are done from the compiled walk itself, one `comm` event each and no Python callback per
    member; the run equals the full path's (ranks, spans, rows). Where links are shared, a
    collective timed alone may still be replayed, and its members are told by Python."""
    from simstudy.compiler import compile_any
    from simstudy.spec.load import load_runnable

    spec = load_runnable(ROOT / "specs" / "examples" / "resnet50_dp8_ring.yaml")
    bundle = compile_any(spec, tmp_path / "b").bundle
    out: dict[str, RunResult | BackendError] = {
        name: FlowsimBackend(congestion=mode, engine="compiled", shortcuts=PATHS[name]).run(bundle, tmp_path / name)
        for name in ("full", "isolated")}
    assert_same(out, "full")
    events = {name: r.details["events"] for name, r in out.items() if isinstance(r, RunResult)}
    assert events["full"]["comm"] == 0
    # message by message, each member but the last of a collective is told by its compiled run
    full = out["full"]
    assert isinstance(full, RunResult)
    assert full.details["members_told"] > 0
    if mode == "unaware":
        assert events["isolated"]["comm"] > 0
        assert events["isolated"]["python"] < events["isolated"]["comm"]
    else:
        assert events["isolated"]["comm"] == 0


@needs_core
def test_flows_apart_take_their_routes_rates(tmp_path: Path) -> None:
    """A ring on a ring: each transfer alone on its links, so the compiled fluid model gives each
    component's flows their routes' own rates (`details.rates_apart`) and never fills them; the run
    equals the Python engine's."""
    from simstudy.compiler import compile_any
    from simstudy.spec.load import load_runnable

    spec = load_runnable(ROOT / "specs" / "examples" / "resnet50_dp8_ring.yaml")
    bundle = compile_any(spec, tmp_path / "b").bundle
    out: dict[str, RunResult | BackendError] = {
        engine: FlowsimBackend(congestion="fluid", engine=engine, shortcuts=FULL).run(bundle, tmp_path / engine)
        for engine in ("python", "compiled")}
    assert_same(out, "python")
    compiled = out["compiled"]
    assert isinstance(compiled, RunResult)
    assert compiled.details["rates_apart"] > 0 and compiled.details["rates_reused"] == 0
