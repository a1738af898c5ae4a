"""The `flowsim` backend: simstudy's built-in engine for the same bundles ASTRA-SIM runs."""

from __future__ import annotations

import contextlib
import gc
import sys
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simstudy import layout
from simstudy.backends.base import SPAN_KINDS, BackendError, Progress, RankStats, RunResult, empty_spans
from simstudy.backends.flowsim.engine import Engine
from simstudy.backends.flowsim.hosts import uniform
from simstudy.backends.flowsim.netmodels import CORE_MISSING, FLUID_SOLVERS, NETMODELS, FluidNet, NetModel
from simstudy.backends.flowsim.replicas import Replicas, ReplicaSink, identical_ranks, replica_plan
from simstudy.backends.flowsim.roce import RoceFluidNet, roce_modelled
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.flowsim.sharing import prepare as prepare_sharing
from simstudy.backends.flowsim.shortcuts import DEFAULT, FULL, Shortcuts
from simstudy.backends.flowsim.system import NotAlike, Planner
from simstudy.backends.flowsim.tcp import TCP_NETMODELS, tcp_modelled
from simstudy.backends.iterations import last_ends
from simstudy.backends.network import Network
from simstudy.backends.traffic_build import WorkloadInfo, by_rank, span_kind, union_pairs_ns
from simstudy.backends.traffic_out import TrafficSink, make_sink
from simstudy.compiler.attributes import NodeMeta, node_iteration
from simstudy.spec import Congestion
from simstudy.table import OPS
from simstudy.version import __version__

__all__ = ["CONGESTION_MODES", "CORE_MISSING", "DEFAULT", "ENGINES", "FULL", "FlowsimBackend", "Shortcuts"]

#: flowsim's congestion modes (see `netmodels`): fluid max-min sharing, ASTRA-SIM's unaware and aware.
CONGESTION_MODES = tuple(m.value for m in NETMODELS)
#: flowsim's engines: `compiled` (the compiled core, `_core.pyx`, where it is built), `python` (the
#: reference it equals to the nanosecond), `auto` (compiled where built, else python)
ENGINES = ("auto", "compiled", "python")
_told: list[bool] = []


def _tell_missing() -> None:
    """Say once per process that the compiled core is missing, and why (the run goes on in Python)."""
    if not _told:
        _told.append(True)
        print(f"simstudy: {CORE_MISSING}; flowsim runs its Python engine", file=sys.stderr)


class _Rows:
    """The engine's transfers into a sink: batches as they come, single transfers buffered."""

    def __init__(self, sink: TrafficSink) -> None:
        self.sink = sink
        self.buf: list[tuple[Any, ...]] = []

    def __call__(self, meta: NodeMeta, t_send: Any, t_arrive: Any, src: Any, dst: Any, nbytes: Any, flow: Any,
                 chunk: Any, step: Any) -> None:
        if isinstance(src, np.ndarray):
            self.sink.add(meta.op, meta.iteration, t_send, t_arrive, src, dst, nbytes, flow, chunk, step)
            return
        self.buf.append((t_send, t_arrive, src, dst, nbytes, flow, OPS.index(meta.op), meta.iteration, chunk, step))
        if len(self.buf) >= 65536:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            c = [np.asarray(col) for col in zip(*self.buf, strict=True)]
            self.buf = []
            self.sink.add(c[6].astype(np.int8), c[7], c[0], c[1], c[2], c[3], c[4], c[5], c[8], c[9])


