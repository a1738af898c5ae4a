"""Tensor (model) parallelism: what one rank computes, holds and communicates for one layer.

Transformers are split Megatron-style (Shoeybi et al. 2019) over a tensor-parallel group of tp
ranks; every rank of the group computes 1/tp of a split layer and holds 1/tp of its weights:

* attention, mlp: a column-parallel then a row-parallel linear. Forward: all-reduce of the
  block's output activation ("g"); backward: all-reduce of the gradient of its input ("f").
* embedding: vocabulary-parallel. Forward: all-reduce of its output; no input gradient.
* linear (e.g. the LM head): column-parallel. Backward: all-reduce of its input gradient;
  forward: all-gather of the output, except for the model's last layer, whose split logits go
  straight into a vocabulary-parallel loss (as Megatron's parallel cross-entropy does).
* every other kind (norms, pooling): replicated on every rank of the group, no communication.

Other model families (CNNs, RNNs, MLPs) are split layer-wise instead (`layerwise`): each
tensor-parallel rank owns consecutive layers and passes activations on point to point, exactly
like a pipeline stage (see `pipeline`); nothing is split inside a layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from simstudy.compiler.costs import LayerCost
from simstudy.compiler.graph import Collective
from simstudy.spec import Model
from simstudy.spec.model import FAMILIES


@dataclass(frozen=True)
class KindRule:
    """How Megatron splits one layer kind over the tensor-parallel group, and the collectives that
    split costs per microbatch: after the forward (`fwd`: all_reduce of the output, or all_gather of
    it unless the layer ends the model) and after the backward (`bwd_input`: all-reduce of the input
    gradient, except for the model's first layer)."""

    fwd: Collective | None
    bwd_input: bool


#: Layer kinds Megatron splits over the tensor-parallel group, and their collectives; every other
#: kind (norms, pooling) is replicated on every rank of the group and sends nothing.
LAYER_KINDS: dict[str, KindRule] = {
    "attention": KindRule(Collective.ALL_REDUCE, True),
    "mlp": KindRule(Collective.ALL_REDUCE, True),
    "embedding": KindRule(Collective.ALL_REDUCE, False),
    "linear": KindRule(Collective.ALL_GATHER, True),
    "moe": KindRule(Collective.ALL_REDUCE, True),  # experts split like an MLP (expert tensor parallel = tp)
}
SPLIT_KINDS = frozenset(LAYER_KINDS)


@dataclass(frozen=True, slots=True)
class LayerWork:
    """One layer on one rank for one microbatch.

    Times, FLOPs and activation bytes are per microbatch; `params` and `grad_bytes` are what the
    rank holds (before any data-parallel sharding). `split`: the layer is split over the
    tensor-parallel group (`LAYER_KINDS`); `last`: it is the model's last layer.
    """

    index: int
    name: str
    fwd_us: float
    bwd_us: float
    fwd_flops: int
    params: int
    grad_bytes: int
    act_bytes: int
    in_bytes: int
    kind: str = "other"
    split: bool = False
    last: bool = False
    #: context parallelism: bytes of the key/value block a rank passes on per ring step (attention layers)
    kv_bytes: int = 0
    #: expert parallelism: the all-to-all size (ASTRA-SIM's: the data each rank holds) of a MoE layer's
    #: dispatch and combine, tokens x top_k x capacity_factor x hidden
    a2a_bytes: int = 0
    #: the part of `grad_bytes` that belongs to the routed experts the rank holds (1/ep of them), when
    #: expert parallelism shards them (ep > 1; without it experts are synchronised like any layer)
    expert_grad_bytes: int = 0
    #: bytes of this layer's output as a pipeline stage passes it on (1/tp of it with sequence parallelism)
    p2p_bytes: int = 0
    #: bytes of this layer's input as the previous stage passed it
    p2p_in_bytes: int = 0


def megatron(model: Model) -> bool:
    """True when tensor parallelism splits the layers of this model (its family says so)."""
    return FAMILIES[model.family].tensor_split == "megatron"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tensor_comms(w: LayerWork, tp: int) -> tuple[tuple[Collective, int] | None, int]:
    """The tensor-parallel collectives of one split layer per microbatch: (after the forward: kind
    and ASTRA-SIM size, or None; after the backward: the all-reduce size of the input gradient, 0:
    none)."""
    rule = LAYER_KINDS.get(w.kind)
    if not w.split or rule is None:
        return None, 0
    fwd: tuple[Collective, int] | None = None
    if rule.fwd is Collective.ALL_REDUCE:
        fwd = (Collective.ALL_REDUCE, w.act_bytes)
    elif rule.fwd is Collective.ALL_GATHER and not w.last:
        fwd = (Collective.ALL_GATHER, _ceil_div(w.act_bytes, tp))
    return fwd, (w.in_bytes if rule.bwd_input and w.index > 0 else 0)


def layer_works(
    model: Model, costs: list[LayerCost], *, microbatches: int, tp: int, dtype_bytes: int, microbatch_samples: int,
    cp: int = 1, ep: int = 1, sp: bool = False,
) -> list[LayerWork]:
    """Every layer's work on one rank for one microbatch (split Megatron-style when tp > 1 and
    the model's family is split so). `microbatches`: microbatches per iteration (the costs are per
    iteration). Context parallelism (`cp`) gives each rank 1/cp of every sequence's tokens: its
    compute and activations; expert parallelism (`ep`) 1/ep of every MoE layer's routed experts;
    sequence parallelism (`sp`) 1/tp of the activations between tensor-parallel layers (norms run on
    them too)."""
    split_model = tp > 1 and megatron(model)
    acts = [-(-layer.activation_bytes_per_sample * microbatch_samples * dtype_bytes // 4 // cp) if cp > 1 else
            layer.activation_bytes_per_sample * microbatch_samples * dtype_bytes // 4 for layer in model.layers]
    shard = tp if split_model and sp else 1
    last = len(model.layers) - 1
    out: list[LayerWork] = []
    for i, (layer, c) in enumerate(zip(model.layers, costs, strict=True)):
        split = split_model and layer.kind in SPLIT_KINDS
        k = tp if split else 1
        work = k * cp * (shard if not split else 1)
        expert = layer.expert_params or 0
        params = _ceil_div(layer.params - expert, k) + _ceil_div(_ceil_div(expert, ep), k)
        kv = 0
        if layer.kind == "attention" and layer.heads is not None:
            kv_heads = layer.kv_heads or layer.heads
            kv = 2 * _ceil_div(acts[i] * _ceil_div(kv_heads, k), layer.heads)  # K and V of the rank's heads
        a2a = 0
        if layer.kind == "moe" and layer.top_k is not None and layer.capacity_factor is not None:
            a2a = int(acts[i] * layer.top_k * layer.capacity_factor)
        in_bytes = acts[i - 1] if i > 0 else 0
        out.append(
            LayerWork(
                index=i,
                name=layer.name,
                fwd_us=c.fwd_us / microbatches / work,
                bwd_us=c.bwd_us / microbatches / work,
                fwd_flops=int(c.fwd_flops / microbatches / work),
                params=params,
                grad_bytes=params * dtype_bytes,
                act_bytes=acts[i],
                in_bytes=in_bytes,
                kind=layer.kind,
                split=split,
                last=i == last,
                kv_bytes=kv,
                a2a_bytes=a2a,
                expert_grad_bytes=_ceil_div(_ceil_div(expert, ep), k) * dtype_bytes if ep > 1 else 0,
                p2p_bytes=_ceil_div(acts[i], shard),
                p2p_in_bytes=_ceil_div(in_bytes, shard),
            )
        )
    return out
