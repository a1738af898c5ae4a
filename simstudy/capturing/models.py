"""Real torch models built from the zoo specs, for the training workers of real captures.

`build_torch_model(name, options)` builds the `simstudy.zoo` model `name` with `options` and a
plain-torch `nn.Module` of exactly the same structure: for every zoo layer there is one
submodule, reachable under the zoo layer's name (`module.get_submodule("layer1.0.conv2")`),
holding exactly that layer's parameters, and the submodules are registered in zoo forward order,
so `module.parameters()` lists the parameters in zoo layer order. That order matters: PyTorch
DDP fills its gradient buckets in reverse `parameters()` order, as the simulator buckets the
zoo layers in reverse order, so the bytes on the wire match the simulated ones.

The torch modules mirror the zoo builders' conventions and read the architectures' numbers (block
counts, widths, sizes) from the zoo modules:

* a zoo conv layer is `Sequential(Conv2d(bias=False), BatchNorm2d, ReLU)` (conv-bn, conv-bn-relu6,
  bn-relu-conv or conv+bias-relu as the zoo layer says), and the residual add or DenseNet
  concatenation folded into a zoo layer is done by the block holding it;
* a pooling layer is a 0-parameter module of its own (global pooling also flattens);
* BERT is `BertModel`: embeddings (word, 512 positions, 2 token types, LayerNorm), post-norm
  attention and FFN blocks and a pooler; GPT-2 is a pre-norm decoder with a final norm and an
  LM head that, when tied, reuses the token embedding's weight and registers no parameter;
* the LSTM LM has one `nn.LSTM` per zoo layer (`lstm.0`, `lstm.1`, ...); a tied decoder reuses the
  embedding's weight and owns only its bias.

Dropout is left out (it has no parameters and does not change the traffic). BatchNorm layers
have running-statistics buffers; DDP broadcasts buffers from rank 0 before every forward pass
unless it is built with `broadcast_buffers=False`, which the zoo spec does not model.

Training objective (synthetic data, see `TrainModel.batch`): CNNs classify random images;
language models (LSTM LM, GPT) predict the next token of random token sequences; BERT, which
has no pre-training head in the zoo (`BertModel`), classifies random token sequences into
`hidden` classes using the pooled output directly as logits, so no parameter is added.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simstudy.spec.model import Model
from simstudy.zoo import cnn, transformer
from simstudy.zoo.registry import Options, build_with_options, in_zoo_order, int_option, optional_int_option
from simstudy.zoo.rnn import lstm_lm_embedding
from simstudy.zoo.transformer import DecoderShape, Size

# --- the model handed to a training worker --------------------------------------------------


@dataclass(frozen=True)
class SyntheticTask:
    """What a training batch looks like.

    `kind` is "image" (standard-normal images of `shape`, one class in [0, classes) per
    sample), "next_token" (random token ids in [0, vocab) of `shape` = (seq_len,), targets the
    next token at every position) or "sequence_class" (random token ids, one class per sample).
    """

    kind: Literal["image", "next_token", "sequence_class"]
    shape: tuple[int, ...]
    vocab: int
    classes: int


@dataclass
class TrainModel:
    """A real torch model of a zoo model, with synthetic data and its loss.

    `module(inputs)` gives the outputs; `layers` maps every zoo layer name, in zoo forward
    order, to the submodule holding exactly that layer's parameters; `spec` is the zoo model.
    """

    module: nn.Module
    layers: dict[str, nn.Module]
    spec: Model
    task: SyntheticTask

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Synthetic inputs and targets for `batch_size` samples, on the generator's device."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        task, device = self.task, generator.device
        if task.kind == "image":
            inputs = torch.randn((batch_size, *task.shape), generator=generator, device=device)
            targets = torch.randint(task.classes, (batch_size,), generator=generator, device=device)
            return inputs, targets
        if task.kind == "next_token":
            (seq_len,) = task.shape
            tokens = torch.randint(task.vocab, (batch_size, seq_len + 1), generator=generator, device=device)
            return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        inputs = torch.randint(task.vocab, (batch_size, *task.shape), generator=generator, device=device)
        targets = torch.randint(task.classes, (batch_size,), generator=generator, device=device)
        return inputs, targets

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """Mean cross entropy of logits `outputs` (classes last) against class ids `targets`."""
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))


# --- building blocks ------------------------------------------------------------------------


def _conv_bn(
    in_channels: int,
    out_channels: int,
    kernel: int,
    *,
    stride: int = 1,
    padding: int = 0,
    groups: int = 1,
    activation: type[nn.Module] | None = nn.ReLU,
) -> nn.Sequential:
    """A zoo conv layer with batch norm: conv (no bias), batch norm, optional activation."""
    modules: list[nn.Module] = [
        nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=padding, groups=groups, bias=False),
        nn.BatchNorm2d(out_channels),
    ]
    if activation is not None:
        modules.append(activation())
    return nn.Sequential(*modules)


def _pre_bn_conv(in_channels: int, out_channels: int, kernel: int, *, padding: int = 0) -> nn.Sequential:
    """A zoo conv layer with `pre_bn` (DenseNet): batch norm, ReLU, conv (no bias)."""
    return nn.Sequential(
        nn.BatchNorm2d(in_channels),
        nn.ReLU(),
        nn.Conv2d(in_channels, out_channels, kernel, padding=padding, bias=False),
    )


def _global_pool() -> nn.Sequential:
    """Global average pooling to one value per channel, flattened."""
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())


class TiedLinear(nn.Module):
    """An output projection reusing an embedding's weight, with an optional bias of its own.

    The embedding is referenced, not registered: its weight is counted once, in the module that
    owns the embedding, and this module's only parameter is the bias (if any).
    """

    def __init__(self, embedding: nn.Embedding, *, bias: bool) -> None:
        super().__init__()
        self._embedding = (embedding,)  # a tuple, so that nn.Module does not register it
        self.bias: nn.Parameter | None = nn.Parameter(torch.zeros(embedding.num_embeddings)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self._embedding[0].weight, self.bias)


# --- CNNs -----------------------------------------------------------------------------------


def _small_cnn(image_size: int, num_classes: int, width: int) -> nn.Module:
    """`simstudy.zoo.cnn.small_cnn`: three conv+bias-relu / max-pool pairs, two linear layers."""
    modules: OrderedDict[str, nn.Module] = OrderedDict()
    channels, size = 3, image_size
    for index, multiple in enumerate(cnn.SMALL_CNN_WIDTHS, 1):
        out = multiple * width
        modules[f"conv{index}"] = nn.Sequential(nn.Conv2d(channels, out, 3, padding=1), nn.ReLU())
        modules[f"pool{index}"] = nn.MaxPool2d(2)
        channels, size = out, size // 2
    modules["fc1"] = nn.Sequential(nn.Flatten(), nn.Linear(channels * size * size, cnn.SMALL_CNN_FC), nn.ReLU())
    modules["fc2"] = nn.Linear(cnn.SMALL_CNN_FC, num_classes)
    return nn.Sequential(modules)


class Bottleneck(nn.Module):
    """A ResNet v1.5 bottleneck; the residual add (and its ReLU) is folded into conv3."""

    def __init__(self, in_channels: int, planes: int, stride: int) -> None:
        super().__init__()
        out_channels = cnn.BOTTLENECK_EXPANSION * planes
        self.conv1 = _conv_bn(in_channels, planes, 1)
        self.conv2 = _conv_bn(planes, planes, 3, stride=stride, padding=1)
        self.conv3 = _conv_bn(planes, out_channels, 1, activation=None)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = _conv_bn(in_channels, out_channels, 1, stride=stride, activation=None)

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.conv3(self.conv2(self.conv1(x)))
        identity: Tensor = x if self.downsample is None else self.downsample(x)
        return F.relu(y + identity)


def _resnet(name: str, num_classes: int) -> nn.Module:
    """`simstudy.zoo.cnn._resnet`: torchvision's bottleneck ResNet `name`."""
    modules: OrderedDict[str, nn.Module] = OrderedDict()
    modules["conv1"] = _conv_bn(3, cnn.RESNET_STEM, 7, stride=2, padding=3)
    modules["maxpool"] = nn.MaxPool2d(3, 2, 1)
    channels = cnn.RESNET_STEM
    for stage, (count, planes) in enumerate(zip(cnn.RESNET_BLOCKS[name], cnn.RESNET_PLANES, strict=True), 1):
        stage_blocks = []
        for index in range(count):
            stride = 2 if index == 0 and stage > 1 else 1
            stage_blocks.append(Bottleneck(channels, planes, stride))
            channels = cnn.BOTTLENECK_EXPANSION * planes
        modules[f"layer{stage}"] = nn.Sequential(*stage_blocks)
    modules["avgpool"] = _global_pool()
    modules["fc"] = nn.Linear(channels, num_classes)
    return nn.Sequential(modules)


