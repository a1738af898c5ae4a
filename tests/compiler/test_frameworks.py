"""Framework presets (`parallelism.framework`): the compiled messages follow each framework's
rule, and the bytes per iteration equal the analytical value.

Analytical bytes per iteration, G = the model's gradient bytes (4 bytes per parameter, fp32), N
workers:
- pytorch_ddp, horovod, tensorflow_mwms: the all-reduces of one iteration sum to G on every rank
  (each gradient byte is in exactly one bucket / fused buffer / pack), and a ring all-reduce makes
  every rank send 2 (N - 1) / N * G;
- kungfu: every chunk goes once up and once down every edge of its graph, and a graph on N ranks
  has N - 1 edges, so the ranks send 2 (N - 1) * G in all; on the star, the root sends (N - 1) * G
  and every other rank G.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from simstudy.backends import FlowsimBackend
from simstudy.compiler import build_graph, compile_scenario, resolve
from simstudy.compiler.costs import layer_costs, whole_us
from simstudy.compiler.data_parallel import compile_data_parallel
from simstudy.compiler.frameworks import PRESETS, messages
from simstudy.compiler.frameworks.kungfu import bcast_graphs, parents
from simstudy.compiler.graph import TaskKind
from simstudy.spec import Scenario, SpecError
from simstudy.spec.framework import PRESETS as SPEC_PRESETS
from simstudy.spec.framework import KungFu
from simstudy.spec.load import load_scenario


def _scenario(framework: Any, *, model: Any = "resnet50", dp: int = 4, iterations: int = 1,
              system: dict[str, Any] | None = None) -> Scenario:
    return resolve(Scenario.model_validate({
        "name": "fw", "model": model, **({"system": system} if system else {}),
        "parallelism": {"dp": dp, "framework": framework},
        "topology": {"kind": "switch", "npus": dp, "bandwidth_gbps": 25, "latency_ns": 500},
        "training": {"batch_size_per_worker": 32, "iterations": iterations},
    }))


def _grad_bytes(s: Scenario) -> int:
    return 4 * s.resolved_model.params


def test_one_table_of_presets() -> None:
    assert list(PRESETS) == list(SPEC_PRESETS) == ["pytorch_ddp", "horovod", "tensorflow_mwms", "kungfu"]


@pytest.mark.parametrize("framework", ["pytorch_ddp", "horovod", "tensorflow_mwms"])
@pytest.mark.parametrize("dp", [2, 4, 8])
def test_collective_presets_all_reduce_every_gradient_byte_once(framework: str, dp: int) -> None:
    s = _scenario(framework, dp=dp, iterations=2)
    g = build_graph(s)
    for rank in g.ranks:
        assert rank.collective_bytes() == 2 * _grad_bytes(s)  # G per iteration, two iterations
    assert sum(m.size_bytes for m in messages(s)) == _grad_bytes(s)


@pytest.mark.parametrize("framework", ["horovod", "tensorflow_mwms", "kungfu",
                                       {"name": "kungfu", "graph": "clique"}])
def test_run_moves_the_analytical_bytes(framework: Any, tmp_path: Path) -> None:
    """flowsim's traffic table of the compiled bundle, ring all-reduce on a switch: every rank
    sends 2 (N - 1) / N * G per iteration; KungFu's ranks send 2 (N - 1) * G in all."""
    n = 4
    s = _scenario(framework, model="small_cnn", dp=n, iterations=2)
    result = compile_scenario(s, tmp_path / "bundle")
    run = FlowsimBackend().run(result.bundle, tmp_path / "run", timeout_s=120)
    sent = run.traffic.groupby("src", observed=True)["bytes"].sum() / 2
    g = _grad_bytes(s)
    if s.parallelism.framework.name == "kungfu":
        assert sent.sum() == 2 * (n - 1) * g
    else:
        assert all(math.isclose(v, 2 * (n - 1) / n * g, rel_tol=1e-6) for v in sent)


