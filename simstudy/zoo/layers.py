"""Counting helpers shared by the zoo builders: shapes, parameters, FLOPs and `Layer` values.

Conventions used by every builder:

* FLOPs are forward FLOPs for one sample; a multiply-add counts as 2 FLOPs. Only tensor
  contractions are counted (convolutions, linear layers, LSTM gate matmuls, attention score and
  context matmuls), as in torchvision's model metadata, fvcore, the model papers and the
  Kaplan / Megatron formulas. Element-wise ops (bias, norm, activation, residual add, softmax)
  and pooling are memory-bound, add well under 2 % to the count, and are not counted.
* Activation bytes are the elements of the layer's output tensor times 4 (fp32).
* Parameter-free ops are fused into the preceding parameterised layer (activation, residual
  add, concatenation). Pooling layers, which change the size of the activation passed on, are
  0-parameter layers of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from simstudy.spec.model import Layer
from simstudy.zoo.errors import ZooError

FP32_BYTES = 4


@dataclass(frozen=True)
class FeatureMap:
    """The shape of a CNN activation for one sample: channels x height x width."""

    channels: int
    height: int
    width: int

    @property
    def elements(self) -> int:
        """Number of elements of the tensor."""
        return self.channels * self.height * self.width

    @property
    def bytes(self) -> int:
        """Bytes of the tensor in fp32."""
        return self.elements * FP32_BYTES


def require_at_least(option: str, value: int | float, minimum: int | float) -> None:
    """Raise `ZooError` unless `value >= minimum`."""
    if value < minimum:
        raise ZooError(f"option {option!r} must be >= {minimum}, got {value!r}")


def require_choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    """Raise `ZooError` unless `value` is one of `choices`."""
    if value not in choices:
        raise ZooError(f"option {option!r} must be one of {', '.join(choices)}; got {value!r}")


def conv_out(size: int, kernel: int, stride: int, padding: int, where: str) -> int:
    """Output length of a convolution or pooling window along one spatial axis."""
    out = (size + 2 * padding - kernel) // stride + 1
    if out < 1:
        raise ZooError(
            f"the input is too small: {where!r} would get an empty output "
            f"(input {size}, kernel {kernel}); use a larger image_size"
        )
    return out


def conv(
    name: str,
    x: FeatureMap,
    out_channels: int,
    kernel: int,
    *,
    stride: int = 1,
    padding: int = 0,
    groups: int = 1,
    bias: bool = False,
    bn: bool = True,
    pre_bn: bool = False,
    passed_channels: int = 0,
) -> tuple[Layer, FeatureMap]:
    """A 2-D convolution fused with its batch norm(s) and activation.

    `bn` adds a batch norm on the output channels (conv-bn-relu), `pre_bn` one on the input
    channels (DenseNet's bn-relu-conv). `passed_channels` are channels concatenated to the
    output by a parameter-free concatenation folded into this layer (DenseNet).
    """
    height = conv_out(x.height, kernel, stride, padding, name)
    width = conv_out(x.width, kernel, stride, padding, name)
    weights = out_channels * (x.channels // groups) * kernel * kernel
    params = weights + (out_channels if bias else 0)
    params += 2 * out_channels if bn else 0
    params += 2 * x.channels if pre_bn else 0
    out = FeatureMap(out_channels + passed_channels, height, width)
    layer = Layer(
        name=name,
        kind="conv",
        params=params,
        fwd_flops_per_sample=2.0 * weights * height * width,
        activation_bytes_per_sample=out.bytes,
    )
    return layer, out


def pool(name: str, x: FeatureMap, kernel: int, stride: int, padding: int = 0) -> tuple[Layer, FeatureMap]:
    """A max or average pooling layer (no parameters, FLOPs not counted)."""
    height = conv_out(x.height, kernel, stride, padding, name)
    width = conv_out(x.width, kernel, stride, padding, name)
    y = FeatureMap(x.channels, height, width)
    return zero_layer(name, "pool", y.bytes), y


def adaptive_pool(name: str, x: FeatureMap, size: int) -> tuple[Layer, FeatureMap]:
    """An adaptive average pooling layer to `size` x `size` (global pooling for size 1)."""
    y = FeatureMap(x.channels, size, size)
    return zero_layer(name, "pool", y.bytes), y


def batch_norm(name: str, x: FeatureMap) -> Layer:
    """A stand-alone batch norm (+ activation) over the channels of `x`."""
    return Layer(
        name=name,
        kind="norm",
        params=2 * x.channels,
        fwd_flops_per_sample=0.0,
        activation_bytes_per_sample=x.bytes,
    )


def linear(
    name: str,
    in_features: int,
    out_features: int,
    *,
    tokens: int = 1,
    bias: bool = True,
    kind: str = "linear",
) -> Layer:
    """A fully connected layer applied to `tokens` positions of one sample."""
    weights = in_features * out_features
    return Layer(
        name=name,
        kind=kind,
        params=weights + (out_features if bias else 0),
        fwd_flops_per_sample=2.0 * weights * tokens,
        activation_bytes_per_sample=tokens * out_features * FP32_BYTES,
    )


def embedding_layer(name: str, rows: int, dim: int, *, tokens: int, extra_params: int = 0) -> Layer:
    """An embedding table lookup (a gather: no FLOPs); `extra_params` e.g. a fused norm."""
    return Layer(
        name=name,
        kind="embedding",
        params=rows * dim + extra_params,
        fwd_flops_per_sample=0.0,
        activation_bytes_per_sample=tokens * dim * FP32_BYTES,
    )


def zero_layer(name: str, kind: str, activation_bytes: int, flops: float = 0.0) -> Layer:
    """A layer without parameters (pooling, a tied output projection...)."""
    return Layer(
        name=name,
        kind=kind,
        params=0,
        fwd_flops_per_sample=flops,
        activation_bytes_per_sample=activation_bytes,
    )
