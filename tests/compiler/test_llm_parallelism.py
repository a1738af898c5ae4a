"""Sequence, context, expert and interleaved pipeline parallelism, gradient accumulation, precision and
the ZeRO-1 distributed optimizer's buckets: the messages every rank sends per iteration equal the
analytical value.

Each test compiles a scenario of a small LLaMA-style decoder (or its mixture of experts), runs it on
flowsim, sums the traffic table's bytes by sender (and counts messages by op) and compares with a
formula written from the model's shape and the parallelism (not from the compiled graph).
Notation as in test_parallelism.py: T = tp, C = cp, D = dp, E = ep, P = pp, m = microbatches,
b = samples per microbatch, s = sequence, h = hidden, B = bytes per element (bf16: 2),
A = b*s*h*B (one microbatch's activation). ASTRA-SIM runs a group smaller than the job as a ring:
an all-reduce of S sends 2(n-1) x S//n per rank, a reduce-scatter (n-1) x S//n, an all-gather of
contribution c (n-1) x c, an all-to-all of S n(n-1)/2 x S//n (every block relayed around the ring);
an all-to-all of every rank runs the direct algorithm: (n-1) x S//n.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simstudy.backends import FlowsimBackend
from simstudy.compiler import TaskKind, build_graph, compile_scenario, resolve
from simstudy.compiler.pipeline import interleaved_schedule
from simstudy.spec import Scenario

L, H, HEADS, KV, FFN, V, S = 2, 64, 4, 2, 128, 256, 32
BF16 = 2


def llama(layers: int = L, experts: int = 0, top_k: int = 2, cf: float = 1.0) -> dict[str, Any]:
    options: dict[str, Any] = {"layers": layers, "hidden": H, "heads": HEADS, "kv_heads": KV, "ffn": FFN,
                               "vocab": V, "seq_len": S}
    if experts:
        return {"zoo": "mixtral_8x7b", "options": {**options, "experts": experts, "top_k": top_k,
                                                   "capacity_factor": cf}}
    return {"zoo": "llama3_8b", "options": options}


def block_params(experts: int = 0) -> tuple[int, int, int]:
    """(attention, mlp or moe dense part, routed experts) parameters of one block."""
    attention = 2 * H * H + 2 * H * (H // HEADS * KV) + H
    if not experts:
        return attention, 3 * H * FFN + H, 0
    return attention, H * experts + H, experts * 3 * H * FFN


def total_params(layers: int = L, experts: int = 0) -> tuple[int, int]:
    """(dense, routed-expert) parameters of the whole model."""
    a, m, e = block_params(experts)
    return 2 * V * H + H + layers * (a + m), layers * e


def run(spec: dict[str, Any], tmp: Path) -> tuple[Scenario, dict[int, float], dict[str, int]]:
    """Compile and run on flowsim: bytes each rank sent per iteration, and transfers per op."""
    scenario = Scenario.model_validate({"name": "llm", "training": {"iterations": 2, "precision": "bf16",
                                                                    **spec.pop("training", {})}, **spec})
    result = compile_scenario(scenario, tmp / "bundle")
    table = FlowsimBackend(congestion="unaware").run(result.bundle, tmp / "run").traffic
    iters = scenario.training.iterations
    sent = table.groupby("src", observed=True)["bytes"].sum()
    ops = table.groupby("op", observed=True).size()
    return (result.scenario, {r: float(sent.get(r, 0)) / iters for r in range(scenario.npus)},
            {str(k): int(v) // iters for k, v in ops.items() if v})


def ring_ar(n: int, size: int) -> int:
    return 2 * (n - 1) * (size // n)


@pytest.mark.parametrize("sp", [False, True])
def test_sequence_parallel_bytes(sp: bool, tmp_path: Path) -> None:
    t, m, b = 4, 2, 4
    _, sent, ops = run({"model": llama(), "parallelism": {"dp": 1, "tp": t, "microbatches": m, "sp": sp},
                        "topology": {"kind": "ring", "npus": t}, "training": {"batch_size_per_worker": b * m}},
                       tmp_path)
    a = b * S * H * BF16
    assert a % t == 0
    unit = (t - 1) * a // t  # a ring reduce-scatter of A, or an all-gather of A/T
    if sp:
        # Per microbatch: every block layer (2L) all-gathers its input and reduce-scatters its output in
        # forward (2 units); in backward all-gathers the output gradient, re-gathers its input and
        # reduce-scatters the input gradient (3 units). The embedding reduce-scatters (forward) and
        # gathers the gradient (backward); the LM head gathers its input (forward), re-gathers it and
        # reduce-scatters the input gradient (backward).
        units = 2 * L * 5 + 2 + 3
        assert "allreduce" not in ops and ops["reducescatter"] and ops["allgather"]
    else:
        # Forward all-reduce of the embedding's and every block's output, backward all-reduce of every
        # block's and the head's input gradient: 2 units each.
        units = 2 * (2 * L + 1) + 2 * (2 * L + 1)
    assert sent == {r: m * units * unit for r in range(t)}


def test_sequence_parallel_shards_pipeline_activations(tmp_path: Path) -> None:
    """With sequence parallelism a stage sends 1/T of the activation to the next: A/T per microbatch."""
    t, p, m, b = 2, 2, 2, 2
    scenario, _, _ = run({"model": llama(layers=4), "parallelism": {"dp": 1, "tp": t, "pp": p, "microbatches": m,
                                                                    "sp": True},
                          "topology": {"kind": "ring", "npus": t * p}, "training": {"batch_size_per_worker": b * m}},
                         tmp_path)
    graph = build_graph(resolve(scenario))
    sends = [x for x in graph.ranks[0].tasks if x.kind is TaskKind.SEND]
    assert len(sends) == 2 * m  # 2 iterations x m microbatches, forward only from stage 0
    assert {x.size_bytes for x in sends} == {b * S * H * BF16 // t}


@pytest.mark.parametrize("cp", [2, 4])
def test_context_parallel_bytes(cp: int, tmp_path: Path) -> None:
    d, m, b = 2, 2, 4
    _, sent, ops = run({"model": llama(), "parallelism": {"dp": d, "cp": cp, "microbatches": m},
                        "topology": {"kind": "switch", "npus": d * cp},
                        "training": {"batch_size_per_worker": b * m}}, tmp_path)
    a = b * S * H * BF16 // cp  # each rank holds s/C tokens
    kv = 2 * a * KV // HEADS  # K and V of the rank's tokens
    # Ring attention: per attention layer and microbatch, C-1 passes of the K/V block in forward and
    # C-1 passes of the block and its gradient (2 kv) in backward.
    ring = m * L * (cp - 1) * 3 * kv
    # Gradients all-reduced once per iteration over the D*C ranks that hold the same parameters.
    dense, _ = total_params()
    g = dense * BF16
    assert g < 2**20  # one DDP bucket
    assert sent == {r: ring + ring_ar(d * cp, g) for r in range(d * cp)}
    assert ops["p2p"] == d * cp * m * L * 2 * (cp - 1)


@pytest.mark.parametrize(("dp", "ep"), [(4, 2), (4, 4)])
def test_expert_parallel_bytes(dp: int, ep: int, tmp_path: Path) -> None:
    m, b, experts, top_k, cf = 2, 2, 8, 2, 1.25
    _, sent, ops = run({"model": llama(experts=experts, top_k=top_k, cf=cf), "parallelism": {
        "dp": dp, "ep": ep, "microbatches": m}, "topology": {"kind": "switch", "npus": dp},
        "training": {"batch_size_per_worker": b * m}}, tmp_path)
    a = b * S * H * BF16
    size = int(a * top_k * cf)  # every token to its top_k experts, padded to the capacity
    # four all-to-alls per MoE layer and microbatch: dispatch and combine, forward and backward
    per_a2a = (ep - 1) * (size // ep) if ep == dp else ep * (ep - 1) // 2 * (size // ep)
    a2a = m * L * 4 * per_a2a
    dense, expert = total_params(experts=experts)
    grads = ring_ar(dp, dense * BF16) + (ring_ar(dp // ep, expert // ep * BF16) if dp > ep else 0)
    assert sent == {r: a2a + grads for r in range(dp)}
    assert ops["alltoall"] > 0


def test_experts_without_expert_parallelism_are_dense(tmp_path: Path) -> None:
    """ep = 1: every expert on every rank, its gradients all-reduced with the others."""
    d, m = 4, 2
    _, sent, ops = run({"model": llama(experts=4), "parallelism": {"dp": d, "microbatches": m,
                                                                   "grad_accumulation_steps": 2},
                        "topology": {"kind": "ring", "npus": d}, "training": {"batch_size_per_worker": 4}}, tmp_path)
    dense, expert = total_params(experts=4)
    assert (dense + expert) * BF16 < 2**20 and "alltoall" not in ops
    assert sent == {r: ring_ar(d, (dense + expert) * BF16) for r in range(d)}


def test_expert_parallel_groups(tmp_path: Path) -> None:
    """EP groups are ep consecutive data-parallel replicas; the expert gradients meet over the ranks
    at the same place of every EP group."""
    s = resolve(Scenario.model_validate({"model": llama(experts=8), "parallelism": {"dp": 4, "ep": 2, "tp": 2},
                                         "topology": {"kind": "switch", "npus": 8},
                                         "training": {"batch_size_per_worker": 2}}))
    graph = build_graph(s)
    rank0 = graph.ranks[0]
    a2a = {graph.groups[x.group] for x in rank0.tasks if x.name.startswith("ep_")}
    experts = {graph.groups[x.group] for x in rank0.tasks if "expert_bucket" in x.name}
    dense = {graph.groups[x.group] for x in rank0.tasks if x.name.startswith("allreduce.bucket")}
    assert a2a == {(0, 2)} and experts == {(0, 4)} and dense == {(0, 2, 4, 6)}


def test_interleaved_schedule_is_megatrons() -> None:
    """Every microbatch runs forward then backward once on every chunk; warm-up as Megatron-LM counts
    it; a chunk's backwards in the reverse chunk order."""
    p, m, v = 4, 8, 2
    for stage in range(p):
        ops = interleaved_schedule(p, stage, m, v)
        assert sorted(ops) == sorted([(k, mb, c) for k in "FB" for mb in range(m) for c in range(v)])
        warm = min((p - stage - 1) * 2 + (v - 1) * p, m * v)
        assert [k for k, _, _ in ops[:warm]] == ["F"] * warm and ops[warm][0] == "F" and ops[warm + 1][0] == "B"
        for mb in range(m):
            for c in range(v):
                assert ops.index(("F", mb, c)) < ops.index(("B", mb, c))
    assert interleaved_schedule(2, 0, 2, 2)[:4] == [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1)]