class FlowsimBackend:
    """Simulates ET files on the topology: ASTRA-SIM's workload and system layers on one shared
    network, in one of three congestion modes (`fluid`: max-min fair flows; `unaware` and
    `aware`: ASTRA-SIM's two analytical network models). `traffic` is what is kept of the
    transfers: `rows` (streamed to Parquet), `links` (per-link bins of `traffic_bin_s`) or `none`.
    `progress(Progress)` is called now and then: the fraction of the transfers it expects that
    are simulated, the simulated time reached, the transfers so far and the wall time. `shortcuts`
    says which fast paths it takes (`shortcuts.FULL`: none, the full simulation they stand for);
    `fluid_solver` which solver the fluid mode uses (`fast`, or `reference`, the one it must equal);
    `engine` which engine runs (`ENGINES`): the compiled core has the event queue, the system layer
    and the three congestion models (fluid as its `fast` solver); a run with sharing policies, TCP
    under loss or the packet network runs in Python whatever it says (run.json's details say which
    engine ran, and why). run.json's `phases_s` gives the wall seconds of each phase: reading the
    traces (`read`), building the run (network, routes, the walk's tables: `build`), `simulate`,
    and `write` (rows flushed, per-rank times and spans)."""

    name = "flowsim"

    def __init__(self, *, congestion: str | Congestion = Congestion.FLUID, traffic: str = "rows",
                 traffic_bin_s: float = 1e-3, progress: Callable[[Progress], None] | None = None,
                 shortcuts: Shortcuts = DEFAULT, fluid_solver: str = "fast", engine: str = "auto") -> None:
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
        if engine == "compiled" and CORE_MISSING is not None:
            raise BackendError(f"flowsim: engine compiled: {CORE_MISSING}; use engine python or auto")
        if engine == "auto" and CORE_MISSING is not None:
            _tell_missing()
        #: the engine chosen (`compiled` or `python`)
        self.engine = "python" if engine == "python" or CORE_MISSING is not None else "compiled"
        if congestion not in NETMODELS:
            raise ValueError(f"unknown congestion mode {congestion!r}; expected one of {', '.join(CONGESTION_MODES)}")
        if fluid_solver not in FLUID_SOLVERS:
            raise ValueError(f"unknown fluid solver {fluid_solver!r}; expected one of {', '.join(FLUID_SOLVERS)}")
        self.fluid_solver = fluid_solver
        self.congestion = Congestion(congestion)
        self.traffic = traffic
        self.traffic_bin_s = traffic_bin_s
        self.progress = progress
        self.shortcuts = shortcuts

    def run(self, bundle: Any, workdir: Path, *, timeout_s: float | None = None) -> RunResult:
        with _fewer_collections():
            try:
                return self._run(bundle, workdir, timeout_s)
            except NotAlike as exc:  # replica 0 cannot stand for the others: every rank, from the start
                cuts, self.shortcuts = self.shortcuts, replace(self.shortcuts, replicas=False)
                try:
                    result = self._run(bundle, workdir, timeout_s)
                finally:
                    self.shortcuts = cuts
                result.details["replicas_not_alike"] = str(exc)
                return result

    def _run(self, bundle: Any, workdir: Path, timeout_s: float | None) -> RunResult:
        t0 = time.perf_counter()
        if self.progress is not None:
            self.progress(Progress(0.0, phase="route"))
        info = WorkloadInfo.from_bundle(bundle)
        phases = {"read": time.perf_counter() - t0}  # wall seconds of each phase, in order
        net = Network.from_topology(info.topology)
        shares = prepare_sharing(info, net, self.congestion)  # a cluster's network: how its jobs share links
        workdir.mkdir(parents=True, exist_ok=True)
        sink = make_sink(self.traffic, path=workdir / layout.TRAFFIC, net=net, bin_s=self.traffic_bin_s)
        rows = _Rows(sink)
        cuts = self.shortcuts
        planner = Planner(info, lanes=cuts.lanes)
        model = self.network_model(info, net, workdir)
        identical, replicas = self._stand_ins(info, net, planner, model is None, shares is None, sink.mode)
        if replicas is not None:
            sink = ReplicaSink(sink, replicas)  # type: ignore[assignment]  # a sink's every use
            rows = _Rows(sink)
        # MLTCP counts every byte a job sends: no collective is timed alone, outside the shared model
        # the compiled core has no sharing policies and no model from elsewhere (the packet network)
        compiled = self.engine == "compiled" and shares is None and model is None
        engine = Engine(info, net, mode=self.congestion, timeout_s=timeout_s, emit=rows,
                        identical=identical, planner=planner, count=None if sink.keeps_rows else sink.count,
                        isolated=cuts.isolated and not (shares is not None and shares.dynamic),
                        solver=self.fluid_solver, model=model, engine="compiled" if compiled else "python",
                        replicas=replicas)
        if shares is not None:
            fluid = engine.comms.model
            assert isinstance(fluid, FluidNet)  # `prepare_sharing` refuses every other mode
            fluid.shares = shares
        if self.progress is not None:
            engine.progress = _ticker(self.progress, lambda: sink.transfers + len(rows.buf) + engine.comms.simulated(),
                                      t0, engine.expected_transfers())
            self.progress(Progress(0.0, wall_s=time.perf_counter() - t0))  # the simulation starts
        t1 = time.perf_counter()
        phases["build"] = t1 - t0 - phases["read"]
        try:
            engine.run()
        except NotAlike:  # the run starts again: its rows written so far closed before they are rewritten
            rows.flush()
            sink.close()
            raise
        finally:
            extra = self.network_done(engine.comms.model)
        t2 = time.perf_counter()
        phases["simulate"] = t2 - t1
        if self.progress is not None:
            self.progress(Progress(1.0, engine.sched.now, sink.transfers + len(rows.buf) + engine.comms.simulated(),
                                   time.perf_counter() - t0, phase="write"))
        rows.flush()
        output = sink.close()
        states = engine.ranks * (info.npus if engine.identical else 1)
        ranks = [
            RankStats(rank=r, finish_ns=int(s.finish), compute_ns=s.compute_ns, comm_ns=union_pairs_ns(s.comm_spans),
                      exposed_comm_ns=int(s.finish) - s.compute_ns)
            for r, s in enumerate(states)
        ]
        for s in engine.ranks:  # counted: not held while the spans are sorted (8 bytes a node's start and end)
            s.comm_spans = array("q")
        spans, ends = _spans(engine, info.npus if engine.identical else 1, replicas)
        phases["write"] = time.perf_counter() - t2
        return RunResult(
            backend=self.name,
            backend_version=__version__,
            ranks=ranks,
            output=output,
            wall_time_s=time.perf_counter() - t0,
            details={"congestion": self.congestion.value, **_engine_details(self, engine),
                     **_solver_details(self, engine), "network": net.kind,
                     "links": len(net.capacity), "identical_ranks": engine.identical,
                     "replicas": 1 if replicas is None else replicas.count,
                     "shortcuts": [n for n in cuts.names if (n != "isolated" or engine.comms.isolated)
                                   and (n != "replicas" or replicas is not None)],
                     **engine.comms.stats, **extra, **_bucket_details(engine), **_roce_details(engine),
                     "iteration_ends_ns": ends,
                     **engine.in_network.details(),
                     "phases_s": {k: round(v, 3) for k, v in phases.items()}},
            spans=spans,
        )

    def _stand_ins(self, info: WorkloadInfo, net: Network, planner: Planner, own_model: bool, unshared: bool,
                   traffic: str) -> tuple[bool, Replicas | None]:
        """Whether rank 0 stands for every rank (`identical_ranks`), else the replicas one stands for
        (`replica_plan`), as the shortcuts allow and the run can (`own_model`: the congestion mode's
        own network model; `unshared`: no sharing policy between jobs)."""
        cuts = self.shortcuts
        # every rank draws its own losses under TCP (flowsim.tcp), and keeps its connections' windows
        # where the transport asks for them: no rank stands for the others then
        tcp = self.congestion in TCP_NETMODELS and tcp_modelled(net)
        # nor where a queue pair's DCQCN rate and the queues depend on every flow (flowsim.roce)
        dcqcn = roce_modelled(net, self.congestion)
        # ranks on hosts of different rates (shared cores) do not run alike
        shared = info.shared_hosts
        # and a token bucket's level depends on all its link carried (flowsim.buckets)
        alone = not tcp and not dcqcn and not net.buckets
        if cuts.identical_ranks and own_model and alone and (
                shared is None or uniform(shared[1], shared[0])) and identical_ranks(info, planner.symmetric):
            return True, None
        # unaware: replicas that run alike stand for each other (no link is shared, nothing else differs)
        if (cuts.replicas and cuts.isolated and own_model and unshared and alone and shared is None
                and self.congestion == Congestion.UNAWARE and traffic in ("none", "rows")):
            return False, replica_plan(info)
        return False, None

    def network_model(self, info: WorkloadInfo, net: Network, workdir: Path) -> Callable[[Scheduler], NetModel] | None:
        """A network model from elsewhere behind flowsim's seam (the packet network), or None for
        the congestion mode's own."""
        return None

    def network_done(self, model: NetModel) -> dict[str, Any]:
        """Called when the engine stops (finished or not): what the model adds to run.json's details."""
        return {}


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Python's cycle collector, less often for the run: a run makes millions of objects that live
    to its end (traces, plans, spans), and at the default threshold (a collection every 700 new
    objects) the collector walks them thousands of times: 12% of LLaMA-3 70B's time on 256 GPUs;
    1% at these thresholds, with the same peak memory."""
    old = gc.get_threshold()
    gc.set_threshold(20_000, 20, 10)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _ticker(progress: Callable[[Progress], None], transfers: Callable[[], int], t0: float,
            expected: int) -> Callable[[float, int], None]:
    """The engine's ticks (fraction of nodes done, simulated ns) as `Progress`: the fraction of the
    `expected` transfers that have arrived (of the nodes when none is expected; 1 at the end)."""

    def tick(nodes: float, sim_ns: int) -> None:
        done = transfers()
        fraction = nodes if nodes >= 1.0 or expected <= 0 else min(done / expected, 0.999)
        progress(Progress(fraction, sim_ns, done, time.perf_counter() - t0))

    return tick


def _engine_details(backend: FlowsimBackend, engine: Engine) -> dict[str, Any]:
    """Which engine ran (`compiled`: the compiled core's event queue, collectives and network
    model), and when the compiled one was chosen but Python ran, why; the compiled queue's events
    by kind (`events`: Python callbacks among them), and the members of collectives whose end
    the compiled walk heard of from their compiled run, without Python (`members_told`)."""
    model = engine.comms.model
    ran = "compiled" if engine.comms.compiled else "python"
    if ran == backend.engine:
        kinds = getattr(engine.sched, "events_by_kind", None)
        told = {} if engine.core_nodes is None else {"members_told": engine.core_nodes.told}
        return {"engine": ran, **({"events": dict(kinds)} if kinds is not None else {}), **told}
    if backend.fluid_solver != "fast":
        why = f"fluid solver {backend.fluid_solver} is Python's"
    elif isinstance(model, FluidNet) and model.shares is not None:
        why = "the compiled core has no sharing policies (network.sharing)"
    elif engine.comms.buckets:
        why = "the compiled core has no token buckets (topology.token_bucket)"
    elif engine.comms.roce is not None:
        why = "the compiled core has no DCQCN (topology.transport.kind: roce)"
    else:
        why = f"the compiled core has no {type(model).__name__} (TCP under loss, or a network from elsewhere)"
    return {"engine": ran, "engine_python_because": why}


def _roce_details(engine: Engine) -> dict[str, Any]:
    """The CNPs flowsim's DCQCN fluid sent (`flowsim.roce`)."""
    model = engine.comms.model
    return {"roce": {"cnps": model.cnps}} if isinstance(model, RoceFluidNet) else {}


