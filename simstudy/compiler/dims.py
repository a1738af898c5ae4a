"""The parallelism dimensions: one entry each, the one place a dimension is added.

An entry says what a dimension is to the compiler: its spec field (`parallelism.<name>`, declared
with its description in `simstudy.spec.parallelism`), which ranks form one of its communicator
groups (by coordinate, see `layout`), whether its groups run collectives in a job, and the
messages it adds around each layer's forward and backward compute (`layer_comms`). The builder
(`hybrid`) registers every dimension's groups in table order and nests each layer's messages in
table order: the messages before a layer's compute in table order, the messages after it in the
reverse order (an outer dimension's messages enclose an inner one's). What a dimension does once
per microbatch or iteration rather than per layer (the pipeline's sends between stages, the
data-parallel gradient synchronisation) is its step in `hybrid`, named after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simstudy.compiler.graph import Collective
from simstudy.compiler.layout import Coord, Layout
from simstudy.compiler.tensor import LayerWork, tensor_comms
from simstudy.spec import Parallelism

FORWARD, BACKWARD = "fwd", "bwd"


@dataclass(frozen=True)
class Comm:
    """One collective a dimension adds next to a layer's compute: named `<label>.<fwd|bwd>.<layer>...`,
    of `kind` and ASTRA-SIM size `size`, over the rank's group of dimension `dim`."""

    label: str
    kind: Collective
    size: int
    dim: str


@dataclass(frozen=True)
class Job:
    """What the dimensions' rules read of a job: its parallelism and whether tensor parallelism
    splits layers (Megatron) or adds stages (layer-wise)."""

    parallelism: Parallelism
    split: bool


LayerComms = tuple[list[Comm], list[Comm]]


@dataclass(frozen=True)
class Dimension:
    """One parallelism dimension (see the module docstring)."""

    name: str
    what: str
    members: Callable[[Layout, Coord], tuple[int, ...]] | None
    active: Callable[[Job], bool]
    layer_comms: Callable[[Job, LayerWork, str], LayerComms] | None = None


def _none(job: Job, w: LayerWork, direction: str) -> LayerComms:
    return [], []


def _tensor_members(layout: Layout, c: Coord) -> tuple[int, ...]:
    return tuple(layout.rank(t, c.d, c.s, c.c) for t in range(layout.tp))


def _data_members(layout: Layout, c: Coord) -> tuple[int, ...]:
    """The ranks that hold the same parameters: every data-parallel replica and context index."""
    return tuple(layout.rank(c.t, d, c.s, k) for d in range(layout.dp) for k in range(layout.cp))


def _expert_members(layout: Layout, c: Coord) -> tuple[int, ...]:
    """`ep` consecutive data-parallel replicas: together they hold every expert of a MoE layer."""
    first = c.d - c.d % layout.ep
    return tuple(layout.rank(c.t, d, c.s, c.c) for d in range(first, first + layout.ep))


def _expert_data_members(layout: Layout, c: Coord) -> tuple[int, ...]:
    """The ranks that hold the same experts: the same place in every expert-parallel group, every
    context index."""
    return tuple(layout.rank(c.t, d, c.s, k) for d in range(c.d % layout.ep, layout.dp, layout.ep)
                 for k in range(layout.cp))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _tensor_comms(job: Job, w: LayerWork, direction: str) -> LayerComms:
    """Megatron: the collective after a split layer's forward (all-reduce of its output, or the
    all-gather of a column-parallel linear's) and the all-reduce of its input gradient after its
    backward (see `tensor.LAYER_KINDS`).

    With sequence parallelism (`sp`, Korthikanti et al. 2022; Megatron-LM's
    `LinearWithGradAccumulationAndAsyncCommunication`) the activations between split layers are
    1/tp of the sequence: a split layer all-gathers its input before its forward (the embedding
    has none) and reduce-scatters its output after (a column-parallel linear keeps its output
    split, the LM head's goes to the parallel loss); its backward all-gathers the output gradient
    (for a layer whose forward reduce-scattered), all-gathers its input again for the weight
    gradient, and reduce-scatters the input gradient."""
    if not job.split:
        return [], []
    p = job.parallelism
    fwd, bwd = tensor_comms(w, p.tp)
    if not p.sp:
        if direction == FORWARD:
            return [], ([Comm(f"tp_{fwd[0].value}", fwd[0], fwd[1], "tp")] if fwd is not None and fwd[1] > 0
                        else [])
        return [], ([Comm("tp_all_reduce", Collective.ALL_REDUCE, bwd, "tp")] if bwd > 0 else [])
    if not w.split:
        return [], []
    gathers_input = w.kind != "embedding" and w.in_bytes > 0
    scatters_output = fwd is not None and fwd[0] is Collective.ALL_REDUCE
    gather_in = Comm("sp_all_gather", Collective.ALL_GATHER, _ceil_div(w.in_bytes, p.tp), "tp")
    if direction == FORWARD:
        return ([gather_in] if gathers_input else [],
                [Comm("sp_reduce_scatter", Collective.REDUCE_SCATTER, w.act_bytes, "tp")] if scatters_output else [])
    before = []
    if scatters_output:
        before.append(Comm("sp_all_gather", Collective.ALL_GATHER, _ceil_div(w.act_bytes, p.tp), "tp"))
    if gathers_input:
        before.append(Comm("sp_regather", Collective.ALL_GATHER, _ceil_div(w.in_bytes, p.tp), "tp"))
    after = [Comm("sp_reduce_scatter", Collective.REDUCE_SCATTER, w.in_bytes, "tp")] if bwd > 0 else []
    return before, after


