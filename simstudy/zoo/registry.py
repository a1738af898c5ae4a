"""The table of built-in models: names, builders, option checking and summaries."""

from __future__ import annotations

import difflib
import inspect
import math
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from simstudy.spec.model import Model, ModelFamily, ZooOption
from simstudy.zoo import cnn, llama, rnn, transformer
from simstudy.zoo.errors import ZooError

Builder = Callable[..., Model]
"""A builder takes keyword-only options (int, float, str or bool) and returns a `Model`."""

_OPTION_TYPES: tuple[type, ...] = (bool, int, float, str)

Options = Mapping[str, ZooOption | None]
"""Every option of a model: the given values and the defaults (None: derived from others)."""


@dataclass(frozen=True)
class ZooOptionInfo:
    """One option of a builder: its name, type and default (None: derived from others)."""

    name: str
    type: type
    default: ZooOption | None

    def describe(self) -> str:
        """`name: type = default`, for messages and help."""
        default = "auto" if self.default is None else repr(self.default)
        return f"{self.name}: {self.type.__name__} = {default}"


@dataclass(frozen=True)
class ZooEntry:
    """A registered model: its builder, family, one-line description and options."""

    name: str
    family: ModelFamily
    description: str
    builder: Builder
    options: tuple[ZooOptionInfo, ...]

    def option(self, name: str) -> ZooOptionInfo | None:
        """The option called `name`, or None."""
        return next((info for info in self.options if info.name == name), None)


@dataclass(frozen=True)
class ZooSummary:
    """What `simstudy models` shows for one model, at its default options.

    `gflops` is forward GFLOPs (1e9 FLOPs, multiply-add = 2) for one sample.
    """

    name: str
    family: ModelFamily
    description: str
    params: int
    gflops: float
    options: Mapping[str, ZooOption | None]


