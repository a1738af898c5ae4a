"""The execution graphs strategies produce: exact bytes per rank per iteration."""

from __future__ import annotations

from typing import Any

import pytest

from simstudy.compiler import Collective, TaskKind, build_graph, resolve
from simstudy.compiler.costs import DDP_FIRST_BUCKET_BYTES, ddp_buckets, layer_costs
from simstudy.spec import Scenario


def scenario(**parts: Any) -> Scenario:
    base: dict[str, Any] = {
        "model": "resnet50",
        "parallelism": {"dp": 4},
        "topology": {"kind": "ring", "npus": 4},
        "training": {"batch_size_per_worker": 8, "iterations": 2},
    }
    base.update(parts)
    return resolve(Scenario.model_validate(base))


def toy_model(params: list[int]) -> dict[str, Any]:
    return {
        "name": "toy",
        "layers": [
            {"name": f"l{i}", "params": p, "fwd_flops_per_sample": 1e6 * (i + 1), "activation_bytes_per_sample": 4096}
            for i, p in enumerate(params)
        ],
    }


def test_allreduce_buckets_sum_to_gradient_bytes() -> None:
    s = scenario()
    model = s.resolved_model
    graph = build_graph(s)
    grad_bytes = model.params * 4  # fp32 gradients
    for g in graph.ranks:
        # Per iteration, the all-reduce sizes add up to every gradient byte exactly once.
        assert g.collective_bytes(Collective.ALL_REDUCE) == grad_bytes * s.training.iterations
        assert g.sent_bytes() == 0


def test_ddp_bucket_order_and_caps() -> None:
    s = scenario()
    costs = layer_costs(s, s.resolved_model)
    cap = 25 * 2**20
    buckets = ddp_buckets(costs, cap)
    # Reverse layer order; the first bucket closes at 1 MiB, later ones at the cap.
    order = [i for b in buckets for i in b.layers]
    assert order == sorted(order, reverse=True)
    assert buckets[0].size_bytes >= DDP_FIRST_BUCKET_BYTES
    assert all(b.size_bytes >= cap for b in buckets[1:-1])
    assert all(b.size_bytes - costs[b.layers[-1]].grad_bytes < cap for b in buckets[1:])


def test_ddp_first_bucket_small_only_with_the_default_cap() -> None:
    """DDP(bucket_cap_mb=None) keeps a 1 MiB first bucket; DDP(bucket_cap_mb=X) makes it X."""
    s = scenario(model={"zoo": "small_cnn"})
    costs = layer_costs(s, s.resolved_model)
    grads = sum(c.grad_bytes for c in costs)  # 1,427,240 bytes; fc1 + fc2 alone are 1,054,248
    default = ddp_buckets(costs, 25 * 2**20)
    assert [b.size_bytes for b in default] == [1_054_248, grads - 1_054_248]
    assert [b.size_bytes for b in ddp_buckets(costs, 10 * 2**20)] == [grads]
    assert [b.size_bytes for b in ddp_buckets(costs, 10 * 2**20, first_cap_bytes=2**20)] == [1_054_248,
                                                                                           grads - 1_054_248]


def test_overlap_off_waits_for_whole_backward() -> None:
    s = scenario(parallelism={"dp": 4, "overlap": False}, training={"iterations": 1})
    g = build_graph(s).ranks[0]
    last_bwd = max(t.id for t in g.tasks if t.name.startswith("bwd."))
    comms = [t for t in g.tasks if t.kind is TaskKind.COLLECTIVE]
    assert comms and all(t.deps == [last_bwd] for t in comms)


def test_fp16_halves_gradient_bytes() -> None:
    s32 = scenario(training={"iterations": 1})
    s16 = scenario(training={"iterations": 1, "precision": "fp16"})
    assert build_graph(s16).ranks[0].collective_bytes() * 2 == build_graph(s32).ranks[0].collective_bytes()


