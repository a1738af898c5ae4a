"""LLaMA-style decoders and their mixtures of experts: LLaMA-2, LLaMA-3, Mixtral, DeepSeekMoE.

Every model is a pre-norm decoder without biases: RMSNorm, grouped-query attention (`kv_heads`
key/value heads shared by `heads` query heads, rotary positions: no position table), a SwiGLU MLP
(gate, up and down projections: 3 x hidden x ffn), a final RMSNorm and an untied LM head (HuggingFace's
`LlamaForCausalLM`, `MixtralForCausalLM` and DeepSeek's `DeepseekForCausalLM`). A mixture-of-experts
block replaces the MLP with a router (hidden x experts, no bias), `experts` routed SwiGLU experts of
width `expert_ffn` (each token goes to `top_k` of them) and `shared_experts` shared ones of the same
width that every token goes through (DeepSeekMoE's fine-grained experts; bundled as one MLP of
width shared_experts x expert_ffn, as DeepSeek does). DeepSeekMoE keeps its first `dense_layers`
blocks dense (width `ffn`).

Each block is two layers: `attention` (its norm, Q/K/V/O projections and the attention itself) and
`mlp` or `moe` (its norm and the MLP or the experts). Parameter counts are those of the published
configurations (HuggingFace config.json: hidden_size, intermediate_size, num_hidden_layers,
num_attention_heads, num_key_value_heads, vocab_size, num_local_experts, num_experts_per_tok,
moe_intermediate_size, n_shared_experts, first_k_dense_replace) and equal HuggingFace's models
built from them; tests/zoo/test_llama.py checks both.

FLOPs, the standard accounting: a forward pass costs 2 FLOPs per multiply-add of every weight
matrix a token goes through (2 x the active non-embedding parameters per token: Q, K, V and O,
the MLP or the router, the top_k routed experts and the shared ones, and the LM head) plus the
attention itself, 4 x seq_len x hidden per token and layer (the scores Q K^T and the context,
full seq_len x seq_len matrices as standard kernels compute them; a causal mask halves the useful
part, which is not subtracted), as the GPT-2 entries count it (`transformer`). The embedding is a
lookup (no FLOPs); norms, activations, softmax and the router's top-k are not counted. Training
is 3x the forward (the backward is `system.backward_factor` = 2 x the forward).
"""

from __future__ import annotations

from simstudy.spec.model import Layer, Model
from simstudy.zoo.errors import ZooError
from simstudy.zoo.layers import FP32_BYTES, embedding_layer, linear, require_at_least


def llama_attention(name: str, hidden: int, seq_len: int, heads: int, kv_heads: int) -> Layer:
    """RMSNorm + grouped-query attention without biases over one sequence."""
    kv_dim = hidden // heads * kv_heads
    weights = 2 * hidden * hidden + 2 * hidden * kv_dim  # Q and O: h x h; K and V: h x kv_dim
    return Layer(
        name=name,
        kind="attention",
        params=weights + hidden,
        fwd_flops_per_sample=2.0 * (seq_len * weights + 2 * seq_len * seq_len * hidden),
        activation_bytes_per_sample=seq_len * hidden * FP32_BYTES,
        heads=heads,
        kv_heads=kv_heads,
    )


def swiglu_mlp(name: str, hidden: int, ffn: int, seq_len: int) -> Layer:
    """RMSNorm + a SwiGLU MLP without biases (gate, up: h x ffn; down: ffn x h)."""
    weights = 3 * hidden * ffn
    return Layer(
        name=name,
        kind="mlp",
        params=weights + hidden,
        fwd_flops_per_sample=2.0 * seq_len * weights,
        activation_bytes_per_sample=seq_len * hidden * FP32_BYTES,
    )