def test_pytorch_ddp_is_todays_graph_and_keeps_the_canonical_json() -> None:
    s = _scenario("pytorch_ddp", iterations=2)
    assert "framework" not in s.model_dump(mode="json")["parallelism"]
    plain = _scenario("pytorch_ddp", iterations=2).model_copy()
    assert [(t.name, t.size_bytes, t.deps) for t in build_graph(s).ranks[1].tasks] == \
        [(t.name, t.size_bytes, t.deps) for t in compile_data_parallel(plain).ranks[1].tasks]
    # another preset's dump leaves DDP's bucket size out and loads again unchanged
    h = _scenario("horovod")
    dumped = h.model_dump(mode="json")["parallelism"]
    assert "bucket_size_mib" not in dumped and dumped["framework"]["name"] == "horovod"
    assert Scenario.model_validate(h.model_dump(mode="json")) == h


# --- Horovod ----------------------------------------------------------------------------------


def _ready_us(s: Scenario) -> dict[int, float]:
    """Each layer's gradient-ready time from the start of backward (layers in reverse order)."""
    t, out = 0.0, {}
    for c in reversed(layer_costs(s, s.resolved_model)):
        t += c.bwd_us
        out[c.index] = t
    return out


@pytest.mark.parametrize(("fusion_mib", "cycle_ms"), [(128, 1), (64, 5), (4, 5), (1, 0.2), (0, 1), (128, 1000)])
def test_horovod_fuses_what_is_ready_in_one_cycle_up_to_the_buffer(fusion_mib: float, cycle_ms: float) -> None:
    s = _scenario({"name": "horovod", "fusion_buffer_mib": fusion_mib, "cycle_time_ms": cycle_ms},
                  system={"peak_tflops": 2, "efficiency": 0.5})
    costs = layer_costs(s, s.resolved_model)
    ready = _ready_us(s)
    threshold = fusion_mib * 1024 * 1024
    fused = messages(s)
    seen = [i for m in fused for i in m.layers]
    assert seen == [c.index for c in reversed(costs) if c.grad_bytes]  # every gradient once, in ready order
    for m in fused:
        assert m.size_bytes == sum(costs[i].grad_bytes for i in m.layers)
        # no fused message above the buffer, unless it is one tensor larger than the buffer
        assert m.size_bytes <= threshold or len(m.layers) == 1
        if threshold == 0:
            assert len(m.layers) == 1
        # a fused buffer holds gradients that became ready within one cycle
        assert len({math.floor(ready[i] / (cycle_ms * 1000)) for i in m.layers}) == 1
        assert m.ready_after == m.layers[-1]
    if fusion_mib == 128 and cycle_ms == 1000:  # the whole backward within one cycle, 98 MiB < 128 MiB
        assert len(fused) == 1
    # consecutive buffers of one cycle are split only because the next gradient did not fit
    for a, b in itertools.pairwise(fused):
        same_cycle = math.floor(ready[a.layers[-1]] / (cycle_ms * 1000)) == \
            math.floor(ready[b.layers[0]] / (cycle_ms * 1000))
        if same_cycle:
            assert threshold == 0 or a.size_bytes + costs[b.layers[0]].grad_bytes > threshold


@pytest.mark.parametrize("cycle_ms", [1, 5, 0.3])
def test_horovod_buffers_wait_for_their_cycles_end(cycle_ms: float) -> None:
    """Every cycle's buffers are issued after one CPU wait from the cycle's last ready gradient to
    the cycle's end, on the ET's clock (whole-us backward nodes from the start of backward); the
    waits are CPU ops that jitter and stragglers leave alone."""
    system = {"peak_tflops": 2, "efficiency": 0.5}
    straggling = {**system, "variability": {"stragglers": [{"ranks": [0], "slowdown": 3}]}}
    s = _scenario({"name": "horovod", "cycle_time_ms": cycle_ms}, system=system)
    costs = layer_costs(s, s.resolved_model)
    ends, t = {}, 0
    for c in reversed(costs):
        t += whole_us(c.bwd_us)
        ends[c.index] = t
    ready = _ready_us(s)
    for graph in (build_graph(s), build_graph(_scenario({"name": "horovod", "cycle_time_ms": cycle_ms},
                                                        system=straggling))):
        tasks = graph.ranks[0].tasks
        waits = [t for t in tasks if t.kind is TaskKind.WAIT]
        fused = [t for t in tasks if t.kind is TaskKind.COLLECTIVE]
        for m, task in zip(messages(s), fused, strict=True):
            k = math.floor(ready[m.layers[-1]] / (cycle_ms * 1000))
            (dep,) = task.deps
            gate = tasks[dep]
            if gate.kind is TaskKind.WAIT:
                assert gate.name == f"horovod.cycle{k}.it0"
                last = gate.deps[0]
                assert tasks[last].name.startswith("bwd.")
                layer = next(i for i in ends if tasks[last].name == f"bwd.{s.resolved_model.layers[i].name}.it0")
                assert ends[layer] + gate.duration_us == whole_us((k + 1) * cycle_ms * 1000)
            else:  # the cycle's last gradient was ready at its end on the ET's clock
                assert gate.name.startswith("bwd.")
        cycles = {math.floor(ready[m.layers[-1]] / (cycle_ms * 1000)) for m in messages(s)}
        assert len({t.deps[0] for t in fused}) == len(cycles) >= len(waits) > 0  # one gate per cycle
    plain = [t.duration_us for t in build_graph(s).ranks[0].tasks if t.kind is TaskKind.WAIT]
    slow = [t.duration_us for t in build_graph(_scenario({"name": "horovod", "cycle_time_ms": cycle_ms},
                                                         system=straggling)).ranks[0].tasks if t.kind is TaskKind.WAIT]
    assert plain == slow and plain