def test_interleaved_pipeline_bytes(tmp_path: Path) -> None:
    p, v, m, b = 2, 2, 4, 1
    scenario, sent, _ = run({"model": llama(layers=4), "parallelism": {"dp": 1, "pp": p, "virtual_stages": v,
                                                                       "microbatches": m},
                             "topology": {"kind": "ring", "npus": p}, "training": {"batch_size_per_worker": b * m}},
                            tmp_path)
    a = b * S * H * BF16
    # p*v = 4 global stages, rank s holds stages s and s + p. Stage g sends each microbatch's activation
    # on (g < 3) and its input gradient back (g > 0): rank 0 (stages 0, 2) sends 1 + 2, rank 1 (1, 3) 2 + 1.
    assert sent == {0: m * a * 3, 1: m * a * 3}
    held = [{t.name.split(".")[1:-3] and ".".join(t.name.split(".")[1:-3]) for t in x.tasks
             if t.kind is TaskKind.COMPUTE and t.name.startswith("fwd.")} for x in build_graph(resolve(scenario)).ranks]
    # the two ranks hold every layer once between them, each in two chunks (.c0 and .c1 computes)
    assert held[0].isdisjoint(held[1])
    assert held[0] | held[1] == {x.name for x in scenario.resolved_model.layers}