def moe_block(name: str, hidden: int, seq_len: int, *, experts: int, top_k: int, expert_ffn: int,
              shared_experts: int, capacity_factor: float) -> Layer:
    """RMSNorm + a router + `experts` routed SwiGLU experts (top_k per token) + shared experts."""
    expert = 3 * hidden * expert_ffn
    router = hidden * experts
    shared = shared_experts * expert
    active = router + top_k * expert + shared  # the weights one token goes through
    return Layer(
        name=name,
        kind="moe",
        params=router + experts * expert + shared + hidden,
        fwd_flops_per_sample=2.0 * seq_len * active,
        activation_bytes_per_sample=seq_len * hidden * FP32_BYTES,
        experts=experts,
        top_k=top_k,
        capacity_factor=capacity_factor,
        expert_params=experts * expert,
    )


def decoder_stack(
    name: str,
    *,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    vocab: int,
    seq_len: int,
    experts: int = 0,
    top_k: int = 2,
    capacity_factor: float = 1.0,
    expert_ffn: int = 0,
    shared_experts: int = 0,
    dense_layers: int = 0,
) -> Model:
    """A LLaMA-style decoder (see the module docstring); `experts` = 0 makes every block dense."""
    for option, value in (("layers", layers), ("hidden", hidden), ("heads", heads), ("kv_heads", kv_heads),
                          ("ffn", ffn), ("vocab", vocab), ("seq_len", seq_len)):
        require_at_least(option, value, 1)
    for option, value in (("experts", experts), ("shared_experts", shared_experts), ("dense_layers", dense_layers),
                          ("expert_ffn", expert_ffn)):
        require_at_least(option, value, 0)
    if hidden % heads:
        raise ZooError(f"option 'hidden' ({hidden}) must be a multiple of 'heads' ({heads})")
    if heads % kv_heads:
        raise ZooError(f"option 'kv_heads' ({kv_heads}) must divide 'heads' ({heads})")
    if experts:
        require_at_least("top_k", top_k, 1)
        if top_k > experts:
            raise ZooError(f"option 'top_k' ({top_k}) must be at most 'experts' ({experts})")
        if not capacity_factor > 0:
            raise ZooError(f"option 'capacity_factor' must be > 0, got {capacity_factor!r}")
    stack = [embedding_layer("embed_tokens", vocab, hidden, tokens=seq_len)]
    for i in range(layers):
        stack.append(llama_attention(f"layers.{i}.self_attn", hidden, seq_len, heads, kv_heads))
        if experts and i >= dense_layers:
            stack.append(moe_block(f"layers.{i}.moe", hidden, seq_len, experts=experts, top_k=top_k,
                                   expert_ffn=expert_ffn or ffn, shared_experts=shared_experts,
                                   capacity_factor=capacity_factor))
        else:
            stack.append(swiglu_mlp(f"layers.{i}.mlp", hidden, ffn, seq_len))
    norm = Layer(name="norm", kind="norm", params=hidden, fwd_flops_per_sample=0.0,
                 activation_bytes_per_sample=seq_len * hidden * FP32_BYTES)
    stack += [norm, linear("lm_head", hidden, vocab, tokens=seq_len, bias=False)]
    return Model(name=name, family="transformer", layers=tuple(stack))


# -- LLaMA-2 (Touvron et al. 2023; meta-llama/Llama-2-*-hf config.json) ----------------------------


def llama2_7b(*, layers: int = 32, hidden: int = 4096, heads: int = 32, kv_heads: int = 32, ffn: int = 11008,
              vocab: int = 32000, seq_len: int = 4096) -> Model:
    """LLaMA-2 7B: 6,738,415,616 params; 62.9 forward TFLOPs per 4,096-token sequence."""
    return decoder_stack("llama2_7b", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                         vocab=vocab, seq_len=seq_len)


def llama2_13b(*, layers: int = 40, hidden: int = 5120, heads: int = 40, kv_heads: int = 40, ffn: int = 13824,
               vocab: int = 32000, seq_len: int = 4096) -> Model:
    """LLaMA-2 13B: 13,015,864,320 params."""
    return decoder_stack("llama2_13b", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                         vocab=vocab, seq_len=seq_len)


