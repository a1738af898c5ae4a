"""Tests of the built-in model zoo: exact parameter counts, FLOPs against published figures,
options, errors and the registry."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simstudy.spec.model import Model
from simstudy.zoo import ZOO, ZooError, build, check_options, list_models
from simstudy.zoo.cnn import RESNET_BLOCKS
from simstudy.zoo.registry import build_with_options, in_zoo_order, int_option, optional_int_option
from simstudy.zoo.rnn import lstm_params
from simstudy.zoo.transformer import BERT_SIZES, GPT2_SIZES, gpt2_name

IMAGENET_CNNS = ("resnet50", "resnet101", "mobilenetv2", "densenet201", "vgg16")

# --- exact parameter counts -----------------------------------------------------------------

# torchvision's `num_params` (model docs) for the CNNs; HuggingFace `BertModel` (with pooler)
# and `GPT2Model` (the tied LM head adds nothing) for the transformers.
EXACT_PARAMS = {
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "mobilenetv2": 3_504_872,
    "densenet201": 20_013_928,
    "vgg16": 138_357_544,
    "bert_base": 109_482_240,
    "bert_large": 335_141_888,
    "gpt2_small": 124_439_808,
    "gpt2_medium": 354_823_168,
    "gpt2_large": 774_030_080,
    "gpt2_xl": 1_557_611_200,
}


@pytest.mark.parametrize(("name", "params"), EXACT_PARAMS.items())
def test_exact_params(name: str, params: int) -> None:
    assert build(name).params == params


@pytest.mark.parametrize("size", ["small", "medium", "large", "xl"])
def test_gpt2_size_option_matches_named_entries(size: str) -> None:
    by_option = build("gpt2", size=size)
    by_name = build(f"gpt2_{size}")
    assert by_option == by_name
    assert by_option.name == f"gpt2_{size}"


@pytest.mark.parametrize(
    ("size", "layers", "hidden"),
    [("small", 12, 768), ("medium", 24, 1024), ("large", 36, 1280), ("xl", 48, 1600)],
)
def test_gpt2_params_formula(size: str, layers: int, hidden: int) -> None:
    """wte + wpe (counted once: tied head) + 12 l h^2 + 13 l h + final norm."""
    expected = (50257 + 1024) * hidden + layers * (12 * hidden**2 + 13 * hidden) + 2 * hidden
    assert build("gpt2", size=size).params == expected


def test_small_cnn_is_small() -> None:
    model = build("small_cnn")
    assert model.params == 356_810
    assert 100_000 < model.params < 1_000_000
    assert model.layers[-1].activation_bytes_per_sample == 10 * 4


def test_lstm_lm_params() -> None:
    """Zaremba et al. medium with PyTorch's two LSTM bias vectors, untied."""
    h, v = 650, 10_000
    expected = v * h + 2 * (4 * h * 2 * h + 8 * h) + (h * v + v)
    assert build("lstm_lm").params == expected == 19_780_400


def test_gnmt_params() -> None:
    """NVIDIA GNMT v2 structure with 8+8 layers and a shared embedding."""
    h, v = 1024, 32_000
    attention = 2 * h * h + 2 * h + 1
    expected = (
        v * h
        + 2 * lstm_params(h, h)
        + lstm_params(2 * h, h)
        + 6 * lstm_params(h, h)
        + lstm_params(h, h)
        + attention
        + 7 * lstm_params(2 * h, h)
        + (h * v + v)
    )
    assert build("gnmt").params == expected == 243_967_233


# --- FLOPs against published figures --------------------------------------------------------

# torchvision model docs (https://pytorch.org/vision/stable/models.html), "GFLOPS" column,
# which counts multiply-accumulates; our FLOPs count a multiply-add as 2, hence x2.
# MobileNetV2: also Sandler et al. 2018 (Table 4), 300M multiply-adds.
TORCHVISION_GMACS = {
    "resnet50": 4.09,
    "resnet101": 7.80,
    "mobilenetv2": 0.30,
    "densenet201": 4.29,
    "vgg16": 15.47,
}


