"""`--estimate` against measured runs: the cost model's memory and wall time beside what each run took.

Every case is compiled once with its ET files (in a process of its own: the compile's wall time and
peak memory, what ASTRA-SIM's binaries read) and run by flowsim in each congestion mode, and by
ASTRA-SIM's binaries where they take the network and are found (`ASTRA_SIM_BIN`), each in a process
of its own, keeping no traffic, one iteration. flowsim runs on each of its engines (`flowsim`: the
compiled core; `flowsim-python`), compiled in memory in its own process first, as `simstudy run` and
`benchmarks/scale.py` run it. The table prints the counts `simstudy run --estimate` prints, the
measured wall time (the run's without imports and compile, as `benchmarks/scale.py` and
`benchmarks/fluid_scale.py` time it) and peak memory (VmHWM; the binary's ru_maxrss), the estimate of
each and estimate / measured. `--fit` fits the cost model (`simstudy.backends.estimate.COSTS`) to the
rows measured (with `--published`, also to the runs of PUBLISHED): non-negative least squares of the
relative error, so that small and large runs count alike; the coefficients in COSTS are its output,
with the command that made them.

The cases (`--cases`) are small enough that each run ends within `--timeout` on a 2-core machine:
  rn256ring    ResNet-50 DP 256 on a ring (every rank identical: one rank simulated)
  rn1024ring   ResNet-50 DP 1,024 on a ring
  rn256ls      ResNet-50 DP 256 on a leaf-spine of 8 leaves x 4 hosts x 8 GPUs, 4 spines
  rn1024ls     ResNet-50 DP 1,024 on a leaf-spine of 16 leaves x 8 hosts x 8 GPUs, 8 spines (every rank's
               messages simulated: no rank stands for the others on a graph)
  llama128     LLaMA-3 70B TP 8 x PP 8 x DP 2 on scale.py's two dimensions (8-GPU switch, 400 Gbit/s switch)
  llama512     LLaMA-3 70B TP 8 x PP 8 x DP 8, the same network
  gpt512clos   GPT-2 medium TP 8 x PP 8 x DP 8 on a 3-tier Clos of 512 GPUs (fluid_scale.py's fabric)
  llama256clos LLaMA-3 70B TP 8 x PP 8 x DP 4 on a 3-tier Clos of 256 GPUs

Usage: python benchmarks/estimate.py [--cases rn256ring,llama128] [--modes unaware,aware,fluid]
       [--timeout 120] [--save FILE.jsonl] [--load FILE.jsonl] [--fit]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simstudy.backends.estimate import (  # noqa: E402
    COSTS,
    GIB,
    REPLICA_NODE_BYTES,
    REPLICA_SPAN_S,
    ROW_BUFFERED,
    ROW_BYTES,
    ROW_S,
    Workload,
    count,
    memory_terms,
    time_terms,
)
from simstudy.backends.locate import find_astra_sim  # noqa: E402
from simstudy.spec import Scenario  # noqa: E402

CHILD = r"""
import json, resource, subprocess, sys, time
from pathlib import Path
kind, arg, work = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3])
def vmhwm():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) * 1024
t0 = time.perf_counter()
if kind == "compile":
    from simstudy.compiler import compile_scenario
    from simstudy.spec import Scenario
    t0 = time.perf_counter()  # the compile, as benchmarks/scale.py times it: not the imports
    compile_scenario(Scenario.model_validate(arg["spec"]), arg["bundle"])
    print(json.dumps({"wall": time.perf_counter() - t0, "peak": vmhwm()}))
elif kind.startswith("flowsim"):
    from simstudy.backends import FlowsimBackend
    from simstudy.compiler import compile_scenario
    from simstudy.spec import Scenario
    engine = "python" if kind == "flowsim-python" else "compiled"
    # compiled in memory, as `simstudy run` and benchmarks/scale.py run flowsim (its replicas found)
    bundle = compile_scenario(Scenario.model_validate(arg["spec"]), work / "bundle", et_files=False).bundle
    t0 = time.perf_counter()  # the run, as benchmarks/fluid_scale.py and scale.py time it: not the compile
    r = FlowsimBackend(congestion=arg["mode"], traffic="none", engine=engine).run(
        bundle, work / "run", timeout_s=arg["timeout"])
    print(json.dumps({"wall": time.perf_counter() - t0, "peak": vmhwm(), "transfers": r.output.transfers}))
