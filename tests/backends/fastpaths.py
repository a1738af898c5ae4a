"""The fast-path harness: run a bundle through flowsim's full path and through every shortcut, and
require the same result (finish times, spans, traffic rows); and hypothesis strategies for random
small bundles written with simstudy's own Chakra codec. Reusable: `run_paths` / `assert_same` take
any bundle (a compiled scenario, a cluster, hand-made ET files), `workloads()` any extra
collective kinds a test wants to draw."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from hypothesis import strategies as st

from simstudy import chakra
from simstudy.backends import BackendError, FlowsimBackend, RunResult
from simstudy.backends.flowsim import CORE_MISSING, DEFAULT, FULL, Shortcuts
from simstudy.backends.patterns import CollectiveConfig, chunk_messages
from simstudy.chakra import Node, NodeType
from simstudy.compiler import Bundle
from simstudy.compiler.topology_file import NativeDim, native_topology
from simstudy.spec.collectives import ALGORITHMS, KINDS
from tests.backends.bundles import collective_node, write_bundle

#: The paths compared: `full` (no shortcut) first, then every shortcut alone and all of them.
PATHS: dict[str, Shortcuts] = {
    "full": FULL,
    "isolated": Shortcuts(lanes=False, identical_ranks=False, isolated=True),
    "isolated+lanes": Shortcuts(lanes=True, identical_ranks=False, isolated=True),
    "identical_ranks": Shortcuts(lanes=False, identical_ranks=True, isolated=False),
    "all": DEFAULT,
}
MODES = ("fluid", "unaware", "aware")
SPAN_COLS = ["rank", "node", "start_ns", "end_ns"]


def run_paths(bundle: Bundle, workdir: Path, congestion: str,
              paths: dict[str, Shortcuts] = PATHS) -> dict[str, RunResult | BackendError]:
    """The bundle run by flowsim once per path (`congestion`: fluid, unaware or aware); a run
    that fails (a deadlock, which ASTRA-SIM's ranks meet too) gives its BackendError."""
    out: dict[str, RunResult | BackendError] = {}
    for name, cuts in paths.items():
        try:
            out[name] = FlowsimBackend(congestion=congestion, shortcuts=cuts).run(
                bundle, workdir / f"{congestion}-{name}")
        except BackendError as exc:
            out[name] = exc
    return out


def canonical(result: RunResult) -> tuple[list[tuple[int, int, int, int]], pd.DataFrame, pd.DataFrame]:
    """What must not depend on the path: per-rank times, the spans and the traffic rows, sorted."""
    ranks = [(r.rank, r.finish_ns, r.compute_ns, r.comm_ns) for r in result.ranks]
    spans = result.spans.sort_values(SPAN_COLS, kind="stable").reset_index(drop=True)
    spans = spans.assign(name=spans["name"].astype(str), kind=spans["kind"].astype(str))
    traffic = result.traffic
    traffic = traffic.assign(op=traffic["op"].astype(str))
    traffic = traffic.sort_values(list(traffic.columns), kind="stable").reset_index(drop=True)
    return ranks, spans, traffic


def assert_same(results: dict[str, RunResult | BackendError], reference: str = "full") -> None:
    """Every path's result equals the reference path's: ranks, spans and traffic rows (or every
    path fails, as the reference does: a deadlock)."""
    ref = results[reference]
    if isinstance(ref, BackendError):
        for name, result in results.items():
            assert isinstance(result, BackendError) and "deadlock" in str(result), (name, ref, result)
        return
    ref_ranks, ref_spans, ref_traffic = canonical(ref)
    for name, result in results.items():
        if name == reference:
            continue
        assert isinstance(result, RunResult), (name, result)
        ranks, spans, traffic = canonical(result)
        assert ranks == ref_ranks, (name, ranks, ref_ranks)
        assert spans.equals(ref_spans), (name, _first_difference(spans, ref_spans))
        assert traffic.equals(ref_traffic), (name, len(traffic), len(ref_traffic),
                                             _first_difference(traffic, ref_traffic))


def _first_difference(a: pd.DataFrame, b: pd.DataFrame) -> str:
    if len(a) != len(b) or list(a.columns) != list(b.columns):
        return f"{len(a)} rows against {len(b)}"
    diff = (a != b).any(axis=1)
    if not diff.any():
        return "dtypes differ"
    i = int(diff.to_numpy().nonzero()[0][0])
    return f"row {i}: {a.iloc[i].to_dict()} against {b.iloc[i].to_dict()}"


# -- random bundles ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One step of every rank's trace: a compute, a collective of a group (None: every rank) or a
    send from `src` to `dst` (the others skip it)."""

    kind: str  # compute | <collective kind> | send
    size: int = 0
    group: str | None = None
    src: int = 0
    dst: int = 0
    #: compute microseconds per rank (one value: the same for every rank)
    micros: tuple[int, ...] = (1,)


@dataclass
class Case:
    """A random bundle: dimensions, system settings, a topology.json (None: the uniform one from
    network.yml) and the ops every rank runs."""

    dims: list[tuple[str, int, float, float]]
    algorithms: list[str]
    active: int
    splits: int
    optimization: str
    ops: list[Op]
    groups: dict[str, list[int]] = field(default_factory=dict)
    topology: dict[str, object] | None = None

    @property
    def npus(self) -> int:
        n = 1
        for d in self.dims:
            n *= d[1]
        return n

    def traces(self) -> list[list[Node]]:
        """Every rank's nodes: the ops in a chain (each waits for the one before on that rank)."""
        out: list[list[Node]] = [[] for _ in range(self.npus)]
        same = all(len(op.micros) == 1 for op in self.ops if op.kind == "compute") and not any(
            op.kind == "send" or op.group for op in self.ops)
        for r in range(1 if same else self.npus):
            nodes = out[r]
            for i, op in enumerate(self.ops):
                deps = (nodes[-1].id,) if nodes else ()
                if op.kind == "compute":
                    us = op.micros[0] if len(op.micros) == 1 else op.micros[r]
                    nodes.append(Node(i, f"compute{i}", NodeType.COMP_NODE, data_deps=list(deps), duration_micros=us,
                                      attrs=[chakra.is_cpu_op(False), chakra.num_ops(1)]))
                elif op.kind == "send":
                    if r == op.src:
                        nodes.append(Node(i, f"send{i}", NodeType.COMM_SEND_NODE, data_deps=list(deps), attrs=[
                            chakra.is_cpu_op(False), chakra.comm_dst(op.dst), chakra.comm_size(op.size),
                            chakra.comm_tag(i)]))
                    elif r == op.dst:
                        nodes.append(Node(i, f"recv{i}", NodeType.COMM_RECV_NODE, data_deps=list(deps), attrs=[
                            chakra.is_cpu_op(False), chakra.comm_src(op.src), chakra.comm_size(op.size),
                            chakra.comm_tag(i)]))
                elif op.group is None or r in self.groups[op.group]:
                    nodes.append(collective_node(i, op.kind, op.size, deps=deps, group=op.group))
            if not nodes:
                nodes.append(Node(0, "idle", NodeType.COMP_NODE, duration_micros=1,
                                  attrs=[chakra.is_cpu_op(False), chakra.num_ops(1)]))
        if same:
            out = [out[0]] * self.npus
        return out

    def bundle(self, out: Path) -> Bundle:
        return write_bundle(out, self.dims, self.traces(), algorithm=self.algorithms, active=self.active,
                            splits=self.splits, optimization=self.optimization, groups=self.groups or None,
                            topology=self.topology)


TOPOLOGIES = ("Ring", "Switch", "FullyConnected")
#: every algorithm of the registry, by its ASTRA-SIM name -> whether it needs 2^k ranks
POW2: dict[str, bool] = {a.astra: a.power_of_two is not None for a in ALGORITHMS.values()}


def _pow2(n: int) -> bool:
    return n & (n - 1) == 0


@st.composite
def dimensions(draw: st.DrawFn, max_npus: int = 16) -> list[tuple[str, int, float, float]]:
    """1-3 ASTRA-SIM dimensions (Ring, Switch, FullyConnected) of 2-4 NPUs, at most `max_npus` in all."""
    dims: list[tuple[str, int, float, float]] = []
    total = 1
    for _ in range(draw(st.integers(1, 3))):
        sizes = [n for n in (2, 3, 4) if total * n <= max_npus]
        if not sizes:
            break
        n = draw(st.sampled_from(sizes))
        total *= n
        dims.append((draw(st.sampled_from(TOPOLOGIES)), n, draw(st.sampled_from([12.5, 25.0, 50.0])),
                     draw(st.sampled_from([0.0, 300.0, 500.0]))))
    return dims


def _algorithms_for(draw: st.DrawFn, dims: Sequence[tuple[str, int, float, float]]) -> list[str]:
    """One algorithm per dimension; halving-doubling and the tree only where the ranks are 2^k."""
    out = []
    for _, n, _, _ in dims:
        names = [a for a, pow2 in POW2.items() if not pow2 or _pow2(n)]
        out.append(draw(st.sampled_from(names)))
    return out


def _kinds_for(algorithms: list[str], dims: Sequence[tuple[str, int, float, float]], optimization: str) -> list[str]:
    """The collectives of every rank that these algorithms can run on these dimensions (each
    dimension's algorithm on its lines; all-to-all with the first one over every rank)."""
    cfg = CollectiveConfig(tuple(d[1] for d in dims), dict.fromkeys(KINDS, tuple(algorithms)), optimization)
    out = []
    for kind in KINDS:
        try:
            chunk_messages(cfg, kind, tuple(range(cfg.npus)), 4096, False)
        except (ValueError, BackendError):
            continue
        out.append(kind)
    return out


def uneven_topology(draw: st.DrawFn, dims: Sequence[tuple[str, int, float, float]]) -> dict[str, object]:
    """The topology.json of the dimensions with some links made faster or slower, some longer."""
    topo = native_topology([NativeDim(t, n, bw, lat) for t, n, bw, lat in dims])  # type: ignore[arg-type]
    data = topo.to_json()
    links = data["links"]
    assert isinstance(links, list)
    for link in links:
        if draw(st.booleans()):
            link["bytes_per_ns"] = link["bytes_per_ns"] * draw(st.sampled_from([0.5, 2.0]))
        if draw(st.booleans()):
            link["latency_ns"] = link["latency_ns"] + draw(st.sampled_from([100.0, 700.0]))
    return json.loads(json.dumps(data))


@st.composite
def cases(draw: st.DrawFn, *, max_npus: int = 16, max_ops: int = 4, groups: bool = True, sends: bool = True,
          computes: bool = True, uneven: bool = True, kinds: Sequence[str] | None = None) -> Case:
    """A random bundle: 1-3 dimensions, an algorithm per dimension, 1-2 active chunks of 1-3,
    baseline or localBWAware, ops of every rank (collectives of every rank or of one of two
    communicator groups, the jobs; sends; computes of the same or of different lengths per rank,
    so that ranks issue collectives at different times) and maybe a topology.json whose links
    differ from one another. `kinds`: the collectives to draw from (default: all that fit);
    `groups`, `sends`, `computes`: whether to draw those."""
    dims = draw(dimensions(max_npus))
    algorithms = _algorithms_for(draw, dims)
    npus = 1
    for d in dims:
        npus *= d[1]
    optimization = draw(st.sampled_from(["baseline", "localBWAware"]))
    allowed = _kinds_for(algorithms, dims, optimization)
    if not allowed:  # e.g. the tree on one dimension of a localBWAware all-reduce: no collective runs
        algorithms = ["ring"] * len(dims)
        allowed = _kinds_for(algorithms, dims, optimization)
    if kinds is not None:
        allowed = [k for k in allowed if k in kinds] or allowed
    group_map: dict[str, list[int]] = {}
    if groups and npus >= 4 and draw(st.booleans()):
        ranks = list(range(npus))
        if draw(st.booleans()):  # interleaved: the groups' rings cross each other's links
            group_map = {"1": ranks[0::2], "2": ranks[1::2]}
        else:
            group_map = {"1": ranks[: npus // 2], "2": ranks[npus // 2:]}
    ops: list[Op] = []
    for _ in range(draw(st.integers(1, max_ops))):
        what = draw(st.sampled_from((["compute"] if computes else []) + ["collective", "collective"]
                                    + (["send"] if sends else [])))
        if what == "compute":
            if draw(st.booleans()):
                ops.append(Op("compute", micros=(draw(st.integers(1, 20)),)))
            else:
                ops.append(Op("compute", micros=tuple(draw(st.integers(1, 20)) for _ in range(npus))))
        elif what == "send":
            src = draw(st.integers(0, npus - 1))
            dst = draw(st.integers(0, npus - 1).filter(lambda d, s=src: d != s))
            ops.append(Op("send", size=draw(st.sampled_from([1024, 65536])), src=src, dst=dst))
        else:
            group = draw(st.sampled_from([None, *group_map])) if group_map else None
            kind = draw(st.sampled_from(allowed if group is None else
                                        ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]))
            ops.append(Op(kind, size=draw(st.sampled_from([4096, 65536, 1 << 20])), group=group))
    topology = uneven_topology(draw, dims) if uneven and draw(st.booleans()) else None
    return Case(dims, algorithms, draw(st.integers(1, 2)), draw(st.integers(1, 3)), optimization, ops, group_map,
                topology)


#: The fluid model's solvers compared, as (fluid solver, engine): the reference first; the compiled
#: core's wherever it is built (CI builds it: there it must be).
SOLVER_RUNS = {"reference": ("reference", "python"), "fast": ("fast", "python"), "compiled": ("fast", "compiled")}
SOLVERS = ("reference", "fast") + (("compiled",) if CORE_MISSING is None or os.environ.get("CI") else ())


def run_solvers(bundle: Bundle, workdir: Path, shortcuts: Shortcuts = FULL,
                solvers: Sequence[str] = SOLVERS) -> dict[str, RunResult | BackendError]:
    """The bundle run in fluid mode by each of the fluid model's solvers (on the path
    `shortcuts`); `assert_same(results, "reference")` compares them."""
    out: dict[str, RunResult | BackendError] = {}
    for name in solvers:
        try:
            solver, engine = SOLVER_RUNS[name]
            out[name] = FlowsimBackend(congestion="fluid", shortcuts=shortcuts, fluid_solver=solver,
                                       engine=engine).run(bundle, workdir / name)
        except BackendError as exc:
            out[name] = exc
    return out
