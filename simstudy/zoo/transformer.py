"""Transformers: BERT encoders (and a generic one), GPT-2 and a generic GPT-style decoder.

One sample is one sequence of `seq_len` tokens. Each block is two layers: attention (its layer
norm, QKV and output projections, residual add) and the feed-forward MLP (its layer norm, two
linear layers, activation, residual add). Parameter counts match HuggingFace's `BertModel`
(with pooler) and `GPT2Model`.

Reference FLOPs: the forward terms of the derivation in Narayanan et al. 2021, "Efficient
Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", Sec. 5.1: per layer
24 s h^2 (QKV 6, projection 2, MLP 16) + 4 s^2 h (scores and context, full s x s matrices as
computed by standard kernels), plus 2 s h V for the output logits. Their training formula
96 B s l h^2 (1 + s/6h + V/16lh) is this, times 3 for the backward pass and 1 for recomputation
(the logits are not recomputed). Kaplan et al. 2020 count the attention term as
2 n_layer n_ctx d_attn per token, i.e. half of ours (causal masking), which is why it is not
used as the reference.

The sizes (`BERT_SIZES`, `GPT2_SIZES`, `FFN_MULT`) and the decoders' shapes (`DecoderShape`) are
data of this module, so that the real torch and Keras models of captures (`simstudy.capturing`)
are built from the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from simstudy.spec.model import Layer, Model
from simstudy.zoo.errors import ZooError
from simstudy.zoo.layers import (
    FP32_BYTES,
    embedding_layer,
    linear,
    require_at_least,
    require_choice,
    zero_layer,
)


class Size(NamedTuple):
    """The size of a Transformer stack: blocks, hidden width, attention heads."""

    layers: int
    hidden: int
    heads: int


#: The MLP width of BERT and GPT-2, in multiples of the hidden width.
FFN_MULT = 4


def ffn_width(hidden: int, ffn_mult: float) -> int:
    """The MLP width of a generic decoder: round(ffn_mult x hidden)."""
    return round(ffn_mult * hidden)


def attention_block(name: str, hidden: int, seq_len: int, heads: int) -> Layer:
    """Multi-head self-attention with biases and one layer norm, over one sequence."""
    linear_macs = 4 * seq_len * hidden * hidden
    matmul_macs = 2 * seq_len * seq_len * hidden
    return Layer(
        name=name,
        kind="attention",
        params=4 * hidden * hidden + 4 * hidden + 2 * hidden,
        fwd_flops_per_sample=2.0 * (linear_macs + matmul_macs),
        activation_bytes_per_sample=seq_len * hidden * FP32_BYTES,
        heads=heads,
    )


def mlp_block(name: str, hidden: int, ffn: int, seq_len: int) -> Layer:
    """The feed-forward block: Linear(h, ffn), activation, Linear(ffn, h), one layer norm."""
    return Layer(
        name=name,
        kind="mlp",
        params=2 * hidden * ffn + ffn + hidden + 2 * hidden,
        fwd_flops_per_sample=2.0 * 2 * seq_len * hidden * ffn,
        activation_bytes_per_sample=seq_len * hidden * FP32_BYTES,
    )


def _check_shape(layers: int, hidden: int, heads: int, seq_len: int, vocab: int) -> None:
    """Validate the common transformer options."""
    for option, value in (
        ("layers", layers),
        ("hidden", hidden),
        ("heads", heads),
        ("seq_len", seq_len),
        ("vocab", vocab),
    ):
        require_at_least(option, value, 1)
    if hidden % heads:
        raise ZooError(f"option 'hidden' ({hidden}) must be a multiple of 'heads' ({heads})")


# --- BERT -----------------------------------------------------------------------------------

#: BERT's position and token-type embedding rows (also built by the capturable torch and Keras BERT)
BERT_MAX_POSITIONS = 512
BERT_TOKEN_TYPES = 2
#: The sizes of the zoo's BERT models (Devlin et al. 2019, Sec. 3).
BERT_SIZES: dict[str, Size] = {
    "bert_base": Size(12, 768, 12),
    "bert_large": Size(24, 1024, 16),
}


def _bert(name: str, size: Size, seq_len: int, vocab: int) -> Model:
    """A BERT encoder with its pooler and without the pre-training heads (`BertModel`)."""
    layers, hidden, heads = size
    _check_shape(layers, hidden, heads, seq_len, vocab)
    if seq_len > BERT_MAX_POSITIONS:
        raise ZooError(f"option 'seq_len' must be <= {BERT_MAX_POSITIONS} for BERT, got {seq_len}")
    rows = vocab + BERT_MAX_POSITIONS + BERT_TOKEN_TYPES
    stack = [embedding_layer("embeddings", rows, hidden, tokens=seq_len, extra_params=2 * hidden)]
    for index in range(layers):
        stack.append(attention_block(f"encoder.{index}.attention", hidden, seq_len, heads))
        stack.append(mlp_block(f"encoder.{index}.ffn", hidden, FFN_MULT * hidden, seq_len))
    stack.append(linear("pooler", hidden, hidden))  # on the first token only
    return Model(name=name, family="transformer", layers=tuple(stack))


def bert_base(*, seq_len: int = 128, vocab: int = 30522) -> Model:
    """BERT-base (12 layers, 768 hidden, 12 heads): 109,482,240 params, 22.35 GFLOPs at s=128."""
    return _bert("bert_base", BERT_SIZES["bert_base"], seq_len, vocab)


def bert_large(*, seq_len: int = 128, vocab: int = 30522) -> Model:
    """BERT-large (24 layers, 1024 hidden, 16 heads): 335,141,888 params, 78.92 GFLOPs at s=128."""
    return _bert("bert_large", BERT_SIZES["bert_large"], seq_len, vocab)


def encoder(
    *,
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    seq_len: int = 128,
    vocab: int = 30522,
) -> Model:
    """A generic BERT-style encoder (`BertModel` structure, FFN width 4 x hidden, 512 positions).

    With the defaults it is BERT-base, parameter for parameter; smaller settings scale a
    Transformer down for CPU captures.
    """
    return _bert("encoder", Size(layers, hidden, heads), seq_len, vocab)


# --- GPT-style decoders ---------------------------------------------------------------------


@dataclass(frozen=True)
class DecoderShape:
    """A GPT-2-style decoder: `layers` blocks of width `hidden` with `heads` heads and an MLP of
    width `ffn`, `max_positions` learned positions, an LM head tied to the token embedding or not."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    ffn: int
    max_positions: int
    tied: bool