def test_gradient_accumulation_reduces_once(tmp_path: Path) -> None:
    d, p, m, gas, b = 2, 2, 2, 3, 1
    scenario, sent, _ = run({"model": llama(layers=2), "parallelism": {
        "dp": d, "pp": p, "microbatches": m, "grad_accumulation_steps": gas},
        "topology": {"kind": "ring", "npus": d * p}, "training": {"batch_size_per_worker": b * m * gas}},
        tmp_path)
    a = b * S * H * BF16
    # every stage's gradients all-reduced once per iteration, after the last of gas x m microbatches
    graph = build_graph(scenario)
    per_stage = {}
    for r in graph.ranks:
        ars = [x for x in r.tasks if x.name.startswith("allreduce.") and x.iteration == 0]
        per_stage[r.rank] = sum(x.size_bytes for x in ars)
        assert len(ars) == 1  # one bucket, reduced once
    for r in range(d * p):
        stage = r // d
        assert sent[r] == gas * m * a + ring_ar(d, per_stage[r]), (r, stage)


def test_accumulation_on_one_stage_is_microbatching(tmp_path: Path) -> None:
    """With pp = 1, grad_accumulation_steps = k and microbatches = 1 compile the same graph as
    microbatches = k (DDP's no_sync accumulation)."""
    base = {"model": llama(), "topology": {"kind": "ring", "npus": 2}, "training": {"batch_size_per_worker": 4}}
    a = build_graph(resolve(Scenario.model_validate({**base, "parallelism": {"dp": 2, "grad_accumulation_steps": 4}})))
    b = build_graph(resolve(Scenario.model_validate({**base, "parallelism": {"dp": 2, "microbatches": 4}})))
    assert [r.tasks for r in a.ranks] == [r.tasks for r in b.ranks]


