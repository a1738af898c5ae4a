"""Know before you run: what a spec costs (ranks, distinct graphs, messages, flows at peak, memory
and wall time per engine and congestion mode), found without simulating and without a structure
per rank, and the refusal of a run that would not fit in this machine's memory.

The counts come from the spec and from compiling each distinct graph once
(`simstudy.compiler.aggregation.distinct_graphs`: one per pipeline stage, one for every rank of plain
data parallelism), each collective's messages from the patterns both backends send
(`patterns.first_member_messages`). A typo'd spec of millions of GPUs is counted in the time of its
stages and refused before anything per rank is allocated.

Memory and wall time are a linear model of those counts (`COSTS`), fitted to runs of today's engine
on this project's 2-core reference machine (the measurements are listed beside the coefficients).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from simstudy.backends.flowsim import CORE_MISSING
from simstudy.backends.patterns import CollectiveConfig, first_member_messages
from simstudy.backends.registry import entry
from simstudy.compiler import check_fit, job_scenario, resolve, resolve_cluster
from simstudy.compiler.aggregation import distinct_graphs
from simstudy.compiler.astra_config import system_config, system_json
from simstudy.compiler.collectives import algorithm
from simstudy.compiler.graph import Collective, RankGraph, TaskKind
from simstudy.spec import BackendSpec, Cluster, Scenario, SpecError, is_graph, topology_dims
from simstudy.spec.collectives import FALLBACK

__all__ = ["COSTS", "Cost", "Estimate", "EstimateError", "Model", "Workload", "check_memory", "estimate",
           "machine_memory"]

GIB = 1 << 30
_KIND = {Collective.ALL_REDUCE: "all_reduce", Collective.ALL_GATHER: "all_gather",
         Collective.REDUCE_SCATTER: "reduce_scatter", Collective.ALL_TO_ALL: "all_to_all"}


class EstimateError(ValueError):
    """A run refused because its memory estimate exceeds what the machine has (`--force` runs it)."""


@dataclass(frozen=True)
class Workload:
    """What a spec asks the engine to do, counted from its distinct graphs.

    `nodes` are ET nodes over every rank, `messages` the transfers the engine simulates (a send is
    one, a collective what its members send, chunk by chunk, as `patterns` cuts it), `flows_at_peak`
    an upper bound of the transfers in flight at once (every rank with its widest communication
    node running: a rank issues one at a time), `distinct_nodes` the nodes of the distinct graphs."""

    ranks: int
    distinct: int
    distinct_nodes: int
    nodes: int
    messages: int
    flows_at_peak: int
    method: str
    #: every rank runs one graph with collectives of every rank only: flowsim simulates rank 0 for all
    #: of them on ASTRA-SIM's networks (its `identical_ranks` shortcut)
    identical: bool = False
    #: the network is a graph (flowsim routes it link by link; a fluid run shares links between many flows)
    graph: bool = False
    #: data-parallel replicas that run alike: flowsim `unaware` simulates one for all of them (its
    #: `replicas` shortcut; the run checks the graph and the network, this counts what it likely finds)
    replicas: int = 1

    @property
    def held_nodes(self) -> int:
        """The ET nodes flowsim holds and walks: one rank's when the ranks are identical."""
        return self.distinct_nodes if self.identical else self.nodes

    @property
    def simulated(self) -> int:
        """The messages flowsim simulates one by one: one rank's when the ranks are identical."""
        return self.messages // self.ranks if self.identical else self.messages


def memory_terms(w: Workload, *, compile: bool = False, every_rank: bool = False, replicas: bool = False
                 ) -> tuple[float, ...]:
    """What peak memory grows with: 1, the nodes held (the compiler: of the distinct graphs; ASTRA-SIM,
    `every_rank`: of every rank, it has no shortcut for identical ranks; `replicas`: one replica's), ranks."""
    held = w.distinct_nodes if compile else w.nodes if every_rank else w.held_nodes
    return (1.0, float(held) / (w.replicas if replicas else 1), float(w.ranks))


