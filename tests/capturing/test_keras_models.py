"""The Keras models of TensorFlow captures (`simstudy.capturing.keras_models`): the zoo's parameter
counts layer by layer and in zoo order, and a real forward/backward pass on CPU."""

from __future__ import annotations

import math

import pytest

tf = pytest.importorskip("tensorflow", reason="tensorflow is not installed (pip install -e '.[capture-tf]')")

from simstudy.capturing.keras_models import build_keras_model, supported_models  # noqa: E402
from simstudy.spec.capture import KERAS_MODELS  # noqa: E402
from simstudy.zoo import build, check_options  # noqa: E402

# The options of the fidelity captures, and the zoo defaults of the small CNN.
CASES: list[tuple[str, dict[str, object]]] = [
    ("small_cnn", {}),
    ("small_cnn", {"image_size": 16, "num_classes": 5, "width": 4}),
    ("lstm_lm", {"layers": 1, "hidden": 128, "vocab": 2000, "seq_len": 20}),
    ("lstm_lm", {"layers": 2, "hidden": 24, "vocab": 60, "seq_len": 7, "embedding": 16}),
    ("encoder", {"layers": 2, "hidden": 128, "heads": 4, "seq_len": 32, "vocab": 2000}),
]


def test_the_spec_lists_the_keras_models() -> None:
    assert supported_models() == KERAS_MODELS


@pytest.mark.parametrize(("name", "options"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_keras_model_has_the_zoo_parameters(name: str, options: dict[str, object]) -> None:
    km = build_keras_model(name, options)
    spec = build(name, **check_options(name, options))
    assert km.model.count_params() == spec.params
    assert list(km.layers) == [layer.name for layer in spec.layers]
    for layer in spec.layers:
        got = sum(int(v.numpy().size) for v in km.layers[layer.name].trainable_weights)
        assert got == layer.params, layer.name
    x, y = km.batch(3, seed=1)
    with tf.GradientTape() as tape:
        loss = km.loss(km.model(x, training=True), y)
    grads = tape.gradient(loss, km.model.trainable_variables)
    assert math.isfinite(float(loss))
    assert all(g is not None for g in grads)
    assert sum(int(tf.size(tf.convert_to_tensor(g))) for g in grads) == spec.params


def test_models_without_a_keras_version_are_refused() -> None:
    with pytest.raises(ValueError, match="no Keras version"):
        build_keras_model("resnet50")
    with pytest.raises(ValueError, match="tied"):
        build_keras_model("lstm_lm", {"tied": True})