else:
    from simstudy.backends import AstraSimBackend
    from simstudy.compiler import Bundle
    bundle = Bundle.from_dir(arg["bundle"])
    backend = AstraSimBackend(aware=arg["mode"] == "aware")
    system = json.loads(bundle.system.read_text())
    system["trace-enabled"] = 0
    (work / "log").mkdir(parents=True, exist_ok=True)
    (work / "system.json").write_text(json.dumps(system))
    with (work / "out.txt").open("wb") as out:
        subprocess.run(backend.command(backend.binary(), bundle, work), cwd=work, stdout=out,
                       stderr=subprocess.STDOUT, check=True, timeout=arg["timeout"])
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"wall": time.perf_counter() - t0, "peak": u.ru_maxrss * 1024}))
"""


def resnet(n: int, topology: dict[str, Any]) -> dict[str, Any]:
    return {"name": f"resnet50_{n}", "model": "resnet50",
            "parallelism": {"dp": n, "aggregation": {"kind": "allreduce", "algorithm": "ring"}},
            "topology": topology, "system": {"peak_tflops": 120, "efficiency": 0.4}, "training": {"iterations": 1}}


def two_dims(n: int) -> dict[str, Any]:
    return {"kind": "multi_dim", "dims": [
        {"type": "switch", "npus": 8, "bandwidth_gbps": 2400, "latency_ns": 500},
        {"type": "switch", "npus": n // 8, "bandwidth_gbps": 400, "latency_ns": 1000}]}


def clos(gpus: int) -> dict[str, Any]:
    """fluid_scale.py's 3-tier Clos of 8-GPU hosts, 8 hosts per ToR, 400 Gbit/s NICs (16 ToRs per pod
    above 4,096 GPUs, as there)."""
    per = 16 if gpus > 4096 else 8 if gpus >= 4096 else max(1, gpus // 512) * 8 if gpus >= 512 else 2
    hosts = gpus // 8
    return {"kind": "clos3", "pods": max(1, hosts // (8 * per)), "tors_per_pod": per, "hosts_per_tor": 8,
            "aggs_per_pod": 4, "cores": 8, "gpus_per_host": 8, "bandwidth_gbps": 400, "latency_ns": 1000}


def llm(model: str, tp: int, pp: int, dp: int, topology: dict[str, Any]) -> dict[str, Any]:
    parallelism: dict[str, Any] = {"dp": dp, "tp": tp, "pp": pp, "microbatches": pp}
    training: dict[str, Any] = {"batch_size_per_worker": pp, "iterations": 1}
    if model.startswith("llama3_"):  # as benchmarks/scale.py runs them
        parallelism["sp"] = True
        training["precision"] = "bf16"
    return {"name": f"{model}_{tp * pp * dp}", "model": model, "parallelism": parallelism, "topology": topology,
            "system": {"peak_tflops": 989, "efficiency": 0.4}, "training": training}


CASES: dict[str, Any] = {
    "rn256ring": lambda: resnet(256, {"kind": "ring", "npus": 256, "bandwidth_gbps": 100}),
    "rn1024ring": lambda: resnet(1024, {"kind": "ring", "npus": 1024, "bandwidth_gbps": 100}),
    "rn256ls": lambda: resnet(256, {"kind": "leaf_spine", "leaves": 8, "spines": 4, "hosts_per_leaf": 4,
                                    "gpus_per_host": 8, "bandwidth_gbps": 100}),
    "rn1024ls": lambda: resnet(1024, {"kind": "leaf_spine", "leaves": 16, "spines": 8, "hosts_per_leaf": 8,
                                      "gpus_per_host": 8, "bandwidth_gbps": 100}),
    "llama128": lambda: llm("llama3_70b", 8, 8, 2, two_dims(128)),
    "llama512": lambda: llm("llama3_70b", 8, 8, 8, two_dims(512)),
    "gpt512clos": lambda: llm("gpt2_medium", 8, 8, 8, clos(512)),
    "llama256clos": lambda: llm("llama3_70b", 8, 8, 4, clos(256)),
    # too large to run here by default: their published measurements (PUBLISHED) join the fit
    "llama4096": lambda: llm("llama3_70b", 8, 8, 64, two_dims(4096)),
    "llama4096sw": lambda: llm("llama3_70b", 8, 8, 64, {"kind": "switch", "npus": 4096, "bandwidth_gbps": 400,
                                                        "latency_ns": 1000}),
    "llama16k": lambda: llm("llama3_70b", 8, 16, 128, two_dims(16384)),
    "llama405_16k": lambda: llm("llama3_405b", 8, 16, 128, two_dims(16384)),
    # benchmarks/fluid_scale.py's and benchmarks/scale.py's cases, with the same specs
    "rn4096ls": lambda: resnet(4096, {"kind": "leaf_spine", "leaves": 32, "spines": 16, "hosts_per_leaf": 16,
                                      "gpus_per_host": 8, "bandwidth_gbps": 100}),
    "llama4096clos": lambda: llm("llama3_70b", 8, 8, 64, clos(4096)),
    # LLaMA-3.1 405B on the Clos below scale.py's sizes: 1,024 (TP 8 x PP 8 x DP 16), 2,048 and 4,096 GPUs
    # (TP 8 x PP 16 x DP 16 and 32), where a fluid run's time per message grows with the job
    "llama405_1kclos": lambda: llm("llama3_405b", 8, 8, 16, clos(1024)),
    "llama405_2kclos": lambda: llm("llama3_405b", 8, 16, 16, clos(2048)),
    "llama405_4kclos": lambda: llm("llama3_405b", 8, 16, 32, clos(4096)),
    "llama405_16kclos": lambda: llm("llama3_405b", 8, 16, 128, clos(16384)),
    "llama405_55k": lambda: llm("llama3_405b", 8, 16, 432, two_dims(55296)),
    "llama405_55kclos": lambda: llm("llama3_405b", 8, 16, 432, clos(55296)),
}
#: too large to run here: their measurements are PUBLISHED's
LARGE = ("llama4096", "llama4096sw", "llama16k", "llama405_16k", "rn4096ls", "llama4096clos", "llama405_1kclos",
         "llama405_2kclos", "llama405_4kclos", "llama405_16kclos",
         "llama405_55k", "llama405_55kclos")
SMALL = [c for c in CASES if c not in LARGE]

#: Runs too large for this benchmark, as the results pages print them (wall s, peak bytes): the same
#: bundles as the cases of the same names (their transfers are the counts here). The first rows, of
#: flowsim's Python engine, ASTRA-SIM and the compile, from benchmarks/scale.py on an earlier machine
#: (docs/how-to/llm-training.md; the Python engine's unaware runs there came before its replicas
#: shortcut and are left out).
PUBLISHED = [
    {"case": "llama4096sw", "backend": "flowsim-python", "mode": "aware", "wall": 522.2, "peak": 2641 << 20},
    {"case": "llama4096", "backend": "astrasim", "mode": "unaware", "wall": 293.9, "peak": 11162 << 20},
    {"case": "llama4096sw", "backend": "astrasim", "mode": "aware", "wall": 749.4, "peak": 15858 << 20},
    {"case": "llama4096", "backend": "compile", "mode": "", "wall": 17.6, "peak": 0},
    {"case": "llama16k", "backend": "compile", "mode": "", "wall": 173.0, "peak": 0},
    # the compiled core on this machine, as docs/results.md prints them: benchmarks/fluid_scale.py
    # ("Ninth pass"), benchmarks/scale.py ("16,384 GPUs on a 3-tier Clos: Python once per collective";
    # "55,296 GPUs: one replica stands for the others"; "`--estimate` refitted": LLaMA-3 70B at 16,384
    # GPUs and the Clos's fluid run); flowsim's run without its compile. Peaks measured again since
    # the compiled walk shares its tables ("Ranks alike share the walk's tables"), wall times as
    # before; `peak_before`: a peak from before that change, not in the memory fit
    {"case": "rn4096ls", "backend": "flowsim", "mode": "fluid", "wall": 30.8, "peak": 410 << 20},
    {"case": "rn4096ls", "backend": "flowsim", "mode": "unaware", "wall": 17.2, "peak": 420 << 20},
    {"case": "llama4096clos", "backend": "flowsim", "mode": "fluid", "wall": 182.1, "peak": 1096 << 20},
    {"case": "llama4096clos", "backend": "flowsim", "mode": "unaware", "wall": 27.9, "peak": 1085 << 20},
    # LLaMA-3.1 405B on the Clos at 1,024-4,096 GPUs (`--cases llama405_1kclos,llama405_2kclos,llama405_4kclos
    # --backends flowsim --modes unaware,fluid`, nothing else running; "A pipeline's sends in the fluid estimate")
    {"case": "llama405_1kclos", "backend": "flowsim", "mode": "unaware", "wall": 8.9, "peak": 379 << 20},
    {"case": "llama405_1kclos", "backend": "flowsim", "mode": "fluid", "wall": 39.6, "peak": 404 << 20},
    {"case": "llama405_2kclos", "backend": "flowsim", "mode": "unaware", "wall": 13.0, "peak": 629 << 20},
    {"case": "llama405_2kclos", "backend": "flowsim", "mode": "fluid", "wall": 76.7, "peak": 657 << 20},
    {"case": "llama405_4kclos", "backend": "flowsim", "mode": "unaware", "wall": 28.4, "peak": 1119 << 20},
    {"case": "llama405_4kclos", "backend": "flowsim", "mode": "fluid", "wall": 200.4, "peak": 1171 << 20},
    {"case": "llama16k", "backend": "flowsim", "mode": "unaware", "wall": 12.1, "peak": 2149 << 20},
    {"case": "llama16k", "backend": "flowsim", "mode": "fluid", "wall": 134.4, "peak": 2869 << 20},
    {"case": "llama405_16k", "backend": "flowsim", "mode": "unaware", "wall": 17.0, "peak": 3059 << 20},
    {"case": "llama405_16k", "backend": "flowsim", "mode": "fluid", "wall": 244.2, "peak": 4103 << 20},
    {"case": "llama405_16kclos", "backend": "flowsim", "mode": "unaware", "wall": 238.5, "peak": 4478 << 20},
    # (the Clos's fluid run: its later measurement, after the fill kept its scratch space, "Fluid on the
    # 16,384-GPU Clos, profiled")
    {"case": "llama405_16kclos", "backend": "flowsim", "mode": "fluid", "wall": 2624.6, "peak": 7059 << 20,
     "peak_before": True},
    {"case": "llama405_55k", "backend": "flowsim", "mode": "unaware", "wall": 92.8, "peak": 9880 << 20},
    {"case": "llama405_55k", "backend": "flowsim", "mode": "fluid", "wall": 1113.1, "peak": 19990 << 20,
     "peak_before": True},
    {"case": "llama405_55kclos", "backend": "flowsim", "mode": "unaware", "wall": 857.5, "peak": 15777 << 20},
]


def child(kind: str, arg: dict[str, Any], work: Path, timeout_s: float) -> dict[str, Any]:
    """One measured step in its own process: {"wall", "peak"} or {"error"}."""
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, kind, json.dumps(arg), str(work)], capture_output=True,
                             text=True, cwd=ROOT, timeout=timeout_s + 60)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout_s:.0f} s", "wall": time.perf_counter() - t0}
    if out.returncode:
        lines = out.stderr.strip().splitlines()
        return {"error": lines[-1][:120] if lines else "failed", "wall": time.perf_counter() - t0}
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def estimate_of(backend: str, mode: str, w: Workload, rows: bool = False) -> tuple[float, float] | None:
    """(seconds, bytes) of the simulation alone, as `simstudy.backends.estimate.estimate` adds them up."""
    model = COSTS.get((backend, mode))
    if model is None:
        return None
    kept = rows and backend.startswith("flowsim")
    return (model.wall_s(w) + (ROW_S * w.messages if kept else 0.0),
            model.bytes(w) + (ROW_BYTES * min(w.messages, ROW_BUFFERED) if kept else 0.0))


def measure(cases: list[str], modes: list[str], backends: list[str], timeout_s: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    astra = "astrasim" in backends and find_astra_sim() is not None and find_astra_sim(aware=True) is not None
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            spec = CASES[case]()
            scenario = Scenario.model_validate(spec)
            w = count(scenario)
            bundle = Path(tmp) / case / "bundle"
            runs = [("compile", "")] + [(b, m) for b in ("flowsim", "flowsim-python") if b in backends for m in modes]
            if astra and scenario.topology.kind in ("ring", "switch", "fully_connected", "multi_dim"):
                runs += [("astrasim", m) for m in modes if m != "fluid"]
            for backend, mode in runs:
                arg = {"spec": spec, "bundle": str(bundle), "mode": mode, "timeout": timeout_s}
                r = child(backend, arg, Path(tmp) / case / f"{backend}{mode}", timeout_s)
                row = {"case": case, "backend": backend, "mode": mode, **r}
                rows.append(row)
                report(row, w)
                if backend == "compile" and "error" in r:
                    break
            subprocess.run(["rm", "-rf", str(Path(tmp) / case)], check=False)
    return rows


def against(w: Workload, backend: str, mode: str, wall_s: float | None, peak_bytes: float | None, *,
            rows: bool = False) -> str:
    """`--estimate`'s wall time and memory of one run (keeping its traffic rows or not) beside the
    measured ones, with estimate / measured: what benchmarks/scale.py and benchmarks/fluid_scale.py
    print under each run."""
    est = estimate_of(backend, mode, w, rows)
    if est is None:
        return f"estimate {backend} {mode}: no model"
    s, b = est
    wall = f" ({s / wall_s:.2f}x measured)" if wall_s else ""
    peak = f" ({b / peak_bytes:.2f}x measured)" if peak_bytes else ""
    return f"estimate {backend} {mode}: {s:,.1f} s{wall}, {b / GIB:,.2f} GiB{peak}"


def header() -> None:
    print(f"{'case':<13} {'run':<17} {'ranks':>6} {'ET nodes':>10} {'messages':>11} {'wall s':>8} {'est s':>8} "
          f"{'x':>5} {'peak GiB':>9} {'est GiB':>8} {'x':>5}")


def report(row: dict[str, Any], w: Workload) -> None:
    label = f"{row['backend']} {row['mode']}".strip()
    est = estimate_of(row["backend"], row["mode"], w)
    head = f"{row['case']:<13} {label:<17} {w.ranks:>6,} {w.held_nodes:>10,} {w.messages:>11,}"
    if "error" in row:
        print(f"{head} {'-':>8}  {row['error']}", flush=True)
        return
    if est is None:
        print(f"{head} {row['wall']:>8.1f} {'-':>8} {'-':>5} {row['peak'] / GIB:>9.2f}", flush=True)
        return
    s, b = est
    ratio = f"{b / row['peak']:>5.2f}" if row["peak"] else f"{'-':>5}"  # a published compile gives no memory
    print(f"{head} {row['wall']:>8.1f} {s:>8.1f} {s / row['wall']:>5.2f} {row['peak'] / GIB:>9.2f} "
          f"{b / GIB:>8.2f} {ratio}", flush=True)


def fit(rows: list[dict[str, Any]], workloads: dict[str, Workload]) -> None:
    """Non-negative least squares of the relative error, per backend and mode, on the terms of
    `simstudy.backends.estimate` (`memory_terms`, `time_terms`)."""
    from scipy.optimize import nnls

    for key in dict.fromkeys((r["backend"], r["mode"]) for r in rows if "error" not in r):
        got = [r for r in rows if (r["backend"], r["mode"]) == key and "error" not in r]
        compile, every = key[0] == "compile", key[0] == "astrasim"
        model = COSTS.get(key)
        rep = model is not None and model.replicas  # its runs simulate one replica and copy its spans
        # a published compile gives no memory; a peak measured before the compiled walk shared its
        # tables (`peak_before`) is not the memory of today's run
        known = [r for r in got if r["peak"] > 0 and not r.get("peak_before")]
        ws = [workloads[r["case"]] for r in got]
        mem = np.array([memory_terms(w, compile=compile, every_rank=every, replicas=rep) for w in ws])
        wall = np.array([time_terms(w, compile=compile, every_rank=every, replicas=rep) for w in ws])
        spans = np.array([model.copied_nodes(w) if model is not None else 0 for w in ws], dtype=float)
        peak = np.array([max(r["peak"], 1) for r in got], dtype=float)
        secs = np.array([r["wall"] for r in got], dtype=float)
        # what the copied spans take (REPLICA_SPAN_S, REPLICA_NODE_BYTES) is the model's as it is
        peak, secs = peak - REPLICA_NODE_BYTES * spans, secs - REPLICA_SPAN_S * spans
        use = np.array([r["peak"] > 0 and not r.get("peak_before") for r in got])
        cm, _ = nnls(mem[use] / peak[use][:, None], np.ones(len(known)))
        cs, _ = nnls(wall / secs[:, None], np.ones(len(got)))
        print(f"{key}: {len(got)} runs: memory=({', '.join(f'{c:.4g}' for c in cm)}), "
              f"seconds=({', '.join(f'{c:.4g}' for c in cs)})")
        for r, m, s in zip(got, mem @ cm + REPLICA_NODE_BYTES * spans, wall @ cs + REPLICA_SPAN_S * spans,
                           strict=True):
            print(f"    {r['case']:<13} wall {r['wall']:8.1f} fit {s:8.1f} ({s / r['wall']:.2f}x)   "
                  f"peak {r['peak'] / GIB:6.2f} fit {m / GIB:6.2f} GiB ({m / r['peak']:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cases", default=",".join(SMALL), help="cases (default: all but the published ones)")
    parser.add_argument("--published", action="store_true",
                        help="add the published measurements of the large cases (PUBLISHED) to the table and fit")
    parser.add_argument("--modes", default="unaware,aware,fluid", help="flowsim's congestion modes")
    parser.add_argument("--backends", default="flowsim,flowsim-python,astrasim",
                        help="flowsim (its compiled engine), flowsim-python (its Python engine), and ASTRA-SIM's "
                             "binaries where they take the network and are found")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a run is stopped")
    parser.add_argument("--save", help="append the measured rows to this JSON-lines file")
    parser.add_argument("--load", help="measure nothing: read the rows of --save files (comma-separated)")
    parser.add_argument("--fit", action="store_true", help="fit the cost model to the rows")
    args = parser.parse_args()
    header()
    if args.load:
        rows = [json.loads(line) for f in args.load.split(",") for line in Path(f).read_text().splitlines()
                if line.strip()]
    else:
        rows = measure([c for c in args.cases.split(",") if c], [m for m in args.modes.split(",") if m],
                       args.backends.split(","), args.timeout)
    if args.published:
        rows += PUBLISHED
    workloads = {case: count(Scenario.model_validate(CASES[case]())) for case in dict.fromkeys(r["case"] for r in rows)}
    for r in rows if args.load else PUBLISHED if args.published else []:
        report(r, workloads[r["case"]])
    if args.save and not args.load:
        with open(args.save, "a", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    if args.fit:
        fit(rows, workloads)


if __name__ == "__main__":
    main()


