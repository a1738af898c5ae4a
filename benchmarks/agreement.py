"""Agreement of flowsim with ASTRA-SIM's analytical backend on the same bundles.

Prints, per case, the finish time of flowsim in a congestion mode and of the ASTRA-SIM binary
that mode models, and the relative difference:

* `unaware` against the congestion-unaware binary on every case: collectives on rings, switches
  and fully connected networks of 4 to 64 NPUs, ResNet-50 data parallel, GPT-2 with tensor,
  pipeline and sharded data parallelism and their hybrids on two dimensions (4 fully connected
  GPUs per node x a switch across nodes; in "dp4 tp2 pp2" the data-parallel groups cross both
  dimensions, and ASTRA-SIM-unaware charges a transfer only for the first dimension in which
  its ends differ, `MultiDimTopology::send`, as flowsim's unaware mode does), and a
  parameter-server job whose pushes converge on the servers;
* `aware` against the congestion-aware binary on every one-dimensional case (that binary takes
  one dimension only): it stores and forwards every message hop by hop through a FIFO queue per
  link, so switches take about twice as long for large messages and the servers' links queue.

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
from simstudy.compiler import Bundle, compile_scenario
from simstudy.compiler.astra_config import REMOTE_MEMORY, network_yaml, system_config
from simstudy.spec import Dim, Scenario

MIB = 2**20


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
    rows: list[tuple[str, str, int, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cases: list[tuple[str, Bundle, bool]] = []  # name, bundle, one dimension
        sizes = [MIB, 64 * MIB] if quick else [MIB, 64 * MIB, 1024 * MIB]
        npus_list = [4, 8] if quick else [4, 8, 16, 64]
        for topo in ("ring", "switch", "fully_connected"):
            for n in npus_list:
                for size in sizes:
                    name = f"allreduce {size // MIB}MiB {topo} {n}"
                    cases.append((name, collective_bundle(root / name.replace(" ", "_"), topo, n, size), True))
        for n in ([8] if quick else [8, 64]):
            spec = {"name": f"r50_dp{n}", "model": "resnet50", "parallelism": {"dp": n},
                    "topology": {"kind": "ring", "npus": n, "bandwidth_gbps": 400}, "training": {"iterations": 2}}
            cases.append((f"resnet50 DP ring {n}", spec_bundle(root / f"r50_{n}", spec), True))
        two_dims = {"kind": "multi_dim", "dims": [
            {"type": "fully_connected", "npus": 4, "bandwidth_gbps": 1200},
            {"type": "switch", "npus": 4, "bandwidth_gbps": 200}]}
        parallel = {
            "GPT-2 dp16 2 dims": {"dp": 16},
            "GPT-2 dp16 zero1 2 dims": {"dp": 16, "sharding": "zero1"},
            "GPT-2 dp16 fsdp 2 dims": {"dp": 16, "sharding": "fsdp"},
            "GPT-2 dp4 tp4 2 dims": {"dp": 4, "tp": 4},
            "GPT-2 dp4 pp4 1f1b 2 dims": {"dp": 4, "pp": 4, "microbatches": 8},
            "GPT-2 dp2 tp4 pp2 2 dims": {"dp": 2, "tp": 4, "pp": 2, "microbatches": 4},
            "GPT-2 dp4 tp2 pp2 2 dims": {"dp": 4, "tp": 2, "pp": 2, "microbatches": 4},
        }
        for name, par in parallel.items():
            spec = {"name": name.replace(" ", "_"), "model": "gpt2", "parallelism": par, "topology": two_dims,
                    "training": {"batch_size_per_worker": 8, "iterations": 2}}
            cases.append((name, spec_bundle(root / name.replace(" ", "_"), spec), False))
        ps = {"name": "ps", "model": "resnet50", "parallelism": {"dp": 8, "aggregation": {
            "kind": "parameter_server", "servers": 2, "mode": "sync"}},
              "topology": {"kind": "switch", "npus": 10, "bandwidth_gbps": 100}, "training": {"iterations": 2}}
        cases.append(("PS sync 8w+2s switch", spec_bundle(root / "ps", ps), True))
        for name, bundle, one_dim in cases:
            for mode, binary in (("unaware", unaware), ("aware", aware)):
                if binary is None or (mode == "aware" and not one_dim):
                    continue
                work = root / "work" / f"{len(rows)}"
                f = FlowsimBackend(congestion=mode).run(bundle, work / "f", timeout_s=3600)
                a = AstraSimBackend(binary, aware=mode == "aware").run(bundle, work / "a", timeout_s=3600)
                rows.append((name, mode, f.finish_ns, a.finish_ns))
    print(f"ASTRA-SIM: {unaware.parent} (unaware{', aware' if aware else ''})")
    print(f"{'case':<36} {'mode':<8} {'flowsim ns':>14} {'astra-sim ns':>14} {'rel diff':>9}")
    worst = {"unaware": 0.0, "aware": 0.0}
    for name, mode, f_ns, a_ns in rows:
        diff = (f_ns - a_ns) / a_ns
        worst[mode] = max(worst[mode], abs(diff))
        print(f"{name:<36} {mode:<8} {f_ns:>14,} {a_ns:>14,} {diff:>+9.4%}")
    for mode in ("unaware", "aware"):
        count = sum(1 for r in rows if r[1] == mode)
        if count:
            print(f"worst |rel diff| of flowsim {mode} against the {mode} binary over {count} cases: "
                  f"{worst[mode]:.4%} (target 1%)")


if __name__ == "__main__":
    main("--quick" in sys.argv)
