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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simstudy.backends.flowsim import CORE_MISSING
from simstudy.backends.patterns import CollectiveConfig, first_member_messages
from simstudy.backends.registry import entry
from simstudy.compiler import check_fit, job_scenario, resolve, resolve_cluster
from simstudy.compiler.aggregation import distinct_graphs
from simstudy.compiler.astra_config import system_config, system_json
from simstudy.compiler.collectives import algorithm
from simstudy.compiler.graph import Collective, RankGraph, TaskKind
from simstudy.spec import BackendSpec, Cluster, Scenario, SpecError, Topology, is_graph, topology_dims
from simstudy.spec.collectives import FALLBACK
from simstudy.spec.topology import Tiered

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
    node running: a rank issues one at a time), `distinct_nodes` the nodes of the distinct graphs.
    `crossing` weighs each message by how many flows it meets at its host's links, on a graph
    network (`_Hosts`): what a fluid run's shared links grow with."""

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
    #: on a graph network: the messages that leave their host, each weighed by the flows of other
    #: groups that leave that host with it (`_Hosts`)
    crossing: float = 0.0
    #: a pipeline's sends' part of `crossing` (jobs with pp > 1): a stage's sends leave every host of the
    #: stage at once and meet at the switches above them, where a fluid run solves their flows together
    #: with the rings they cross (a parameter server's pushes and pulls leave at each worker's own pace)
    crossing_sends: float = 0.0

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
    file), the messages simulated, and what they share: on a graph network, the messages that
    leave their host weighed by the flows they leave it with (`Workload.crossing`: the flows whose
    rates a fluid run solves together, which a ring's neighbours on one host do not add to, and each
    group of a tensor-parallel host does); on ASTRA-SIM's dimensions, the messages again (each
    meets the flows of its NPU's links there), for the modes whose links are shared; and on a
    graph network the sends among those messages again (`Workload.crossing_sends`).
    `replicas`: a model whose runs simulate one of `w.replicas` (nodes and messages: one replica's)."""
    if compile:
        return (1.0, float(w.nodes), 0.0, 0.0, 0.0, 0.0)
    if every_rank:
        return (1.0, float(w.nodes), float(w.messages), 0.0, 0.0, 0.0)
    one = w.replicas if replicas else 1
    simulated = float(w.simulated) / one
    return (1.0, float(w.held_nodes) / one, simulated, w.crossing if w.graph else 0.0,
            0.0 if w.graph else simulated, w.crossing_sends if w.graph else 0.0)


@dataclass(frozen=True)
class Model:
    """A linear cost model: peak bytes = memory . `memory_terms`, seconds = seconds . `time_terms`;
    `source` says which measurements it was fitted to."""

    memory: tuple[float, float, float]
    seconds: tuple[float, float, float, float, float, float]
    source: str
    compile: bool = False
    every_rank: bool = False
    #: its runs take the replicas shortcut (flowsim `unaware`): they simulate one replica, and still
    #: spend `REPLICA_SPAN_S` and `REPLICA_NODE_BYTES` on each node of every rank
    replicas: bool = False

    def copied_nodes(self, w: Workload) -> int:
        """The nodes whose spans a run with replicas copies from replica 0 (0 without replicas)."""
        return w.nodes if self.replicas and w.replicas > 1 else 0

    def bytes(self, w: Workload) -> float:
        terms = memory_terms(w, compile=self.compile, every_rank=self.every_rank, replicas=self.replicas)
        return sum(c * x for c, x in zip(self.memory, terms, strict=True)) + REPLICA_NODE_BYTES * self.copied_nodes(w)

    def wall_s(self, w: Workload) -> float:
        terms = time_terms(w, compile=self.compile, every_rank=self.every_rank, replicas=self.replicas)
        return sum(c * x for c, x in zip(self.seconds, terms, strict=True)) + REPLICA_SPAN_S * self.copied_nodes(w)


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

_FIT_CORE = ("`python benchmarks/estimate.py --backends flowsim,flowsim-python --save rows.jsonl` (the 8 cases, "
             "each engine's run timed after its process compiled the spec in memory, as `simstudy run` does) then "
             "`--load rows.jsonl --published --fit`, which adds benchmarks/fluid_scale.py's and "
             "benchmarks/scale.py's runs on the compiled core, 4,096 to 55,296 GPUs (docs/results.md)")

#: (backend, congestion mode) -> its model; ("compile", "") is the compile before every ASTRA-SIM run
#: of a spec (writing every rank's ET file: its time adds to the run's, its memory is freed before the
#: run), ("compile-memory", "") the compile before a flowsim run (every rank's nodes kept in memory).
#: Coefficients: memory (bytes: 1, per node held, per rank), seconds (1, per node, per message simulated,
#: per message leaving its host weighed as `Workload.crossing` weighs it on a graph network, per message
#: simulated on ASTRA-SIM's dimensions, per send among the former, `Workload.crossing_sends`), each the
#: output of the fit named beside it.
COSTS: dict[tuple[str, str], Model] = {
    ("compile", ""): Model((5.102e7, 1756.0, 7880.0), (0.4437, 3.981e-6, 0.0, 0.0, 0.0, 0.0), _FIT, compile=True),
    # the compile before a flowsim run, which keeps every rank's nodes in memory and writes no ET file:
    # its time per node from benchmarks/scale.py's runs on this machine (LLaMA-3 70B at 16,384 GPUs,
    # 19,695,616 nodes in 13.9 s; LLaMA-3.1 405B at 16,384, 30,341,120 nodes in 19.1 s, and at 55,296,
    # 102,401,280 nodes in 93.1-96.5 s), and a constant from the small cases of benchmarks/estimate.py
    # (0.0-0.1 s)
    ("compile-memory", ""): Model((5.102e7, 1756.0, 7880.0), (0.05, 7.5e-7, 0.0, 0.0, 0.0, 0.0), _FIT, compile=True),
    # flowsim's compiled core (`engine: compiled`, the default where built), `_FIT_CORE`: memory (refitted
    # after the compiled walk shared its tables between ranks alike, on the peaks measured since) within
    # 0.52-1.15x on every run (1.01-1.48x on the fluid runs measured after that fit); wall time within
    # 0.52-1.32x on every run. Fluid's time refitted with a pipeline's sends apart (`Workload.crossing_sends`:
    # 131 us a send weighed, against 1.8 us a collective's message) and LLaMA-3.1 405B on the Clos at
    # 1,024-4,096 GPUs: within 0.50-1.31x on its 17 runs, 0.58x on the 16,384-GPU Clos
    ("flowsim", "unaware"): Model((1.513e8, 160.6, 0.0), (0.01746, 2.158e-6, 6.695e-8, 2.25e-7, 6.356e-7, 0.0),
                                  _FIT_CORE, replicas=True),
    ("flowsim", "aware"): Model((1.562e8, 166.8, 1.467e4), (0.01665, 4.482e-6, 0.0, 5.066e-6, 9.456e-7, 0.0),
                                _FIT_CORE),
    ("flowsim", "fluid"): Model((1.447e8, 186.8, 3.345e4), (0.0216, 1.07e-6, 0.0, 1.841e-6, 8.031e-7, 1.312e-4),
                                _FIT_CORE),
    # flowsim's Python engine (`engine: python`, or where the compiled core is not built), `_FIT_CORE`:
    # memory within 0.75-1.13x; wall time within 0.67-1.28x but unaware on the leaf-spines (0.36-0.40x)
    # and fluid on GPT-2 medium's 512-GPU Clos (0.23x) and the 1,024-GPU ring (0.42x, 0.2 s)
    ("flowsim-python", "unaware"): Model((1.697e8, 392.1, 0.0), (0.0603, 0.0, 2.242e-6, 0.0, 3.582e-7, 0.0), _FIT_CORE,
                                         replicas=True),
    ("flowsim-python", "aware"): Model((1.513e8, 452.0, 1.54e4), (0.006522, 9.96e-6, 9.633e-6, 1.795e-5, 1.278e-6, 0.0),
                                       _FIT_CORE),
    ("flowsim-python", "fluid"): Model((1.685e8, 405.8, 0.0), (0.05168, 0.0, 0.0, 1.413e-4, 2.242e-6, 0.0), _FIT_CORE),
    # the binaries' memory per ET node of every rank and time per message, from their two published
    # 4,096-GPU runs (measured since: llama512 unaware 1.08x in memory, 0.73x in time; rn256ring and
    # rn1024ring unaware 0.5x in memory, 4.4x and 6.1x in time: collectives of every rank cost it less)
    ("astrasim", "unaware"): Model((0.0, 2421.0, 0.0), (0.0, 0.0, 8.75e-6, 0.0, 0.0, 0.0), _FIT, every_rank=True),
    ("astrasim", "aware"): Model((0.0, 3440.0, 0.0), (0.0, 0.0, 2.231e-5, 0.0, 0.0, 0.0), _FIT, every_rank=True),
}

#: Keeping the traffic rows (`traffic: rows`, streamed to Parquet): seconds and buffer bytes per row
#: written, from one pair of runs on the compiled core: ResNet-50 DP 1,024 on a ring, 10,475,520 rows,
#: 1.9 s and 0.48 GiB with rows (benchmarks/fluid_scale.py's rn1024ring) against 0.2 s and 0.15 GiB
#: without (benchmarks/estimate.py's rn1024ring); the buffers are taken not to grow beyond that many rows
#: (they are written in batches).
ROW_S, ROW_BYTES, ROW_BUFFERED = 1.6e-7, 34.0, 10_475_520


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


class _Hosts:
    """Which host each NPU of a graph network is on (a tiered cluster's NPUs numbered host by host,
    `gpus_per_host` each; elsewhere every NPU a host of its own) and how a message that leaves its
    host counts (`crossing`). Ranks are the NPUs of their numbers, or those `npus` gives them (a job
    of a shared cluster on the NPUs it is placed on). Nothing per rank: a group of every rank is
    counted in closed form (where ranks are NPUs)."""

    def __init__(self, topology: object, npus: Sequence[int] | None = None) -> None:
        self.per_host = topology.gpus_per_host if isinstance(topology, Tiered) else 1
        self.npus = None if npus is None else np.asarray(npus, dtype=np.int64)
        self._groups: dict[int, float] = {}

    def of(self, rank: int) -> int:
        return int(self.npus[rank] if self.npus is not None else rank) // self.per_host

    def group(self, group: int, members: Sequence[int]) -> float:
        """The weight of one message of a collective on `members`: the share of ring neighbours on
        other hosts, times the groups that leave a host at once (its NPUs over the members it holds:
        a ring of every rank leaves each host once, the data-parallel groups of a host with eight
        tensor-parallel ranks eight times)."""
        found = self._groups.get(group)
        if found is None:
            n, g = len(members), self.per_host
            if n < 2:
                found = 0.0
            elif self.npus is None and isinstance(members, range) and members.step == 1 and members.start % g == 0:
                hosts = -(-n // g)  # every rank from a host's first: each host left once, around the ring
                found = (hosts / n if hosts > 1 else 0.0) * g / min(g, n)
            else:
                ranks = np.asarray(members, dtype=np.int64)
                h = (ranks if self.npus is None else self.npus[ranks]) // g
                cross = float(np.count_nonzero(h != np.roll(h, -1))) / n
                found = cross * g / max(int(np.count_nonzero(h == h[0])), 1)
            self._groups[group] = found
        return found

    def send(self, src: int, dst: int) -> float:
        """The weight of a send: every NPU of the host sends with it when it leaves the host (a
        pipeline stage's ranks send to the next stage at once)."""
        return float(self.per_host) if self.of(src) != self.of(dst) else 0.0


def _count_graph(g: RankGraph, groups: dict[int, tuple[int, ...]], npus: int, cfg: CollectiveConfig,
                 active: int, seen: dict[tuple[str, int, int], tuple[int, int]],
                 hosts: _Hosts | None = None) -> tuple[int, int, bool, float, float]:
    """(messages, widest node, only collectives of every rank, messages crossing hosts weighed as
    `_Hosts` weighs them, the sends' part of those) of one rank running `g`: a send is one message; a
    collective what its first member sends (`seen` keeps them by kind, group and size)."""
    messages = widest = 0
    crossing = sends = 0.0
    everyone = True
    for t in g.tasks:
        if t.kind in (TaskKind.SEND, TaskKind.RECV):
            everyone = False
        if t.kind is TaskKind.SEND:
            messages += 1
            widest = max(widest, 1)
            if hosts is not None:
                sends += hosts.send(g.rank, g.peer_of(t))
            continue
        if t.kind is not TaskKind.COLLECTIVE or t.collective is None:
            continue
        everyone = everyone and not t.group
        # group 0 is every rank of the job: on a shared cluster, a group of the network's NPUs
        members = groups.get(t.group) if t.group else None
        span: tuple[int, ...] | range = members if members is not None else range(npus)
        key = (_KIND[t.collective], t.group, t.size_bytes)
        found = seen.get(key)
        if found is None:
            chunks, phases = first_member_messages(cfg, key[0], span, t.size_bytes, len(span) < cfg.npus)
            per_step = max((int(max(_steps(p.step)) if len(p.step) else 0) for p in phases), default=0)
            found = seen[key] = (chunks * sum(len(p.src) for p in phases), min(chunks, active) * per_step)
        messages += found[0]
        widest = max(widest, found[1])
        if hosts is not None:
            crossing += found[0] * hosts.group(t.group, span)
    return messages, widest, everyone and npus == cfg.npus, crossing + sends, sends


def _steps(step: object) -> list[int]:
    """How many messages each step of a pattern holds."""
    return np.bincount(np.asarray(step, dtype=np.int64)).tolist() or [0]


def _job_workload(scenario: Scenario, cfg: CollectiveConfig, active: int, network: Topology | None = None,
                  placed: Sequence[int] | None = None) -> Workload:
    """One job's workload; a job of a shared cluster on the cluster's `network`, its ranks on the
    NPUs it is `placed` on (its own scenario stands on a switch of its ranks)."""
    found = distinct_graphs(scenario)
    npus = found.ranks
    seen: dict[tuple[str, int, int], tuple[int, int]] = {}
    messages = nodes = flows = distinct_nodes = 0
    crossing = crossing_sends = 0.0
    topology = network if network is not None else scenario.topology
    graph = is_graph(topology)
    hosts = _Hosts(topology, placed) if graph else None
    identical = len(found.graphs) == 1 and not graph
    for g, ranks in found.graphs:
        m, widest, everyone, cross, cross_sends = _count_graph(g, found.groups, npus, cfg, active, seen, hosts)
        messages += m * ranks
        nodes += len(g.tasks) * ranks
        flows += widest * ranks
        crossing += cross * ranks
        if scenario.parallelism.pp > 1:  # a pipeline's sends (not a parameter server's pushes and pulls)
            crossing_sends += cross_sends * ranks
        distinct_nodes += len(g.tasks)
        identical = identical and everyone
    return Workload(found.ranks, len(found.graphs), distinct_nodes, nodes, messages, flows, found.method, identical,
                    graph, 1 if identical or graph else _replicas(scenario, npus), crossing, crossing_sends)


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
    if isinstance(spec, Cluster):  # each job weighed on the cluster's hosts it is placed on
        parts = [_job_workload(j, cfg, active, resolved.topology, placed)
                 for j, placed in zip(jobs, resolved.placed, strict=True)]
    else:
        parts = [_job_workload(j, cfg, active) for j in jobs]
    if len(parts) == 1:
        return parts[0]
    methods = list(dict.fromkeys(p.method for p in parts))
    return Workload(npus, sum(p.distinct for p in parts), sum(p.distinct_nodes for p in parts),
                    sum(p.nodes for p in parts), sum(p.messages for p in parts),
                    sum(p.flows_at_peak for p in parts), "; ".join(methods), graph=is_graph(spec.topology),
                    crossing=sum(p.crossing for p in parts), crossing_sends=sum(p.crossing_sends for p in parts))


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


def _mode(backend: BackendSpec, spec: Scenario | Cluster | None = None) -> tuple[str, str]:
    """The (backend, mode) a spec runs: the mode its registry entry takes for it (ASTRA-SIM's unaware
    binary under the default fluid), flowsim's on the engine it will run (`flowsim-python` for the
    Python one, and for what only the Python engine runs: `python_only`)."""
    name: str = backend.name
    mode = entry(backend).mode(backend)
    if name == "flowsim" and (backend.engine == "python" or CORE_MISSING is not None
                              or (spec is not None and python_only(spec, fluid=mode.fluid))):
        name = "flowsim-python"
    return name, mode.value


def python_only(spec: Scenario | Cluster, *, fluid: bool = True) -> bool:
    """Whether flowsim runs `spec` on its Python engine whatever the engine asked: a topology whose
    links lose packets (TCP under loss), that asks for TCP without loss (`transport.model: tcp`) or
    has token buckets, or, in the fluid mode, RoCE with DCQCN (the compiled core models none of
    them). `flowsim.tcp.tcp_modelled` and `flowsim.roce.roce_modelled` say the same of a built
    network; the estimate reads the spec, before any network is built."""
    topo = getattr(spec, "topology", None)
    transport = getattr(topo, "transport", None)
    return (getattr(transport, "model", "ideal") == "tcp" or (getattr(topo, "loss", 0) or 0) > 0
            or getattr(topo, "token_bucket", None) is not None or (fluid and getattr(transport, "dcqcn", False)))


def check_memory(spec: Scenario | Cluster, backend: BackendSpec, source: str | Path | None = None, *,
                 available: Callable[[], int | None] = machine_memory) -> Estimate | None:
    """Refuse a run whose memory estimate exceeds the memory available (`EstimateError`: one line
    naming the estimate, the machine's memory and `--force`); the estimate, or None for a backend
    without a model (the packet network)."""
    run = _mode(backend, spec)
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