def _bucket_details(engine: Engine) -> dict[str, Any]:
    """How many links are behind token buckets, and how often one ran out (`flowsim.buckets`)."""
    if not engine.comms.buckets:
        return {}
    return {"token_buckets": len(engine.comms.buckets), "buckets_emptied": getattr(engine.comms.model, "emptied", 0)}


def _solver_details(backend: FlowsimBackend, engine: Engine) -> dict[str, Any]:
    """The fluid mode's solver, and how often it found a component's rates already solved."""
    if not backend.congestion.fluid:
        return {}
    model = engine.comms.model
    return {"fluid_solver": backend.fluid_solver, "rates_reused": int(getattr(model, "reused", 0)),
            "rates_apart": int(getattr(model, "apart_solved", 0))}


def _spans(engine: Engine, copies: int, replicas: Replicas | None = None) -> tuple[pd.DataFrame, list[int]]:
    """The spans table, built column by column (names and kinds as categorical codes), sorted by
    start, rank and node one column at a time (16,384 ranks run 38 M spans: a table sorted whole is
    held two and three times over); and when the job's iterations end (`last_ends`, found before
    the spans are copied or sorted: identical ranks' rank 0 is everyone's). With identical ranks,
    rank 0's spans for every rank; with replicas, replica 0's for every replica, on its ranks.
    Where the compiled walk ran, a rank's codes are its table's (one per pipeline stage), not found
    node by node."""
    rank, node, start, end = engine.take_span_columns()
    if not len(rank):
        return empty_spans(), []
    names: dict[str, int] = {}
    name_code = np.empty(len(rank), dtype=np.int32)
    kind_code = np.empty(len(rank), dtype=np.int8)
    iteration = np.empty(len(rank), dtype=np.int64)
    tables: dict[int, np.ndarray] = {}  # a table's names as codes
    for r, sel in by_rank(rank):
        state = engine.ranks[r]
        t = state.table
        if t is None:  # the Python walk: node by node
            nodes = state.nodes
            ids = node[sel].tolist()
            name_code[sel] = [names.setdefault(nodes[i].name, len(names)) for i in ids]
            kind_code[sel] = [SPAN_KINDS.index(span_kind(nodes[i])) for i in ids]
            iteration[sel] = [node_iteration(nodes[i]) for i in ids]
            continue
        codes = tables.get(id(t))
        if codes is None:
            codes = tables[id(t)] = np.fromiter((names.setdefault(x, len(names)) for x in t.names), dtype=np.int32,
                                                count=len(t.names))
        at = node[sel] if isinstance(state.nodes, list) else np.searchsorted(t.ids, node[sel])
        name_code[sel] = codes[at]
        kind_code[sel] = t.span_kind[at]
        iteration[sel] = t.iteration[at]
    ends = last_ends(iteration, end)
    del iteration
    if replicas is not None:
        rank = replicas.images(rank).ravel()
        copies = replicas.count
    elif copies > 1:
        rank = np.repeat(np.arange(copies, dtype=np.int64), len(rank))
    if copies > 1:
        node, start, end = np.tile(node, copies), np.tile(start, copies), np.tile(end, copies)
        name_code, kind_code = np.tile(name_code, copies), np.tile(kind_code, copies)
    order = np.lexsort((node, rank, start))  # stable: as sort_values(["start_ns", "rank", "node"])
    rank = rank.astype(np.int32, copy=False)[order]
    node = node[order]
    start = start[order]
    end = end[order]
    name = pd.Categorical.from_codes(name_code[order], categories=list(names))
    del name_code
    kind = pd.Categorical.from_codes(kind_code[order], categories=list(SPAN_KINDS))
    del kind_code, order
    return pd.DataFrame({"rank": rank, "node": node, "name": name, "kind": kind, "start_ns": start, "end_ns": end},
                        copy=False), ends
