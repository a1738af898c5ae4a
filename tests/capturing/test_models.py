"""Tests of the real torch models built from zoo specs for captures (`simstudy.capturing.models`).

Every supported model is checked against its zoo spec layer by layer: parameter counts, the
order of `module.parameters()` (DDP's gradient buckets follow it), and the size of every
layer's output activation. Small options run for real on CPU (forward, backward, finite loss);
default options, some of them too large for a fast test, run on the `meta` device, which has
shapes but no data, so the structure of the full-size models is checked too.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest

torch = pytest.importorskip("torch")

from torch import Tensor, nn  # noqa: E402

from simstudy.capturing.models import TrainModel, build_torch_model, supported_models  # noqa: E402
from simstudy.zoo import ZOO, ZooError, build  # noqa: E402
from simstudy.zoo.cnn import RESNET_BLOCKS  # noqa: E402
from simstudy.zoo.transformer import BERT_SIZES, GPT2_SIZES, gpt2_name  # noqa: E402

CNN_32: dict[str, object] = {"image_size": 32, "num_classes": 10}
TINY_BERT: dict[str, object] = {"seq_len": 8, "vocab": 50}

# Options small enough to train for real on CPU in a fraction of a second or so each.
SMALL: dict[str, dict[str, object]] = {
    "small_cnn": {"image_size": 16, "num_classes": 5, "width": 4},
    "resnet50": CNN_32,
    "resnet101": CNN_32,
    "mobilenetv2": CNN_32,
    "densenet201": CNN_32,
    "lstm_lm": {"layers": 2, "hidden": 24, "vocab": 60, "seq_len": 7},
    "encoder": {"layers": 2, "hidden": 32, "heads": 4, "seq_len": 12, "vocab": 90},
    "decoder": {"layers": 2, "hidden": 32, "heads": 4, "seq_len": 12, "vocab": 90, "ffn_mult": 8 / 3},
    "gpt2_small": {"seq_len": 4},
}
# More real CPU runs: default options of the small models and the options that change structure.
REAL_CASES: list[tuple[str, dict[str, object]]] = [
    *SMALL.items(),
    ("small_cnn", {}),
    ("small_cnn", {"image_size": 20}),  # not a multiple of 8: pooling floors like the zoo
    ("lstm_lm", {}),
    ("lstm_lm", {"layers": 3, "hidden": 16, "vocab": 40, "seq_len": 5, "embedding": 8}),
    ("lstm_lm", {"layers": 1, "hidden": 16, "vocab": 40, "seq_len": 5, "tied": True}),
    ("encoder", {"layers": 1, "hidden": 48, "heads": 3, "seq_len": 5, "vocab": 30}),
    ("decoder", {"layers": 1, "hidden": 16, "heads": 2, "seq_len": 6, "vocab": 30, "tied": False}),
    ("mobilenetv2", {"image_size": 40, "num_classes": 3}),
]
# Models whose options cannot make them small: checked on the meta device below.
TOO_LARGE_FOR_CPU = {"vgg16", "bert_base", "bert_large", "gpt2", "gpt2_medium", "gpt2_large", "gpt2_xl"}


@contextmanager
def meta_device() -> Iterator[None]:
    with torch.device("meta"):
        yield


def case_id(case: tuple[str, Mapping[str, object]]) -> str:
    name, options = case
    return name + "".join(f"-{key}={value}" for key, value in options.items())


def activation_sizes(model: TrainModel, inputs: Tensor) -> dict[str, int]:
    """Elements per sample of the output of every zoo layer's module, from forward hooks."""
    sizes: dict[str, int] = {}
    handles = []
    for name, module in model.layers.items():

        def hook(_module: nn.Module, _args: object, output: object, name: str = name) -> None:
            tensor = output[0] if isinstance(output, tuple) else output  # nn.LSTM: (output, state)
            assert isinstance(tensor, Tensor)
            sizes[name] = tensor.numel() // inputs.shape[0]

        handles.append(module.register_forward_hook(hook))
    try:
        model.module(inputs)
    finally:
        for handle in handles:
            handle.remove()
    return sizes


def check_structure(model: TrainModel, name: str, options: Mapping[str, object]) -> None:
    """The torch model has the zoo spec's layers, parameters and parameter order."""
    spec = build(name, **options)  # type: ignore[arg-type]
    assert model.spec == spec
    assert list(model.layers) == [layer.name for layer in spec.layers]
    ordered: list[nn.Parameter] = []
    for layer in spec.layers:
        params = list(model.layers[layer.name].parameters())
        assert sum(p.numel() for p in params) == layer.params, layer.name
        ordered += params
    everything = list(model.module.parameters())
    assert sum(p.numel() for p in everything) == spec.params
    # Exactly the layers' parameters, each once, in zoo layer order (DDP buckets in reverse).
    assert [id(p) for p in everything] == [id(p) for p in ordered]
    assert all(p.requires_grad for p in everything)