@pytest.mark.parametrize(("name", "gmacs"), TORCHVISION_GMACS.items())
def test_cnn_flops_match_torchvision(name: str, gmacs: float) -> None:
    assert build(name).fwd_flops_per_sample == pytest.approx(2 * gmacs * 1e9, rel=0.02)


def megatron_forward_flops(layers: int, hidden: int, seq_len: int, vocab: int) -> float:
    """Forward FLOPs of one sequence from the derivation in Narayanan et al. 2021 (Megatron-LM,
    SC'21, Sec. 5.1): 24 s h^2 + 4 s^2 h per layer, 2 s h V for the logits (V = 0: no head)."""
    return 24 * seq_len * layers * hidden**2 + 4 * seq_len**2 * layers * hidden + (2 * seq_len * hidden * vocab)


@pytest.mark.parametrize(
    ("name", "layers", "hidden", "seq_len", "vocab"),
    [
        ("bert_base", 12, 768, 128, 0),  # BertModel: no MLM head, so no logits term
        ("bert_large", 24, 1024, 128, 0),
        ("gpt2_small", 12, 768, 1024, 50257),
        ("gpt2_medium", 24, 1024, 1024, 50257),
        ("gpt2_large", 36, 1280, 1024, 50257),
        ("gpt2_xl", 48, 1600, 1024, 50257),
    ],
)
def test_transformer_flops_match_megatron(name: str, layers: int, hidden: int, seq_len: int, vocab: int) -> None:
    expected = megatron_forward_flops(layers, hidden, seq_len, vocab)
    assert build(name).fwd_flops_per_sample == pytest.approx(expected, rel=0.02)


def test_transformer_flops_close_to_kaplan_2n_at_short_context() -> None:
    """Kaplan et al. 2020, Table 1: C_forward ~ 2N + 2 n_layer n_ctx d_attn per token (plus
    2 d_model n_vocab for the de-embedding). At a short context the attention term is small
    and the two conventions (full vs causal-halved score matrices) agree within 2%."""
    layers, hidden, vocab, seq_len = 12, 768, 50257, 128
    n = 12 * layers * hidden**2
    per_token = 2 * n + 2 * layers * seq_len * hidden + 2 * hidden * vocab
    model = build("gpt2_small", seq_len=seq_len)
    assert model.fwd_flops_per_sample == pytest.approx(per_token * seq_len, rel=0.02)


def test_lstm_lm_flops_are_two_per_weight_per_token() -> None:
    """Kaplan et al. 2020: C_forward ~ 2N per token, N the matmul weights (no embedding)."""
    h, v, s = 650, 10_000, 35
    weights = 2 * 4 * h * (2 * h) + h * v
    assert build("lstm_lm").fwd_flops_per_sample == pytest.approx(2 * weights * s, rel=0.02)


def test_gnmt_flops() -> None:
    """2 FLOPs per matmul weight per token (Kaplan et al. 2020) for both sequences, plus the
    attention scores and context, 2 x 2 s^2 h (Bahdanau et al. 2015)."""
    h, v, s, layers = 1024, 32_000, 50, 8
    encoder = 2 * 4 * h * (2 * h) + 4 * h * (3 * h) + (layers - 2) * 4 * h * (2 * h)
    decoder = 4 * h * (2 * h) + 2 * h * h + (layers - 1) * 4 * h * (3 * h) + h * v
    expected = 2 * (encoder + decoder) * s + 4 * s * s * h
    assert build("gnmt").fwd_flops_per_sample == pytest.approx(expected, rel=0.02)


# --- activation bytes -----------------------------------------------------------------------


def layer(model: Model, name: str) -> int:
    """Activation bytes of the layer called `name`."""
    return next(x for x in model.layers if x.name == name).activation_bytes_per_sample


