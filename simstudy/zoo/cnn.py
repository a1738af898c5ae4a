"""Convolutional networks, layer by layer, as defined by torchvision (and one tiny CNN).

Each convolution is fused with its batch norm and activation into one layer; residual adds and
DenseNet concatenations are folded into the layer before them; pooling layers are 0-parameter
layers of their own. FLOPs are 2 x multiply-accumulates of convolutions and linear layers.

The architectures' numbers (block counts, widths) are module constants, so that the real torch and
Keras models of captures (`simstudy.capturing`) are built from the same numbers.

Reference FLOPs: torchvision's model documentation ("GFLOPS" column of
https://pytorch.org/vision/stable/models.html, which counts multiply-accumulates), so the
expected forward FLOPs are 2 x that figure.
"""

from __future__ import annotations

from simstudy.spec.model import Layer, Model
from simstudy.zoo.layers import (
    FeatureMap,
    adaptive_pool,
    batch_norm,
    conv,
    linear,
    pool,
    require_at_least,
)

_MIN_IMAGE = 1


def _check(image_size: int, num_classes: int) -> FeatureMap:
    """Validate the common CNN options and return the input shape."""
    require_at_least("image_size", image_size, _MIN_IMAGE)
    require_at_least("num_classes", num_classes, 1)
    return FeatureMap(3, image_size, image_size)


# --- ResNet ---------------------------------------------------------------------------------

#: Bottleneck blocks per stage of each ResNet of the zoo (He et al. 2016, Table 1).
RESNET_BLOCKS: dict[str, tuple[int, int, int, int]] = {
    "resnet50": (3, 4, 6, 3),
    "resnet101": (3, 4, 23, 3),
}
#: The stem's output channels and each stage's bottleneck width ("planes").
RESNET_STEM = 64
RESNET_PLANES = (64, 128, 256, 512)
#: A bottleneck block's output channels, in multiples of its planes.
BOTTLENECK_EXPANSION = 4


def _bottleneck(prefix: str, x: FeatureMap, planes: int, stride: int) -> tuple[list[Layer], FeatureMap]:
    """A torchvision ResNet v1.5 bottleneck block (stride on the 3x3 convolution)."""
    conv1, y = conv(f"{prefix}.conv1", x, planes, 1)
    conv2, y = conv(f"{prefix}.conv2", y, planes, 3, stride=stride, padding=1)
    conv3, y = conv(f"{prefix}.conv3", y, BOTTLENECK_EXPANSION * planes, 1)
    layers = [conv1, conv2, conv3]
    if stride != 1 or x.channels != BOTTLENECK_EXPANSION * planes:
        downsample, _ = conv(f"{prefix}.downsample", x, BOTTLENECK_EXPANSION * planes, 1, stride=stride)
        layers.append(downsample)
    return layers, y


def _resnet(name: str, image_size: int, num_classes: int) -> Model:
    """The bottleneck ResNet `name`, with `RESNET_BLOCKS[name]` blocks per stage."""
    x = _check(image_size, num_classes)
    stem, x = conv("conv1", x, RESNET_STEM, 7, stride=2, padding=3)
    maxpool, x = pool("maxpool", x, 3, 2, 1)
    layers = [stem, maxpool]
    for stage, (count, planes) in enumerate(zip(RESNET_BLOCKS[name], RESNET_PLANES, strict=True), 1):
        for index in range(count):
            stride = 2 if index == 0 and stage > 1 else 1
            block, x = _bottleneck(f"layer{stage}.{index}", x, planes, stride)
            layers += block
    avgpool, x = adaptive_pool("avgpool", x, 1)
    layers += [avgpool, linear("fc", x.elements, num_classes)]
    return Model(name=name, family="cnn", layers=tuple(layers))


def resnet50(*, image_size: int = 224, num_classes: int = 1000) -> Model:
    """ResNet-50 (torchvision): 25,557,032 params, 8.18 GFLOPs (torchvision docs: 4.09 GMACs)."""
    return _resnet("resnet50", image_size, num_classes)