def check_activations(model: TrainModel, inputs: Tensor) -> None:
    """Each layer's module outputs the activation the zoo spec says (fp32, 4 bytes each)."""
    sizes = activation_sizes(model, inputs)
    assert set(sizes) == set(model.layers)
    for layer in model.spec.layers:
        if ".denselayer" in layer.name and layer.name.endswith(".conv2"):
            # The zoo folds the concatenation into conv2; the enclosing DenseLayer does it here.
            continue
        assert 4 * sizes[layer.name] == layer.activation_bytes_per_sample, layer.name


@pytest.mark.parametrize("case", REAL_CASES, ids=case_id)
def test_real_model_matches_spec_and_trains(case: tuple[str, dict[str, object]]) -> None:
    name, options = case
    model = build_torch_model(name, options, seed=3)
    check_structure(model, name, options)
    generator = torch.Generator().manual_seed(0)
    inputs, targets = model.batch(2, generator)
    with torch.no_grad():
        check_activations(model, inputs)
    outputs = model.module(inputs)
    assert outputs.shape[0] == 2 and outputs.dtype == torch.float32
    loss = model.loss(outputs, targets)
    assert loss.ndim == 0 and math.isfinite(loss.item())
    torch.autograd.backward(loss)
    for parameter_name, parameter in model.module.named_parameters():
        assert parameter.grad is not None, parameter_name
        assert torch.isfinite(parameter.grad).all(), parameter_name
    # Most parameters really learn something from one batch (not all: e.g. unused positions).
    nonzero = sum(p.numel() for p in model.module.parameters() if p.grad is not None and p.grad.abs().sum() > 0)
    assert nonzero > 0.5 * model.spec.params


@pytest.mark.parametrize("name", supported_models())
def test_every_supported_model_at_defaults_on_meta(name: str) -> None:
    """Full-size structure, parameter order, activations, forward and backward (shapes only)."""
    options: dict[str, object] = dict(CNN_32) if ZOO[name].family == "cnn" and name != "small_cnn" else {}
    with meta_device():
        model = build_torch_model(name, options)
    check_structure(model, name, options)
    assert all(p.device.type == "meta" for p in model.module.parameters())
    inputs, targets = model.batch(2, torch.Generator().manual_seed(0))
    inputs, targets = inputs.to("meta"), targets.to("meta")
    with meta_device():
        check_activations(model, inputs)
        loss = model.loss(model.module(inputs), targets)
        torch.autograd.backward(loss)
    assert loss.shape == ()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in model.module.parameters())


def test_every_supported_model_is_tested() -> None:
    assert set(supported_models()) == set(SMALL) | TOO_LARGE_FOR_CPU
    assert set(SMALL).isdisjoint(TOO_LARGE_FOR_CPU)
    assert {"small_cnn", "resnet50", "resnet101", "mobilenetv2", "lstm_lm", "bert_base", "bert_large"} <= set(
        supported_models()
    )
    assert {"encoder", "gpt2", "gpt2_small", "decoder"} <= set(supported_models())
    assert list(supported_models()) == [name for name in ZOO if name in supported_models()]


def test_the_zoo_size_tables_are_all_buildable() -> None:
    """Every size the zoo names (ResNet depths, BERT sizes, GPT-2 sizes) has a torch model."""
    named = {*RESNET_BLOCKS, *BERT_SIZES, *(gpt2_name(size) for size in GPT2_SIZES)}
    assert named <= set(supported_models())


@pytest.mark.parametrize(
    ("name", "options"),
    [("bert_base", TINY_BERT), ("gpt2", {"size": "medium", "seq_len": 16}), ("vgg16", {"image_size": 48})],
    ids=["bert_base", "gpt2_medium", "vgg16"],
)
def test_options_of_large_models_on_meta(name: str, options: dict[str, object]) -> None:
    with meta_device():
        model = build_torch_model(name, options)
    check_structure(model, name, options)
    inputs, _ = model.batch(1, torch.Generator())
    with meta_device():
        check_activations(model, inputs.to("meta"))


def test_encoder_defaults_build_bert_base() -> None:
    with meta_device():
        encoder, bert = build_torch_model("encoder"), build_torch_model("bert_base")
    shapes = [(n, p.shape) for n, p in encoder.module.named_parameters()]
    assert shapes == [(n, p.shape) for n, p in bert.module.named_parameters()]
    assert list(encoder.layers) == list(bert.layers)