def test_precision_sets_message_bytes(tmp_path: Path) -> None:
    """fp32 messages are twice the bf16 or fp16 ones: gradients, activations, every dimension's."""
    spec = {"model": llama(experts=4), "parallelism": {"dp": 2, "tp": 2, "pp": 2, "ep": 2, "sp": True,
                                                       "microbatches": 2},
            "topology": {"kind": "switch", "npus": 8}, "training": {"batch_size_per_worker": 4}}
    sent = {}
    for precision in ("fp32", "bf16", "fp16"):
        s = {**spec, "training": {**spec["training"], "precision": precision}}
        _, sent[precision], _ = run(dict(s), tmp_path / precision)
    assert sent["bf16"] == sent["fp16"]
    assert sent["fp32"] == {r: 2 * x for r, x in sent["bf16"].items()}


def test_zero1_deepspeed_buckets(tmp_path: Path) -> None:
    """DeepSpeed ZeRO-1 (use_multi_rank_bucket_allreduce): every gradient bucket of at most
    reduce_bucket_size elements all-reduced; the updated parameters all-gathered in
    max(1, shard x D // allgather_bucket_size) pieces of the rank's shard."""
    d, rb, ab = 4, 30_000, 25_000
    scenario, sent, ops = run({"model": llama(), "parallelism": {
        "dp": d, "sharding": "zero1", "overlap": False,
        "zero": {"gradients": "allreduce", "reduce_bucket_elements": rb, "allgather_bucket_elements": ab}},
        "topology": {"kind": "ring", "npus": d}, "training": {"batch_size_per_worker": 2}}, tmp_path)
    layers = [x.params for x in scenario.resolved_model.layers]
    buckets, cur = [], 0  # backward order, a bucket closes before the layer that would overflow it
    for n in reversed(layers):
        if cur and cur + n > rb:
            buckets.append(cur)
            cur = 0
        cur += n
    buckets.append(cur)
    assert len(buckets) > 2
    shard = -(-sum(layers) // d)
    pieces = max(1, shard * d // ab)
    gathers = [shard // pieces] * (pieces - 1) + [shard - shard // pieces * (pieces - 1)]
    assert pieces > 1
    expected = sum(ring_ar(d, x * BF16) for x in buckets) + sum((d - 1) * x * BF16 for x in gathers)
    assert sent == {r: expected for r in range(d)}
    assert ops["allreduce"] == d * len(buckets) * 2 * (d - 1)


def test_zero1_megatron_reduce_scatter(tmp_path: Path) -> None:
    d, rb = 4, 30_000
    scenario, sent, ops = run({"model": llama(), "parallelism": {
        "dp": d, "sharding": "zero1", "zero": {"reduce_bucket_elements": rb, "allgather_bucket_elements": 10**9}},
        "topology": {"kind": "ring", "npus": d}, "training": {"batch_size_per_worker": 2}}, tmp_path)
    total = sum(x.params for x in scenario.resolved_model.layers)
    rs = ops["reducescatter"] // (d * (d - 1))  # buckets
    assert rs > 2 and "allreduce" not in ops
    # reduce-scatters of every bucket: (D-1) x bucket//D each, about (D-1)/D of the gradients; one
    # all-gather of the whole shard (the all-gather bucket is larger than the model)
    gather = (d - 1) * -(-total // d) * BF16
    assert ops["allgather"] == d * (d - 1)
    assert all(abs(x - gather - (d - 1) * total * BF16 / d) <= (d - 1) * rs for x in sent.values())


@pytest.mark.parametrize("ep", [2, 4])
def test_pairwise_all_to_all_bytes(ep: int, tmp_path: Path) -> None:
    """ep_a2a: pairwise sends each of the other ep - 1 members its share S//ep, point to point (NCCL's
    all-to-all): (ep-1) x S//ep per all-to-all, against (ep-1)/2 x S for ASTRA-SIM's ring relay."""
    dp, m, b, top_k, cf = 4, 2, 2, 2, 1.25
    _, sent, ops = run({"model": llama(experts=8, top_k=top_k, cf=cf), "parallelism": {
        "dp": dp, "ep": ep, "ep_a2a": "pairwise", "microbatches": m}, "topology": {"kind": "switch", "npus": dp},
        "training": {"batch_size_per_worker": b * m}}, tmp_path)
    size = int(b * S * H * BF16 * top_k * cf)
    a2a = m * L * 4 * (ep - 1) * (size // ep)
    dense, expert = total_params(experts=8)
    grads = ring_ar(dp, dense * BF16) + (ring_ar(dp // ep, expert // ep * BF16) if dp > ep else 0)
    assert sent == {r: a2a + grads for r in range(dp)}
    assert ops["alltoall"] == dp * m * L * 4 * (ep - 1)


def test_pairwise_all_to_all_leaves_no_cycle(tmp_path: Path) -> None:
    """Point-to-point all-to-alls beside tensor-parallel collectives and expert-gradient buckets: a
    bucket's all-reduce waits for its layer's messages, else a rank could issue it while a member of
    its group waits in a tensor-parallel reduce-scatter for this rank (flowsim aware on a leaf-spine
    deadlocked before)."""
    spec = {"name": "cycle", "model": {"zoo": "mixtral_8x7b", "options": {
        "layers": 1, "hidden": 256, "heads": 32, "kv_heads": 8, "ffn": 1024, "vocab": 1000, "seq_len": 1024}},
        "parallelism": {"dp": 16, "ep": 4, "ep_a2a": "pairwise", "tp": 4, "sp": True},
        "topology": {"kind": "leaf_spine", "leaves": 2, "spines": 4, "hosts_per_leaf": 4, "gpus_per_host": 8,
                     "nics_per_host": 8, "bandwidth_gbps": 200, "oversubscription": 2.0},
        "training": {"batch_size_per_worker": 8, "precision": "bf16"}}
    bundle = compile_scenario(Scenario.model_validate(spec), tmp_path / "b").bundle
    run = FlowsimBackend(congestion="aware", traffic="none").run(bundle, tmp_path / "r")
    assert all(r.finish_ns > 0 for r in run.ranks)