def _gpt(name: str, shape: DecoderShape, seq_len: int) -> Model:
    """A GPT-2-style pre-norm decoder with learned positions, a final norm and an LM head."""
    hidden, vocab, max_positions = shape.hidden, shape.vocab, shape.max_positions
    _check_shape(shape.layers, hidden, shape.heads, seq_len, vocab)
    if seq_len > max_positions:
        raise ZooError(f"option 'seq_len' must be <= {max_positions} for {name}, got {seq_len}")
    stack = [embedding_layer("embeddings", vocab + max_positions, hidden, tokens=seq_len)]
    for index in range(shape.layers):
        stack.append(attention_block(f"h.{index}.attn", hidden, seq_len, shape.heads))
        stack.append(mlp_block(f"h.{index}.mlp", hidden, shape.ffn, seq_len))
    ln_f = Layer(
        name="ln_f",
        kind="norm",
        params=2 * hidden,
        fwd_flops_per_sample=0.0,
        activation_bytes_per_sample=seq_len * hidden * FP32_BYTES,
    )
    head = linear("lm_head", hidden, vocab, tokens=seq_len, bias=False)
    if shape.tied:  # the weight is the token embedding's, counted once in `embeddings`
        head = zero_layer("lm_head", "linear", head.activation_bytes_per_sample, head.fwd_flops_per_sample)
    stack += [ln_f, head]
    return Model(name=name, family="transformer", layers=tuple(stack))


