"""Compiled bundles of every parallelism strategy run to completion on a real ASTRA-SIM
analytical binary, and carry the same bytes per rank as flowsim's run of the same bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simstudy.backends import FlowsimBackend
from simstudy.backends.astrasim import AstraSimBackend
from simstudy.compiler import compile_scenario
from simstudy.spec import Scenario

pytestmark = pytest.mark.astrasim

CASES: dict[str, dict[str, Any]] = {
    "dp_ring": {"model": "resnet50", "parallelism": {"dp": 8}, "topology": {"kind": "ring", "npus": 8}},
    "dp_switch_halving": {
        "model": "mobilenetv2",
        "parallelism": {"dp": 4, "aggregation": {"kind": "allreduce", "algorithm": "halving_doubling"}},
        "topology": {"kind": "switch", "npus": 4},
    },
    "ps_sync_dedicated": {
        "model": "small_cnn",
        "parallelism": {"dp": 4, "bucket_size_mib": 0.25,
                        "aggregation": {"kind": "parameter_server", "servers": 2, "mode": "sync"}},
        "topology": {"kind": "switch", "npus": 6},
    },
    "tp_megatron": {"model": "bert_base", "parallelism": {"dp": 1, "tp": 4}, "topology": {"kind": "ring", "npus": 4}},
    "tp_layerwise_cnn": {"model": "resnet50", "parallelism": {"dp": 1, "tp": 4},
                         "topology": {"kind": "switch", "npus": 4}},
    "pp_gpipe": {"model": "gpt2", "parallelism": {"dp": 1, "pp": 4, "microbatches": 4, "schedule": "gpipe"},
                 "topology": {"kind": "switch", "npus": 4}},
    "pp_1f1b": {"model": "gnmt", "parallelism": {"dp": 1, "pp": 4, "microbatches": 4, "schedule": "1f1b"},
                "topology": {"kind": "ring", "npus": 4}},
    "dp_zero1": {"model": "resnet50", "parallelism": {"dp": 4, "sharding": "zero1"},
                 "topology": {"kind": "ring", "npus": 4}},
    "dp_zero3": {"model": "bert_base", "parallelism": {"dp": 4, "sharding": "zero3", "microbatches": 2},
                 "topology": {"kind": "switch", "npus": 4}},
    "dp_fsdp": {"model": "mobilenetv2", "parallelism": {"dp": 4, "sharding": "fsdp"},
                "topology": {"kind": "fully_connected", "npus": 4}},
    "hybrid_d2t4p2_multidim": {
        "model": "gpt2", "parallelism": {"dp": 2, "tp": 4, "pp": 2, "microbatches": 4, "sharding": "zero1"},
        "topology": {"kind": "multi_dim", "dims": [{"type": "fully_connected", "npus": 4},
                                                   {"type": "switch", "npus": 4}]},
    },
    "hybrid_d2t2p2_fsdp_gpipe": {
        "model": "lstm_lm", "parallelism": {"dp": 2, "tp": 2, "pp": 2, "microbatches": 2, "schedule": "gpipe",
                                            "sharding": "fsdp"},
        "topology": {"kind": "ring", "npus": 8},
    },
    # the framework presets (simstudy.compiler.frameworks)
    "preset_horovod": {"model": "resnet50", "parallelism": {"dp": 4, "framework": {
        "name": "horovod", "fusion_buffer_mib": 16, "cycle_time_ms": 0.5}}, "topology": {"kind": "ring", "npus": 4}},
    "preset_tensorflow_mwms": {"model": "lstm_lm", "parallelism": {"dp": 4, "framework": {
        "name": "tensorflow_mwms", "bytes_per_pack": 8 << 20}}, "topology": {"kind": "switch", "npus": 4}},
    "preset_kungfu_binary_tree_star": {"model": "small_cnn", "parallelism": {"dp": 6, "framework": "kungfu"},
                                       "topology": {"kind": "switch", "npus": 6}},
    "preset_kungfu_clique": {"model": "small_cnn", "parallelism": {"dp": 4, "framework": {
        "name": "kungfu", "graph": "clique"}}, "topology": {"kind": "fully_connected", "npus": 4}},
    "ps_async_colocated": {
        "model": "lstm_lm",
        "parallelism": {"dp": 4, "aggregation": {"kind": "parameter_server", "servers": 2,
                                                 "placement": "colocated", "mode": "async"}},
        "topology": {"kind": "fully_connected", "npus": 4},
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bundle_finishes_on_every_rank(case: str, astra_sim_bin: Path, tmp_path: Path) -> None:
    spec = {**CASES[case], "name": case, "training": {"batch_size_per_worker": 4, "iterations": 2}}
    result = compile_scenario(Scenario.model_validate(spec), tmp_path / "bundle")
    run = AstraSimBackend(astra_sim_bin).run(result.bundle, tmp_path / "run", timeout_s=300)
    assert [r.rank for r in run.ranks] == list(range(result.scenario.npus))
    assert all(r.finish_ns > 0 for r in run.ranks)
    # Every iteration computes: each rank's compute time is at least its forward+backward durations.
    assert all(r.compute_ns > 0 for r in run.ranks[: result.scenario.parallelism.compute_ranks])
    # The bytes each rank sends (from ASTRA-SIM's own trace of every collective and send) are the
    # bytes flowsim moves for the same bundle (which tests/compiler/test_parallelism.py checks
    # against the analytical formulas).
    flow = FlowsimBackend().run(result.bundle, tmp_path / "flowsim", timeout_s=300)
    a = run.traffic.groupby("src", observed=True)["bytes"].sum()
    f = flow.traffic.groupby("src", observed=True)["bytes"].sum()
    assert a.equals(f) and a.sum() > 0


@pytest.mark.parametrize("aware", [False, True], ids=["unaware", "aware"])
def test_both_binaries_accept_simstudy_attributes(aware: bool, astra_sim_bin: Path, tmp_path: Path) -> None:
    """Compiled nodes carry simstudy's own attributes (simstudy.op, .iteration, .flow, .chunk); both
    binaries ignore them and run the bundle to the same finish as a copy without them."""
    from simstudy import chakra
    from simstudy.compiler import Bundle
    from simstudy.compiler.attributes import CHUNK, FLOW, ITERATION, OP
    from simstudy.layout import TOPOLOGY

    spec = {**CASES["ps_sync_dedicated"], "name": "ps", "training": {"batch_size_per_worker": 4, "iterations": 2}}
    bundle = compile_scenario(Scenario.model_validate(spec), tmp_path / "bundle").bundle
    nodes = chakra.read_trace(bundle.et_path(0))[1]
    names = {a.name for n in nodes for a in n.attrs}
    assert {OP, ITERATION, FLOW, CHUNK} <= names
    bare = tmp_path / "bare"
    bare.mkdir()
    for r in range(bundle.npus):
        meta, nodes = chakra.read_trace(bundle.et_path(r))
        for n in nodes:
            n.attrs = [a for a in n.attrs if not a.name.startswith("simstudy.")]
        chakra.write_trace(chakra.trace_path(bare / "ps", r), meta, nodes)
    for f in ("network.yml", "system.json", "remote_memory.json"):
        (bare / f).write_bytes((bundle.directory / f).read_bytes())
    assert (bundle.directory / TOPOLOGY).is_file()
    with_attrs = AstraSimBackend(astra_sim_bin, aware=aware).run(bundle, tmp_path / "a", timeout_s=300)
    without = AstraSimBackend(astra_sim_bin, aware=aware).run(Bundle.from_dir(bare), tmp_path / "b", timeout_s=300)
    assert [r.finish_ns for r in with_attrs.ranks] == [r.finish_ns for r in without.ranks]