def _expert_comms(job: Job, w: LayerWork, direction: str) -> LayerComms:
    """Expert parallelism (GShard, Megatron-LM's all-to-all token dispatcher): a MoE layer sends
    every token to the ranks of its top_k experts before the experts run (dispatch) and the results
    back after (combine), each an all-to-all over the expert-parallel group of
    tokens x top_k x capacity_factor x hidden (the capacity pads every expert's share); the backward
    sends the gradients the same two ways, in the opposite order."""
    if job.parallelism.ep == 1 or w.kind != "moe" or w.a2a_bytes == 0:
        return [], []
    a2a = Collective.ALL_TO_ALL
    if direction == FORWARD:
        return [Comm("ep_dispatch", a2a, w.a2a_bytes, "ep")], [Comm("ep_combine", a2a, w.a2a_bytes, "ep")]
    return [Comm("ep_combine", a2a, w.a2a_bytes, "ep")], [Comm("ep_dispatch", a2a, w.a2a_bytes, "ep")]


#: The dimensions, outermost first (the order their groups get ids and their messages nest).
DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("tp", "tensor parallelism: Megatron splits of every layer over tp ranks (`tensor`), with sequence "
                    "parallelism (`sp`) when asked",
              _tensor_members, lambda job: job.split, _tensor_comms),
    Dimension("cp", "context parallelism: every sequence split over cp ranks; attention passes key/value blocks "
                    "around the ring of a rank's cp peers point to point (`hybrid._Builder._ring`)",
              None, lambda job: False),
    Dimension("ep", "expert parallelism: the experts of MoE layers sharded over ep data-parallel replicas, an "
                    "all-to-all before and after every MoE layer",
              _expert_members, lambda job: job.parallelism.ep > 1, _expert_comms),
    Dimension("dp", "data parallelism: replicas (with every context index) that synchronise gradients "
                    "(`hybrid._Builder.step`), or shard parameters (fsdp/zero3: `hybrid._Builder._gather`)",
              _data_members, lambda job: job.parallelism.dp * job.parallelism.cp > 1, _none),
    Dimension("edp", "expert data parallelism: the ranks that hold the same experts, which synchronise their "
                     "gradients (`hybrid._Builder.step`)",
              _expert_data_members, lambda job: job.parallelism.ep > 1 and job.parallelism.dp * job.parallelism.cp
              > job.parallelism.ep, _none),
    Dimension("pp", "pipeline parallelism: consecutive stages that pass activations and gradients point to "
                    "point (`pipeline`)", None, lambda job: False),
)
BY_NAME: dict[str, Dimension] = {d.name: d for d in DIMENSIONS}


def register_groups(layout: Layout, job: Job) -> None:
    """Give every group in use an id in a fixed order: dimension by dimension in table order, ranks
    in order within each."""
    coords = [layout.coord(r) for r in range(layout.npus)]
    for dim in DIMENSIONS:
        if dim.members is None or not dim.active(job):
            continue
        for c in coords:
            layout.group_id(dim.members(layout, c))


def rank_groups(layout: Layout, job: Job, c: Coord) -> dict[str, int | None]:
    """The group id of each dimension for the rank at `c` (None: that dimension runs no collective)."""
    return {dim.name: layout.group_id(dim.members(layout, c)) if dim.members is not None and dim.active(job)
            else None for dim in DIMENSIONS}


def layer_comms(job: Job, w: LayerWork, direction: str) -> LayerComms:
    """Every dimension's messages before and after one layer's compute, nested in table order."""
    before: list[Comm] = []
    after: list[Comm] = []
    for dim in DIMENSIONS:
        if dim.layer_comms is None:
            continue
        b, a = dim.layer_comms(job, w, direction)
        before += b
        after = a + after
    return before, after
