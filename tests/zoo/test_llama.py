"""The LLaMA-style decoders and mixtures of experts of the zoo: exact parameter counts of the published
configurations, the same counts as HuggingFace's models built from those configurations, FLOPs per
token by the standard accounting, and the expert fields their MoE layers carry."""

from __future__ import annotations

from typing import Any

import pytest

from simstudy.zoo import ZooError, build, list_models

#: Parameter counts of the published models. LLaMA-2 7B's is the one the Zhejiang Lab trace's training
#: log prints ("Number of trainable parameters = 6,738,415,616"); Mixtral 8x7B's the 46.7B of its
#: paper; DeepSeekMoE 16B's the 16.4B of its paper (16.38B on its model card); every one equals
#: HuggingFace's model built from the model's config.json (test_params_match_huggingface).
PUBLISHED = {
    "llama2_7b": 6_738_415_616,
    "llama2_13b": 13_015_864_320,
    "llama2_70b": 68_976_648_192,
    "llama3_8b": 8_030_261_248,
    "llama3_70b": 70_553_706_496,
    "llama3_405b": 405_853_388_800,
    "mixtral_8x7b": 46_702_792_704,
    "mixtral_8x22b": 140_630_071_296,
    "deepseek_moe_16b": 16_375_728_128,
}

#: config.json of each model (HuggingFace names): the published configurations.
CONFIGS: dict[str, dict[str, Any]] = {
    "llama2_7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000},
    "llama2_13b": {"hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 40,
                   "num_attention_heads": 40, "num_key_value_heads": 40, "vocab_size": 32000},
    "llama2_70b": {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
                   "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 32000},
    "llama3_8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256},
    "llama3_70b": {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
                   "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256},
    "llama3_405b": {"hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": 126,
                    "num_attention_heads": 128, "num_key_value_heads": 8, "vocab_size": 128256},
    "mixtral_8x7b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                     "num_local_experts": 8, "num_experts_per_tok": 2},
    "mixtral_8x22b": {"hidden_size": 6144, "intermediate_size": 16384, "num_hidden_layers": 56,
                      "num_attention_heads": 48, "num_key_value_heads": 8, "vocab_size": 32768,
                      "num_local_experts": 8, "num_experts_per_tok": 2},
}


@pytest.mark.parametrize(("name", "params"), PUBLISHED.items())
def test_published_params(name: str, params: int) -> None:
    assert build(name).params == params


def formula_params(h: int, layers: int, heads: int, kv: int, ffn: int, vocab: int, experts: int = 0,
                   expert_ffn: int = 0, shared: int = 0, dense: int = 0) -> int:
    """Untied embedding and head (2Vh), final norm (h); per block: Q, O (h^2 each), K, V (h x kv_dim
    each), two norms (2h) and a SwiGLU MLP (3 h ffn), or for a mixture-of-experts block a router (h E)
    and E routed + `shared` shared experts of 3 h expert_ffn each."""
    kv_dim = h // heads * kv
    attention = 2 * h * h + 2 * h * kv_dim + 2 * h
    mlp = 3 * h * ffn
    moe = h * experts + (experts + shared) * 3 * h * expert_ffn
    blocks = sum(attention + (moe if experts and i >= dense else mlp) for i in range(layers))
    return 2 * vocab * h + h + blocks


def test_params_follow_the_formula() -> None:
    c = CONFIGS["mixtral_8x7b"]
    assert build("mixtral_8x7b").params == formula_params(4096, 32, 32, 8, 14336, 32000, experts=8, expert_ffn=14336)
    assert c["intermediate_size"] == 14336
    assert build("llama3_8b").params == formula_params(4096, 32, 32, 8, 14336, 128256)
    # DeepSeekMoE 16B: the first block dense (10,944), then 64 routed + 2 shared experts of 1,408
    assert build("deepseek_moe_16b").params == formula_params(2048, 28, 16, 16, 10944, 102400, experts=64,
                                                              expert_ffn=1408, shared=2, dense=1)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_params_match_huggingface(name: str) -> None:
    """HuggingFace's LlamaForCausalLM / MixtralForCausalLM built on the meta device (no memory) from the
    published config has exactly our parameters, and so does every block."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = CONFIGS[name]
    if "num_local_experts" in cfg:
        config, cls = transformers.MixtralConfig(**cfg), transformers.MixtralForCausalLM
    else:
        config, cls = transformers.LlamaConfig(**cfg), transformers.LlamaForCausalLM
    with torch.device("meta"):
        reference = cls(config)
    assert build(name).params == sum(p.numel() for p in reference.parameters())
    ours = build(name).layers
    block = reference.model.layers[0]
    attention = sum(p.numel() for p in block.self_attn.parameters()) + block.input_layernorm.weight.numel()
    assert ours[1].params == attention
    mlp = block.block_sparse_moe if hasattr(block, "block_sparse_moe") else block.mlp
    assert ours[2].params == sum(p.numel() for p in mlp.parameters()) + block.post_attention_layernorm.weight.numel()


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_flops_per_token(name: str) -> None:
    """Forward FLOPs per sequence = 2 x the weights each token goes through x seq_len (every matrix but
    the embedding; top_k routed experts, the shared ones and the router for MoE blocks) + 4 seq_len^2
    hidden per block (attention scores and context)."""
    model = build(name)
    s = {"llama3_8b": 8192, "llama3_70b": 8192, "llama3_405b": 8192}.get(name, 4096)
    h = next(x for x in model.layers if x.kind == "attention").activation_bytes_per_sample // (4 * s)
    blocks = sum(x.kind == "attention" for x in model.layers)
    active = 0
    for x in model.layers:
        if x.kind in ("embedding", "norm"):
            continue
        weights = x.params - (h if x.kind != "linear" else 0)  # a block's norm is not a matrix
        if x.kind == "moe":
            assert x.experts and x.top_k and x.expert_params is not None
            weights -= x.expert_params - x.expert_params // x.experts * x.top_k
        active += weights
    assert model.fwd_flops_per_sample == pytest.approx(2 * active * s + blocks * 4 * s * s * h, rel=1e-12)


def test_llama2_7b_flops_against_the_6n_rule() -> None:
    """Training (3x forward) per token: 6 x the matrix parameters (not the embedding lookup, not the
    norms' scales) plus the attention term, 12 L s h, as the scaling-law literature counts it (Kaplan
    et al. 2020, with full attention matrices)."""
    model = build("llama2_7b")
    s, h, layers, vocab = 4096, 4096, 32, 32000
    n = model.params - vocab * h - (2 * layers + 1) * h
    assert 3 * model.fwd_flops_per_sample / s == pytest.approx(6 * n + 12 * layers * s * h, rel=1e-12)


def test_moe_layers_carry_their_experts() -> None:
    model = build("mixtral_8x7b")
    moe = [x for x in model.layers if x.kind == "moe"]
    assert len(moe) == 32
    assert {(x.experts, x.top_k, x.capacity_factor) for x in moe} == {(8, 2, 1.0)}
    assert {x.expert_params for x in moe} == {8 * 3 * 4096 * 14336}
    attn = [x for x in model.layers if x.kind == "attention"]
    assert {(x.heads, x.kv_heads) for x in attn} == {(32, 8)}
    ds = build("deepseek_moe_16b", capacity_factor=1.25)
    assert [x.kind for x in ds.layers[1:5]] == ["attention", "mlp", "attention", "moe"]
    assert {x.capacity_factor for x in ds.layers if x.kind == "moe"} == {1.25}
    # a dense LLaMA as a mixture of experts, scaled down by its options
    small = build("llama3_8b", layers=2, hidden=256, heads=4, kv_heads=2, ffn=512, vocab=1000, seq_len=64)
    assert small.params == formula_params(256, 2, 4, 2, 512, 1000)


def test_option_errors() -> None:
    with pytest.raises(ZooError, match="top_k"):
        build("mixtral_8x7b", top_k=9)
    with pytest.raises(ZooError, match="kv_heads"):
        build("llama3_8b", kv_heads=5)
    with pytest.raises(ZooError, match="no option"):
        build("llama2_7b", experts=8)


def test_models_lists_them() -> None:
    names = {m.name for m in list_models()}
    assert set(PUBLISHED) <= names