def _option_type(builder: Builder, parameter: inspect.Parameter) -> type:
    """The option type of a builder parameter; `T | None` means T with a derived default."""
    annotation = parameter.annotation
    if isinstance(annotation, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        annotation = args[0] if len(args) == 1 else annotation
    if annotation not in _OPTION_TYPES:
        raise TypeError(f"{builder.__name__}: option {parameter.name!r} must be int, float, str or bool")
    return typing.cast(type, annotation)


def _options_of(builder: Builder) -> tuple[ZooOptionInfo, ...]:
    """Read the keyword-only options of a builder from its signature."""
    infos = []
    for parameter in inspect.signature(builder, eval_str=True).parameters.values():
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY or parameter.default is inspect.Parameter.empty:
            raise TypeError(f"{builder.__name__}: every parameter must be keyword-only with a default")
        infos.append(ZooOptionInfo(parameter.name, _option_type(builder, parameter), parameter.default))
    return tuple(infos)


def _entry(name: str, family: ModelFamily, description: str, builder: Builder) -> ZooEntry:
    return ZooEntry(name, family, description, builder, _options_of(builder))


_CNN_NOTE = "torchvision, 224x224"
_TABLE: tuple[tuple[str, ModelFamily, Builder, str], ...] = (
    ("resnet50", "cnn", cnn.resnet50, f"ResNet-50 ({_CNN_NOTE})"),
    ("resnet101", "cnn", cnn.resnet101, f"ResNet-101 ({_CNN_NOTE})"),
    ("mobilenetv2", "cnn", cnn.mobilenetv2, f"MobileNetV2 1.0 ({_CNN_NOTE})"),
    ("densenet201", "cnn", cnn.densenet201, f"DenseNet-201 ({_CNN_NOTE})"),
    ("vgg16", "cnn", cnn.vgg16, f"VGG-16 without batch norm ({_CNN_NOTE})"),
    ("small_cnn", "cnn", cnn.small_cnn, "tiny 3-conv CNN for 32x32 inputs (CPU captures)"),
    ("lstm_lm", "rnn", rnn.lstm_lm, "word-level LSTM language model (Zaremba medium)"),
    ("gnmt", "rnn", rnn.gnmt, "GNMT-like LSTM seq2seq with attention (GNMT-8)"),
    ("bert_base", "transformer", transformer.bert_base, "BERT-base with pooler (BertModel)"),
    ("bert_large", "transformer", transformer.bert_large, "BERT-large with pooler (BertModel)"),
    ("encoder", "transformer", transformer.encoder, "generic BERT-style encoder"),
    ("gpt2", "transformer", transformer.gpt2, "GPT-2, size small/medium/large/xl"),
    ("gpt2_small", "transformer", transformer.gpt2_small, "GPT-2 small (124M)"),
    ("gpt2_medium", "transformer", transformer.gpt2_medium, "GPT-2 medium (355M)"),
    ("gpt2_large", "transformer", transformer.gpt2_large, "GPT-2 large (774M)"),
    ("gpt2_xl", "transformer", transformer.gpt2_xl, "GPT-2 XL (1.5B)"),
    ("decoder", "transformer", transformer.decoder, "generic GPT-2-style decoder"),
    ("llama2_7b", "transformer", llama.llama2_7b, "LLaMA-2 7B (RMSNorm, SwiGLU, untied head)"),
    ("llama2_13b", "transformer", llama.llama2_13b, "LLaMA-2 13B"),
    ("llama2_70b", "transformer", llama.llama2_70b, "LLaMA-2 70B (grouped-query attention, 8 KV heads)"),
    ("llama3_8b", "transformer", llama.llama3_8b, "LLaMA-3 8B (GQA, 128K vocabulary)"),
    ("llama3_70b", "transformer", llama.llama3_70b, "LLaMA-3 70B"),
    ("llama3_405b", "transformer", llama.llama3_405b, "LLaMA-3.1 405B"),
    ("mixtral_8x7b", "transformer", llama.mixtral_8x7b, "Mixtral 8x7B (mixture of experts, top-2 of 8)"),
    ("mixtral_8x22b", "transformer", llama.mixtral_8x22b, "Mixtral 8x22B (top-2 of 8)"),
    ("deepseek_moe_16b", "transformer", llama.deepseek_moe_16b,
     "DeepSeekMoE 16B (64 fine-grained experts, top-6, 2 shared)"),
)

ZOO: dict[str, ZooEntry] = {
    name: _entry(name, family, description, builder) for name, family, builder, description in _TABLE
}
"""Every built-in model by name."""


def _lookup(name: str) -> ZooEntry:
    """The entry called `name`, or a `ZooError` listing the known names."""
    entry = ZOO.get(name)
    if entry is None:
        close = difflib.get_close_matches(name, ZOO, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ZooError(f"unknown model {name!r}{hint}; known models: {', '.join(ZOO)}")
    return entry


def _check_value(entry: ZooEntry, info: ZooOptionInfo, value: object) -> ZooOption:
    """Check one option value against its declared type; ints are accepted for floats."""
    expected = info.type
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    valid = type(value) is expected and not (isinstance(value, float) and not math.isfinite(value))
    if not valid:
        raise ZooError(
            f"option {info.name!r} of model {entry.name!r} must be a"
            f"{' finite' if expected is float else 'n' if expected is int else ''} "
            f"{expected.__name__}, got {value!r} ({type(value).__name__})"
        )
    return typing.cast(ZooOption, value)


def check_options(name: str, options: Mapping[str, object]) -> dict[str, ZooOption]:
    """Validate the names and types of `options` for model `name`; return them (typed)."""
    entry = _lookup(name)
    checked: dict[str, ZooOption] = {}
    for option, value in options.items():
        info = entry.option(option)
        if info is None:
            known = "; ".join(other.describe() for other in entry.options)
            raise ZooError(f"model {name!r} has no option {option!r}; its options are: {known}")
        checked[option] = _check_value(entry, info, value)
    return checked


def build(name: str, **options: ZooOption) -> Model:
    """Build the model registered as `name` with the given options.

    Raises `ZooError` for an unknown name, an unknown option, a value of the wrong type or a
    value the builder rejects.
    """
    checked = check_options(name, options)
    return _lookup(name).builder(**checked)


def build_with_options(name: str, options: Mapping[str, object]) -> tuple[Model, dict[str, ZooOption | None]]:
    """Build model `name` as `build` does; return it with all its options (`Options`)."""
    checked = check_options(name, options)
    resolved: dict[str, ZooOption | None] = {info.name: info.default for info in ZOO[name].options}
    resolved.update(checked)
    return ZOO[name].builder(**checked), resolved


def int_option(options: Options, name: str) -> int:
    """Option `name`, an int (`TypeError` otherwise, e.g. for a derived default left None)."""
    value = options[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"option {name!r} must be an int, got {value!r}")
    return value


def optional_int_option(options: Options, name: str) -> int | None:
    """Option `name`, an int or None (a default derived from other options)."""
    return None if options[name] is None else int_option(options, name)


def in_zoo_order(names: Collection[str], what: str) -> tuple[str, ...]:
    """`names` in zoo order; `ZooError` if one is not a zoo model (`what` says whose names)."""
    unknown = sorted(set(names) - set(ZOO))
    if unknown:
        raise ZooError(f"{what}: not zoo models: {', '.join(unknown)}")
    return tuple(name for name in ZOO if name in names)


def list_models() -> list[ZooSummary]:
    """A summary of every registered model, built at its default options."""
    summaries = []
    for entry in ZOO.values():
        model = entry.builder()
        summaries.append(
            ZooSummary(
                name=entry.name,
                family=entry.family,
                description=entry.description,
                params=model.params,
                gflops=model.fwd_flops_per_sample / 1e9,
                options={info.name: info.default for info in entry.options},
            )
        )
    return summaries
