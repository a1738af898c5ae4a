"""Recurrent networks: an LSTM language model and a GNMT-like translation model.

One sample is one sequence. Each LSTM layer (both directions of a bidirectional layer) is one
layer. LSTM parameters follow PyTorch's `nn.LSTM`: 4 gates, each with an input weight, a
recurrent weight and two bias vectors (b_ih and b_hh), i.e. 4h(in + h) + 8h per direction.

Reference FLOPs: there is no published per-sample figure for these models, so the reference is
the standard count of Kaplan et al. 2020 ("Scaling Laws for Neural Language Models", Table 1):
2 FLOPs per weight of every matmul per token (C_forward ~ 2N, embedding lookups free), plus,
for GNMT's attention, 2 x (t_q x t_k x d) multiply-adds for the scores and for the context.
"""

from __future__ import annotations

from simstudy.spec.model import Layer, Model
from simstudy.zoo.errors import ZooError
from simstudy.zoo.layers import FP32_BYTES, embedding_layer, linear, require_at_least


def lstm_params(input_size: int, hidden: int) -> int:
    """Parameters of one direction of one PyTorch LSTM layer."""
    return 4 * hidden * (input_size + hidden) + 8 * hidden


def lstm_lm_embedding(hidden: int, embedding: int | None) -> int:
    """The LSTM language model's embedding width: `embedding`, by default `hidden`."""
    return hidden if embedding is None else embedding


def lstm(name: str, input_size: int, hidden: int, *, tokens: int, bidirectional: bool = False) -> Layer:
    """One LSTM layer over `tokens` time steps (gate matmuls counted, element-wise ops not)."""
    directions = 2 if bidirectional else 1
    macs = 4 * hidden * (input_size + hidden) * tokens
    return Layer(
        name=name,
        kind="lstm",
        params=directions * lstm_params(input_size, hidden),
        fwd_flops_per_sample=2.0 * directions * macs,
        activation_bytes_per_sample=tokens * directions * hidden * FP32_BYTES,
    )


def lstm_lm(
    *,
    layers: int = 2,
    hidden: int = 650,
    vocab: int = 10000,
    seq_len: int = 35,
    embedding: int | None = None,
    tied: bool = False,
) -> Model:
    """A word-level LSTM language model (Zaremba et al. 2014 "medium" at the defaults).

    embedding -> `layers` stacked LSTMs -> linear decoder to the vocabulary, as PyTorch's
    word_language_model example. `embedding` (the embedding width) defaults to `hidden`; with
    `tied` the decoder reuses the embedding matrix (only its bias is a new parameter), which
    needs embedding == hidden. 19,780,400 params at the defaults (untied).
    """
    emb = lstm_lm_embedding(hidden, embedding)
    for option, value in (
        ("layers", layers),
        ("hidden", hidden),
        ("vocab", vocab),
        ("seq_len", seq_len),
    ):
        require_at_least(option, value, 1)
    require_at_least("embedding", emb, 1)
    if tied and emb != hidden:
        raise ZooError(f"option 'tied' needs embedding == hidden; got {emb} and {hidden}")
    stack = [embedding_layer("embedding", vocab, emb, tokens=seq_len)]
    for index in range(layers):
        stack.append(lstm(f"lstm.{index}", emb if index == 0 else hidden, hidden, tokens=seq_len))
    decoder = linear("decoder", hidden, vocab, tokens=seq_len)
    if tied:  # the weight is the embedding's, counted there; only the bias is new
        decoder = Layer(
            name=decoder.name,
            kind=decoder.kind,
            params=vocab,
            fwd_flops_per_sample=decoder.fwd_flops_per_sample,
            activation_bytes_per_sample=decoder.activation_bytes_per_sample,
        )
    stack.append(decoder)
    return Model(name="lstm_lm", family="rnn", layers=tuple(stack))


def bahdanau_attention(name: str, hidden: int, *, queries: int, keys: int) -> Layer:
    """Normalised Bahdanau (additive) attention as in NVIDIA's GNMT v2 (MLPerf).

    Query and key projections (no bias), the score vector, the normalisation scalar and bias;
    FLOPs: both projections, the scores (t_q x t_k x h) and the context (t_q x t_k x h).
    The output is the context vector for every query.
    """
    macs = (queries + keys) * hidden * hidden + 2 * queries * keys * hidden
    return Layer(
        name=name,
        kind="attention",
        params=2 * hidden * hidden + 2 * hidden + 1,
        fwd_flops_per_sample=2.0 * macs,
        activation_bytes_per_sample=queries * hidden * FP32_BYTES,
    )


def gnmt(
    *,
    layers: int = 8,
    hidden: int = 1024,
    vocab: int = 32000,
    seq_len: int = 50,
    shared_embedding: bool = True,
) -> Model:
    """A GNMT-like LSTM seq2seq model with attention (GNMT-8 at the defaults).

    Structure of NVIDIA's GNMT v2 (the MLPerf reference, Wu et al. 2016), generalised to
    `layers` encoder and `layers` decoder layers:
    encoder: a bidirectional LSTM (output 2h), an LSTM(2h, h), then LSTM(h, h) layers;
    decoder: an LSTM(h, h) whose output queries a normalised Bahdanau attention over the
    encoder output, then LSTM(2h, h) layers fed with [output; context], then a linear
    classifier to the vocabulary. The source and target sequences both have `seq_len` tokens;
    the embedding is shared between encoder and decoder unless `shared_embedding` is false.
    """
    require_at_least("layers", layers, 2)
    for option, value in (("hidden", hidden), ("vocab", vocab), ("seq_len", seq_len)):
        require_at_least(option, value, 1)
    tokens = seq_len
    if shared_embedding:  # looked up for the source and the target tokens
        stack = [embedding_layer("embedding", vocab, hidden, tokens=2 * tokens)]
    else:
        stack = [embedding_layer("encoder.embedding", vocab, hidden, tokens=tokens)]
    stack.append(lstm("encoder.lstm.0", hidden, hidden, tokens=tokens, bidirectional=True))
    stack.append(lstm("encoder.lstm.1", 2 * hidden, hidden, tokens=tokens))
    stack += [lstm(f"encoder.lstm.{i}", hidden, hidden, tokens=tokens) for i in range(2, layers)]
    if not shared_embedding:
        stack.append(embedding_layer("decoder.embedding", vocab, hidden, tokens=tokens))
    stack.append(lstm("decoder.lstm.0", hidden, hidden, tokens=tokens))
    stack.append(bahdanau_attention("decoder.attention", hidden, queries=tokens, keys=tokens))
    stack += [lstm(f"decoder.lstm.{i}", 2 * hidden, hidden, tokens=tokens) for i in range(1, layers)]
    stack.append(linear("classifier", hidden, vocab, tokens=tokens))
    return Model(name="gnmt", family="rnn", layers=tuple(stack))