def resnet101(*, image_size: int = 224, num_classes: int = 1000) -> Model:
    """ResNet-101 (torchvision): 44,549,160 params, 15.60 GFLOPs (torchvision: 7.80 GMACs)."""
    return _resnet("resnet101", image_size, num_classes)


# --- MobileNetV2 ----------------------------------------------------------------------------

# (expansion t, output channels c, repeats n, first stride s), from the paper's Table 2.
MOBILENETV2_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
#: The stem's and the last 1x1 convolution's output channels.
MOBILENETV2_STEM = 32
MOBILENETV2_HEAD = 1280


def _inverted_residual(
    prefix: str, x: FeatureMap, expansion: int, out_channels: int, stride: int
) -> tuple[list[Layer], FeatureMap]:
    """An inverted residual block: 1x1 expand, 3x3 depthwise, 1x1 linear projection."""
    layers: list[Layer] = []
    y = x
    if expansion != 1:
        expand, y = conv(f"{prefix}.expand", y, x.channels * expansion, 1)
        layers.append(expand)
    dw, y = conv(f"{prefix}.dw", y, y.channels, 3, stride=stride, padding=1, groups=y.channels)
    project, y = conv(f"{prefix}.project", y, out_channels, 1)
    return [*layers, dw, project], y


def mobilenetv2(*, image_size: int = 224, num_classes: int = 1000) -> Model:
    """MobileNetV2 width 1.0 (torchvision): 3,504,872 params, 0.60 GFLOPs.

    Reference: 0.30 GMACs (torchvision docs; the paper, Sandler et al. 2018, says 300M MACs).
    """
    x = _check(image_size, num_classes)
    stem, x = conv("features.0", x, MOBILENETV2_STEM, 3, stride=2, padding=1)
    layers = [stem]
    index = 1
    for expansion, channels, repeats, first_stride in MOBILENETV2_BLOCKS:
        for repeat in range(repeats):
            stride = first_stride if repeat == 0 else 1
            block, x = _inverted_residual(f"features.{index}", x, expansion, channels, stride)
            layers += block
            index += 1
    head, x = conv(f"features.{index}", x, MOBILENETV2_HEAD, 1)
    avgpool, x = adaptive_pool("avgpool", x, 1)
    layers += [head, avgpool, linear("classifier", x.elements, num_classes)]
    return Model(name="mobilenetv2", family="cnn", layers=tuple(layers))


# --- DenseNet -------------------------------------------------------------------------------

#: DenseNet-201 (Huang et al. 2017, Table 1): dense layers per block, the stem's channels, the
#: features each dense layer adds (growth rate) and its bottleneck width (4 x growth).
DENSENET201_BLOCKS = (6, 12, 48, 32)
DENSENET_STEM = 64
DENSENET_GROWTH = 32
DENSENET_BOTTLENECK = 128


def _dense_block(
    prefix: str, x: FeatureMap, count: int, growth: int, bottleneck: int
) -> tuple[list[Layer], FeatureMap]:
    """A dense block: `count` bn-relu-conv1x1 / bn-relu-conv3x3 pairs, outputs concatenated."""
    layers: list[Layer] = []
    for index in range(1, count + 1):
        name = f"{prefix}.denselayer{index}"
        conv1, y = conv(f"{name}.conv1", x, bottleneck, 1, bn=False, pre_bn=True)
        conv2, x = conv(
            f"{name}.conv2",
            y,
            growth,
            3,
            padding=1,
            bn=False,
            pre_bn=True,
            passed_channels=x.channels,
        )
        layers += [conv1, conv2]
    return layers, x