class InvertedResidual(nn.Module):
    """A MobileNetV2 block; the residual add (stride 1, same width) is folded into `project`."""

    def __init__(self, in_channels: int, expansion: int, out_channels: int, stride: int) -> None:
        super().__init__()
        hidden = in_channels * expansion
        self.expand: nn.Module | None = None
        if expansion != 1:
            self.expand = _conv_bn(in_channels, hidden, 1, activation=nn.ReLU6)
        self.dw = _conv_bn(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, activation=nn.ReLU6)
        self.project = _conv_bn(hidden, out_channels, 1, activation=None)
        self.residual = stride == 1 and in_channels == out_channels

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = x if self.expand is None else self.expand(x)
        y = self.project(self.dw(y))
        return x + y if self.residual else y


def _mobilenetv2(name: str, num_classes: int) -> nn.Module:
    """`simstudy.zoo.cnn.mobilenetv2`: torchvision's MobileNetV2 1.0 without dropout."""
    channels = cnn.MOBILENETV2_STEM
    features: list[nn.Module] = [_conv_bn(3, channels, 3, stride=2, padding=1, activation=nn.ReLU6)]
    for expansion, out, repeats, first_stride in cnn.MOBILENETV2_BLOCKS:
        for repeat in range(repeats):
            features.append(InvertedResidual(channels, expansion, out, first_stride if repeat == 0 else 1))
            channels = out
    features.append(_conv_bn(channels, cnn.MOBILENETV2_HEAD, 1, activation=nn.ReLU6))
    return nn.Sequential(
        OrderedDict(
            [
                ("features", nn.Sequential(*features)),
                ("avgpool", _global_pool()),
                ("classifier", nn.Linear(cnn.MOBILENETV2_HEAD, num_classes)),
            ]
        )
    )


