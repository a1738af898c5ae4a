"""Model specs: a network as an ordered list of layers with their costs.

A layer is described by what the traffic and compute of training depend on: its parameter
count (gradient and weight bytes), its forward FLOPs per sample (compute time) and the bytes of
its output activation per sample (pipeline / tensor-parallel transfers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from simstudy.spec.base import Spec

ModelFamily = Literal["cnn", "rnn", "transformer", "mlp", "other"]


@dataclass(frozen=True)
class Family:
    """A model family: what it is and how model parallelism cuts it.

    `tensor_split` is how tensor parallelism (`parallelism.tp`) splits the family's models:
    `megatron` splits the layers themselves over the tensor-parallel group (heads, MLP columns and
    rows, the vocabulary; see `simstudy.compile.tensor`), `layerwise` gives each tensor-parallel
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
        description="layer type: conv, linear, embedding, lstm, attention, norm, pool, ...",
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

    @model_serializer(mode="wrap")
    def _drop_unset_heads(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave `heads` out when it is not given, so specs written before it existed keep their
        canonical JSON (and their sweep run keys)."""
        data = handler(self)
        if isinstance(data, dict) and data.get("heads", 0) is None:
            del data["heads"]
        return data


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