def time_terms(w: Workload, *, compile: bool = False, every_rank: bool = False, replicas: bool = False
               ) -> tuple[float, ...]:
    """What wall time grows with: 1, the nodes held (the compiler: every rank's, written to its ET
    file), the messages simulated and, on a graph network, those times the flows at peak (the links
    a message shares with other flows are many there: fluid rates are solved over all of them).
    `replicas`: a model whose runs simulate one of `w.replicas` (nodes and messages: one replica's)."""
    if compile:
        return (1.0, float(w.nodes), 0.0, 0.0)
    if every_rank:
        return (1.0, float(w.nodes), float(w.messages), 0.0)
    shared = float(w.simulated) * w.flows_at_peak if w.graph else 0.0
    one = w.replicas if replicas else 1
    return (1.0, float(w.held_nodes) / one, float(w.simulated) / one, shared)


@dataclass(frozen=True)
class Model:
    """A linear cost model: peak bytes = memory . `memory_terms`, seconds = seconds . `time_terms`;
    `source` says which measurements it was fitted to."""

    memory: tuple[float, float, float]
    seconds: tuple[float, float, float, float]
    source: str
    compile: bool = False
    every_rank: bool = False
    #: its runs take the replicas shortcut (flowsim `unaware`): they simulate one replica, and still
    #: spend `REPLICA_SPAN_S` and `REPLICA_NODE_BYTES` on each node of every rank
    replicas: bool = False

    def bytes(self, w: Workload) -> float:
        terms = memory_terms(w, compile=self.compile, every_rank=self.every_rank, replicas=self.replicas)
        spans = REPLICA_NODE_BYTES * w.nodes if self.replicas and w.replicas > 1 else 0.0
        return sum(c * x for c, x in zip(self.memory, terms, strict=True)) + spans

    def wall_s(self, w: Workload) -> float:
        terms = time_terms(w, compile=self.compile, every_rank=self.every_rank, replicas=self.replicas)
        spans = REPLICA_SPAN_S * w.nodes if self.replicas and w.replicas > 1 else 0.0
        return sum(c * x for c, x in zip(self.seconds, terms, strict=True)) + spans


#: What a run with replicas spends per ET node of every rank besides simulating one replica (every
#: rank's trace held from the compile; its spans copied to every replica, sorted and written): seconds,
#: from LLaMA-3.1 405B TP8 x PP16 x DP16 on 2,048 GPUs (3,792,640 nodes, 1.0-1.7 s of writing), and
#: bytes, from TP8 x PP16 x DP128 on 16,384 GPUs (30,341,120 nodes, 3,310 MB peak; benchmarks/scale.py,
#: this 2-core machine).
REPLICA_SPAN_S = 4.5e-7
REPLICA_NODE_BYTES = 100.0


_FIT = ("`python benchmarks/estimate.py --save rows.jsonl` (7 cases, 128-1,024 GPUs, each run in its own "
        "process on this project's 2-core, 24 GiB machine, shared) then `--load rows.jsonl --published --fit`, "
        "which adds benchmarks/scale.py's published LLaMA-3 70B runs at 4,096 and 16,384 GPUs")

_FIT_CORE = ("`python benchmarks/estimate.py --backends flowsim --save rows.jsonl` (the same 7 cases and "
             "rn1024ls on the compiled core) then `--load rows.jsonl --published --fit`, which adds "
             "benchmarks/scale.py's LLaMA-3 70B and LLaMA-3.1 405B runs at 16,384 GPUs on the compiled core")