class DenseLayer(nn.Module):
    """A DenseNet layer; the concatenation of its input and new features is folded into conv2."""

    def __init__(self, in_channels: int, growth: int, bottleneck: int) -> None:
        super().__init__()
        self.conv1 = _pre_bn_conv(in_channels, bottleneck, 1)
        self.conv2 = _pre_bn_conv(bottleneck, growth, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x, self.conv2(self.conv1(x))], dim=1)


def _densenet201(name: str, num_classes: int) -> nn.Module:
    """`simstudy.zoo.cnn.densenet201`: torchvision's DenseNet-201."""
    modules: OrderedDict[str, nn.Module] = OrderedDict()
    channels = cnn.DENSENET_STEM
    modules["conv0"] = _conv_bn(3, channels, 7, stride=2, padding=3)
    modules["pool0"] = nn.MaxPool2d(3, 2, 1)
    for index, count in enumerate(cnn.DENSENET201_BLOCKS, 1):
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        for layer in range(1, count + 1):
            layers[f"denselayer{layer}"] = DenseLayer(channels, cnn.DENSENET_GROWTH, cnn.DENSENET_BOTTLENECK)
            channels += cnn.DENSENET_GROWTH
        modules[f"denseblock{index}"] = nn.Sequential(layers)
        if index < len(cnn.DENSENET201_BLOCKS):
            transition = OrderedDict([("conv", _pre_bn_conv(channels, channels // 2, 1)), ("pool", nn.AvgPool2d(2, 2))])
            modules[f"transition{index}"] = nn.Sequential(transition)
            channels //= 2
    modules["norm5"] = nn.Sequential(nn.BatchNorm2d(channels), nn.ReLU())
    modules["avgpool"] = _global_pool()
    modules["classifier"] = nn.Linear(channels, num_classes)
    return nn.Sequential(modules)


def _vgg16(name: str, num_classes: int) -> nn.Module:
    """`simstudy.zoo.cnn.vgg16`: torchvision's VGG-16 without batch norm and without dropout."""
    modules: OrderedDict[str, nn.Module] = OrderedDict()
    channels = 3
    for stage, (out, count) in enumerate(cnn.VGG16_STAGES, 1):
        for index in range(1, count + 1):
            modules[f"conv{stage}_{index}"] = nn.Sequential(nn.Conv2d(channels, out, 3, padding=1), nn.ReLU())
            channels = out
        modules[f"pool{stage}"] = nn.MaxPool2d(2, 2)
    pooled, width = cnn.VGG_POOLED, cnn.VGG_FC
    modules["avgpool"] = nn.Sequential(nn.AdaptiveAvgPool2d(pooled), nn.Flatten())
    modules["fc6"] = nn.Sequential(nn.Linear(channels * pooled * pooled, width), nn.ReLU())
    modules["fc7"] = nn.Sequential(nn.Linear(width, width), nn.ReLU())
    modules["fc8"] = nn.Linear(width, num_classes)
    return nn.Sequential(modules)


# --- the LSTM language model ----------------------------------------------------------------


class LSTMLanguageModel(nn.Module):
    """`simstudy.zoo.rnn.lstm_lm`: embedding, one `nn.LSTM` per layer, decoder (maybe tied)."""

    def __init__(self, *, layers: int, hidden: int, vocab: int, embedding: int, tied: bool) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embedding)
        self.lstm = nn.ModuleList(
            nn.LSTM(embedding if index == 0 else hidden, hidden, batch_first=True) for index in range(layers)
        )
        self.decoder: nn.Module = TiedLinear(self.embedding, bias=True) if tied else nn.Linear(hidden, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        x: Tensor = self.embedding(tokens)
        for lstm in self.lstm:
            x, _ = lstm(x)
        logits: Tensor = self.decoder(x)
        return logits


# --- Transformers ---------------------------------------------------------------------------


class SelfAttention(nn.Module):
    """Multi-head self-attention: a fused QKV projection and an output projection, with biases."""

    def __init__(self, hidden: int, heads: int, *, causal: bool) -> None:
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: Tensor) -> Tensor:
        batch, seq_len, hidden = x.shape
        qkv: Tensor = self.qkv(x)
        q, k, v = qkv.view(batch, seq_len, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        context = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        out: Tensor = self.proj(context.transpose(1, 2).reshape(batch, seq_len, hidden))
        return out


class FeedForward(nn.Module):
    """Linear(hidden, ffn), GELU, Linear(ffn, hidden)."""

    def __init__(self, hidden: int, ffn: int, *, approximate: Literal["none", "tanh"]) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))
        return y


class PostNormResidual(nn.Module):
    """BERT's `norm(x + f(x))`: a zoo attention or FFN layer of `BertModel`."""

    def __init__(self, inner: nn.Module, hidden: int) -> None:
        super().__init__()
        self.inner = inner
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.norm(x + self.inner(x))
        return y


class PreNormResidual(nn.Module):
    """GPT-2's `x + f(norm(x))`: a zoo attention or MLP layer of a decoder."""

    def __init__(self, inner: nn.Module, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.inner = inner

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.inner(self.norm(x))
        return x + y


class BertEmbeddings(nn.Module):
    """Word, position and token-type embeddings, summed, then LayerNorm (token type 0 only)."""

    def __init__(self, vocab: int, hidden: int, max_positions: int, token_types: int) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(token_types, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, tokens: Tensor) -> Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x: Tensor = self.word(tokens) + self.position(positions) + self.token_type(torch.zeros_like(tokens))
        y: Tensor = self.norm(x)
        return y


class BertLayer(nn.Module):
    """One encoder layer: the zoo's `attention` and `ffn` layers."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.attention = PostNormResidual(SelfAttention(hidden, heads, causal=False), hidden)
        self.ffn = PostNormResidual(FeedForward(hidden, transformer.FFN_MULT * hidden, approximate="none"), hidden)

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.ffn(self.attention(x))
        return y


class Pooler(nn.Module):
    """BERT's pooler: tanh(Linear(first token))."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.dense(x[:, 0]))


class Bert(nn.Module):
    """`simstudy.zoo.transformer._bert`: `BertModel` with its pooler; outputs the pooled vector."""

    def __init__(self, size: Size, vocab: int) -> None:
        super().__init__()
        layers, hidden, heads = size
        self.embeddings = BertEmbeddings(vocab, hidden, transformer.BERT_MAX_POSITIONS, transformer.BERT_TOKEN_TYPES)
        self.encoder = nn.ModuleList(BertLayer(hidden, heads) for _ in range(layers))
        self.pooler = Pooler(hidden)

    def forward(self, tokens: Tensor) -> Tensor:
        x: Tensor = self.embeddings(tokens)
        for layer in self.encoder:
            x = layer(x)
        pooled: Tensor = self.pooler(x)
        return pooled


class GPTEmbeddings(nn.Module):
    """Token and learned position embeddings, summed."""

    def __init__(self, vocab: int, hidden: int, max_positions: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_positions, hidden)

    def forward(self, tokens: Tensor) -> Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x: Tensor = self.wte(tokens) + self.wpe(positions)
        return x


class GPTBlock(nn.Module):
    """One decoder block: the zoo's `attn` and `mlp` layers (pre-norm, causal)."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attn = PreNormResidual(SelfAttention(hidden, heads, causal=True), hidden)
        self.mlp = PreNormResidual(FeedForward(hidden, ffn, approximate="tanh"), hidden)

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.mlp(self.attn(x))
        return y


class GPT(nn.Module):
    """`simstudy.zoo.transformer._gpt`: a GPT-2-style decoder with an LM head; outputs logits."""

    def __init__(self, shape: DecoderShape) -> None:
        super().__init__()
        hidden = shape.hidden
        self.embeddings = GPTEmbeddings(shape.vocab, hidden, shape.max_positions)
        self.h = nn.ModuleList(GPTBlock(hidden, shape.heads, shape.ffn) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head: nn.Module = (
            TiedLinear(self.embeddings.wte, bias=False) if shape.tied else nn.Linear(hidden, shape.vocab, bias=False)
        )

    def forward(self, tokens: Tensor) -> Tensor:
        x: Tensor = self.embeddings(tokens)
        for block in self.h:
            x = block(x)
        logits: Tensor = self.lm_head(self.ln_f(x))
        return logits


def _init_transformer(module: nn.Module) -> None:
    """BERT / GPT-2 initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


# --- the table of supported models ----------------------------------------------------------

_TorchBuilder = Callable[[str, Options], tuple[nn.Module, SyntheticTask]]
"""Builds the torch module of zoo model `name` with all its options (`Options`)."""


def _image_task(options: Options) -> SyntheticTask:
    size = int_option(options, "image_size")
    return SyntheticTask("image", (3, size, size), 0, int_option(options, "num_classes"))


def _cnn(make: Callable[[str, int], nn.Module]) -> _TorchBuilder:
    """A builder for a CNN whose structure only depends on its name and `num_classes`."""

    def builder(name: str, options: Options) -> tuple[nn.Module, SyntheticTask]:
        return make(name, int_option(options, "num_classes")), _image_task(options)

    return builder


def _build_small_cnn(name: str, options: Options) -> tuple[nn.Module, SyntheticTask]:
    width = int_option(options, "width")
    module = _small_cnn(int_option(options, "image_size"), int_option(options, "num_classes"), width)
    return module, _image_task(options)


def _build_lstm_lm(name: str, options: Options) -> tuple[nn.Module, SyntheticTask]:
    hidden, vocab = int_option(options, "hidden"), int_option(options, "vocab")
    module = LSTMLanguageModel(
        layers=int_option(options, "layers"),
        hidden=hidden,
        vocab=vocab,
        embedding=lstm_lm_embedding(hidden, optional_int_option(options, "embedding")),
        tied=options["tied"] is True,
    )
    return module, SyntheticTask("next_token", (int_option(options, "seq_len"),), vocab, vocab)


def _build_bert(name: str, options: Options) -> tuple[nn.Module, SyntheticTask]:
    """BERT of a size of the zoo (`BERT_SIZES`) or, for the generic `encoder`, of the options'."""
    size = transformer.BERT_SIZES.get(name)
    if size is None:
        size = Size(int_option(options, "layers"), int_option(options, "hidden"), int_option(options, "heads"))
    vocab = int_option(options, "vocab")
    module = Bert(size, vocab)
    module.apply(_init_transformer)
    return module, SyntheticTask("sequence_class", (int_option(options, "seq_len"),), vocab, size.hidden)


def _gpt_module(shape: DecoderShape, seq_len: int) -> tuple[nn.Module, SyntheticTask]:
    module = GPT(shape)
    module.apply(_init_transformer)
    return module, SyntheticTask("next_token", (seq_len,), shape.vocab, shape.vocab)


def _gpt2_builder(size: str | None) -> _TorchBuilder:
    """A GPT-2 builder for `size`; None takes the size from the options (`gpt2`)."""

    def builder(name: str, options: Options) -> tuple[nn.Module, SyntheticTask]:
        chosen = options["size"] if size is None else size
        if not isinstance(chosen, str):
            raise TypeError(f"option 'size' must be a str, got {chosen!r}")
        return _gpt_module(transformer.gpt2_shape(chosen), int_option(options, "seq_len"))

    return builder


def _build_decoder(name: str, options: Options) -> tuple[nn.Module, SyntheticTask]:
    ffn_mult, seq_len = options["ffn_mult"], int_option(options, "seq_len")
    if not isinstance(ffn_mult, int | float) or isinstance(ffn_mult, bool):
        raise TypeError(f"option 'ffn_mult' must be a float, got {ffn_mult!r}")
    shape = transformer.decoder_shape(
        layers=int_option(options, "layers"),
        hidden=int_option(options, "hidden"),
        heads=int_option(options, "heads"),
        seq_len=seq_len,
        vocab=int_option(options, "vocab"),
        ffn_mult=ffn_mult,
        tied=options["tied"] is True,
    )
    return _gpt_module(shape, seq_len)


_BUILDERS: dict[str, _TorchBuilder] = {
    "small_cnn": _build_small_cnn,
    **dict.fromkeys(cnn.RESNET_BLOCKS, _cnn(_resnet)),
    "mobilenetv2": _cnn(_mobilenetv2),
    "densenet201": _cnn(_densenet201),
    "vgg16": _cnn(_vgg16),
    "lstm_lm": _build_lstm_lm,
    **dict.fromkeys(transformer.BERT_SIZES, _build_bert),
    "encoder": _build_bert,
    "gpt2": _gpt2_builder(None),
    **{transformer.gpt2_name(size): _gpt2_builder(size) for size in transformer.GPT2_SIZES},
    "decoder": _build_decoder,
}
"""The torch builder of each zoo model that has one, by zoo name."""

_SUPPORTED = in_zoo_order(_BUILDERS, "simstudy.capturing.models")


def supported_models() -> tuple[str, ...]:
    """The zoo models `build_torch_model` can build, in zoo order."""
    return _SUPPORTED


def _check_against_spec(module: nn.Module, layers: Mapping[str, nn.Module], spec: Model) -> None:
    """Raise `RuntimeError` unless the torch parameters are the zoo layers', in zoo order."""
    expected: list[nn.Parameter] = []
    for layer in spec.layers:
        params = list(layers[layer.name].parameters())
        count = sum(p.numel() for p in params)
        if count != layer.params:
            raise RuntimeError(
                f"{spec.name}: torch layer {layer.name!r} has {count} parameters, the zoo {layer.params}"
            )
        expected += params
    actual = list(module.parameters())
    if [id(p) for p in actual] != [id(p) for p in expected]:
        raise RuntimeError(f"{spec.name}: the torch parameters are not exactly the zoo layers' parameters in zoo order")


def build_torch_model(name: str, options: Mapping[str, object] | None = None, *, seed: int = 0) -> TrainModel:
    """Build zoo model `name` with `options` as a real torch model, initialised from `seed`.

    The same seed gives the same initial parameters (the global RNG state is left unchanged).
    Raises `ValueError` for a model without a torch implementation and `simstudy.zoo.ZooError`
    (a `ValueError`) for invalid options.
    """
    builder = _BUILDERS.get(name)
    if builder is None:
        raise ValueError(
            f"model {name!r} has no torch implementation for captures; supported: {', '.join(supported_models())}"
        )
    spec, resolved = build_with_options(name, dict(options or {}))
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        module, task = builder(name, resolved)
    layers = {layer.name: module.get_submodule(layer.name) for layer in spec.layers}
    _check_against_spec(module, layers, spec)
    return TrainModel(module=module, layers=layers, spec=spec, task=task)
