"""flowsim's speed and memory against ASTRA-SIM, as ratios measured in one run.

1. ResNet-50 data parallel (2 iterations) on a ring of 64, 256 and 1024 NPUs: flowsim's wall time
   in `unaware` and `aware` mode over the wall time of the binary it models (target <= 1), and at
   the largest size flowsim's peak memory over ASTRA-SIM's (target <= 1.5). flowsim keeps the
   traffic table (`traffic: rows`, streamed to Parquet); ASTRA-SIM runs with its trace on, as the
   astrasim backend runs it. Finish times must be equal.
2. A 1 GiB all-reduce of 4096 NPUs (ring, 4 chunks: 134 million transfers) in `aware` mode,
   keeping rows and keeping per-link bins: wall time and peak memory (bound: 1 GB).
3. Two all-reduces of different groups (even and odd ranks) at once on one ring, whose messages
   share every link: flowsim `fluid` (every transfer a flow, max-min rates) over flowsim `unaware`
   on the same ranks (target <= 3).

Each run is its own process, so that peak memory is its own.

Usage: ASTRA_SIM_BIN=... python benchmarks/speed.py [--sizes 64,256,1024] [--skip-4096]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from simstudy.backends.locate import find_astra_sim

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from simstudy.backends import AstraSimBackend, FlowsimBackend
from simstudy.compiler import Bundle, compile_scenario
from simstudy.spec import Scenario
kind, arg, work = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3])
if arg["make"] == "resnet":
    spec = {"name": "r50", "model": "resnet50", "parallelism": {"dp": arg["npus"]},
            "topology": {"kind": "ring", "npus": arg["npus"]}, "training": {"iterations": 2}}
    bundle = compile_scenario(Scenario.model_validate(spec), work / "bundle").bundle
else:
    bundle = Bundle.from_dir(arg["bundle"])
if kind == "flowsim":
    backend = FlowsimBackend(congestion=arg["mode"], traffic=arg.get("traffic", "rows"))
else:
    backend = AstraSimBackend(aware=arg["mode"] == "aware")
r = backend.run(bundle, work / "run", timeout_s=7200)
# this process's own peak (VmHWM): ru_maxrss would carry the parent's peak across fork and exec
own = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"wall": r.wall_time_s, "finish": r.finish_ns, "transfers": r.output.transfers,
                  "rss_mb": own if kind == "flowsim" else kids}))
"""


def child(kind: str, arg: dict[str, object], work: Path) -> dict[str, float]:
    work.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, "-c", CHILD, kind, json.dumps(arg), str(work)],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{kind} {arg} failed:\n{out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def all_reduce_bundle(out: Path, npus: int, groups: dict[str, list[int]] | None = None) -> Path:
    """One 1 GiB ring all-reduce per rank (per group when `groups`) on a ring of `npus`."""
    from simstudy import chakra
    from simstudy.chakra import CollectiveType, GlobalMetadata, Node, NodeType

    out.mkdir(parents=True)
    for r in range(npus):
        attrs = [chakra.is_cpu_op(False), chakra.comm_type(CollectiveType.ALL_REDUCE), chakra.comm_size(2**30)]
        if groups:
            attrs.append(chakra.pg_name(next(g for g, m in groups.items() if r in m)))
        chakra.write_trace(chakra.trace_path(out / "ar", r), GlobalMetadata(), [Node(0, "ar", NodeType.COMM_COLL_NODE,
                                                                                     attrs=attrs)])
    (out / "network.yml").write_text(f"topology: [ Ring ]\nnpus_count: [ {npus} ]\nbandwidth: [ 50.0 ]\n"
                                     "latency: [ 500.0 ]\n")
    (out / "system.json").write_text(json.dumps({
        "endpoint-delay": 10, "active-chunks-per-dimension": 1, "preferred-dataset-splits": 4,
        "all-reduce-implementation": ["ring"], "collective-optimization": "baseline", "local-mem-bw": 1600}))
    (out / "remote_memory.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    if groups:
        (out / "comm_group.json").write_text(json.dumps(groups))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="64,256,1024", help="NPU counts of the ResNet-50 comparison")
    parser.add_argument("--skip-4096", action="store_true", help="leave out the 4096-NPU all-reduce")
    args = parser.parse_args()
    if find_astra_sim() is None or find_astra_sim(aware=True) is None:
        sys.exit("no ASTRA-SIM binaries: set ASTRA_SIM_BIN to the unaware one (the aware one beside it)")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("1. ResNet-50 data parallel, 2 iterations, ring: flowsim (rows streamed) vs the ASTRA-SIM binary")
        print(f"{'NPUs':>5} {'mode':<8} {'flowsim s':>10} {'astra-sim s':>12} {'wall ratio':>11} {'flowsim MB':>11} "
              f"{'astra MB':>9} {'memory ratio':>13} {'transfers':>12}")
        for n in sizes:
            for mode in ("unaware", "aware"):
                arg = {"make": "resnet", "npus": n, "mode": mode}
                f = child("flowsim", arg, root / f"f{n}{mode}")
                a = child("astrasim", arg, root / f"a{n}{mode}")
                if f["finish"] != a["finish"]:
                    sys.exit(f"finish times differ at {n} NPUs, {mode}: flowsim {f['finish']}, ASTRA-SIM {a['finish']}")
                print(f"{n:>5} {mode:<8} {f['wall']:>10.2f} {a['wall']:>12.2f} {f['wall'] / a['wall']:>11.3f} "
                      f"{f['rss_mb']:>11.0f} {a['rss_mb']:>9.0f} {f['rss_mb'] / a['rss_mb']:>13.3f} "
                      f"{int(f['transfers']):>12,}")
        if not args.skip_4096:
            print("\n2. 1 GiB all-reduce of 4096 NPUs (ring, 4 chunks), flowsim aware (memory bound: 1000 MB)")
            bundle = all_reduce_bundle(root / "ar4096", 4096)
            for traffic in ("rows", "links"):
                f = child("flowsim", {"make": "bundle", "bundle": str(bundle), "mode": "aware", "traffic": traffic},
                          root / f"f4096{traffic}")
                print(f"  traffic {traffic:<6} {f['wall']:>7.2f} s  peak {f['rss_mb']:>6.0f} MB "
                      f"({'within' if f['rss_mb'] < 1000 else 'OVER'} the bound)  {int(f['transfers']):,} transfers, "
                      f"finish {int(f['finish']):,} ns")
        print("\n3. two all-reduces of different groups (even and odd ranks) sharing every link of a ring")
        print(f"{'NPUs':>5} {'fluid s':>9} {'unaware s':>10} {'fluid/unaware':>14} {'fluid finish ns':>16} "
              f"{'unaware finish ns':>18}")
        for n in (64, 256):
            groups = {"1": list(range(0, n, 2)), "2": list(range(1, n, 2))}
            bundle = all_reduce_bundle(root / f"groups{n}", n, groups)
            f = child("flowsim", {"make": "bundle", "bundle": str(bundle), "mode": "fluid"}, root / f"g{n}f")
            u = child("flowsim", {"make": "bundle", "bundle": str(bundle), "mode": "unaware"}, root / f"g{n}u")
            print(f"{n:>5} {f['wall']:>9.2f} {u['wall']:>10.2f} {f['wall'] / u['wall']:>14.3f} {int(f['finish']):>16,} "
                  f"{int(u['finish']):>18,}")


if __name__ == "__main__":
    main()