def test_deterministic_given_seed() -> None:
    options = SMALL["encoder"]
    state = torch.get_rng_state()
    first = build_torch_model("encoder", options, seed=7)
    second = build_torch_model("encoder", options, seed=7)
    other = build_torch_model("encoder", options, seed=8)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is left alone
    pairs = list(zip(first.module.parameters(), second.module.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in pairs)
    assert not all(torch.equal(a, b) for a, b in zip(first.module.parameters(), other.module.parameters(), strict=True))
    # The same for BatchNorm CNNs and LSTMs (constructor initialisations use the seeded RNG).
    for name in ("mobilenetv2", "lstm_lm"):
        a, b = build_torch_model(name, SMALL[name], seed=1), build_torch_model(name, SMALL[name], seed=1)
        assert all(torch.equal(x, y) for x, y in zip(a.module.parameters(), b.module.parameters(), strict=True))


def test_batches() -> None:
    cnn = build_torch_model("small_cnn", {"image_size": 16, "num_classes": 5})
    images, labels = cnn.batch(3, torch.Generator().manual_seed(0))
    assert images.shape == (3, 3, 16, 16) and images.dtype == torch.float32
    assert labels.shape == (3,) and labels.dtype == torch.int64
    assert int(labels.min()) >= 0 and int(labels.max()) < 5
    again, _ = cnn.batch(3, torch.Generator().manual_seed(0))
    assert torch.equal(images, again)

    lm = build_torch_model("decoder", SMALL["decoder"])
    tokens, following = lm.batch(4, torch.Generator().manual_seed(0))
    assert tokens.shape == following.shape == (4, 12) and tokens.dtype == torch.int64
    assert torch.equal(tokens[:, 1:], following[:, :-1])  # next-token targets
    assert int(tokens.min()) >= 0 and int(tokens.max()) < 90
    assert lm.module(tokens).shape == (4, 12, 90)

    bert = build_torch_model("encoder", SMALL["encoder"])
    tokens, classes = bert.batch(2, torch.Generator().manual_seed(0))
    assert tokens.shape == (2, 12) and classes.shape == (2,)
    assert bert.module(tokens).shape == (2, 32)  # the pooled output: logits of `hidden` classes
    assert int(classes.max()) < 32

    with pytest.raises(ValueError, match="batch_size"):
        lm.batch(0, torch.Generator())


def test_loss_is_cross_entropy() -> None:
    model = build_torch_model("decoder", SMALL["decoder"])
    logits = torch.zeros(2, 12, 90)
    targets = torch.zeros(2, 12, dtype=torch.int64)
    assert model.loss(logits, targets).item() == pytest.approx(math.log(90))


def test_tied_lm_head_reuses_the_embedding() -> None:
    model = build_torch_model("decoder", SMALL["decoder"])  # tied by default
    head, embeddings = model.layers["lm_head"], model.layers["embeddings"]
    assert list(head.parameters()) == []
    wte = embeddings.get_submodule("wte").weight
    with torch.no_grad():
        hidden = model.module.get_submodule("ln_f")(torch.randn(1, 12, 32))
        assert torch.allclose(head(hidden), hidden @ wte.T)
    untied = build_torch_model("decoder", {**SMALL["decoder"], "tied": False})
    assert sum(p.numel() for p in untied.layers["lm_head"].parameters()) == 90 * 32


def test_tied_lstm_decoder_owns_only_its_bias() -> None:
    options = {"layers": 1, "hidden": 16, "vocab": 40, "seq_len": 5, "tied": True}
    model = build_torch_model("lstm_lm", options)
    (bias,) = model.layers["decoder"].parameters()
    assert bias.shape == (40,)
    with torch.no_grad():
        model.layers["embedding"].get_parameter("weight").zero_()
        bias.copy_(torch.arange(40.0))
        logits = model.module(torch.zeros(1, 5, dtype=torch.int64))
    assert torch.equal(logits, torch.arange(40.0).expand(1, 5, 40))


def test_residual_blocks_are_residual() -> None:
    """Zeroing a ResNet block's last BN scale leaves relu(input) (through the identity)."""
    model = build_torch_model("resnet50", CNN_32)
    model.module.eval()
    block = model.module.get_submodule("layer1.1")
    with torch.no_grad():
        norm = model.layers["layer1.1.conv3"].get_submodule("1")
        assert isinstance(norm, nn.BatchNorm2d)
        norm.weight.zero_()
        norm.bias.zero_()
        x = torch.randn(1, 256, 8, 8)
        assert torch.equal(block(x), torch.relu(x))


def test_unsupported_model() -> None:
    with pytest.raises(ValueError, match="'gnmt'") as info:
        build_torch_model("gnmt")
    for name in supported_models():
        assert name in str(info.value)
    with pytest.raises(ValueError, match="'nope'"):
        build_torch_model("nope")


def test_invalid_options_are_the_zoo_errors() -> None:
    with pytest.raises(ZooError, match="no option 'hidden'"):
        build_torch_model("resnet50", {"hidden": 3})
    with pytest.raises(ZooError, match="needs embedding == hidden"):
        build_torch_model("lstm_lm", {"tied": True, "embedding": 8, "hidden": 16})
    with pytest.raises(ZooError, match="must be <= 512"):
        build_torch_model("encoder", {"seq_len": 600})