#: (backend, congestion mode) -> its model; ("compile", "") is the compile before every ASTRA-SIM run
#: of a spec (writing every rank's ET file: its time adds to the run's, its memory is freed before the
#: run), ("compile-memory", "") the compile before a flowsim run (every rank's nodes kept in memory).
#: Coefficients: memory (bytes: 1, per node held, per rank), seconds (1, per node, per message simulated,
#: per message x flow at peak on a graph network), each the output of `_FIT` (fit within 10% in memory
#: on every run; wall time within 2x on all but fluid on a 3-tier Clos, 0.35x, and the 16,384-GPU run
#: measured under the heaviest load, 0.37x).
COSTS: dict[tuple[str, str], Model] = {
    ("compile", ""): Model((5.102e7, 1756.0, 7880.0), (0.4437, 3.981e-6, 0.0, 0.0), _FIT, compile=True),
    # the compile before a flowsim run, which keeps every rank's nodes in memory and writes no ET file:
    # its time per node from benchmarks/scale.py's 16,384-GPU LLaMA-3.1 405B (30,341,120 nodes, 20.5 s)
    ("compile-memory", ""): Model((5.102e7, 1756.0, 7880.0), (0.4437, 6.6e-7, 0.0, 0.0), _FIT, compile=True),
    # flowsim's compiled core (`engine: compiled`, the default where built), fitted to the same 7 cases,
    # ResNet-50 DP 1,024 on a leaf-spine and (unaware) the two 16,384-GPU runs (`_FIT_CORE`: memory
    # within 0.83-1.08x on every run; wall time within 0.65-1.18x on all but fluid on the 3-tier Clos:
    # 0.28x at 512 GPUs, 0.72x at 256). The fluid term (messages x flows at peak) cannot tell a ring over a
    # leaf-spine, whose flows seldom meet (ResNet-50 DP 4,096: 3.3x the measured time), from LLaMA-3's
    # groups on a Clos, whose flows meet in large components (on 4,096 GPUs: 0.34x)
    ("flowsim", "unaware"): Model((1.59e8, 238.4, 1994.0), (0.5261, 4.398e-6, 8.584e-8, 0.0), _FIT_CORE,
                                  replicas=True),
    ("flowsim", "aware"): Model((1.596e8, 281.2, 0.0), (0.594, 7.112e-6, 0.0, 2.493e-10), _FIT_CORE),
    ("flowsim", "fluid"): Model((1.609e8, 274.7, 3490.0), (0.6403, 4.754e-6, 0.0, 2.413e-10), _FIT_CORE),
    # flowsim's Python engine (`engine: python`, or where the compiled core is not built)
    ("flowsim-python", "unaware"): Model((1.544e8, 540.4, 1.614e4), (0.8146, 0.0, 4.324e-6, 7.056e-9), _FIT,
                                         replicas=True),
    ("flowsim-python", "aware"): Model((1.595e8, 530.9, 1.075e4), (1.199, 1.317e-4, 0.0, 2.224e-8), _FIT),
    ("flowsim-python", "fluid"): Model((1.669e8, 552.2, 1905.0), (1.294, 3.832e-5, 0.0, 6.489e-8), _FIT),
    # the binaries' memory per ET node of every rank and time per message, from their two published
    # 4,096-GPU runs (measured since: llama512 unaware 1.08x in memory, 0.73x in time; rn256ring and
    # rn1024ring unaware 0.5x in memory, 4.4x and 6.1x in time: collectives of every rank cost it less)
    ("astrasim", "unaware"): Model((0.0, 2421.0, 0.0), (0.0, 0.0, 8.75e-6, 0.0), _FIT, every_rank=True),
    ("astrasim", "aware"): Model((0.0, 3440.0, 0.0), (0.0, 0.0, 2.231e-5, 0.0), _FIT, every_rank=True),
}

#: Keeping the traffic rows (`traffic: rows`, streamed to Parquet): seconds and buffer bytes per row
#: written, from one pair of runs: ResNet-50 DP 1,024 on a ring, 10,475,520 rows, 8.6 s and 490 MB
#: with rows (benchmarks/scale.py's rows case) against 0.7 s and 0.16 GiB without (benchmarks/estimate.py's
#: rn1024ring); the buffers are taken not to grow beyond that many rows (they are written in batches).
ROW_S, ROW_BYTES, ROW_BUFFERED = 7.5e-7, 33.0, 10_475_520