def test_activation_bytes() -> None:
    resnet = build("resnet50")
    assert layer(resnet, "conv1") == 64 * 112 * 112 * 4
    assert layer(resnet, "maxpool") == 64 * 56 * 56 * 4
    assert layer(resnet, "layer4.2.conv3") == 2048 * 7 * 7 * 4
    assert layer(resnet, "fc") == 1000 * 4
    dense = build("densenet201")  # concatenation folded into conv2: 64 + 32 channels
    assert layer(dense, "denseblock1.denselayer1.conv2") == (64 + 32) * 56 * 56 * 4
    assert layer(build("vgg16"), "avgpool") == 512 * 7 * 7 * 4
    assert layer(build("bert_base"), "encoder.0.ffn") == 128 * 768 * 4
    assert layer(build("gpt2_small"), "lm_head") == 1024 * 50257 * 4
    assert layer(build("lstm_lm"), "lstm.1") == 35 * 650 * 4
    assert layer(build("gnmt"), "encoder.lstm.0") == 50 * 2 * 1024 * 4


# --- structure of every model ---------------------------------------------------------------


@pytest.mark.parametrize("name", list(ZOO))
def test_every_model_is_well_formed(name: str) -> None:
    model = build(name)
    assert model.family == ZOO[name].family
    names = [x.name for x in model.layers]
    assert len(names) == len(set(names))
    for x in model.layers:
        assert x.params >= 0
        assert x.fwd_flops_per_sample >= 0
        assert x.activation_bytes_per_sample > 0
        assert x.activation_bytes_per_sample % 4 == 0
    assert model.params > 0
    assert model.fwd_flops_per_sample > 0


def test_transformer_granularity() -> None:
    model = build("bert_base")
    assert len(model.layers) == 1 + 2 * 12 + 1
    assert [x.kind for x in model.layers[1:3]] == ["attention", "mlp"]
    gpt = build("gpt2_small")
    assert [x.name for x in gpt.layers[-2:]] == ["ln_f", "lm_head"]
    assert gpt.layers[-1].params == 0  # tied to the token embedding


def test_resnet_granularity() -> None:
    names = [x.name for x in build("resnet50").layers]
    assert names[:6] == [
        "conv1",
        "maxpool",
        "layer1.0.conv1",
        "layer1.0.conv2",
        "layer1.0.conv3",
        "layer1.0.downsample",
    ]
    assert names[-2:] == ["avgpool", "fc"]
    assert sum(name.endswith("downsample") for name in names) == 4


# --- options --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "features"),
    [
        ("resnet50", 2048),
        ("resnet101", 2048),
        ("mobilenetv2", 1280),
        ("densenet201", 1920),
        ("vgg16", 4096),
        ("small_cnn", 128),
    ],
)
def test_num_classes_changes_only_the_head(name: str, features: int) -> None:
    default, other = build(name), build(name, num_classes=7)
    assert default.layers[:-1] == other.layers[:-1]
    head = other.layers[-1]
    assert head.params == (features + 1) * 7
    assert head.fwd_flops_per_sample == 2 * features * 7
    assert head.activation_bytes_per_sample == 7 * 4
    classes = 10 if name == "small_cnn" else 1000
    assert default.params - other.params == (features + 1) * (classes - 7)


@pytest.mark.parametrize("name", IMAGENET_CNNS)
def test_image_size_scales_flops_not_params(name: str) -> None:
    """Adaptive pooling before the classifier (VGG's to 512x7x7) keeps params fixed."""
    small, large = build(name), build(name, image_size=448)
    assert large.params == small.params
    assert large.fwd_flops_per_sample / small.fwd_flops_per_sample == pytest.approx(4, rel=0.02)


def test_small_cnn_image_size_changes_fc1() -> None:
    default, large = build("small_cnn"), build("small_cnn", image_size=64)
    fc1 = {x.name: x.params for x in default.layers}["fc1"]
    fc1_large = {x.name: x.params for x in large.layers}["fc1"]
    assert fc1 == 128 * 4 * 4 * 128 + 128
    assert fc1_large == 128 * 8 * 8 * 128 + 128
    assert large.params - default.params == fc1_large - fc1