def densenet201(*, image_size: int = 224, num_classes: int = 1000) -> Model:
    """DenseNet-201 (torchvision): 20,013,928 params, 8.58 GFLOPs (torchvision: 4.29 GMACs).

    The concatenation of a dense layer's new features to its input is folded into its conv2,
    whose activation is therefore the whole concatenated feature map.
    """
    x = _check(image_size, num_classes)
    conv0, x = conv("conv0", x, DENSENET_STEM, 7, stride=2, padding=3)
    pool0, x = pool("pool0", x, 3, 2, 1)
    layers = [conv0, pool0]
    for index, count in enumerate(DENSENET201_BLOCKS, 1):
        block, x = _dense_block(f"denseblock{index}", x, count, DENSENET_GROWTH, DENSENET_BOTTLENECK)
        layers += block
        if index < len(DENSENET201_BLOCKS):
            transition, x = conv(f"transition{index}.conv", x, x.channels // 2, 1, bn=False, pre_bn=True)
            transition_pool, x = pool(f"transition{index}.pool", x, 2, 2)
            layers += [transition, transition_pool]
    avgpool, pooled = adaptive_pool("avgpool", x, 1)
    layers += [batch_norm("norm5", x), avgpool, linear("classifier", pooled.elements, num_classes)]
    return Model(name="densenet201", family="cnn", layers=tuple(layers))


# --- VGG ------------------------------------------------------------------------------------

#: VGG-16 (configuration D of Simonyan and Zisserman 2015): (output channels, 3x3 convolutions)
#: per stage, each stage ending in a 2x2 max pooling.
VGG16_STAGES = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))
#: The side of the pooled feature map the classifier reads, and its hidden width.
VGG_POOLED = 7
VGG_FC = 4096


def vgg16(*, image_size: int = 224, num_classes: int = 1000) -> Model:
    """VGG-16, no batch norm (torchvision): 138,357,544 params, 30.94 GFLOPs (15.47 GMACs).

    As in torchvision, an adaptive average pooling to 512x7x7 precedes the classifier, so the
    parameter count does not depend on the image size.
    """
    x = _check(image_size, num_classes)
    layers: list[Layer] = []
    for stage, (channels, count) in enumerate(VGG16_STAGES, 1):
        for index in range(1, count + 1):
            layer, x = conv(f"conv{stage}_{index}", x, channels, 3, padding=1, bias=True, bn=False)
            layers.append(layer)
        maxpool, x = pool(f"pool{stage}", x, 2, 2)
        layers.append(maxpool)
    avgpool, x = adaptive_pool("avgpool", x, VGG_POOLED)
    layers += [
        avgpool,
        linear("fc6", x.elements, VGG_FC),
        linear("fc7", VGG_FC, VGG_FC),
        linear("fc8", VGG_FC, num_classes),
    ]
    return Model(name="vgg16", family="cnn", layers=tuple(layers))


# --- a tiny CNN for real captures on CPU ----------------------------------------------------

#: The small CNN's conv channels in multiples of `width`, and its hidden fully connected width.
SMALL_CNN_WIDTHS = (1, 2, 4)
SMALL_CNN_FC = 128


def small_cnn(*, image_size: int = 32, num_classes: int = 10, width: int = 32) -> Model:
    """A tiny CNN for CIFAR-sized inputs: 356,810 params at the defaults.

    In PyTorch terms (no batch norm, ReLU after every conv and fc1, w = width, s = image_size):
    Conv2d(3, w, 3, padding=1), MaxPool2d(2), Conv2d(w, 2w, 3, padding=1), MaxPool2d(2),
    Conv2d(2w, 4w, 3, padding=1), MaxPool2d(2), Flatten, Linear(4w * (s//8)**2, 128),
    Linear(128, num_classes). fc1's input, hence its parameter count, depends on image_size.
    """
    require_at_least("image_size", image_size, 8)
    require_at_least("num_classes", num_classes, 1)
    require_at_least("width", width, 1)
    x = FeatureMap(3, image_size, image_size)
    layers: list[Layer] = []
    for index, multiple in enumerate(SMALL_CNN_WIDTHS, 1):
        layer, x = conv(f"conv{index}", x, multiple * width, 3, padding=1, bias=True, bn=False)
        maxpool, x = pool(f"pool{index}", x, 2, 2)
        layers += [layer, maxpool]
    layers += [linear("fc1", x.elements, SMALL_CNN_FC), linear("fc2", SMALL_CNN_FC, num_classes)]
    return Model(name="small_cnn", family="cnn", layers=tuple(layers))