@dataclass(frozen=True)
class Cost:
    """The estimate of one backend and congestion mode: peak memory and wall time of the whole run
    (compile and simulation), and the simulation's part of the wall time."""

    backend: str
    mode: str
    memory_bytes: int
    wall_s: float
    simulate_s: float

    @property
    def label(self) -> str:
        return f"{self.backend} {self.mode}"


@dataclass(frozen=True)
class Estimate:
    """A spec's counts and the cost of running it on each backend and mode that can, beside the
    memory this machine has available."""

    name: str
    workload: Workload
    costs: tuple[Cost, ...]
    machine_bytes: int | None

    def cost(self, backend: str, mode: str) -> Cost | None:
        """The cost of one backend and mode (None: not estimated)."""
        return next((c for c in self.costs if c.backend == backend and c.mode == mode), None)

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        """The estimate as the CLI prints it."""
        w = self.workload
        have = "unknown" if self.machine_bytes is None else f"{self.machine_bytes / GIB:,.1f} GiB"
        out = [f"{self.name}: {w.ranks:,} ranks, {w.distinct:,} distinct graphs ({w.method}), "
               f"{w.nodes:,} ET nodes, {w.messages:,} messages, at most {w.flows_at_peak:,} flows at once",
               f"  {'backend':<10} {'mode':<8} {'memory GiB':>11} {'wall time':>12} {'of which simulating':>20}"]
        for c in self.costs:
            over = "  exceeds this machine" if self.machine_bytes is not None and c.memory_bytes > self.machine_bytes \
                else ""
            out.append(f"  {c.backend:<10} {c.mode:<8} {c.memory_bytes / GIB:>11,.2f} {_duration(c.wall_s):>12} "
                       f"{_duration(c.simulate_s):>20}{over}")
        out.append(f"  machine: {have} available (MemAvailable); estimated by a model fitted to measured runs "
                   "(simstudy.backends.estimate.COSTS)")
        return out