def test_lstm_lm_options() -> None:
    untied, tied = build("lstm_lm"), build("lstm_lm", tied=True)
    assert untied.params - tied.params == 650 * 10_000
    assert tied.fwd_flops_per_sample == untied.fwd_flops_per_sample
    wide = build("lstm_lm", embedding=400)
    assert wide.layers[0].params == 10_000 * 400
    assert wide.layers[1].params == lstm_params(400, 650)
    assert len(build("lstm_lm", layers=4).layers) == 1 + 4 + 1
    longer = build("lstm_lm", seq_len=70)
    assert longer.fwd_flops_per_sample == pytest.approx(2 * untied.fwd_flops_per_sample)
    assert longer.params == untied.params


def test_gnmt_options() -> None:
    model = build("gnmt", layers=4)
    assert len(model.layers) == 1 + 4 + 1 + 1 + (4 - 1) + 1
    assert model.layers[1].name == "encoder.lstm.0"
    assert model.layers[1].params == 2 * lstm_params(1024, 1024)  # bidirectional
    separate = build("gnmt", shared_embedding=False)
    assert separate.params - build("gnmt").params == 32_000 * 1024


def test_decoder_defaults_are_gpt2_small() -> None:
    decoder, gpt2 = build("decoder"), build("gpt2_small")
    assert decoder.params == gpt2.params
    assert decoder.fwd_flops_per_sample == gpt2.fwd_flops_per_sample
    untied = build("decoder", tied=False)
    assert untied.params - decoder.params == 50257 * 768


def test_encoder_defaults_are_bert_base() -> None:
    encoder, bert = build("encoder"), build("bert_base")
    assert encoder.name == "encoder"
    assert encoder.family == bert.family == "transformer"
    assert encoder.layers == bert.layers  # layer for layer: names, params, FLOPs, activations
    assert encoder.params == 109_482_240
    large = build("encoder", layers=24, hidden=1024, heads=16)
    assert large.layers == build("bert_large").layers
    assert build("encoder", seq_len=64, vocab=8000).layers == build("bert_base", seq_len=64, vocab=8000).layers


@settings(max_examples=30, deadline=None)
@given(
    layers=st.integers(1, 6),
    heads=st.integers(1, 8),
    head_dim=st.integers(1, 64),
    seq_len=st.integers(1, 512),
    vocab=st.integers(1, 5000),
)
def test_encoder_params_formula(layers: int, heads: int, head_dim: int, seq_len: int, vocab: int) -> None:
    """Embeddings (vocab + 512 positions + 2 token types, LayerNorm), 12 h^2 + 13 h per layer, pooler."""
    hidden = heads * head_dim
    model = build("encoder", layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, vocab=vocab)
    embeddings = (vocab + 512 + 2) * hidden + 2 * hidden
    assert model.params == embeddings + layers * (12 * hidden**2 + 13 * hidden) + hidden**2 + hidden
    assert [x.name for x in model.layers[:3]] == ["embeddings", "encoder.0.attention", "encoder.0.ffn"]
    assert model.layers[-1].name == "pooler"
    assert len(model.layers) == 2 * layers + 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"seq_len": 513}, "'seq_len' must be <= 512"),
        ({"hidden": 100, "heads": 12}, "multiple of 'heads'"),
        ({"layers": 0}, "'layers' must be >= 1"),
    ],
)
def test_encoder_invalid_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(ZooError, match=message):
        build("encoder", **options)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    layers=st.integers(1, 8),
    heads=st.integers(1, 8),
    head_dim=st.integers(1, 64),
    seq_len=st.integers(1, 512),
    vocab=st.integers(1, 5000),
    ffn_mult=st.sampled_from([1, 2.0, 8 / 3, 4]),
)
def test_decoder_params_formula(
    layers: int, heads: int, head_dim: int, seq_len: int, vocab: int, ffn_mult: float
) -> None:
    hidden = heads * head_dim
    ffn = round(ffn_mult * hidden)
    model = build(
        "decoder",
        layers=layers,
        hidden=hidden,
        heads=heads,
        seq_len=seq_len,
        vocab=vocab,
        ffn_mult=ffn_mult,
    )
    block = 4 * hidden**2 + 6 * hidden + 2 * hidden * ffn + ffn + 3 * hidden
    assert model.params == (vocab + seq_len) * hidden + layers * block + 2 * hidden
    assert len(model.layers) == 2 * layers + 3


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(IMAGENET_CNNS), image_size=st.integers(32, 320))
def test_cnn_params_independent_of_image_size(name: str, image_size: int) -> None:
    assert build(name, image_size=image_size).params == build(name).params