def test_only_horovod_waits() -> None:
    for framework in ("pytorch_ddp", "tensorflow_mwms", {"name": "horovod", "cycle_time_ms": 0}):
        assert not any(t.kind is TaskKind.WAIT for t in build_graph(_scenario(framework)).ranks[0].tasks)


# --- TensorFlow MWMS ----------------------------------------------------------------------------


def test_mwms_default_is_one_pack_after_the_whole_backward() -> None:
    s = _scenario("tensorflow_mwms", iterations=1)
    (pack,) = messages(s)
    first = next(c.index for c in layer_costs(s, s.resolved_model) if c.grad_bytes)
    assert pack.size_bytes == _grad_bytes(s) and pack.ready_after == first
    g = build_graph(s).ranks[0]
    comm = next(t for t in g.tasks if t.kind is TaskKind.COLLECTIVE)
    bwd_first = next(t.id for t in g.tasks if t.name == f"bwd.{s.resolved_model.layers[first].name}.it0")
    assert comm.deps == [bwd_first]


@pytest.mark.parametrize("per_pack", [1, 100_000, 4 << 20, 25 << 20])
def test_mwms_packs_follow_group_by_size(per_pack: int) -> None:
    """`group_by_size`: reversed gradients; a new pack starts once the current one holds more than
    bytes_per_pack, so every pack but the last is over it and under it without its last tensor."""
    s = _scenario({"name": "tensorflow_mwms", "bytes_per_pack": per_pack})
    costs = layer_costs(s, s.resolved_model)
    packs = messages(s)
    assert [i for p in packs for i in p.layers] == [c.index for c in reversed(costs) if c.grad_bytes]
    for p in packs[:-1]:
        assert p.size_bytes > per_pack
        assert p.size_bytes - costs[p.layers[-1]].grad_bytes <= per_pack
        assert p.ready_after == p.layers[-1]


# --- KungFu ---------------------------------------------------------------------------------


def test_kungfu_graphs_are_kungfus() -> None:
    def edges(graph: str, n: int, per_host: int = 1) -> list[dict[int, list[int]]]:
        return bcast_graphs(KungFu(name="kungfu", graph=graph, peers_per_host=per_host), n)  # type: ignore[arg-type]

    assert edges("star", 4) == [{0: [1, 2, 3]}]
    assert edges("tree", 4) == [{0: [1, 2, 3]}]  # one worker per host: the star
    assert edges("tree", 6, 2) == [{0: [1, 2, 4], 2: [3], 4: [5]}]
    assert edges("binary_tree_star", 7) == [{0: [1, 2], 1: [3, 4], 2: [5, 6]}]
    assert edges("binary_tree_star", 8, 2) == [{0: [1, 2, 4], 2: [3, 6], 4: [5], 6: [7]}]
    assert edges("clique", 3) == [{0: [1, 2]}, {1: [0, 2]}, {2: [0, 1]}]
    for graph in ("star", "tree", "binary_tree_star", "clique"):
        for g in edges(graph, 8, 2):  # spanning trees: N - 1 edges reaching every rank
            assert sorted(parents(g)) == sorted(set(range(8)) - (set(g) - set(parents(g))))
            assert len(parents(g)) == 7


