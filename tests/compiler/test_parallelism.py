"""Tensor, pipeline and sharded data parallelism and their hybrids: the bytes every rank sends per
iteration equal the analytical value.

Each test compiles a scenario, runs it on flowsim, sums the `bytes` column of the traffic table
by sender and compares it with a formula written from the model's shape (not from the compiled
graph). Notation: T = tp, D = dp, P = pp, m = microbatches, b = samples per microbatch,
h = hidden, s = sequence length, V = vocabulary, L = decoder blocks, 4 bytes per fp32 value,
A = b*s*h*4 (one microbatch's hidden activation). Ring collectives over n ranks (ASTRA-SIM runs
every collective of a group smaller than the job as a ring), with one chunk of S bytes:
all-reduce sends 2(n-1) messages of S//n per rank, reduce-scatter n-1 messages of S//n,
all-gather n-1 messages of the contribution c.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simstudy.backends import FlowsimBackend
from simstudy.compiler import Collective, TaskKind, build_graph, compile_scenario, resolve
from simstudy.compiler.hybrid import partition
from simstudy.compiler.pipeline import balanced_stages, schedule
from simstudy.spec import Scenario

L, H, HEADS, S, V = 2, 64, 4, 32, 256


def decoder(layers: int = L) -> dict[str, Any]:
    return {"zoo": "decoder", "options": {"layers": layers, "hidden": H, "heads": HEADS, "seq_len": S, "vocab": V}}


def decoder_params(layers: int = L) -> dict[str, int]:
    """Parameters per layer of the GPT-2-style decoder (pre-norm, 4h MLP, tied LM head)."""
    params = {"embeddings": (V + S) * H}  # token + learned position embeddings (max positions = s)
    for i in range(layers):
        params[f"h.{i}.attn"] = 4 * H * H + 4 * H + 2 * H  # QKV + projection, biases, one norm
        params[f"h.{i}.mlp"] = 2 * H * 4 * H + 4 * H + H + 2 * H  # two linears, biases, one norm
    params["ln_f"] = 2 * H
    params["lm_head"] = 0  # tied to the token embedding
    return params


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def run_sent(spec: dict[str, Any], tmp: Path) -> tuple[Scenario, dict[int, float]]:
    """Compile and run on flowsim; bytes each rank sent per iteration."""
    scenario = Scenario.model_validate({"name": "par", **spec})
    result = compile_scenario(scenario, tmp / "bundle")
    run = FlowsimBackend().run(result.bundle, tmp / "run")
    iters = scenario.training.iterations
    sent = run.traffic.groupby("src", observed=True)["bytes"].sum()
    return result.scenario, {r: float(sent.get(r, 0)) / iters for r in range(scenario.npus)}


@pytest.mark.parametrize("tp", [2, 4])
def test_tensor_parallel_bytes(tp: int, tmp_path: Path) -> None:
    m, batch = 2, 4
    _, sent = run_sent({"model": decoder(), "parallelism": {"dp": 1, "tp": tp, "microbatches": m},
                        "topology": {"kind": "ring", "npus": tp},
                        "training": {"batch_size_per_worker": batch, "iterations": 2}}, tmp_path)
    a = (batch // m) * S * H * 4
    # Per microbatch: forward all-reduces after the embedding and after every attention and MLP
    # block (2L+1); backward all-reduces of the input gradients of the LM head and every block
    # (2L+1). Each ring all-reduce sends 2(T-1) x A//T per rank.
    expected = m * (4 * L + 2) * 2 * (tp - 1) * (a // tp)
    assert sent == {r: expected for r in range(tp)}


def test_layerwise_model_parallel_bytes(tmp_path: Path) -> None:
    # A CNN-family model of 6 equally expensive layers with distinct activation sizes: tp = 3 cuts
    # it into 3 stages of 2 layers. Rank k sends the activation of its last layer forward and the
    # gradient of its input (the previous stage's last activation) back: b x act per sample.
    act = [4000 * (i + 1) for i in range(6)]
    model = {"name": "chain", "family": "cnn", "layers": [
        {"name": f"c{i}", "kind": "conv", "params": 1000, "fwd_flops_per_sample": 1e6,
         "activation_bytes_per_sample": a} for i, a in enumerate(act)]}
    batch = 4
    _, sent = run_sent({"model": model, "parallelism": {"dp": 1, "tp": 3}, "topology": {"kind": "switch", "npus": 3},
                        "training": {"batch_size_per_worker": batch, "iterations": 2}}, tmp_path)
    assert sent == {0: batch * act[1], 1: batch * (act[3] + act[1]), 2: batch * act[3]}


@pytest.mark.parametrize("sched", ["gpipe", "1f1b"])
def test_pipeline_bytes(sched: str, tmp_path: Path) -> None:
    pp, m, batch = 4, 4, 8
    _, sent = run_sent({"model": decoder(layers=4), "parallelism": {"dp": 1, "pp": pp, "microbatches": m,
                                                                    "schedule": sched},
                        "topology": {"kind": "switch", "npus": pp},
                        "training": {"batch_size_per_worker": batch, "iterations": 2}}, tmp_path)
    a = (batch // m) * S * H * 4
    # Stage k sends each microbatch's activation forward (k < P-1) and its input gradient back
    # (k > 0); every layer that can end a non-final stage outputs A bytes.
    assert sent == {k: m * a * ((k < pp - 1) + (k > 0)) for k in range(pp)}


def test_gradient_accumulation_all_reduces_once(tmp_path: Path) -> None:
    d = 4
    _, sent = run_sent({"model": decoder(), "parallelism": {"dp": d, "microbatches": 2},
                        "topology": {"kind": "ring", "npus": d},
                        "training": {"batch_size_per_worker": 4, "iterations": 2}}, tmp_path)
    g = 4 * sum(decoder_params().values())
    assert g < 2**20  # one DDP bucket (the first bucket closes at 1 MiB)
    # One ring all-reduce of every gradient per iteration, whatever the microbatches: 2(D-1) x G//D.
    assert sent == {r: 2 * (d - 1) * (g // d) for r in range(d)}


def test_zero1_bytes(tmp_path: Path) -> None:
    d = 4
    _, sent = run_sent({"model": decoder(), "parallelism": {"dp": d, "sharding": "zero1"},
                        "topology": {"kind": "ring", "npus": d},
                        "training": {"batch_size_per_worker": 4, "iterations": 2}}, tmp_path)
    g = 4 * sum(decoder_params().values())
    assert g < 2**20
    # Reduce-scatter of the gradients ((D-1) x G//D) + all-gather of the updated parameter
    # shards ((D-1) x ceil(G/D)): the bytes of one all-reduce, in two halves.
    assert sent == {r: (d - 1) * (g // d + ceil_div(g, d)) for r in range(d)}


@pytest.mark.parametrize("sharding", ["zero3", "fsdp"])
def test_fully_sharded_bytes(sharding: str, tmp_path: Path) -> None:
    d, m = 4, 2
    _, sent = run_sent({"model": decoder(), "parallelism": {"dp": d, "sharding": sharding, "microbatches": m},
                        "topology": {"kind": "switch", "npus": d},
                        "training": {"batch_size_per_worker": 4, "iterations": 2}}, tmp_path)
    grads = [4 * p for p in decoder_params().values() if p]
    # Per microbatch and layer with parameters (g_l gradient bytes): all-gather before forward and
    # before backward ((D-1) x ceil(g_l/D) each), reduce-scatter after backward ((D-1) x g_l//D).
    expected = m * (d - 1) * sum(2 * ceil_div(g, d) + g // d for g in grads)
    assert sent == {r: expected for r in range(d)}


HYBRIDS = {
    "d2t2p2_zero1_switch8": ({"dp": 2, "tp": 2, "pp": 2, "microbatches": 2, "sharding": "zero1"},
                             {"kind": "switch", "npus": 8}),
    "d2t4p2_1f1b_multidim16": ({"dp": 2, "tp": 4, "pp": 2, "microbatches": 4},
                               {"kind": "multi_dim", "dims": [{"type": "fully_connected", "npus": 4},
                                                              {"type": "switch", "npus": 4}]}),
    "d2t2p4_gpipe_ring16": ({"dp": 2, "tp": 2, "pp": 4, "microbatches": 4, "schedule": "gpipe"},
                            {"kind": "ring", "npus": 16}),
}


@pytest.mark.parametrize("case", sorted(HYBRIDS))
def test_hybrid_bytes(case: str, tmp_path: Path) -> None:
    par, topo = HYBRIDS[case]
    batch = 8
    scenario, sent = run_sent({"model": decoder(layers=4), "parallelism": par, "topology": topo,
                               "training": {"batch_size_per_worker": batch, "iterations": 2}}, tmp_path)
    t, d, p, m = par["tp"], par["dp"], par["pp"], par["microbatches"]
    a = (batch // m) * S * H * 4
    model = scenario.resolved_model
    stages = partition(scenario).stages  # which layers each stage holds: the compiler's balanced cut
    params = decoder_params(layers=4)
    for rank in range(scenario.npus):
        ti, rest = rank % t, rank // t  # rank = t + T*(d + D*s)
        stage = rest // d
        layers = [model.layers[i] for i in stages[stage]]
        # Tensor parallel: per microbatch, one forward all-reduce per embedding/attention/MLP and
        # one backward all-reduce per attention/MLP/LM head (not the model's first layer).
        fwd = sum(x.kind in ("attention", "mlp", "embedding") for x in layers)
        bwd = sum(x.kind in ("attention", "mlp", "linear") for x in layers)
        tp_bytes = m * (fwd + bwd) * 2 * (t - 1) * (a // t)
        # Pipeline: the activation forward and the input gradient back, per microbatch.
        pp_bytes = m * a * ((stage < p - 1) + (stage > 0))
        # Data parallel over the stage's local gradients (split layers hold 1/T, others all).
        g = sum(4 * (ceil_div(params[x.name], t) if x.kind in ("attention", "mlp", "embedding", "linear")
                     else params[x.name]) for x in layers)
        assert g < 2**20
        zero1 = par.get("sharding") == "zero1"
        dp_bytes = (d - 1) * (g // d + ceil_div(g, d)) if zero1 else 2 * (d - 1) * (g // d)
        assert sent[rank] == tp_bytes + pp_bytes + dp_bytes, (rank, ti, stage)


def test_groups_put_tensor_parallel_innermost(tmp_path: Path) -> None:
    s = resolve(Scenario.model_validate({
        "model": decoder(layers=4), "parallelism": {"dp": 2, "tp": 4, "pp": 2, "microbatches": 2},
        "topology": {"kind": "multi_dim", "dims": [{"type": "ring", "npus": 4}, {"type": "switch", "npus": 4}]},
        "training": {"batch_size_per_worker": 4}}))
    graph = build_graph(s)
    groups = sorted(graph.groups.values())
    # Tensor-parallel groups: the 4 NPUs of one ring (the innermost dimension); data-parallel
    # groups: ranks 4 apart, across the switch.
    assert [g for g in groups if len(g) == 4] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]
    assert [g for g in groups if len(g) == 2] == sorted((t + 8 * st, t + 8 * st + 4) for t in range(4) for st in (0, 1))
    # Every collective names its group; stage neighbours are 8 ranks apart.
    rank0 = graph.ranks[0]
    tp_ids = {t.group for t in rank0.tasks if t.name.startswith("tp_")}
    assert tp_ids and all(graph.groups[i] == (0, 1, 2, 3) for i in tp_ids)
    assert {t.peer for t in rank0.tasks if t.kind in (TaskKind.SEND, TaskKind.RECV)} == {8}
    ar = [t for t in rank0.tasks if t.collective is Collective.ALL_REDUCE and t.name.startswith("allreduce")]
    assert ar and {graph.groups[t.group] for t in ar} == {(0, 4)}


@pytest.mark.parametrize("n", range(1, 9))
def test_balanced_stages_is_optimal(n: int) -> None:
    import itertools
    import random

    rng = random.Random(n)
    weights = [rng.choice([0.0, 1.0, 2.5, 7.0, 13.0]) for _ in range(n)]
    for parts in range(1, n + 1):
        stages = balanced_stages(weights, parts)
        assert [i for st in stages for i in st] == list(range(n)) and all(stages)
        got = max(sum(weights[i] for i in st) for st in stages)
        best = min(
            max(sum(weights[a:b]) for a, b in itertools.pairwise((0, *cuts, n)))
            for cuts in itertools.combinations(range(1, n), parts - 1)
        ) if sum(weights) > 0 else got
        assert got == pytest.approx(best)


@pytest.mark.parametrize("stages,m", [(4, 4), (4, 8), (2, 5), (3, 3)])
def test_schedules(stages: int, m: int) -> None:
    for k in range(stages):
        for kind in ("gpipe", "1f1b"):
            ops = schedule(kind, stages, k, m)
            assert sorted(ops) == sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
            # A backward never comes before its forward.
            assert all(ops.index(("F", i)) < ops.index(("B", i)) for i in range(m))
            in_flight, peak = 0, 0
            for op, _ in ops:
                in_flight += 1 if op == "F" else -1
                peak = max(peak, in_flight)
            # GPipe keeps every microbatch's activations; 1F1B at most (stages - k) of them.
            assert peak == (m if kind == "gpipe" else min(stages - k, m))


def test_hybrid_graph_matches_plain_data_parallel_bytes() -> None:
    # The same job through the hybrid compiler (gradient accumulation over 1 microbatch is plain
    # DP) and the data-parallel one: the same collective bytes on every rank.
    base = {"model": "resnet50", "topology": {"kind": "ring", "npus": 4},
            "training": {"batch_size_per_worker": 8, "iterations": 2}}
    plain = build_graph(resolve(Scenario.model_validate({**base, "parallelism": {"dp": 4}})))
    accum = build_graph(resolve(Scenario.model_validate({**base, "parallelism": {"dp": 4, "microbatches": 2}})))
    for a, b in zip(plain.ranks, accum.ranks, strict=True):
        assert a.collective_bytes(Collective.ALL_REDUCE) == b.collective_bytes(Collective.ALL_REDUCE) > 0