#: GPT-2's vocabulary and context length (also built by the capturable torch GPT-2)
GPT2_VOCAB = 50257
GPT2_CONTEXT = 1024
# size -> (layers, hidden, heads), from the GPT-2 paper (Radford et al. 2019, Table 2) and
# HuggingFace's configs gpt2, gpt2-medium, gpt2-large, gpt2-xl.
GPT2_SIZES: dict[str, Size] = {
    "small": Size(12, 768, 12),
    "medium": Size(24, 1024, 16),
    "large": Size(36, 1280, 20),
    "xl": Size(48, 1600, 25),
}


def gpt2_name(size: str) -> str:
    """The zoo name of GPT-2 of `size` (`gpt2_small`, ...), also its model's name."""
    return f"gpt2_{size}"


def gpt2_shape(size: str) -> DecoderShape:
    """GPT-2 of `size`: its vocabulary and context, an MLP of 4 x hidden, a tied LM head."""
    layers, hidden, heads = GPT2_SIZES[size]
    return DecoderShape(layers, hidden, heads, GPT2_VOCAB, FFN_MULT * hidden, GPT2_CONTEXT, tied=True)


def decoder_shape(
    *, layers: int, hidden: int, heads: int, seq_len: int, vocab: int, ffn_mult: float, tied: bool
) -> DecoderShape:
    """The shape of the generic `decoder` with these options: learned positions for `seq_len`
    tokens, an MLP of round(ffn_mult x hidden)."""
    return DecoderShape(layers, hidden, heads, vocab, ffn_width(hidden, ffn_mult), max_positions=seq_len, tied=tied)


def gpt2(*, size: str = "small", seq_len: int = 1024) -> Model:
    """GPT-2 (HuggingFace `GPT2Model` + tied LM head), vocabulary 50257, context 1024.

    Params: small 124,439,808; medium 354,823,168; large 774,030,080; xl 1,557,611,200
    (HuggingFace `GPT2Model`). Forward GFLOPs per 1024-token sequence: 291.6, 827.0, 1774.6,
    3506.7 (the Megatron-LM forward terms, see the module docstring).
    """
    require_choice("size", size, tuple(GPT2_SIZES))
    return _gpt(gpt2_name(size), gpt2_shape(size), seq_len)


def gpt2_small(*, seq_len: int = 1024) -> Model:
    """GPT-2 small (124M): `gpt2(size="small")`."""
    return gpt2(size="small", seq_len=seq_len)


def gpt2_medium(*, seq_len: int = 1024) -> Model:
    """GPT-2 medium (355M): `gpt2(size="medium")`."""
    return gpt2(size="medium", seq_len=seq_len)


def gpt2_large(*, seq_len: int = 1024) -> Model:
    """GPT-2 large (774M): `gpt2(size="large")`."""
    return gpt2(size="large", seq_len=seq_len)


def gpt2_xl(*, seq_len: int = 1024) -> Model:
    """GPT-2 XL (1.5B): `gpt2(size="xl")`."""
    return gpt2(size="xl", seq_len=seq_len)


def decoder(
    *,
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    seq_len: int = 1024,
    vocab: int = 50257,
    ffn_mult: float = 4.0,
    tied: bool = True,
) -> Model:
    """A generic GPT-2-style decoder; the MLP width is round(ffn_mult x hidden).

    Learned positions for `seq_len` tokens; with the defaults it is GPT-2 small.
    """
    require_at_least("hidden", hidden, 1)
    if ffn_width(hidden, ffn_mult) < 1:
        raise ZooError(f"option 'ffn_mult' must give an MLP width >= 1, got {ffn_mult!r}")
    shape = decoder_shape(
        layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, vocab=vocab, ffn_mult=ffn_mult, tied=tied
    )
    return _gpt("decoder", shape, seq_len)