def _duration(s: float) -> str:
    """'0.4 s', '12 min', '3.1 h', '5.2 days', '1,234 years'."""
    for unit, size in (("years", 365 * 86400.0), ("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if s >= 2 * size:
            return f"{s / size:,.1f} {unit}" if s < 100 * size else f"{s / size:,.0f} {unit}"
    return f"{s:.1f} s"


def machine_memory() -> int | None:
    """The memory available to a new run: MemAvailable of /proc/meminfo (None where there is none)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# -- counting ------------------------------------------------------------------------------------


def _collectives(topology_npus: int, dim_sizes: list[int], system: dict[str, object]) -> CollectiveConfig:
    cfg = CollectiveConfig.from_system(system, dim_sizes)
    if cfg.npus != topology_npus:  # a graph topology's approximation: one dimension of every host
        cfg = CollectiveConfig.from_system(system, [topology_npus])
    return cfg


def _count_graph(g: RankGraph, groups: dict[int, tuple[int, ...]], npus: int, cfg: CollectiveConfig,
                 active: int, seen: dict[tuple[str, int, int], tuple[int, int]]) -> tuple[int, int, bool]:
    """(messages, widest node, only collectives of every rank) of one rank running `g`: a send is one
    message; a collective what its first member sends (`seen` keeps them by kind, group and size)."""
    messages = widest = 0
    everyone = True
    for t in g.tasks:
        if t.kind in (TaskKind.SEND, TaskKind.RECV):
            everyone = False
        if t.kind is TaskKind.SEND:
            messages += 1
            widest = max(widest, 1)
            continue
        if t.kind is not TaskKind.COLLECTIVE or t.collective is None:
            continue
        everyone = everyone and not t.group
        key = (_KIND[t.collective], t.group, t.size_bytes)
        found = seen.get(key)
        if found is None:
            # group 0 is every rank of the job: on a shared cluster, a group of the network's NPUs
            members = groups.get(t.group) if t.group else None
            span: tuple[int, ...] | range = members if members is not None else range(npus)
            chunks, phases = first_member_messages(cfg, key[0], span, t.size_bytes, len(span) < cfg.npus)
            per_step = max((int(max(_steps(p.step)) if len(p.step) else 0) for p in phases), default=0)
            found = seen[key] = (chunks * sum(len(p.src) for p in phases), min(chunks, active) * per_step)
        messages += found[0]
        widest = max(widest, found[1])
    return messages, widest, everyone and npus == cfg.npus


def _steps(step: object) -> list[int]:
    """How many messages each step of a pattern holds."""
    import numpy as np

    return np.bincount(np.asarray(step, dtype=np.int64)).tolist() or [0]


def _job_workload(scenario: Scenario, cfg: CollectiveConfig, active: int) -> Workload:
    found = distinct_graphs(scenario)
    npus = found.ranks
    seen: dict[tuple[str, int, int], tuple[int, int]] = {}
    messages = nodes = flows = distinct_nodes = 0
    identical = len(found.graphs) == 1 and not is_graph(scenario.topology)
    for g, ranks in found.graphs:
        m, widest, everyone = _count_graph(g, found.groups, npus, cfg, active, seen)
        messages += m * ranks
        nodes += len(g.tasks) * ranks
        flows += widest * ranks
        distinct_nodes += len(g.tasks)
        identical = identical and everyone
    return Workload(found.ranks, len(found.graphs), distinct_nodes, nodes, messages, flows, found.method, identical,
                    is_graph(scenario.topology), 1 if identical else _replicas(scenario, npus))


def _replicas(scenario: Scenario, npus: int) -> int:
    """The data-parallel replicas flowsim `unaware` likely simulates one of (its `replicas` shortcut,
    as the compiler and the run check it): dp, where plain data-parallel all-reduces (no double
    binary tree) over ASTRA-SIM's own dimensions and no compute varied per rank leave the replicas
    alike; else 1."""
    p, system = scenario.parallelism, scenario.system
    alike = (p.dp > 1 and p.cp == 1 and p.ep == 1 and npus == p.tp * p.pp * p.dp and not is_graph(scenario.topology)
             and p.aggregation.kind == "allreduce" and not _alternates(p.aggregation.all_reduce_algorithm)
             and system.variability is None and system.host_cores is None)
    return p.dp if alike else 1


def _alternates(name: str | None) -> bool:
    """Whether an all-reduce algorithm's trees take turns across collectives (`replicas` takes none)."""
    return name is not None and algorithm(name).alternates


def count(spec: Scenario | Cluster, source: str | Path | None = None) -> Workload:
    """The workload of a scenario or a cluster (its jobs' together) from its distinct graphs."""
    if isinstance(spec, Cluster):
        resolved = resolve_cluster(spec, source=source)
        dims = topology_dims(resolved.topology)
        algorithms = {a for j in resolved.jobs if (a := j.parallelism.aggregation.all_reduce_algorithm) is not None}
        system = system_json(resolved.system, len(dims), algorithms.pop() if len(algorithms) == 1 else FALLBACK.name)
        jobs = [job_scenario(resolved, i) for i in range(len(resolved.jobs))]
        npus = resolved.topology.total_npus
    else:
        one = resolve(spec, source=source)
        check_fit(one, source)
        dims = topology_dims(one.topology)
        system = system_config(one)
        jobs, npus = [one], one.npus
    cfg = _collectives(npus, [d.npus for d in dims], system)
    active = max(1, int(str(system.get("active-chunks-per-dimension", 1))))
    parts = [_job_workload(j, cfg, active) for j in jobs]
    if len(parts) == 1:
        return parts[0]
    methods = list(dict.fromkeys(p.method for p in parts))
    return Workload(npus, sum(p.distinct for p in parts), sum(p.distinct_nodes for p in parts),
                    sum(p.nodes for p in parts), sum(p.messages for p in parts),
                    sum(p.flows_at_peak for p in parts), "; ".join(methods), graph=is_graph(spec.topology))


# -- the estimate and the refusal ----------------------------------------------------------------


def _runs(spec: Scenario | Cluster) -> list[tuple[str, str]]:
    """The backends and modes a spec can run on that have a model: flowsim in every mode on each of
    its engines (`flowsim`: the compiled core, where built; `flowsim-python`), ASTRA-SIM's binaries
    where they take the network (ASTRA-SIM's own dimensions, not a graph; the aware one: one)."""
    engines = ("flowsim-python",) if CORE_MISSING is not None else ("flowsim", "flowsim-python")
    out = [(b, m) for b in engines for m in ("unaware", "aware", "fluid")]
    if not is_graph(spec.topology):
        out.append(("astrasim", "unaware"))
        if len(topology_dims(spec.topology)) == 1:  # the congestion-aware binary takes one dimension
            out.append(("astrasim", "aware"))
    return [r for r in out if r in COSTS]


def estimate(spec: Scenario | Cluster, source: str | Path | None = None, *,
             runs: list[tuple[str, str]] | None = None, rows: bool = False) -> Estimate:
    """Count `spec` and estimate each of its runs (`runs`: (backend, mode) pairs; default every one
    that has a model and takes the spec's network), keeping its traffic rows or not (`rows`)."""
    w = count(spec, source)
    row_s = ROW_S * w.messages if rows else 0.0
    row_bytes = ROW_BYTES * min(w.messages, ROW_BUFFERED) if rows else 0.0
    costs = []
    for backend, mode in runs if runs is not None else _runs(spec):
        model = COSTS.get((backend, mode))
        if model is None:
            continue
        # flowsim compiles in memory; ASTRA-SIM's binaries read every rank's ET file
        compile_model = COSTS.get(("compile-memory" if backend.startswith("flowsim") else "compile", ""))
        compile_s = compile_model.wall_s(w) if compile_model is not None else 0.0
        compile_bytes = compile_model.bytes(w) if compile_model is not None else 0.0
        sim = model.wall_s(w) + (row_s if backend.startswith("flowsim") else 0.0)
        held = model.bytes(w) + (row_bytes if backend.startswith("flowsim") else 0.0)
        costs.append(Cost(backend, mode, int(max(held, compile_bytes)), compile_s + sim, sim))
    name = Path(source).name if source is not None else spec.name
    return Estimate(name, w, tuple(costs), machine_memory())


def _mode(backend: BackendSpec) -> tuple[str, str]:
    """The (backend, mode) a spec runs: the mode its registry entry takes for it (ASTRA-SIM's unaware
    binary under the default fluid), flowsim's on the engine it will run (`flowsim-python` for the
    Python one)."""
    name: str = backend.name
    if name == "flowsim" and (backend.engine == "python" or CORE_MISSING is not None):
        name = "flowsim-python"
    return name, entry(backend).mode(backend).value


def check_memory(spec: Scenario | Cluster, backend: BackendSpec, source: str | Path | None = None, *,
                 available: Callable[[], int | None] = machine_memory) -> Estimate | None:
    """Refuse a run whose memory estimate exceeds the memory available (`EstimateError`: one line
    naming the estimate, the machine's memory and `--force`); the estimate, or None for a backend
    without a model (the packet network)."""
    run = _mode(backend)
    if run not in COSTS:
        return None
    est = estimate(spec, source, runs=[run], rows=backend.traffic in ("rows", "pcap"))
    have = available()
    cost = est.costs[0]
    if have is not None and cost.memory_bytes > have:
        where = str(source) if source is not None else spec.name
        raise EstimateError(
            f"{where}: the run would need about {cost.memory_bytes / GIB:,.1f} GiB ({cost.label}, "
            f"{est.workload.ranks:,} ranks, {est.workload.nodes:,} ET nodes) and this machine has "
            f"{have / GIB:,.1f} GiB available; give --force to run it anyway")
    return est


def refused(spec: Scenario | Cluster, backend: BackendSpec) -> str | None:
    """Why a run of `spec` is refused on this machine (the `EstimateError` line), or None: what a
    sweep writes to skipped.json."""
    try:
        check_memory(spec, backend)
    except EstimateError as exc:
        return str(exc)
    except (SpecError, ValueError):
        return None  # the run itself reports what is wrong with the spec
    return None
