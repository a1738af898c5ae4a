"""dp x tp x pp x cp (x ep): data, tensor, pipeline, context and expert parallelism together, with
optional sharding, sequence parallelism, interleaved stages and gradient accumulation.

Every rank runs, per iteration, `grad_accumulation_steps` times its stage's schedule of microbatch
forwards and backwards (see `pipeline`; with `virtual_stages` the interleaved one over the rank's
model chunks), each one layer after another on the chunk's layers (see `tensor`), then
synchronises gradients with its data-parallel group and steps its optimizer:

* forward of a microbatch: receive the input activation from the previous stage; per layer,
  [fsdp/zero3: all-gather the layer's parameter shards], the messages every dimension puts before
  the compute (`dims`: sequence parallelism's all-gather, expert parallelism's dispatch), the
  compute [context parallelism: in cp parts, key/value blocks passed around the ring between
  them], the messages after it (the combine, the tensor-parallel all-reduce or reduce-scatter);
  send the output activation to the next stage.
* backward of a microbatch: receive the output gradient from the next stage; per layer in
  reverse, [fsdp/zero3: all-gather], the dimensions' messages around the compute, [fsdp/zero3:
  reduce-scatter of the layer's gradient]; send the input gradient back.
* gradient synchronisation over the data-parallel group (dp x cp ranks), after the last backward
  of the last accumulation step: none: one all-reduce per DDP bucket (issued as its last layer's
  backward finishes when `overlap` is on), then the optimizer; zero1: one reduce-scatter per
  bucket (or as `parallelism.zero` says), the optimizer on the rank's shard, then the all-gathers
  of the updated parameters; zero3 and fsdp (compiled alike): the per-layer reduce-scatters above,
  then the optimizer on the shard. With expert parallelism the routed experts' gradients are
  bucketed apart and synchronised over the ranks that hold the same experts.

Each task waits for the one before it in the rank's schedule, so a rank follows its schedule
exactly; receives are posted when the rank is ready for them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from simstudy.compiler import dims
from simstudy.compiler.costs import Bucket, LayerCost, ddp_buckets, layer_costs, optimizer_us, whole_us, zero_buckets
from simstudy.compiler.dims import Job
from simstudy.compiler.graph import Collective, ExecutionGraph, RankGraph
from simstudy.compiler.layout import Layout
from simstudy.compiler.pipeline import (
    BACKWARD,
    FORWARD,
    ChunkOp,
    balanced_stages,
    interleaved_schedule,
    p2p_tag,
    schedule,
)
from simstudy.compiler.tensor import LayerWork, layer_works, megatron
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
    """The per-microbatch layer work and the stages of a scenario (pp x virtual_stages of them)."""
    p = scenario.parallelism
    model = scenario.resolved_model
    costs = layer_costs(scenario, model)
    m = p.microbatches_per_iteration
    works = layer_works(
        model, costs, microbatches=m, tp=p.tp, dtype_bytes=scenario.training.dtype_bytes,
        microbatch_samples=scenario.training.batch_size_per_worker // m, cp=p.cp, ep=p.ep, sp=p.sp,
    )
    layerwise = p.tp > 1 and not megatron(model)
    parts = p.pp * p.tp if layerwise else p.pp * p.virtual_stages
    stages = balanced_stages([c.fwd_us + c.bwd_us for c in costs], parts)
    return Partition(works, stages, layerwise)


@dataclass
class _Rank:
    """Everything one rank's graph depends on: its model chunks (one without virtual stages) with
    their stage neighbours, its schedule, its group of every dimension (`dims.rank_groups`) and its
    context-parallel ring."""

    chunks: list[list[LayerWork]]
    ops: list[ChunkOp]
    prevs: list[int | None]
    nexts: list[int | None]
    groups: dict[str, int | None]
    dp: int  # ranks of the data-parallel group (dp x cp)
    edp: int = 1  # ranks of the expert data-parallel group
    ring: tuple[int, int] | None = None  # (previous, next) of the context-parallel ring
    experts: tuple[int, ...] = ()  # the expert-parallel group, for pairwise all-to-alls
    stages: list[int] = field(default_factory=lambda: [0])  # the global stage of each chunk
    per_chunk: int = 1  # global stages per model chunk (the pipeline's depth)
    layers: list[LayerWork] = field(init=False)

    def __post_init__(self) -> None:
        self.layers = [w for chunk in self.chunks for w in chunk]

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
        self.mb_total = p.microbatches_per_iteration
        self.v = p.virtual_stages
        self.gas = p.grad_accumulation_steps
        self.cp = p.cp
        self.pairwise = p.ep_a2a == "pairwise"
        self.layer_count = len(scenario.resolved_model.layers)
        self.sharding = p.sharding
        self.zero = p.zero
        self.overlap = p.overlap
        self.shard_params = p.sharding in ("zero3", "fsdp") and spec.dp > 1 and spec.dp_group is not None
        self.bucket_cap = p.bucket_size_bytes
        self.dtype = scenario.training.dtype_bytes
        self.scenario = scenario

    # -- one microbatch --------------------------------------------------------------------------

    def _comms(self, comms: list[dims.Comm], direction: str, w: LayerWork, sfx: str, deps: list[int],
               it: int, mb: int) -> list[int]:
        """Chain the dimensions' collectives of one layer, each after the one before."""
        for c in comms:
            if self.pairwise and c.kind is Collective.ALL_TO_ALL:
                deps = self._pairwise(c, direction, w, sfx, deps, it, mb)
                continue
            group = self.s.groups[c.dim]
            assert group is not None, f"{c.label}: dimension {c.dim} has no group on rank {self.g.rank}"
            deps = [self.g.collective(f"{c.label}.{direction}.{w.name}.{sfx}", c.kind, c.size, deps, group=group,
                                      iteration=it)]
        return deps

    def _pairwise(self, c: dims.Comm, direction: str, w: LayerWork, sfx: str, deps: list[int], it: int,
                  mb: int) -> list[int]:
        """An all-to-all as point-to-point messages (NCCL's all-to-all: a grouped send and receive per
        peer): each member sends each other member its share, size // n, the next member first; the
        layer goes on once every share has arrived."""
        peers = self.s.experts
        n, me = len(peers), peers.index(self.g.rank)
        share = max(c.size // n, 1)
        phase = 2 * (direction == dims.BACKWARD) + (c.label == "ep_combine")  # four all-to-alls per layer
        base = (((it * self.mb_total + mb) * self.layer_count + w.index) * 4 + phase) * n
        label = f"{c.label}.{direction}.{w.name}.{sfx}"
        for j in range(1, n):
            self.g.send(f"{label}.to{j}", peers[(me + j) % n], share, base + j, deps, op="alltoall", iteration=it)
        return [self.g.recv(f"{label}.from{j}", peers[(me - j) % n], share, base + j, deps, op="alltoall",
                            iteration=it) for j in range(1, n)]

    def _gather(self, what: str, w: LayerWork, deps: list[int], it: int) -> int | None:
        if not self.shard_params or w.params == 0:
            return None
        assert self.s.dp_group is not None
        size = -(-w.grad_bytes // self.s.dp)
        return self.g.collective(f"fsdp_gather.{what}.{w.name}", Collective.ALL_GATHER, size, deps,
                                 group=self.s.dp_group, iteration=it)

    def _compute(self, direction: str, w: LayerWork, sfx: str, deps: list[int], it: int, mb: int) -> int:
        """A layer's compute; an attention layer under context parallelism runs in cp parts with the
        ring's key/value passes between them (`_ring`)."""
        fwd = direction == dims.FORWARD
        us, flops = (w.fwd_us, w.fwd_flops) if fwd else (w.bwd_us, 2 * w.fwd_flops)
        tensor = max(1, w.grad_bytes + w.act_bytes)
        if self.s.ring is not None and w.kind == "attention" and w.kv_bytes > 0:
            return self._ring(direction, w, sfx, deps, it, mb, us, flops, tensor)
        return self.g.compute(f"{direction}.{w.name}.{sfx}", whole_us(us), deps, flops=flops, tensor_bytes=tensor,
                              iteration=it)

    def _ring(self, direction: str, w: LayerWork, sfx: str, deps: list[int], it: int, mb: int, us: float,
              flops: int, tensor: int) -> int:
        """Ring attention (Liu et al. 2023; Megatron-LM's context parallelism through TransformerEngine):
        the rank computes its attention in cp parts, one per key/value block; while it computes with one
        block it sends that block on to the next rank of its ring and receives the next block from the
        previous one (cp - 1 passes). In backward each pass carries the block and its gradient (K, V,
        dK, dV: twice the bytes)."""
        assert self.s.ring is not None
        g, (prev, nxt) = self.g, self.s.ring
        size = w.kv_bytes * (1 if direction == dims.FORWARD else 2)
        d = 0 if direction == dims.FORWARD else 1
        base = (((it * self.mb_total + mb) * self.layer_count + w.index) * 2 + d) * self.cp
        part_us, part_flops = whole_us(us / self.cp), flops // self.cp
        t = g.compute(f"{direction}.{w.name}.{sfx}.part0", part_us, deps, flops=part_flops, tensor_bytes=tensor,
                      iteration=it)
        block = list(deps)  # the block in hand: the rank's own at first
        for j in range(self.cp - 1):
            g.send(f"cp_send.{direction}.{w.name}.{sfx}.{j}", nxt, size, base + j, block, iteration=it)
            r = g.recv(f"cp_recv.{direction}.{w.name}.{sfx}.{j}", prev, size, base + j, block, iteration=it)
            block = [r]
            t = g.compute(f"{direction}.{w.name}.{sfx}.part{j + 1}", part_us, [t, r], flops=part_flops,
                          tensor_bytes=tensor, iteration=it)
        return t

    def _layers(self, direction: str, layers: Sequence[LayerWork], sfx: str, deps: list[int], last: list[int],
                it: int, mb: int) -> Iterator[tuple[LayerWork, list[int], int, int | None]]:
        """A chunk's layers in `direction`, in the order given: each one's sharded parameters
        all-gathered (one layer ahead, after `last`), its communication before its compute, the
        compute, the communication after. Yields every layer with what follows it (the tasks its
        communication after ends with), its compute and its all-gather (None: none)."""
        prefix = "fwd" if direction == dims.FORWARD else "bwd"
        computes: list[int] = []
        gather: int | None = None
        for i, w in enumerate(layers):
            ag_deps = [gather] if gather is not None else list(last)
            if i >= 2:
                ag_deps.append(computes[i - 2])  # prefetch one layer ahead, not more
            got = self._gather(f"{prefix}.{sfx}", w, ag_deps, it)
            gather = got if got is not None else gather
            before, after = dims.layer_comms(self.job, w, direction)
            deps = self._comms(before, direction, w, sfx, deps, it, mb)
            t = self._compute(direction, w, sfx, deps + ([got] if got is not None else []), it, mb)
            computes.append(t)
            deps = self._comms(after, direction, w, sfx, [t], it, mb)
            yield w, deps, t, got

    def forward(self, it: int, mb: int, chunk: int, last: list[int]) -> list[int]:
        g, s = self.g, self.s
        layers, prev, nxt = s.chunks[chunk], s.prevs[chunk], s.nexts[chunk]
        sfx = f"mb{mb}.it{it}" if self.v == 1 else f"mb{mb}.c{chunk}.it{it}"
        deps = list(last)
        if prev is not None:
            deps.append(g.recv(f"recv_act.{sfx}", prev, layers[0].p2p_in_bytes,
                               self._tag(it, mb, chunk, prev_of=True, direction=FORWARD), list(last), iteration=it))
        for _, ends, _, _ in self._layers(dims.FORWARD, layers, sfx, deps, last, it, mb):
            deps = ends
        if nxt is not None:
            g.send(f"send_act.{sfx}", nxt, layers[-1].p2p_bytes,
                   self._tag(it, mb, chunk, prev_of=False, direction=FORWARD), deps, iteration=it)
        return deps

    def backward(self, it: int, mb: int, chunk: int, last: list[int]) -> tuple[list[int], dict[int, list[int]],
                                                                                list[int]]:
        g, s = self.g, self.s
        layers, prev, nxt = s.chunks[chunk], s.prevs[chunk], s.nexts[chunk]
        sfx = f"mb{mb}.it{it}" if self.v == 1 else f"mb{mb}.c{chunk}.it{it}"
        deps = list(last)
        if nxt is not None:
            deps.append(g.recv(f"recv_grad.{sfx}", nxt, layers[-1].p2p_bytes,
                               self._tag(it, mb, chunk, prev_of=False, direction=BACKWARD), list(last), iteration=it))
        done: dict[int, list[int]] = {}
        scatters: list[int] = []
        for w, ends, t, got in self._layers(dims.BACKWARD, layers[::-1], sfx, deps, last, it, mb):
            deps = ends
            # A gradient bucket goes once the layer's backward compute is done; with point-to-point
            # all-to-alls, once the layer's messages are too: a rank waits for their receives outside
            # the one-message-at-a-time rule, and a bucket's collective issued in between could wait
            # for a member that waits for this rank's next collective.
            done[w.index] = deps if self.pairwise and w.a2a_bytes and self.s.experts else [t]
            if got is not None:
                assert s.dp_group is not None
                scatters.append(g.collective(f"fsdp_scatter.{w.name}.{sfx}", Collective.REDUCE_SCATTER,
                                             w.grad_bytes, [t], group=s.dp_group, iteration=it))
        if prev is not None:
            g.send(f"send_grad.{sfx}", prev, layers[0].p2p_in_bytes,
                   self._tag(it, mb, chunk, prev_of=True, direction=BACKWARD), deps, iteration=it)
        return deps, done, scatters

    def _tag(self, it: int, mb: int, chunk: int, *, prev_of: bool, direction: int) -> int:
        """The tag of a transfer between this rank's `chunk` and its previous (`prev_of`) or next stage,
        named by the model chunk of the earlier stage of the two (the stage before rank 0's chunk c is
        the last rank's chunk c - 1)."""
        lower = self.s.stages[chunk] - (1 if prev_of else 0)
        return p2p_tag(it, mb, self.mb_total, direction, lower // self.s.per_chunk, self.v)

    # -- one iteration ---------------------------------------------------------------------------

    def iteration(self, it: int, after: list[int]) -> list[int]:
        last = list(after)
        final: dict[int, list[int]] = {}
        scatters: list[int] = []
        for step in range(self.gas):
            for kind, mb, chunk in self.s.ops:
                mb += step * self.m
                if kind == "F":
                    last = self.forward(it, mb, chunk, last)
                else:
                    last, done, rs = self.backward(it, mb, chunk, last)
                    scatters += rs
                    final.update(done)
        return self.step(it, last, final, scatters)

    def _buckets(self, expert: bool) -> list[Bucket]:
        """The rank's gradient buckets in backward order: of its dense gradients, or of its experts'."""
        costs = [LayerCost(w.index, w.name, 0.0, 0.0, 0,
                           w.expert_grad_bytes if expert else w.grad_bytes - w.expert_grad_bytes, 0)
                 for w in self.s.layers]
        if self.zero is not None:
            return zero_buckets(costs, self.zero.reduce_bucket_elements * self.dtype)
        return ddp_buckets(costs, self.bucket_cap)

    def step(self, it: int, last: list[int], final: dict[int, list[int]], scatters: list[int]) -> list[int]:
        g, s = self.g, self.s
        params = sum(w.params for w in s.layers)
        model = self.scenario.resolved_model
        sync = s.dp_group is not None and s.dp > 1
        if not sync or self.shard_params:
            shard = -(-params // s.dp) if self.shard_params else params
            opt = whole_us(optimizer_us(self.scenario, model, params=shard))
            return [g.compute(f"optimizer.it{it}", opt, last + scatters, iteration=it)]
        assert s.dp_group is not None
        first_layer = final[s.layers[0].index]
        sets = [("", s.dp_group, s.dp, self._buckets(expert=False))]
        expert_group = s.groups.get("edp")
        if any(w.expert_grad_bytes for w in s.layers) and expert_group is not None:
            sets.append(("expert_", expert_group, s.edp, self._buckets(expert=True)))

        def ready(b: Bucket) -> list[int]:
            return list(final[b.ready_after] if self.overlap else first_layer)

        if self.sharding == "zero1":
            reduce = Collective.ALL_REDUCE if self.zero is not None and self.zero.gradients == "allreduce" \
                else Collective.REDUCE_SCATTER
            rs = [g.collective(f"zero1_{'allreduce' if reduce is Collective.ALL_REDUCE else 'scatter'}."
                               f"{what}bucket{b.index}.it{it}", reduce, b.size_bytes, ready(b), group=group,
                               iteration=it)
                  for what, group, _, buckets in sets for b in buckets]
            experts = sum(w.expert_grad_bytes for w in s.layers) // self.dtype
            shard = -(-(params - experts) // s.dp) + (-(-experts // s.edp) if experts else 0)
            opt = g.compute(f"optimizer.it{it}", whole_us(optimizer_us(self.scenario, model, params=shard)),
                            last + rs, iteration=it)
            ags = []
            for what, group, n, buckets in sets:
                for name, size in self._param_gathers(buckets, n):
                    ags.append(g.collective(f"zero1_gather.{what}{name}.it{it}", Collective.ALL_GATHER, size, [opt],
                                            group=group, iteration=it))
            return [opt, *ags]
        ars = [g.collective(f"allreduce.{what}bucket{b.index}.it{it}", Collective.ALL_REDUCE, b.size_bytes, ready(b),
                            group=group, iteration=it)
               for what, group, _, buckets in sets for b in buckets]
        opt = g.compute(f"optimizer.it{it}", whole_us(optimizer_us(self.scenario, model, params=params)), last + ars,
                        iteration=it)
        return [opt]

    def _param_gathers(self, buckets: list[Bucket], n: int) -> list[tuple[str, int]]:
        """The all-gathers of the updated parameters, (name, contribution bytes): one per gradient bucket
        (1/n of it each), or with `parallelism.zero` DeepSpeed's `all_gather_dp_groups` pieces of the
        rank's shard: max(1, shard x n // allgather_bucket_elements) of them, the last taking the rest."""
        if self.zero is None:
            return [(f"bucket{b.index}", -(-b.size_bytes // n)) for b in buckets]
        shard = -(-sum(b.size_bytes for b in buckets) // self.dtype // n)
        pieces = max(1, shard * n // self.zero.allgather_bucket_elements)
        each = shard // pieces
        return [(f"shard{k}", (each if k < pieces - 1 else shard - each * (pieces - 1)) * self.dtype)
                for k in range(pieces)]


def _group_map(template: _Rank, rank: _Rank) -> dict[int, int] | None:
    """The template's group ids -> the rank's, dimension by dimension (None: the same groups)."""
    out = {t: g for t, g in zip(template.groups.values(), rank.groups.values(), strict=True)
           if t is not None and g is not None and t != g}
    return out or None


def _peer_map(template_rank: int, template: _Rank, rank: int, spec: _Rank) -> dict[int, int] | None:
    """The template's peers -> the rank's: stage neighbours chunk by chunk, the context-parallel
    ring, and the expert-parallel group by position relative to each (None: the same peers)."""
    pairs = [(a, b) for a, b in zip([*template.prevs, *template.nexts], [*spec.prevs, *spec.nexts], strict=True)
             if a is not None and b is not None]
    if template.ring is not None and spec.ring is not None:
        pairs += list(zip(template.ring, spec.ring, strict=True))
    if template.experts:
        n, me_t, me = len(template.experts), template.experts.index(template_rank), spec.experts.index(rank)
        pairs += [(template.experts[(me_t + j) % n], spec.experts[(me + j) % n]) for j in range(1, n)]
    out: dict[int, int] = {}
    for a, b in pairs:
        if out.setdefault(a, b) != b:
            raise ValueError(f"rank {rank} does not run rank {template_rank}'s program: its peer {a} is both "
                             f"{out[a]} and {b}")
    return {a: b for a, b in out.items() if a != b} or None


@dataclass(frozen=True)
class _Plan:
    """What every rank's program of a job is made from: its partition and layout (`layout.groups`
    holds the groups registered so far)."""

    scenario: Scenario
    part: Partition
    job: Job
    layout: Layout

    @property
    def keys(self) -> int:
        """Programs of the job: one per stage (per stage and tensor index layer-wise)."""
        p = self.scenario.parallelism
        return p.pp * p.tp if self.part.layerwise else p.pp

    def representative(self, key: int) -> int:
        """The first rank of program `key` (the one its template is built for)."""
        tp = self.scenario.parallelism.tp
        if self.part.layerwise:
            return self.layout.rank(key % tp, 0, key // tp, 0)
        return self.layout.rank(0, 0, key, 0)


def _plan(scenario: Scenario) -> _Plan:
    p = scenario.parallelism
    part = partition(scenario)
    return _Plan(scenario, part, Job(p, split=p.tp > 1 and not part.layerwise), Layout(p.dp, p.tp, p.pp, p.cp, p.ep))


def _rank_spec(plan: _Plan, r: int) -> _Rank:
    """Everything rank `r`'s graph depends on (its groups registered in `plan.layout` when new)."""
    p, part, layout = plan.scenario.parallelism, plan.part, plan.layout
    v = p.virtual_stages

    def stage_rank(g: int, t: int, d: int, c: int) -> int:
        """The rank of global stage `g` (of pp x virtual_stages, or pp x tp layer-wise)."""
        if part.layerwise:
            return layout.rank(g % p.tp, d, g // p.tp, c)
        return layout.rank(t, d, g % p.pp, c)

    c = layout.coord(r)
    if part.layerwise:
        stages = [c.s * p.tp + c.t]
        ops: list[ChunkOp] = [(k, mb, 0) for k, mb in schedule(p.schedule, part.parts, stages[0], p.microbatches)]
    else:
        stages = [k * p.pp + c.s for k in range(v)]
        ops = ([(k, mb, 0) for k, mb in schedule(p.schedule, part.parts, c.s, p.microbatches)] if v == 1
               else interleaved_schedule(p.pp, c.s, p.microbatches, v))
    groups = dims.rank_groups(layout, plan.job, c)
    experts = dims.BY_NAME["ep"].members(layout, c) if p.ep > 1 and dims.BY_NAME["ep"].members else ()
    ring = None
    if p.cp > 1:
        ring = (layout.rank(c.t, c.d, c.s, (c.c - 1) % p.cp), layout.rank(c.t, c.d, c.s, (c.c + 1) % p.cp))
    return _Rank(
        chunks=[[part.works[i] for i in part.stages[gs]] for gs in stages],
        ops=ops,
        prevs=[stage_rank(gs - 1, c.t, c.d, c.c) if gs > 0 else None for gs in stages],
        nexts=[stage_rank(gs + 1, c.t, c.d, c.c) if gs + 1 < part.parts else None for gs in stages],
        groups=groups,
        dp=p.dp * p.cp,
        edp=p.dp * p.cp // p.ep,
        ring=ring,
        experts=experts,
        stages=stages,
        per_chunk=part.parts // v,
    )


def _build(plan: _Plan, r: int, spec: _Rank) -> RankGraph:
    """Rank `r`'s own graph (a template for the ranks that run the same program)."""
    g = RankGraph(rank=r)
    builder = _Builder(plan.scenario, plan.job, spec, g)
    after: list[int] = []
    for it in range(plan.scenario.training.iterations):
        after = builder.iteration(it, after)
    return g


def compile_hybrid(scenario: Scenario) -> ExecutionGraph:
    """The execution graph of any dp x tp x pp x cp (x ep) combination, with any sharding and schedule."""
    plan = _plan(scenario)
    layout = plan.layout
    dims.register_groups(layout, plan.job)
    graphs: list[RankGraph] = []
    # One program per stage (chunk stages, or stage and tensor index layer-wise): built for the first
    # rank that runs it, bound to the groups and peers of every other rank that does.
    templates: dict[tuple[int, ...], tuple[RankGraph, _Rank]] = {}
    for r in range(layout.npus):
        spec = _rank_spec(plan, r)
        found = templates.get(tuple(spec.stages))
        if found is not None:
            template, tspec = found
            graphs.append(RankGraph(rank=r, tasks=template.tasks, groups=_group_map(tspec, spec),
                                    peers=_peer_map(template.rank, tspec, r, spec)))
            continue
        g = _build(plan, r, spec)
        templates[tuple(spec.stages)] = (g, spec)
        graphs.append(g)
    return ExecutionGraph(ranks=graphs, groups=dict(layout.groups))


def distinct_hybrid(scenario: Scenario) -> tuple[list[tuple[RankGraph, int]], dict[int, tuple[int, ...]]]:
    """Only the distinct graphs of `compile_hybrid` (one per program, built for its first rank), each
    with how many ranks run it, and the groups they use: what the job costs, without a structure per
    rank (a job of millions of ranks is estimated in the time of its stages)."""
    plan = _plan(scenario)
    per = plan.layout.npus // plan.keys
    graphs = []
    for key in range(plan.keys):
        r = plan.representative(key)
        graphs.append((_build(plan, r, _rank_spec(plan, r)), per))
    return graphs, dict(plan.layout.groups)