@pytest.mark.parametrize("placement", ["dedicated", "colocated"])
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("servers", [1, 2, 3])
def test_parameter_server_push_pull_bytes(placement: str, mode: str, servers: int) -> None:
    workers = 4
    npus = workers + (servers if placement == "dedicated" else 0)
    params = [3000, 0, 70000, 12345, 5]
    s = scenario(
        model=toy_model(params),
        parallelism={"dp": workers, "bucket_size_mib": 0.1,
                     "aggregation": {"kind": "parameter_server", "servers": servers,
                                     "placement": placement, "mode": mode}},
        topology={"kind": "switch", "npus": npus},
        training={"iterations": 3},
    )
    graph = build_graph(s)
    p_bytes = sum(params) * 4
    iters = 3
    # Shard s owns bytes [s*P/S, (s+1)*P/S).
    shard = [(k + 1) * p_bytes // servers - k * p_bytes // servers for k in range(servers)]
    hosts = list(range(servers)) if placement == "colocated" else [workers + k for k in range(servers)]
    for w in range(workers):
        g = graph.ranks[w]
        # A worker pushes every gradient byte except the shard it hosts itself, and pulls the same.
        local = sum(shard[k] for k in range(servers) if hosts[k] == w)
        pushes = sum(t.size_bytes for t in g.tasks if t.kind is TaskKind.SEND and t.name.startswith("push"))
        pulls = sum(t.size_bytes for t in g.tasks if t.kind is TaskKind.RECV and t.name.startswith("pull"))
        assert pushes == pulls == (p_bytes - local) * iters
    for k, h in enumerate(hosts):
        g = graph.ranks[h]
        remote_workers = workers - (1 if h < workers else 0)
        recv = sum(t.size_bytes for t in g.tasks if t.kind is TaskKind.RECV and t.name.startswith("recv_grad"))
        sent = sum(t.size_bytes for t in g.tasks if t.kind is TaskKind.SEND and t.name.startswith("send_param"))
        assert recv == sent == shard[k] * remote_workers * iters


def test_sync_server_waits_for_all_workers_async_does_not() -> None:
    ps = {"kind": "parameter_server", "servers": 1}
    base = {"model": toy_model([1000, 2000]), "topology": {"kind": "switch", "npus": 4},
            "training": {"iterations": 1}}
    sync = build_graph(scenario(parallelism={"dp": 3, "aggregation": {**ps, "mode": "sync"}}, **base))
    updates = [t for t in sync.ranks[3].tasks if t.name.startswith("update")]
    assert all(len(t.deps) == 3 for t in updates)  # one receive from each worker
    asyn = build_graph(scenario(parallelism={"dp": 3, "aggregation": {**ps, "mode": "async"}}, **base))
    updates = [t for t in asyn.ranks[3].tasks if t.name.startswith("update")]
    assert updates and all(len(t.deps) == 1 for t in updates)


def test_sync_replies_go_round_robin_in_slices() -> None:
    """A rank runs one send at a time (ASTRA-SIM), so the sync server cuts each reply into
    REPLY_SLICES slices and sends slice c to every worker before slice c + 1."""
    from simstudy.compiler.parameter_server import REPLY_SLICES

    ps = {"kind": "parameter_server", "servers": 1}
    base = {"model": toy_model([1000, 2001]), "topology": {"kind": "switch", "npus": 4},
            "training": {"iterations": 1}}
    sync = build_graph(scenario(parallelism={"dp": 3, "aggregation": {**ps, "mode": "sync"}}, **base))
    sends = [t for t in sync.ranks[3].tasks if t.kind is TaskKind.SEND]
    per_piece = REPLY_SLICES * 3
    assert len(sends) % per_piece == 0
    for i in range(0, len(sends), per_piece):
        piece = sends[i:i + per_piece]
        assert [t.peer for t in piece] == [0, 1, 2] * REPLY_SLICES  # round-robin over the workers
        sizes = [t.size_bytes for t in piece]
        assert max(sizes) - min(sizes) <= 1
        pulls = [t for t in sync.ranks[0].tasks if t.kind is TaskKind.RECV
                 and t.name.startswith(piece[0].name.replace("send_param", "pull").rsplit(".w", 1)[0])]
        assert sum(t.size_bytes for t in pulls) == sum(sizes) // 3  # worker 0 gets its whole reply
    # async servers answer each worker on its own: whole replies
    asyn = build_graph(scenario(parallelism={"dp": 3, "aggregation": {**ps, "mode": "async"}}, **base))
    assert not any(".c" in t.name for t in asyn.ranks[3].tasks if t.kind is TaskKind.SEND)


def test_compute_time_from_flops_in_whole_microseconds() -> None:
    s = scenario(model=toy_model([10]), parallelism={"dp": 4},
                 system={"peak_tflops": 1.0, "efficiency": 0.5}, training={"batch_size_per_worker": 10})
    g = build_graph(s).ranks[0]
    fwd = next(t for t in g.tasks if t.name == "fwd.l0.it0")
    # 1e6 FLOPs/sample x 10 samples / (1e12 x 0.5 FLOP/s) = 20 us; backward is 2x forward.
    assert fwd.duration_us == 20
    assert next(t for t in g.tasks if t.name == "bwd.l0.it0").duration_us == 40


def test_measured_times_override_flops() -> None:
    measured = {"forward_us": 300.0, "backward_us": 600.0, "layers": {"l0": {"forward_us": 100, "backward_us": 150}}}
    s = scenario(model=toy_model([10, 20, 30]), system={"measured": measured})
    g = build_graph(s).ranks[0]
    dur = {t.name: t.duration_us for t in g.tasks}
    assert dur["fwd.l0.it0"] == 100 and dur["bwd.l0.it0"] == 150
    # The rest of the totals is spread over l1, l2 by FLOPs share (2:3).
    assert dur["fwd.l1.it0"] == 80 and dur["fwd.l2.it0"] == 120
    assert dur["bwd.l1.it0"] == 180 and dur["bwd.l2.it0"] == 270


def test_tensor_parallel_compiles_with_comm_groups() -> None:
    graph = build_graph(scenario(model="bert_base", parallelism={"dp": 2, "tp": 2}))
    # Two tensor-parallel groups of neighbours and two data-parallel groups across them.
    assert sorted(graph.groups.values()) == [(0, 1), (0, 2), (1, 3), (2, 3)]
    for g in graph.ranks:
        groups = {g.group_of(t) for t in g.tasks if t.kind is TaskKind.COLLECTIVE}
        assert groups and all(g.rank in graph.groups[i] for i in groups)
