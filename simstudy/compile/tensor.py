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

from simstudy.compile.costs import LayerCost
from simstudy.compile.graph import Collective
from simstudy.spec import Model

#: Layer kinds Megatron splits over the tensor-parallel group.
SPLIT_KINDS = frozenset({"attention", "mlp", "embedding", "linear"})


@dataclass(frozen=True, slots=True)
class LayerWork:
    """One layer on one rank for one microbatch.

    Times, FLOPs and activation bytes are per microbatch; `params` and `grad_bytes` are what the
    rank holds (before any data-parallel sharding). `fwd_comm` is the tensor-parallel collective
    after the forward (kind, ASTRA-SIM size), `bwd_comm` the all-reduce size of the input gradient
    after the backward (0: none).
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
    fwd_comm: tuple[Collective, int] | None = None
    bwd_comm: int = 0


def megatron(model: Model) -> bool:
    """True when tensor parallelism splits the layers of this model (Transformers)."""
    return model.family == "transformer"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def layer_works(
    model: Model, costs: list[LayerCost], *, microbatches: int, tp: int, dtype_bytes: int, microbatch_samples: int
) -> list[LayerWork]:
    """Every layer's work on one rank for one microbatch (split Megatron-style when tp > 1 and
    the model is a Transformer)."""
    split_model = tp > 1 and megatron(model)
    acts = [layer.activation_bytes_per_sample * microbatch_samples * dtype_bytes // 4 for layer in model.layers]
    last = len(model.layers) - 1
    out: list[LayerWork] = []
    for i, (layer, c) in enumerate(zip(model.layers, costs, strict=True)):
        in_bytes = acts[i - 1] if i > 0 else 0
        split = split_model and layer.kind in SPLIT_KINDS
        k = tp if split else 1
        params = _ceil_div(layer.params, k)
        fwd_comm: tuple[Collective, int] | None = None
        bwd_comm = 0
        if split:
            if layer.kind in ("attention", "mlp", "embedding"):
                fwd_comm = (Collective.ALL_REDUCE, acts[i])
            elif i != last:
                fwd_comm = (Collective.ALL_GATHER, _ceil_div(acts[i], tp))
            if layer.kind != "embedding" and i > 0:
                bwd_comm = in_bytes
        out.append(
            LayerWork(
                index=i,
                name=layer.name,
                fwd_us=c.fwd_us / microbatches / k,
                bwd_us=c.bwd_us / microbatches / k,
                fwd_flops=int(c.fwd_flops / microbatches / k),
                params=params,
                grad_bytes=params * dtype_bytes,
                act_bytes=acts[i],
                in_bytes=in_bytes,
                fwd_comm=fwd_comm,
                bwd_comm=bwd_comm,
            )
        )
    return out
