"""Horovod's cycle as both backends run it: a fused buffer leaves at its cycle's end (a CPU wait in
the ET from its cycle's last ready gradient), worked out by hand; `cycle_time_ms: 0` sends every
gradient as soon as it is ready; both ASTRA-SIM analytical binaries agree with flowsim to the
nanosecond on the same ET files.

Two layers of measured compute: forward 200 + 200 us; backward l1 300 us, then l0 900 us, so from
the start of backward (at 400 us) l1's gradient is ready at 300 us (cycle 0 of 1 ms) and l0's at
1200 us (cycle 1): their buffers leave at 1000 and 2000 us, i.e. at 1400 and 2400 us of the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simstudy.backends import AstraSimBackend, FlowsimBackend, RunResult
from simstudy.compiler import compile_scenario
from simstudy.spec import Scenario

US = 1000  # ns


def two_layers(framework: Any, *, system: dict[str, Any] | None = None, npus: int = 2,
               model: Any = None, iterations: int = 1) -> Scenario:
    layers = {"l0": {"forward_us": 200, "backward_us": 900}, "l1": {"forward_us": 200, "backward_us": 300}}
    return Scenario.model_validate({
        "name": "hvd", "parallelism": {"dp": npus, "framework": framework},
        "topology": {"kind": "switch", "npus": npus, "bandwidth_gbps": 100, "latency_ns": 500},
        "model": model or {"name": "two", "layers": [
            {"name": n, "params": 1000, "fwd_flops_per_sample": 1e6, "activation_bytes_per_sample": 64}
            for n in ("l0", "l1")]},
        "system": system or {"measured": {"layers": layers, "optimizer_us": 0}},
        "training": {"iterations": iterations}})


def run(s: Scenario, tmp: Path) -> RunResult:
    return FlowsimBackend(congestion="unaware").run(compile_scenario(s, tmp / "b").bundle, tmp / "r")


def collective_starts(result: RunResult) -> list[int]:
    spans = result.spans[(result.spans["rank"] == 0) & (result.spans["kind"].astype(str) == "collective")]
    return sorted(int(t) for t in spans["start_ns"])


def test_a_fused_buffer_leaves_at_its_cycles_end(tmp_path: Path) -> None:
    result = run(two_layers("horovod"), tmp_path)
    assert collective_starts(result) == [1400 * US, 2400 * US]
    waits = result.spans[(result.spans["rank"] == 0) & result.spans["name"].astype(str).str.startswith("horovod.")]
    assert sorted(zip(waits["start_ns"], waits["end_ns"], strict=True)) == [(700 * US, 1400 * US),
                                                                           (1600 * US, 2400 * US)]
    assert set(waits["kind"].astype(str)) == {"other"}  # a CPU wait, not the device's compute
    assert result.ranks[0].compute_ns == 1600 * US  # forward and backward only


def test_a_longer_cycle_fuses_both_and_waits_for_its_end(tmp_path: Path) -> None:
    """A 5 ms cycle: both gradients are ready within it and leave in one buffer at 5 ms (5400 us)."""
    result = run(two_layers({"name": "horovod", "cycle_time_ms": 5}), tmp_path)
    assert collective_starts(result) == [5400 * US]


def test_no_cycle_sends_each_gradient_when_it_is_ready(tmp_path: Path) -> None:
    result = run(two_layers({"name": "horovod", "cycle_time_ms": 0}), tmp_path)
    assert collective_starts(result) == [700 * US, 1600 * US]
    assert not result.spans["name"].astype(str).str.startswith("horovod.").any()


AGREEMENT: dict[str, dict[str, Any]] = {
    "two_layers": {},
    "resnet50_ring4": {"model": "resnet50", "npus": 4, "iterations": 2,
                       "system": {"peak_tflops": 20, "efficiency": 0.4}},
    "small_cnn_cycle_5ms_straggler": {
        "framework": {"name": "horovod", "cycle_time_ms": 5, "fusion_buffer_mib": 0.25}, "model": "small_cnn",
        "npus": 4, "iterations": 2,
        "system": {"peak_tflops": 2, "variability": {"stragglers": [{"ranks": [1], "slowdown": 2}]}}},
}


@pytest.mark.astrasim
@pytest.mark.parametrize("aware", [False, True], ids=["unaware", "aware"])
@pytest.mark.parametrize("case", sorted(AGREEMENT))
def test_both_astra_sim_binaries_agree_with_flowsim_to_the_nanosecond(case: str, aware: bool, astra_sim_bin: Path,
                                                                       aware_bin: Path, tmp_path: Path) -> None:
    parts = dict(AGREEMENT[case])
    s = two_layers(parts.pop("framework", "horovod"), **parts)
    bundle = compile_scenario(s, tmp_path / "bundle").bundle
    a = AstraSimBackend(aware_bin if aware else astra_sim_bin, aware=aware).run(bundle, tmp_path / "a", timeout_s=600)
    f = FlowsimBackend(congestion="aware" if aware else "unaware").run(bundle, tmp_path / "f", timeout_s=600)
    assert [r.finish_ns for r in f.ranks] == [r.finish_ns for r in a.ranks]
    assert [r.compute_ns for r in f.ranks] == [r.compute_ns for r in a.ranks]