def llama2_70b(*, layers: int = 80, hidden: int = 8192, heads: int = 64, kv_heads: int = 8, ffn: int = 28672,
               vocab: int = 32000, seq_len: int = 4096) -> Model:
    """LLaMA-2 70B (grouped-query attention, 8 KV heads): 68,976,648,192 params."""
    return decoder_stack("llama2_70b", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                         vocab=vocab, seq_len=seq_len)


# -- LLaMA-3 (Grattafiori et al. 2024; meta-llama/Meta-Llama-3-*, Llama-3.1-405B config.json) ------


def llama3_8b(*, layers: int = 32, hidden: int = 4096, heads: int = 32, kv_heads: int = 8, ffn: int = 14336,
              vocab: int = 128256, seq_len: int = 8192) -> Model:
    """LLaMA-3 8B: 8,030,261,248 params."""
    return decoder_stack("llama3_8b", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                         vocab=vocab, seq_len=seq_len)


def llama3_70b(*, layers: int = 80, hidden: int = 8192, heads: int = 64, kv_heads: int = 8, ffn: int = 28672,
               vocab: int = 128256, seq_len: int = 8192) -> Model:
    """LLaMA-3 70B: 70,553,706,496 params."""
    return decoder_stack("llama3_70b", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                         vocab=vocab, seq_len=seq_len)


def llama3_405b(*, layers: int = 126, hidden: int = 16384, heads: int = 128, kv_heads: int = 8, ffn: int = 53248,
                vocab: int = 128256, seq_len: int = 8192) -> Model:
    """LLaMA-3.1 405B: 405,853,388,800 params."""
    return decoder_stack("llama3_405b", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                         vocab=vocab, seq_len=seq_len)


# -- Mixtral (Jiang et al. 2024; mistralai/Mixtral-8x7B-v0.1, Mixtral-8x22B-v0.1 config.json) ------


def mixtral_8x7b(*, layers: int = 32, hidden: int = 4096, heads: int = 32, kv_heads: int = 8, ffn: int = 14336,
                 experts: int = 8, top_k: int = 2, capacity_factor: float = 1.0, vocab: int = 32000,
                 seq_len: int = 4096) -> Model:
    """Mixtral 8x7B (8 experts of width 14,336, top-2): 46,702,792,704 params, 12.9 B active."""
    return decoder_stack("mixtral_8x7b", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                         vocab=vocab, seq_len=seq_len, experts=experts, top_k=top_k,
                         capacity_factor=capacity_factor)


def mixtral_8x22b(*, layers: int = 56, hidden: int = 6144, heads: int = 48, kv_heads: int = 8, ffn: int = 16384,
                  experts: int = 8, top_k: int = 2, capacity_factor: float = 1.0, vocab: int = 32768,
                  seq_len: int = 4096) -> Model:
    """Mixtral 8x22B (8 experts of width 16,384, top-2): 140,630,071,296 params."""
    return decoder_stack("mixtral_8x22b", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                         vocab=vocab, seq_len=seq_len, experts=experts, top_k=top_k,
                         capacity_factor=capacity_factor)


# -- DeepSeekMoE (Dai et al. 2024; deepseek-ai/deepseek-moe-16b-base config.json) ------------------


def deepseek_moe_16b(*, layers: int = 28, hidden: int = 2048, heads: int = 16, kv_heads: int = 16,
                     ffn: int = 10944, expert_ffn: int = 1408, experts: int = 64, shared_experts: int = 2,
                     top_k: int = 6, capacity_factor: float = 1.0, dense_layers: int = 1, vocab: int = 102400,
                     seq_len: int = 4096) -> Model:
    """DeepSeekMoE 16B, fine-grained experts: 64 routed experts of width 1,408 (top-6) and 2 shared
    ones in every block but the first (dense, width 10,944): 16,375,728,128 params."""
    return decoder_stack("deepseek_moe_16b", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                         vocab=vocab, seq_len=seq_len, experts=experts, top_k=top_k,
                         capacity_factor=capacity_factor, expert_ffn=expert_ffn, shared_experts=shared_experts,
                         dense_layers=dense_layers)