# --- errors ---------------------------------------------------------------------------------


def test_unknown_model_lists_known_names() -> None:
    with pytest.raises(ZooError, match="unknown model 'resnet5'") as info:
        build("resnet5")
    assert isinstance(info.value, ValueError)
    for name in ZOO:
        assert name in str(info.value)
    assert "did you mean 'resnet50'" in str(info.value)


def test_unknown_option_names_it_and_the_options() -> None:
    with pytest.raises(ZooError, match="no option 'hidden'") as info:
        build("resnet50", hidden=3)
    assert "image_size: int = 224" in str(info.value)
    assert "num_classes: int = 1000" in str(info.value)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("resnet50", {"image_size": "224"}, "'image_size' of model 'resnet50' must be an int"),
        ("resnet50", {"num_classes": True}, "'num_classes' .* must be an int"),
        ("resnet50", {"num_classes": 10.0}, "'num_classes' .* must be an int"),
        ("lstm_lm", {"tied": 1}, "'tied' .* must be a bool"),
        ("gpt2", {"size": 2}, "'size' .* must be a str"),
        ("decoder", {"ffn_mult": math.nan}, "'ffn_mult' .* must be a finite float"),
    ],
)
def test_wrong_option_type(name: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(ZooError, match=message):
        check_options(name, options)
    with pytest.raises(ZooError, match=message):
        build(name, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("resnet50", {"num_classes": 0}, "'num_classes' must be >= 1"),
        ("vgg16", {"image_size": 16}, "too small: 'pool5'"),
        ("densenet201", {"image_size": 16}, "too small: 'transition3.pool'"),
        ("lstm_lm", {"layers": 0}, "'layers' must be >= 1"),
        ("lstm_lm", {"tied": True, "embedding": 400}, "'tied' needs embedding == hidden"),
        ("gnmt", {"layers": 1}, "'layers' must be >= 2"),
        ("gpt2", {"size": "huge"}, "'size' must be one of small, medium, large, xl"),
        ("gpt2_small", {"seq_len": 2048}, "'seq_len' must be <= 1024"),
        ("bert_base", {"seq_len": 513}, "'seq_len' must be <= 512"),
        ("decoder", {"hidden": 100, "heads": 12}, "multiple of 'heads'"),
        ("decoder", {"ffn_mult": 0.0}, "'ffn_mult' must give an MLP width >= 1"),
    ],
)
def test_invalid_option_value(name: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(ZooError, match=message):
        build(name, **options)  # type: ignore[arg-type]


def test_int_accepted_for_float_option() -> None:
    assert check_options("decoder", {"ffn_mult": 4}) == {"ffn_mult": 4.0}
    assert build("decoder", ffn_mult=4) == build("decoder")


# --- registry -------------------------------------------------------------------------------


def test_registry_names() -> None:
    assert set(ZOO) == {
        *IMAGENET_CNNS,
        "small_cnn",
        "lstm_lm",
        "gnmt",
        "bert_base",
        "bert_large",
        "encoder",
        "gpt2",
        "gpt2_small",
        "gpt2_medium",
        "gpt2_large",
        "gpt2_xl",
        "decoder",
        "llama2_7b",
        "llama2_13b",
        "llama2_70b",
        "llama3_8b",
        "llama3_70b",
        "llama3_405b",
        "mixtral_8x7b",
        "mixtral_8x22b",
        "deepseek_moe_16b",
    }


def test_options_are_typed_keywords() -> None:
    for entry in ZOO.values():
        for info in entry.options:
            assert info.type in (int, float, str, bool)
            assert info.default is None or type(info.default) is info.type


def test_list_models() -> None:
    summaries = list_models()
    assert [s.name for s in summaries] == list(ZOO)
    for summary in summaries:
        model = build(summary.name)
        assert summary.family == model.family
        assert summary.params == model.params
        assert summary.gflops == pytest.approx(model.fwd_flops_per_sample / 1e9)
        assert summary.description
        assert dict(summary.options) == {o.name: o.default for o in ZOO[summary.name].options}


def test_build_with_options_fills_in_the_defaults() -> None:
    model, options = build_with_options("lstm_lm", {"hidden": 64, "tied": True})
    assert model == build("lstm_lm", hidden=64, tied=True)
    assert options == {"layers": 2, "hidden": 64, "vocab": 10000, "seq_len": 35, "embedding": None, "tied": True}
    assert optional_int_option(options, "embedding") is None
    assert int_option(options, "hidden") == 64
    with pytest.raises(TypeError, match="'tied' must be an int"):
        int_option(options, "tied")
    with pytest.raises(ZooError, match="'hidden' of model 'lstm_lm' must be an int"):
        build_with_options("lstm_lm", {"hidden": "64"})


def test_in_zoo_order_names_what_is_not_in_the_zoo() -> None:
    assert in_zoo_order({"decoder", "small_cnn", "resnet50"}, "a table") == ("resnet50", "small_cnn", "decoder")
    with pytest.raises(ZooError, match="a table: not zoo models: resnet51"):
        in_zoo_order({"resnet50", "resnet51"}, "a table")


def test_the_named_sizes_are_zoo_models() -> None:
    """The zoo's size tables, which the torch and Keras models read, name models of the zoo."""
    for name, blocks in RESNET_BLOCKS.items():
        assert build(name).params == EXACT_PARAMS[name]
        assert sum(layer.name.endswith(".conv1") for layer in build(name).layers) == sum(blocks)
    for name, (layers, hidden, heads) in BERT_SIZES.items():
        assert build(name) == build("encoder", layers=layers, hidden=hidden, heads=heads).model_copy(
            update={"name": name}
        )
    for size in GPT2_SIZES:
        assert gpt2_name(size) in ZOO
        assert build(gpt2_name(size)).name == gpt2_name(size)


# --- optional cross-checks against the reference implementations ----------------------------


@pytest.mark.parametrize(
    ("name", "factory"),
    [
        ("resnet50", "resnet50"),
        ("resnet101", "resnet101"),
        ("mobilenetv2", "mobilenet_v2"),
        ("densenet201", "densenet201"),
        ("vgg16", "vgg16"),
    ],
)
@pytest.mark.ci_may_skip("torchvision has no CPU wheel for torch 2.13.0 on the registry CI reaches")
def test_params_match_torchvision(name: str, factory: str) -> None:
    models = pytest.importorskip("torchvision.models")
    reference = getattr(models, factory)(num_classes=10)
    expected = sum(p.numel() for p in reference.parameters())
    assert build(name, num_classes=10).params == expected


@pytest.mark.ci_may_skip("torchvision has no CPU wheel for torch 2.13.0 on the registry CI reaches")
def test_layer_params_match_torchvision_resnet50() -> None:
    """Per-layer check: each fused conv+bn layer matches torchvision's modules."""
    models = pytest.importorskip("torchvision.models")
    reference = models.resnet50()
    modules = dict(reference.named_modules())
    for x in build("resnet50").layers:
        if x.kind != "conv" or x.name == "conv1":
            continue
        prefix, _, conv = x.name.rpartition(".")
        if conv == "downsample":
            expected = sum(p.numel() for p in modules[x.name].parameters())
        else:
            bn = modules[f"{prefix}.bn{conv[-1]}"]
            expected = sum(p.numel() for p in modules[x.name].parameters()) + sum(p.numel() for p in bn.parameters())
        assert x.params == expected, x.name


@pytest.mark.parametrize("name", ["bert_base", "gpt2_small"])
def test_params_match_huggingface(name: str) -> None:
    transformers = pytest.importorskip("transformers")
    if name == "bert_base":
        reference = transformers.BertModel(transformers.BertConfig())
    else:
        reference = transformers.GPT2Model(transformers.GPT2Config())
    assert build(name).params == sum(p.numel() for p in reference.parameters())