@pytest.mark.parametrize("graph", ["star", "tree", "binary_tree_star", "clique"])
def test_kungfu_sends_every_chunk_up_and_down_every_edge(graph: str) -> None:
    n = 5
    s = _scenario({"name": "kungfu", "graph": graph}, model="small_cnn", dp=n)
    g = build_graph(s)
    trees = bcast_graphs(s.parallelism.framework, n)  # type: ignore[arg-type]
    chunk = 1024 * 1024
    sends = [(r.rank, t.peer, t.size_bytes, t.tag) for r in g.ranks for t in r.tasks if t.kind is TaskKind.SEND]
    assert all(size <= chunk for _, _, size, _ in sends)
    by_chunk: dict[int, list[tuple[int, int, int]]] = {}
    for src, dst, _size, tag in sends:
        by_chunk.setdefault(tag // 2, []).append((src, dst, tag % 2))
    grads = _grad_bytes(s)
    assert sum(size for _, _, size, _ in sends) == 2 * (n - 1) * grads
    for msgs in by_chunk.values():
        reduce_edges = {(a, b) for a, b, phase in msgs if phase == 0}
        bcast_edges = {(a, b) for a, b, phase in msgs if phase == 1}
        assert len(reduce_edges) == len(bcast_edges) == n - 1 == len(msgs) / 2
        assert bcast_edges == {(b, a) for a, b in reduce_edges}  # down the edges it went up
        # the reduce edges are one of the preset's graphs (kid -> parent)
        assert any(reduce_edges == set(parents(t).items()) for t in trees)
    if graph == "star":
        per_rank: Counter[int] = Counter()
        for src, _, size, _ in sends:
            per_rank[src] += size
        assert per_rank[0] == (n - 1) * grads and all(per_rank[r] == grads for r in range(1, n))


def test_kungfu_clique_roots_chunk_i_at_rank_i_mod_n() -> None:
    n = 3
    s = _scenario({"name": "kungfu", "graph": "clique"}, model="small_cnn", dp=n)
    g = build_graph(s)
    # fc1 (262,272 params, 1,049,088 B) is cut into 2 chunks: rooted at rank 0, then rank 1
    roots = []
    for c in range(2):
        senders = {r.rank for r in g.ranks for t in r.tasks if t.kind is TaskKind.SEND
                   and t.name.startswith(f"kf_bcast_send.fc1.c{c}.")}
        receivers = {r.rank for r in g.ranks for t in r.tasks if t.kind is TaskKind.RECV
                     and t.name.startswith(f"kf_bcast_recv.fc1.c{c}.")}
        (root,) = senders
        assert receivers == set(range(n)) - {root}
        roots.append(root)
    assert roots == [0, 1]


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("framework", "extra", "field", "expected"), [
    ("mxnet", "", "parallelism.framework", "unknown framework 'mxnet'; expected one of pytorch_ddp"),
    ("{name: horovod, bytes_per_pack: 1024}", "", "parallelism.framework.bytes_per_pack",
     "does not apply to framework horovod (a knob of tensorflow_mwms); horovod's knobs: fusion_buffer_mib"),
    ("{name: pytorch_ddp, graph: star}", "", "parallelism.framework.graph", "a knob of kungfu"),
    ("horovod", "bucket_size_mib: 10", "parallelism.bucket_size_mib", "PyTorch DDP's bucket cap"),
    ("kungfu", "aggregation: {algorithm: direct}", "parallelism.aggregation.algorithm", "framework.graph"),
    ("horovod", "aggregation: {servers: 1}", "parallelism.aggregation", "horovod has no parameter server"),
    ("{name: kungfu, graph: ring}", "", "parallelism.framework", "star"),
])
def test_bad_framework_names_file_and_field(tmp_path: Path, framework: str, extra: str, field: str,
                                            expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\nmodel: small_cnn\nparallelism:\n  dp: 4\n  framework: {framework}\n"
                    + (f"  {extra}\n" if extra else "")
                    + "topology: {kind: switch, npus: 4}\n")
    with pytest.raises(SpecError) as err:
        load_scenario(path)
    text = str(err.value)
    assert str(path) in text and field in text and expected in text, text
    done = subprocess.run([sys.executable, "-m", "simstudy", "compile", str(path), "-o", str(tmp_path / "b")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and field in done.stderr
