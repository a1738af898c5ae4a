"""Plain-Keras models of the zoo's small CNN, LSTM language model and BERT-style encoder, for the
TensorFlow workers of real captures (`framework: tensorflow`).

`build_keras_model(name, options)` builds the `simstudy.zoo` model `name` with `options` and a
Keras model (TensorFlow backend) of the same structure: every zoo layer is one Keras layer of the
same name holding exactly that layer's parameters (a test checks the counts layer by layer), and
the model's `trainable_variables` list them in zoo layer order (MultiWorkerMirroredStrategy packs
gradients in reverse of that order, as DDP does).

What differs from the torch models (`simstudy.capturing.models`), and why:

* images are channels-last (Keras's default); the parameter counts do not depend on it;
* the LSTM is `TorchLSTM`, a Keras RNN whose cell has PyTorch's two bias vectors (b_ih and b_hh),
  so that it has the zoo's 4h(in + h) + 8h parameters; Keras's own LSTM has one bias (4h fewer);
* BERT's position and token-type tables are read by slicing (every sample uses positions
  0..seq_len-1 and token type 0), so their gradients are dense tensors; the word table is a
  `keras.layers.Embedding`, whose gradient TensorFlow gives as `IndexedSlices` (the worker
  converts them to dense tensors before the all-reduce, see `simstudy.capturing.tf_worker`).

Only the three models the captures use have Keras versions (`_BUILDERS`, which must list the
zoo models of `simstudy.spec.capture.KERAS_MODELS`); other zoo models raise ValueError. The
architectures' numbers are read from the zoo modules, as by the torch models.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf

from simstudy.spec.capture import KERAS_MODELS
from simstudy.spec.model import Model
from simstudy.zoo import cnn, transformer
from simstudy.zoo.registry import Options, build_with_options, in_zoo_order, int_option, optional_int_option
from simstudy.zoo.rnn import lstm_lm_embedding


@dataclass
class KerasModel:
    """A Keras model of a zoo model, its synthetic data and loss.

    `layers` maps every zoo layer name, in zoo order, to the Keras layer holding exactly its
    parameters; `task` is "image", "next_token" or "sequence_class" (as `SyntheticTask.kind`).
    """

    model: Any  # keras.Model
    layers: dict[str, Any]
    spec: Model
    task: str
    shape: tuple[int, ...]
    vocab: int
    classes: int

    def batch(self, batch_size: int, seed: int) -> tuple[Any, Any]:
        """Synthetic inputs and targets for `batch_size` samples (tf tensors)."""
        gen = tf.random.Generator.from_seed(seed)
        if self.task == "image":
            x = gen.normal((batch_size, *self.shape))
            y = gen.uniform((batch_size,), 0, self.classes, dtype=tf.int32)
            return x, y
        if self.task == "next_token":
            (seq_len,) = self.shape
            tokens = gen.uniform((batch_size, seq_len + 1), 0, self.vocab, dtype=tf.int32)
            return tokens[:, :-1], tokens[:, 1:]
        x = gen.uniform((batch_size, *self.shape), 0, self.vocab, dtype=tf.int32)
        y = gen.uniform((batch_size,), 0, self.classes, dtype=tf.int32)
        return x, y

    def loss(self, outputs: Any, targets: Any) -> Any:
        """Mean cross entropy of logits `outputs` (classes last) against class ids `targets`."""
        logits = tf.reshape(outputs, (-1, outputs.shape[-1]))
        labels = tf.reshape(targets, (-1,))
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


# --- layers ---------------------------------------------------------------------------------


class TorchLSTMCell(keras.layers.Layer):  # type: ignore[misc]
    """An LSTM cell with PyTorch's parameters: W_ih (in, 4h), W_hh (h, 4h), b_ih and b_hh (4h each);
    gates in PyTorch's order (input, forget, cell, output)."""

    def __init__(self, units: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.units = units
        self.state_size = [units, units]
        self.output_size = units

    def build(self, input_shape: Any) -> None:
        h = self.units
        self.w_ih = self.add_weight(shape=(input_shape[-1], 4 * h), initializer="glorot_uniform", name="w_ih")
        self.w_hh = self.add_weight(shape=(h, 4 * h), initializer="orthogonal", name="w_hh")
        self.b_ih = self.add_weight(shape=(4 * h,), initializer="zeros", name="b_ih")
        self.b_hh = self.add_weight(shape=(4 * h,), initializer="zeros", name="b_hh")

    def call(self, inputs: Any, states: Any) -> Any:
        h_prev, c_prev = states
        z = tf.matmul(inputs, self.w_ih) + self.b_ih + tf.matmul(h_prev, self.w_hh) + self.b_hh
        i, f, g, o = tf.split(z, 4, axis=-1)
        c = tf.sigmoid(f) * c_prev + tf.sigmoid(i) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, [h, c]


def torch_lstm(units: int, name: str) -> Any:
    """One LSTM layer over a whole sequence (batch first), returning every step's output."""
    return keras.layers.RNN(TorchLSTMCell(units), return_sequences=True, name=name)


class BertEmbeddings(keras.layers.Layer):  # type: ignore[misc]
    """Word, position and token-type embeddings, summed, then LayerNorm (token type 0 only)."""

    def __init__(self, vocab: int, hidden: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.word = keras.layers.Embedding(vocab, hidden, embeddings_initializer=_normal, name="word")
        self.hidden = hidden
        self.norm = keras.layers.LayerNormalization(epsilon=1e-12, name="norm")

    def build(self, input_shape: Any) -> None:
        self.position = self.add_weight(shape=(transformer.BERT_MAX_POSITIONS, self.hidden), initializer=_normal,
                                        name="position")
        self.token_type = self.add_weight(shape=(transformer.BERT_TOKEN_TYPES, self.hidden), initializer=_normal,
                                          name="token_type")

    def call(self, tokens: Any) -> Any:
        seq_len = tokens.shape[1]
        x = self.word(tokens) + self.position[:seq_len] + self.token_type[0]
        return self.norm(x)


class PostNormAttention(keras.layers.Layer):  # type: ignore[misc]
    """BERT's `norm(x + attention(x))`: fused QKV and output projections with biases."""

    def __init__(self, hidden: int, heads: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.heads = heads
        self.qkv = keras.layers.Dense(3 * hidden, kernel_initializer=_normal, name="qkv")
        self.proj = keras.layers.Dense(hidden, kernel_initializer=_normal, name="proj")
        self.norm = keras.layers.LayerNormalization(epsilon=1e-12, name="norm")

    def call(self, x: Any) -> Any:
        batch, seq_len, hidden = tf.shape(x)[0], x.shape[1], x.shape[2]
        head = hidden // self.heads
        qkv = tf.reshape(self.qkv(x), (batch, seq_len, 3, self.heads, head))
        q, k, v = tf.unstack(tf.transpose(qkv, (2, 0, 3, 1, 4)), axis=0)
        scores = tf.matmul(q, k, transpose_b=True) / float(head) ** 0.5
        context = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
        context = tf.reshape(tf.transpose(context, (0, 2, 1, 3)), (batch, seq_len, hidden))
        return self.norm(x + self.proj(context))


class PostNormFeedForward(keras.layers.Layer):  # type: ignore[misc]
    """BERT's `norm(x + fc2(gelu(fc1(x))))`."""

    def __init__(self, hidden: int, ffn: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fc1 = keras.layers.Dense(ffn, kernel_initializer=_normal, name="fc1")
        self.fc2 = keras.layers.Dense(hidden, kernel_initializer=_normal, name="fc2")
        self.norm = keras.layers.LayerNormalization(epsilon=1e-12, name="norm")

    def call(self, x: Any) -> Any:
        return self.norm(x + self.fc2(tf.nn.gelu(self.fc1(x), approximate=False)))


_normal = keras.initializers.RandomNormal(stddev=0.02)


# --- models ---------------------------------------------------------------------------------

_Built = tuple[Any, dict[str, Any], str, tuple[int, ...], int, int]


def _small_cnn(options: Options) -> _Built:
    """`simstudy.zoo.cnn.small_cnn`: three conv+bias-relu / max-pool pairs, two dense layers."""
    size, classes = int_option(options, "image_size"), int_option(options, "num_classes")
    width = int_option(options, "width")
    inputs = keras.Input((size, size, 3))
    layers: dict[str, Any] = {}
    x = inputs
    for index, multiple in enumerate(cnn.SMALL_CNN_WIDTHS, 1):
        out = multiple * width
        layers[f"conv{index}"] = keras.layers.Conv2D(out, 3, padding="same", activation="relu", name=f"conv{index}")
        layers[f"pool{index}"] = keras.layers.MaxPooling2D(2, name=f"pool{index}")
        x = layers[f"pool{index}"](layers[f"conv{index}"](x))
    x = keras.layers.Flatten(name="flatten")(x)
    layers["fc1"] = keras.layers.Dense(cnn.SMALL_CNN_FC, activation="relu", name="fc1")
    layers["fc2"] = keras.layers.Dense(classes, name="fc2")
    outputs = layers["fc2"](layers["fc1"](x))
    return keras.Model(inputs, outputs, name="small_cnn"), layers, "image", (size, size, 3), 0, classes


def _lstm_lm(options: Options) -> _Built:
    """`simstudy.zoo.rnn.lstm_lm` (untied): embedding, one LSTM per layer, dense decoder."""
    if options["tied"] is True:
        raise ValueError("lstm_lm with tied: true has no Keras version for captures; use tied: false")
    hidden, vocab, seq_len = int_option(options, "hidden"), int_option(options, "vocab"), int_option(options, "seq_len")
    emb = lstm_lm_embedding(hidden, optional_int_option(options, "embedding"))
    inputs = keras.Input((seq_len,), dtype="int32")
    layers: dict[str, Any] = {"embedding": keras.layers.Embedding(vocab, emb, name="embedding")}
    x = layers["embedding"](inputs)
    for index in range(int_option(options, "layers")):
        layers[f"lstm.{index}"] = torch_lstm(hidden, f"lstm.{index}")
        x = layers[f"lstm.{index}"](x)
    layers["decoder"] = keras.layers.Dense(vocab, name="decoder")
    outputs = layers["decoder"](x)
    return keras.Model(inputs, outputs, name="lstm_lm"), layers, "next_token", (seq_len,), vocab, vocab


def _encoder(options: Options) -> _Built:
    """`simstudy.zoo.transformer.encoder`: BERT's `BertModel` (post-norm) with its pooler; the pooled
    vector is the logits of `hidden` classes."""
    hidden, heads, vocab = int_option(options, "hidden"), int_option(options, "heads"), int_option(options, "vocab")
    seq_len = int_option(options, "seq_len")
    inputs = keras.Input((seq_len,), dtype="int32")
    layers: dict[str, Any] = {"embeddings": BertEmbeddings(vocab, hidden, name="embeddings")}
    x = layers["embeddings"](inputs)
    for index in range(int_option(options, "layers")):
        layers[f"encoder.{index}.attention"] = PostNormAttention(hidden, heads, name=f"encoder.{index}.attention")
        ffn = transformer.FFN_MULT * hidden
        layers[f"encoder.{index}.ffn"] = PostNormFeedForward(hidden, ffn, name=f"encoder.{index}.ffn")
        x = layers[f"encoder.{index}.ffn"](layers[f"encoder.{index}.attention"](x))
    layers["pooler"] = keras.layers.Dense(hidden, activation="tanh", kernel_initializer=_normal, name="pooler")
    first = keras.layers.Lambda(lambda t: t[:, 0], name="first_token")(x)
    outputs = layers["pooler"](first)
    return keras.Model(inputs, outputs, name="encoder"), layers, "sequence_class", (seq_len,), vocab, hidden


_BUILDERS: dict[str, Callable[[Options], _Built]] = {
    "small_cnn": _small_cnn,
    "lstm_lm": _lstm_lm,
    "encoder": _encoder,
}
"""The Keras builder of each zoo model that has one, by zoo name."""

_SUPPORTED = in_zoo_order(_BUILDERS, "simstudy.capturing.keras_models")
if _SUPPORTED != KERAS_MODELS:  # what a tensorflow capture spec accepts
    raise ImportError(f"the Keras models {_SUPPORTED} are not simstudy.spec.capture.KERAS_MODELS {KERAS_MODELS}")


def supported_models() -> tuple[str, ...]:
    """The zoo models `build_keras_model` can build, in zoo order."""
    return _SUPPORTED


def _count(layer: Any) -> int:
    return sum(int(v.numpy().size) for v in layer.trainable_weights)


def _check_against_spec(model: Any, layers: Mapping[str, Any], spec: Model) -> None:
    """RuntimeError unless every Keras layer has its zoo layer's parameters, in zoo order."""
    expected: list[int] = []
    for layer in spec.layers:
        count = _count(layers[layer.name])
        if count != layer.params:
            raise RuntimeError(f"{spec.name}: Keras layer {layer.name!r} has {count} parameters, "
                               f"the zoo {layer.params}")
        expected += [id(v) for v in layers[layer.name].trainable_weights]
    if [id(v) for v in model.trainable_variables] != expected:
        raise RuntimeError(f"{spec.name}: the Keras variables are not exactly the zoo layers' variables in zoo order")


def build_keras_model(name: str, options: Mapping[str, object] | None = None, *, seed: int = 0) -> KerasModel:
    """Build zoo model `name` with `options` as a Keras model, initialised from `seed`.

    Raises ValueError for a model without a Keras version and `simstudy.zoo.ZooError` (a
    ValueError) for invalid options."""
    builder = _BUILDERS.get(name)
    if builder is None:
        raise ValueError(f"model {name!r} has no Keras version for TensorFlow captures; "
                         f"supported: {', '.join(supported_models())}")
    spec, resolved = build_with_options(name, dict(options or {}))
    keras.utils.set_random_seed(seed)
    model, layers, task, shape, vocab, classes = builder(resolved)
    _check_against_spec(model, layers, spec)
    return KerasModel(model=model, layers=layers, spec=spec, task=task, shape=shape, vocab=vocab, classes=classes)
