"""The LLM strategies' bundles on both ASTRA-SIM binaries: flowsim's `unaware` and `aware` modes finish
every rank within 0.1% of ASTRA-SIM c459ab6's congestion-unaware and congestion-aware binaries (on
every case here they are equal to the nanosecond), and carry the same bytes between the same ranks.

One case per strategy: sequence parallelism, context parallelism (ring attention's sends), expert
parallelism (all-to-all in groups, which ASTRA-SIM relays around a ring, and of every rank, which runs
its direct algorithm, on a switch, a ring and a fully connected network; and as point-to-point sends,
`ep_a2a: pairwise`), interleaved virtual
stages, gradient accumulation, fp16 and fp32 precision, the DeepSpeed-style ZeRO-1 buckets, and all
of them together. The aware binary takes one network dimension only; the unaware one also runs a
two-dimensional case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simstudy.compiler import compile_scenario
from simstudy.spec import Scenario
from tests.backends.bundles import agree as check

pytestmark = pytest.mark.astrasim


def llama(layers: int = 2, experts: int = 0) -> dict[str, Any]:
    options: dict[str, Any] = {"layers": layers, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 256,
                               "seq_len": 64}
    if experts:
        return {"zoo": "mixtral_8x7b", "options": {**options, "experts": experts, "top_k": 2,
                                                   "capacity_factor": 1.25}}
    return {"zoo": "llama3_8b", "options": options}


def one(kind: str, npus: int) -> dict[str, Any]:
    return {"kind": kind, "npus": npus, "bandwidth_gbps": 100, "latency_ns": 700}


CASES: dict[str, dict[str, Any]] = {
    "sp_tp4_dp2_ring": {"model": llama(), "parallelism": {"dp": 2, "tp": 4, "sp": True, "microbatches": 2},
                        "topology": one("ring", 8)},
    "cp4_dp2_switch": {"model": llama(), "parallelism": {"dp": 2, "cp": 4}, "topology": one("switch", 8)},
    "cp2_tp2_dp2_ring": {"model": llama(), "parallelism": {"dp": 2, "cp": 2, "tp": 2}, "topology": one("ring", 8)},
    "ep4_dp8_switch": {"model": llama(experts=8), "parallelism": {"dp": 8, "ep": 4}, "topology": one("switch", 8)},
    "ep8_direct_switch": {"model": llama(experts=8), "parallelism": {"dp": 8, "ep": 8}, "topology": one("switch", 8)},
    "ep8_direct_ring": {"model": llama(experts=8), "parallelism": {"dp": 8, "ep": 8}, "topology": one("ring", 8)},
    "ep8_direct_ring_chunks4_active2": {"model": llama(experts=8), "parallelism": {"dp": 8, "ep": 8},
                                        "topology": one("ring", 8),
                                        "system": {"collective_chunks": 4, "active_chunks_per_dimension": 2}},
    "ep4_pairwise_switch": {"model": llama(experts=8), "parallelism": {"dp": 8, "ep": 4, "ep_a2a": "pairwise",
                                                                       "tp": 1, "microbatches": 2},
                            "topology": one("switch", 8)},
    "ep8_pairwise_ring": {"model": llama(experts=8), "parallelism": {"dp": 8, "ep": 8, "ep_a2a": "pairwise"},
                          "topology": one("ring", 8)},
    "ep4_direct_fc": {"model": llama(experts=4), "parallelism": {"dp": 4, "ep": 4, "microbatches": 2},
                      "topology": one("fully_connected", 4)},
    "interleaved_pp2_v2": {"model": llama(layers=4), "parallelism": {"dp": 2, "pp": 2, "virtual_stages": 2,
                                                                     "microbatches": 4},
                           "topology": one("ring", 4)},
    "interleaved_pp4_v2": {"model": llama(layers=6), "parallelism": {"dp": 1, "pp": 4, "virtual_stages": 2,
                                                                     "microbatches": 8},
                           "topology": one("switch", 4)},
    "accumulation_pp2": {"model": llama(), "parallelism": {"dp": 2, "pp": 2, "microbatches": 2,
                                                           "grad_accumulation_steps": 2},
                         "topology": one("ring", 4)},
    "fp16_tp2_pp2": {"model": llama(), "parallelism": {"dp": 2, "tp": 2, "pp": 2, "microbatches": 2},
                     "topology": one("switch", 8), "training": {"precision": "fp16"}},
    "fp32_sp_ep": {"model": llama(experts=4), "parallelism": {"dp": 2, "tp": 2, "ep": 2, "sp": True},
                   "topology": one("ring", 4), "training": {"precision": "fp32"}},
    "zero1_deepspeed": {"model": llama(), "parallelism": {"dp": 4, "sharding": "zero1", "overlap": False, "zero": {
        "gradients": "allreduce", "reduce_bucket_elements": 30000, "allgather_bucket_elements": 25000}},
        "topology": one("ring", 4)},
    "everything_16": {"model": llama(layers=4, experts=4), "parallelism": {
        "dp": 2, "tp": 2, "pp": 2, "cp": 2, "ep": 2, "sp": True, "virtual_stages": 2, "microbatches": 2,
        "grad_accumulation_steps": 2, "sharding": "zero1"}, "topology": one("switch", 16)},
}


def bundle(case: str, tmp: Path, topology: dict[str, Any] | None = None) -> Any:
    spec = dict(CASES[case])
    training = {"batch_size_per_worker": 8, "iterations": 2, "precision": "bf16", **spec.pop("training", {})}
    if topology is not None:
        spec["topology"] = topology
    scenario = Scenario.model_validate({"name": case, **spec, "training": training})
    return compile_scenario(scenario, tmp / "bundle").bundle


def agree(binary: Path, aware: bool, b: Any, tmp: Path) -> None:
    check(binary, aware, b, tmp, rel=0.001)


@pytest.mark.parametrize("case", sorted(CASES))
def test_unaware(case: str, astra_sim_bin: Path, tmp_path: Path) -> None:
    agree(astra_sim_bin, False, bundle(case, tmp_path), tmp_path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_aware(case: str, aware_bin: Path, tmp_path: Path) -> None:
    agree(aware_bin, True, bundle(case, tmp_path), tmp_path)


def test_unaware_two_dimensions(astra_sim_bin: Path, tmp_path: Path) -> None:
    """Tensor-parallel (sequence-parallel) groups inside the first dimension, expert-parallel and data-parallel
    groups across the second, context-parallel ring sends crossing it."""
    topology = {"kind": "multi_dim", "dims": [{"type": "fully_connected", "npus": 2, "bandwidth_gbps": 800},
                                              {"type": "switch", "npus": 8, "bandwidth_gbps": 100}]}
    b = bundle("everything_16", tmp_path, topology)
    agree(astra_sim_bin, False, b, tmp_path)
