"""Model specs: a network as an ordered list of layers with their costs.

A layer is described by what the traffic and compute of training depend on: its parameter
count (gradient and weight bytes), its forward FLOPs per sample (compute time) and the bytes of
its output activation per sample (pipeline / tensor-parallel transfers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from simstudy.spec.base import Spec

ModelFamily = Literal["cnn", "rnn", "transformer", "mlp", "other"]


@dataclass(frozen=True)
class Family:
    """A model family: what it is and how model parallelism cuts it.

    `tensor_split` is how tensor parallelism (`parallelism.tp`) splits the family's models:
    `megatron` splits the layers themselves over the tensor-parallel group (heads, MLP columns and
    rows, the vocabulary; see `simstudy.compiler.tensor`), `layerwise` gives each tensor-parallel
    rank consecutive whole layers, like pipeline stages."""

    name: ModelFamily
    description: str
    tensor_split: Literal["megatron", "layerwise"]


#: Every model family, by name: the one table a new family is added to.
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("cnn", "convolutional networks", "layerwise"),
    Family("rnn", "recurrent networks (LSTM, GRU)", "layerwise"),
    Family("transformer", "attention blocks (encoders, decoders, mixtures of experts)", "megatron"),
    Family("mlp", "multi-layer perceptrons", "layerwise"),
    Family("other", "anything else", "layerwise"),
)}
assert set(FAMILIES) == set(get_args(ModelFamily)), "FAMILIES and ModelFamily must name the same families"


class Layer(Spec):
    """One layer (or fused block) of a model, in forward execution order."""

    name: str = Field(min_length=1, description="unique name of the layer within the model")
    kind: str = Field(
        default="other",
        description="layer type: conv, linear, embedding, lstm, attention, mlp, moe (mixture of experts), norm, "
        "pool, ...",
    )
    params: int = Field(ge=0, description="trainable parameters (count, not bytes)")
    fwd_flops_per_sample: float = Field(
        ge=0, description="forward FLOPs for one sample (a multiply-add counts as 2 FLOPs)"
    )
    activation_bytes_per_sample: int = Field(
        ge=0,
        description="bytes of this layer's output activation for one sample, in fp32",
    )
    heads: int | None = Field(
        default=None,
        ge=1,
        description="attention heads (attention layers): tensor parallelism splits them, so tp must divide them",
    )
    kv_heads: int | None = Field(
        default=None,
        ge=1,
        description="key/value heads of grouped-query attention (attention layers; default: heads): context "
        "parallelism passes the keys and values of these heads around its ring",
    )
    experts: int | None = Field(
        default=None, ge=1, description="routed experts of a mixture-of-experts layer (kind moe)"
    )
    top_k: int | None = Field(default=None, ge=1, description="experts each token is routed to (kind moe)")
    capacity_factor: float | None = Field(
        default=None,
        gt=0,
        description="expert capacity over an even share of the tokens (kind moe): each expert takes "
        "capacity_factor x tokens x top_k / experts tokens, padded to that, so expert parallelism's "
        "all-to-all carries tokens x top_k x capacity_factor per rank",
    )
    expert_params: int | None = Field(
        default=None,
        ge=0,
        description="parameters of the routed experts, part of `params` (kind moe): expert parallelism "
        "shards them over its ranks; the rest (router, shared experts, norm) is replicated",
    )

    @model_serializer(mode="wrap")
    def _drop_unset_optional(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave the optional fields (`heads`, the attention and expert fields) out when they are
        not given, so specs written before they existed keep their canonical JSON (and their sweep
        run keys)."""
        data = handler(self)
        if isinstance(data, dict):
            for key in _OPTIONAL_LAYER_FIELDS:
                if key in data and data[key] is None:
                    del data[key]
        return data

    @model_validator(mode="after")
    def _check_experts(self) -> Layer:
        moe = (self.experts, self.top_k, self.capacity_factor, self.expert_params)
        if self.kind == "moe" and None in moe:
            raise ValueError(f"layer {self.name!r} of kind moe needs experts, top_k, capacity_factor and "
                             "expert_params")
        if self.kind != "moe" and any(v is not None for v in moe):
            raise ValueError(f"experts, top_k, capacity_factor and expert_params belong to layers of kind moe, "
                             f"not {self.kind!r} (layer {self.name!r})")
        if self.experts is not None and self.top_k is not None and self.top_k > self.experts:
            raise ValueError(f"layer {self.name!r}: top_k = {self.top_k} is more than its {self.experts} experts")
        if self.expert_params is not None and self.expert_params > self.params:
            raise ValueError(f"layer {self.name!r}: expert_params ({self.expert_params}) exceed params "
                             f"({self.params})")
        if self.kv_heads is not None and (self.heads is None or self.heads % self.kv_heads):
            raise ValueError(f"layer {self.name!r}: kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
        return self


_OPTIONAL_LAYER_FIELDS = ("heads", "kv_heads", "experts", "top_k", "capacity_factor", "expert_params")


class Model(Spec):
    """An explicit model: a name, a family and its layers."""

    kind: Literal["layers"] = "layers"
    name: str = Field(min_length=1, description="model name, used in trace names and reports")
    family: ModelFamily = Field(default="other", description="cnn, rnn, transformer, mlp or other")
    layers: tuple[Layer, ...] = Field(min_length=1, description="layers in forward order")

    @field_validator("layers")
    @classmethod
    def _unique_names(cls, layers: tuple[Layer, ...]) -> tuple[Layer, ...]:
        seen: set[str] = set()
        for layer in layers:
            if layer.name in seen:
                raise ValueError(f"layer names must be unique; {layer.name!r} appears twice")
            seen.add(layer.name)
        return layers

    @property
    def params(self) -> int:
        """Total trainable parameters."""
        return sum(layer.params for layer in self.layers)

    @property
    def fwd_flops_per_sample(self) -> float:
        """Total forward FLOPs per sample."""
        return sum(layer.fwd_flops_per_sample for layer in self.layers)


ZooOption = int | float | str | bool


class ZooModel(Spec):
    """A reference to a built-in model of `simstudy.zoo`, with its options.

    In YAML a plain string (`model: resnet50`) is short for `{zoo: resnet50}`.
    """

    kind: Literal["zoo"] = "zoo"
    zoo: str = Field(min_length=1, description="name of a built-in model (see `simstudy models`)")
    options: dict[str, ZooOption] = Field(
        default_factory=dict,
        description="builder options, e.g. image_size, num_classes, layers, hidden, seq_len",
    )


ModelSpec = Annotated[Model | ZooModel, Field(discriminator="kind")]
