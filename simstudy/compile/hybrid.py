"""dp x tp x pp: data, tensor and pipeline parallelism together, with optional sharding.

Every rank runs, per iteration, its stage's schedule of microbatch forwards and backwards (see
`pipeline`), each one layer after another on its own layers (see `tensor`), then synchronises
gradients with its data-parallel group and steps its optimizer:

* forward of a microbatch: receive the input activation from the previous stage; per layer,
  [fsdp/zero3: all-gather the layer's parameter shards], compute, [tensor parallel: the layer's
  collective]; send the output activation to the next stage.
* backward of a microbatch: receive the output gradient from the next stage; per layer in
  reverse, [fsdp/zero3: all-gather], compute, [tensor parallel: all-reduce of the input
  gradient], [fsdp/zero3: reduce-scatter of the layer's gradient]; send the input gradient back.
* gradient synchronisation over the data-parallel group, after the last backward:
  none: one all-reduce per DDP bucket (issued as its last layer's backward finishes when
  `overlap` is on), then the optimizer; zero1: one reduce-scatter per bucket, the optimizer on
  the rank's 1/dp shard, then one all-gather per bucket of the updated parameters; zero3 and
  fsdp (compiled alike): the per-layer reduce-scatters above, then the optimizer on the shard.

Each task waits for the one before it in the rank's schedule, so a rank follows its schedule
exactly; receives are posted when the rank is ready for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from simstudy.compile import dims
from simstudy.compile.costs import LayerCost, ddp_buckets, layer_costs, optimizer_us, whole_us
from simstudy.compile.dims import Job
from simstudy.compile.graph import Collective, ExecutionGraph, RankGraph
from simstudy.compile.layout import Layout
from simstudy.compile.pipeline import BACKWARD, FORWARD, Op, balanced_stages, p2p_tag, schedule
from simstudy.compile.tensor import LayerWork, layer_works, megatron
from simstudy.spec import Scenario


@dataclass(frozen=True)
class Partition:
    """How a job cuts its model: `parts` consecutive stages, and whether tensor parallelism
    splits layers (Megatron) or adds stages (layer-wise model parallelism)."""

    works: list[LayerWork]
    stages: list[list[int]]
    layerwise: bool

    @property
    def parts(self) -> int:
        return len(self.stages)


def partition(scenario: Scenario) -> Partition:
    """The per-microbatch layer work and the stages of a scenario."""
    p = scenario.parallelism
    model = scenario.resolved_model
    costs = layer_costs(scenario, model)
    works = layer_works(
        model, costs, microbatches=p.microbatches, tp=p.tp, dtype_bytes=scenario.training.dtype_bytes,
        microbatch_samples=scenario.training.batch_size_per_worker // p.microbatches,
    )
    layerwise = p.tp > 1 and not megatron(model)
    parts = p.pp * p.tp if layerwise else p.pp
    stages = balanced_stages([c.fwd_us + c.bwd_us for c in costs], parts)
    return Partition(works, stages, layerwise)


@dataclass
class _Rank:
    """Everything one rank's graph depends on: its layers, its schedule, its stage neighbours and
    its group of every dimension (`dims.rank_groups`)."""

    layers: list[LayerWork]
    ops: list[Op]
    prev: int | None
    next: int | None
    groups: dict[str, int | None]
    dp: int

    @property
    def dp_group(self) -> int | None:
        return self.groups["dp"]


class _Builder:
    def __init__(self, scenario: Scenario, job: Job, spec: _Rank, g: RankGraph) -> None:
        p = scenario.parallelism
        self.job = job
        self.s = spec
        self.g = g
        self.m = p.microbatches
        self.sharding = p.sharding
        self.overlap = p.overlap
        self.shard_params = p.sharding in ("zero3", "fsdp") and spec.dp > 1 and spec.dp_group is not None
        self.bucket_cap = p.bucket_size_bytes
        self.scenario = scenario

    # -- one microbatch --------------------------------------------------------------------------

    def _comms(self, comms: list[dims.Comm], direction: str, w: LayerWork, sfx: str, deps: list[int],
               it: int) -> list[int]:
        """Chain the dimensions' collectives of one layer, each after the one before."""
        for c in comms:
            group = self.s.groups[c.dim]
            assert group is not None, f"{c.label}: dimension {c.dim} has no group on rank {self.g.rank}"
            deps = [self.g.collective(f"{c.label}.{direction}.{w.name}.{sfx}", c.kind, c.size, deps, group=group,
                                      iteration=it)]
        return deps

    def _gather(self, what: str, w: LayerWork, deps: list[int], it: int) -> int | None:
        if not self.shard_params or w.params == 0:
            return None
        assert self.s.dp_group is not None
        size = -(-w.grad_bytes // self.s.dp)
        return self.g.collective(f"fsdp_gather.{what}.{w.name}", Collective.ALL_GATHER, size, deps,
                                 group=self.s.dp_group, iteration=it)

    def forward(self, it: int, mb: int, last: list[int]) -> list[int]:
        g, s = self.g, self.s
        sfx = f"mb{mb}.it{it}"
        deps = list(last)
        if s.prev is not None:
            deps.append(g.recv(f"recv_act.{sfx}", s.prev, s.layers[0].in_bytes,
                               p2p_tag(it, mb, self.m, FORWARD), list(last), iteration=it))
        computes: list[int] = []
        gather: int | None = None
        for i, w in enumerate(s.layers):
            ag_deps = [gather] if gather is not None else list(last)
            if i >= 2:
                ag_deps.append(computes[i - 2])  # prefetch one layer ahead, not more
            got = self._gather(f"fwd.{sfx}", w, ag_deps, it)
            gather = got if got is not None else gather
            before, after = dims.layer_comms(self.job, w, dims.FORWARD)
            deps = self._comms(before, dims.FORWARD, w, sfx, deps, it)
            t = g.compute(f"fwd.{w.name}.{sfx}", whole_us(w.fwd_us), deps + ([got] if got is not None else []),
                          flops=w.fwd_flops, tensor_bytes=max(1, w.grad_bytes + w.act_bytes), iteration=it)
            computes.append(t)
            deps = self._comms(after, dims.FORWARD, w, sfx, [t], it)
        if s.next is not None:
            g.send(f"send_act.{sfx}", s.next, s.layers[-1].act_bytes, p2p_tag(it, mb, self.m, FORWARD), deps,
                   iteration=it)
        return deps

    def backward(self, it: int, mb: int, last: list[int]) -> tuple[list[int], dict[int, int], list[int]]:
        g, s = self.g, self.s
        sfx = f"mb{mb}.it{it}"
        deps = list(last)
        if s.next is not None:
            deps.append(g.recv(f"recv_grad.{sfx}", s.next, s.layers[-1].act_bytes,
                               p2p_tag(it, mb, self.m, BACKWARD), list(last), iteration=it))
        done: dict[int, int] = {}
        scatters: list[int] = []
        computes: list[int] = []
        gather: int | None = None
        for i, w in enumerate(reversed(s.layers)):
            ag_deps = [gather] if gather is not None else list(last)
            if i >= 2:
                ag_deps.append(computes[i - 2])
            got = self._gather(f"bwd.{sfx}", w, ag_deps, it)
            gather = got if got is not None else gather
            before, after = dims.layer_comms(self.job, w, dims.BACKWARD)
            deps = self._comms(before, dims.BACKWARD, w, sfx, deps, it)
            t = g.compute(f"bwd.{w.name}.{sfx}", whole_us(w.bwd_us), deps + ([got] if got is not None else []),
                          flops=2 * w.fwd_flops, tensor_bytes=max(1, w.grad_bytes + w.act_bytes), iteration=it)
            computes.append(t)
            done[w.index] = t
            deps = self._comms(after, dims.BACKWARD, w, sfx, [t], it)
            if got is not None:
                assert s.dp_group is not None
                scatters.append(g.collective(f"fsdp_scatter.{w.name}.{sfx}", Collective.REDUCE_SCATTER,
                                             w.grad_bytes, [t], group=s.dp_group, iteration=it))
        if s.prev is not None:
            g.send(f"send_grad.{sfx}", s.prev, s.layers[0].in_bytes, p2p_tag(it, mb, self.m, BACKWARD), deps,
                   iteration=it)
        return deps, done, scatters

    # -- one iteration ---------------------------------------------------------------------------

    def iteration(self, it: int, after: list[int]) -> list[int]:
        last = list(after)
        final: dict[int, int] = {}
        scatters: list[int] = []
        last_b = max(k for k, (kind, _) in enumerate(self.s.ops) if kind == "B")
        for k, (kind, mb) in enumerate(self.s.ops):
            if kind == "F":
                last = self.forward(it, mb, last)
            else:
                last, done, rs = self.backward(it, mb, last)
                scatters += rs
                if k == last_b:
                    final = done
        return self.step(it, last, final, scatters)

    def step(self, it: int, last: list[int], final: dict[int, int], scatters: list[int]) -> list[int]:
        g, s = self.g, self.s
        params = sum(w.params for w in s.layers)
        model = self.scenario.resolved_model
        sync = s.dp_group is not None and s.dp > 1
        if not sync or self.shard_params:
            shard = -(-params // s.dp) if self.shard_params else params
            opt = whole_us(optimizer_us(self.scenario, model, params=shard))
            return [g.compute(f"optimizer.it{it}", opt, last + scatters, iteration=it)]
        assert s.dp_group is not None
        costs = [LayerCost(w.index, w.name, 0.0, 0.0, 0, w.grad_bytes, 0) for w in s.layers]
        buckets = ddp_buckets(costs, self.bucket_cap)
        first_layer = final[s.layers[0].index]
        if self.sharding == "zero1":
            rs = [g.collective(f"zero1_scatter.bucket{b.index}.it{it}", Collective.REDUCE_SCATTER, b.size_bytes,
                               [final[b.ready_after] if self.overlap else first_layer], group=s.dp_group,
                               iteration=it)
                  for b in buckets]
            opt = g.compute(f"optimizer.it{it}", whole_us(optimizer_us(self.scenario, model,
                                                                       params=-(-params // s.dp))), last + rs,
                            iteration=it)
            ags = [g.collective(f"zero1_gather.bucket{b.index}.it{it}", Collective.ALL_GATHER,
                                -(-b.size_bytes // s.dp), [opt], group=s.dp_group, iteration=it) for b in buckets]
            return [opt, *ags]
        ars = [g.collective(f"allreduce.bucket{b.index}.it{it}", Collective.ALL_REDUCE, b.size_bytes,
                            [final[b.ready_after] if self.overlap else first_layer], group=s.dp_group,
                            iteration=it)
               for b in buckets]
        opt = g.compute(f"optimizer.it{it}", whole_us(optimizer_us(self.scenario, model, params=params)), last + ars,
                        iteration=it)
        return [opt]


def compile_hybrid(scenario: Scenario) -> ExecutionGraph:
    """The execution graph of any dp x tp x pp combination, with any sharding and schedule."""
    p = scenario.parallelism
    part = partition(scenario)
    job = Job(p, split=p.tp > 1 and not part.layerwise)
    layout = Layout(p.dp, p.tp, p.pp)
    dims.register_groups(layout, job)

    def stage_rank(v: int, t: int, d: int) -> int:
        if part.layerwise:
            return layout.rank(v % p.tp, d, v // p.tp)
        return layout.rank(t, d, v)

    graphs: list[RankGraph] = []
    shared: dict[tuple[object, ...], RankGraph] = {}
    for r in range(layout.npus):
        c = layout.coord(r)
        v = c.s * p.tp + c.t if part.layerwise else c.s
        spec = _Rank(
            layers=[part.works[i] for i in part.stages[v]],
            ops=schedule(p.schedule, part.parts, v, p.microbatches),
            prev=stage_rank(v - 1, c.t, c.d) if v > 0 else None,
            next=stage_rank(v + 1, c.t, c.d) if v + 1 < part.parts else None,
            groups=dims.rank_groups(layout, job, c),
            dp=p.dp,
        )
        key = (v, spec.prev, spec.next, *spec.groups.values())
        same = shared.get(key) if spec.prev is None and spec.next is None else None
        if same is not None:
            graphs.append(RankGraph(rank=r, tasks=same.tasks))
            continue
        g = RankGraph(rank=r)
        builder = _Builder(scenario, job, spec, g)
        after: list[int] = []
        for it in range(scenario.training.iterations):
            after = builder.iteration(it, after)
        shared[key] = g
        graphs.append(g)
    return ExecutionGraph(ranks=graphs, groups=dict(layout.groups))
