"""Agreement of flowsim with ASTRA-SIM's analytical backend on the same bundles.

Prints, per case, the finish time of each backend and the relative difference. Which
ASTRA-SIM binary each case is compared with:

* congestion-UNAWARE for collectives: ring, halving-doubling and direct patterns put at most one
  transfer on a link at a time on these topologies (direct on a Switch is the exception, see the
  output), so flowsim's max-min sharing never engages and both model the same thing;
* the parameter-server bundle twice: flowsim without contention vs unaware (same semantics: the
  incast at a server is not shared), and flowsim with contention vs aware (both share the
  server's link, but ASTRA-SIM-aware stores and forwards whole messages FIFO per link while
  flowsim shares bandwidth fluidly: expect them to differ).
* tensor, pipeline and sharded data parallelism and their hybrids (GPT-2 on 16 NPUs, 4 fully
  connected per node x a switch across nodes) against unaware. "dp4 tp2 pp2" is expected to
  differ: its data-parallel groups {0,2,4,6}... cross both dimensions, and ASTRA-SIM-unaware
  charges a transfer only for the first dimension in which its ends differ
  (`MultiDimTopology::send`), while flowsim routes it through every dimension it crosses.

Usage: ASTRA_SIM_BIN=... python benchmarks/agreement.py [--quick]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from simstudy import chakra
from simstudy.backends import AstraSimBackend, FlowsimBackend
from simstudy.backends.locate import find_astra_sim
from simstudy.chakra import CollectiveType, GlobalMetadata, Node, NodeType
from simstudy.compile import Bundle, compile_scenario
from simstudy.compile.astra_config import REMOTE_MEMORY, network_yaml, system_config
from simstudy.spec import Dim, Scenario

MIB = 2**20
#: Cases whose groups cross dimensions, where ASTRA-SIM-unaware prices only the first one (see above).
CROSS_DIMENSION = {"GPT-2 dp4 tp2 pp2 2 dims"}


def collective_bundle(out: Path, topo: str, npus: int, size: int) -> Bundle:
    """One all-reduce of `size` bytes on every rank (ASTRA-SIM's microbenchmark shape)."""
    out.mkdir(parents=True)
    node = Node(0, f"all_reduce_{size}", NodeType.COMM_COLL_NODE,
                attrs=[chakra.is_cpu_op(False), chakra.comm_type(CollectiveType.ALL_REDUCE), chakra.comm_size(size)])
    for r in range(npus):
        chakra.write_trace(chakra.trace_path(out / "all_reduce", r), GlobalMetadata(), [node])
    (out / "network.yml").write_text(network_yaml((Dim(type=topo, npus=npus, bandwidth_gbps=400, latency_ns=500),)))
    scenario = Scenario.model_validate({"model": "small_cnn", "parallelism": {"dp": npus},
                                        "topology": {"kind": topo, "npus": npus}})
    (out / "system.json").write_text(json.dumps(system_config(scenario)))
    (out / "remote_memory.json").write_text(json.dumps(REMOTE_MEMORY))
    return Bundle(out / "all_reduce", out / "network.yml", out / "system.json", out / "remote_memory.json")


def spec_bundle(out: Path, spec: dict[str, object]) -> Bundle:
    return compile_scenario(Scenario.model_validate(spec), out).bundle


def main(quick: bool) -> None:
    unaware = find_astra_sim()
    aware = find_astra_sim(aware=True)
    if unaware is None:
        sys.exit("no ASTRA-SIM binary: set ASTRA_SIM_BIN")
    rows: list[tuple[str, str, int, int, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cases: list[tuple[str, Bundle, bool, bool]] = []
        sizes = [MIB, 64 * MIB] if quick else [MIB, 64 * MIB, 1024 * MIB]
        npus_list = [4, 8] if quick else [4, 8, 16, 64]
        for topo in ("ring", "switch", "fully_connected"):
            for n in npus_list:
                for size in sizes:
                    name = f"allreduce {size // MIB}MiB {topo} {n}"
                    cases.append((name, collective_bundle(root / name.replace(" ", "_"), topo, n, size), True, False))
        for n in ([8] if quick else [8, 64]):
            spec = {"name": f"r50_dp{n}", "model": "resnet50", "parallelism": {"dp": n},
                    "topology": {"kind": "ring", "npus": n, "bandwidth_gbps": 400}, "training": {"iterations": 2}}
            cases.append((f"resnet50 DP ring {n}", spec_bundle(root / f"r50_{n}", spec), True, False))
        two_dims = {"kind": "multi_dim", "dims": [
            {"type": "fully_connected", "npus": 4, "bandwidth_gbps": 1200},
            {"type": "switch", "npus": 4, "bandwidth_gbps": 200}]}
        parallel = {
            "GPT-2 dp16 2 dims": ({"dp": 16}, True),
            "GPT-2 dp16 zero1 2 dims": ({"dp": 16, "sharding": "zero1"}, True),
            "GPT-2 dp16 fsdp 2 dims": ({"dp": 16, "sharding": "fsdp"}, True),
            "GPT-2 dp4 tp4 2 dims": ({"dp": 4, "tp": 4}, True),
            "GPT-2 dp4 pp4 1f1b 2 dims": ({"dp": 4, "pp": 4, "microbatches": 8}, False),
            "GPT-2 dp2 tp4 pp2 2 dims": ({"dp": 2, "tp": 4, "pp": 2, "microbatches": 4}, True),
            "GPT-2 dp4 tp2 pp2 2 dims": ({"dp": 4, "tp": 2, "pp": 2, "microbatches": 4}, True),
        }
        for name, (par, sharing) in parallel.items():
            spec = {"name": name.replace(" ", "_"), "model": "gpt2", "parallelism": par, "topology": two_dims,
                    "training": {"batch_size_per_worker": 8, "iterations": 2}}
            cases.append((name, spec_bundle(root / name.replace(" ", "_"), spec), sharing, False))
        ps = {"name": "ps", "model": "resnet50", "parallelism": {"dp": 8, "aggregation": {
            "kind": "parameter_server", "servers": 2, "mode": "sync"}},
              "topology": {"kind": "switch", "npus": 10, "bandwidth_gbps": 100}, "training": {"iterations": 2}}
        ps_bundle = spec_bundle(root / "ps", ps)
        cases.append(("PS sync 8w+2s switch", ps_bundle, False, False))
        if aware is not None:
            cases.append(("PS sync 8w+2s switch", ps_bundle, True, True))
        for name, bundle, contention, use_aware in cases:
            work = root / "work" / f"{len(rows)}"
            f = FlowsimBackend(contention=contention).run(bundle, work / "f", timeout_s=3600)
            a = AstraSimBackend(aware if use_aware else unaware, aware=use_aware).run(bundle, work / "a",
                                                                                      timeout_s=3600)
            variant = ("aware" if use_aware else "unaware") + (" / fluid" if contention else " / no sharing")
            rows.append((name, variant, f.finish_ns, a.finish_ns, f.wall_time_s, a.wall_time_s))
    print(f"ASTRA-SIM: {AstraSimBackend(unaware).binary().name} ({unaware.parent})")
    print(f"{'case':<34} {'astra-sim / flowsim':<24} {'flowsim ns':>14} {'astra-sim ns':>14} {'rel diff':>9}")
    worst = 0.0
    for name, variant, f_ns, a_ns, _, _ in rows:
        diff = (f_ns - a_ns) / a_ns
        expected_gap = name in CROSS_DIMENSION
        if variant.startswith("unaware") and not expected_gap:
            worst = max(worst, abs(diff))
        note = "  (expected: transfers cross two dimensions)" if expected_gap else ""
        print(f"{name:<34} {variant:<24} {f_ns:>14,} {a_ns:>14,} {diff:>+9.4%}{note}")
    print(f"worst |rel diff| against the unaware binary: {worst:.4%} (target 1%; cross-dimension cases excluded)")


if __name__ == "__main__":
    main("--quick" in sys.argv)
