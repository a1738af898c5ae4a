"""The shared network at cluster scale: flowsim's fluid mode against its unaware mode, case by case.

Every case runs in fluid and in unaware (ASTRA-SIM's congestion-unaware model, the reference:
links never shared) on the same bundle, each in its own process, in one command, and prints wall
time, peak memory (the process's VmHWM), transfers per second and fluid / unaware. Runs keep no
traffic (`--traffic none`), one iteration. The goals (issue 34, the compiled core, this 2-core
machine): ResNet-50 DP 256 fluid within 1.5x unaware; ResNet-50 DP 4,096 fluid under 60 s and 4 GiB;
LLaMA-3 70B on 4,096 GPUs of a 3-tier Clos, fluid, under 5 minutes; the Lingjun study under 90 s;
ResNet-50 DP 1,024 on a ring with rows, unaware, at most 0.25x ASTRA-SIM's wall time and 1.5x its
memory. (Issue 24's, before it: LLaMA-3 70B on 16,384 GPUs under 20 minutes and 16 GiB; fluid
within 2x unaware everywhere.)

Cases (`--cases`, comma-separated; default all that the zoo can build):
  rn256      ResNet-50 DP 256, leaf-spine 8 leaves x 4 hosts x 8 GPUs, 4 spines
  rn1024ring ResNet-50 DP 1,024 on a ring, every transfer kept (`--traffic rows`), unaware, against
             ASTRA-SIM's congestion-unaware binary with its trace on (run `astrasim`: the binary's
             own wall time and peak memory; ASTRA_SIM_BIN)
  rn4096     ResNet-50 DP 4,096, leaf-spine 32 leaves x 16 hosts x 8 GPUs, 16 spines
  lingjun    specs/placement_lingjun.yaml, the whole study (3 placements, every job alone too, links kept)
  llama4096  LLaMA-3 70B TP 8 x PP 8 x DP 64 on a 3-tier Clos of 4,096 GPUs
  llama2x2048  two LLaMA-3 70B jobs of 2,048 GPUs (TP 8 x PP 8 x DP 32) spread over that Clos
  llama16k   LLaMA-3 70B TP 8 x PP 16 x DP 128 on a 3-tier Clos of 16,384 GPUs
  gpt4096, gpt2x2048, gpt16k  the same shapes and fabrics with GPT-2 medium (16 heads, 24 layers:
             TP 8 x PP 8, DP 64 / 32 / 256), standing in for LLaMA-3 70B until the zoo has it

A run that passes `--timeout` seconds is stopped and printed as '>' its timeout. Under each run:
`simstudy run --estimate`'s wall time and memory of it and estimate / measured.

Every run is a congestion mode on one of flowsim's engines (`--runs mode:engine,...`; the default:
fluid on the compiled core, fluid on the Python engine, unaware on the compiled core, the reference).

Usage: python benchmarks/fluid_scale.py [--cases rn256,lingjun] [--timeout 1800]
                                        [--runs fluid:compiled,unaware:compiled]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from estimate import against  # benchmarks/estimate.py: the estimate beside each run

if TYPE_CHECKING:
    from simstudy.backends.estimate import Workload

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30

#: LLaMA-3 70B shapes: GPUs -> (tp, pp, dp)
LLAMA = {4096: (8, 8, 64), 16384: (8, 16, 128)}
#: GPT-2 medium's (24 layers: PP 8 at most at TP 8) stand-in shapes
GPT = {4096: (8, 8, 64), 16384: (8, 8, 256)}


def resnet(name: str, leaves: int, hosts: int, spines: int) -> dict[str, Any]:
    return {"name": name, "model": "resnet50",
            "parallelism": {"dp": leaves * hosts * 8, "aggregation": {"kind": "allreduce", "algorithm": "ring"}},
            "topology": {"kind": "leaf_spine", "leaves": leaves, "spines": spines, "hosts_per_leaf": hosts,
                         "gpus_per_host": 8, "bandwidth_gbps": 100},
            "system": {"peak_tflops": 120, "efficiency": 0.4}, "training": {"iterations": 1}}


def clos(gpus: int) -> dict[str, Any]:
    """A 3-tier Clos of 8-GPU hosts, 8 hosts per ToR, 8 ToRs per pod (16 of each at 16,384 GPUs),
    400 Gbit/s NICs, non-blocking."""
    per = 8 if gpus <= 4096 else 16
    hosts = gpus // 8
    return {"kind": "clos3", "pods": hosts // (8 * per), "tors_per_pod": per, "hosts_per_tor": 8,
            "aggs_per_pod": 4, "cores": 8, "gpus_per_host": 8, "bandwidth_gbps": 400, "latency_ns": 1000}


def llama_job(tp: int, pp: int, dp: int) -> dict[str, Any]:
    return {"model": "llama3_70b", "parallelism": {"dp": dp, "tp": tp, "pp": pp, "microbatches": pp, "sp": True},
            "training": {"batch_size_per_worker": pp, "iterations": 1, "precision": "bf16"}}


def gpt_job(tp: int, pp: int, dp: int) -> dict[str, Any]:
    """GPT-2 medium in LLaMA-3 70B's place (what the zoo on this branch has with 8 | heads and 8 | layers)."""
    return {"model": "gpt2_medium", "parallelism": {"dp": dp, "tp": tp, "pp": pp, "microbatches": pp},
            "training": {"batch_size_per_worker": pp, "iterations": 1}}


def llama(gpus: int, job: Any = llama_job) -> dict[str, Any]:
    name = "llama3_70b" if job is llama_job else "gpt2_medium"
    shape = LLAMA[gpus] if job is llama_job else GPT[gpus]
    return {"name": f"{name}_{gpus}", **job(*shape), "topology": clos(gpus),
            "system": {"peak_tflops": 989, "efficiency": 0.4}}


def two_llamas(job: Any = llama_job) -> dict[str, Any]:
    name = "llama3_70b" if job is llama_job else "gpt2_medium"
    return {"kind": "cluster", "name": f"{name}_2x2048", "topology": clos(4096),
            "system": {"peak_tflops": 989, "efficiency": 0.4},
            "jobs": [{"name": n, "gpus": 2048, "placement": "spread", **job(8, 8, 32)} for n in ("a", "b")]}


CASES: dict[str, tuple[str, Any]] = {
    "rn256": ("ResNet-50 DP 256 leaf-spine", lambda: resnet("resnet50_256", 8, 4, 4)),
    "rn4096": ("ResNet-50 DP 4096 leaf-spine", lambda: resnet("resnet50_4096", 32, 16, 16)),
    "rn1024ring": ("ResNet-50 DP 1024 ring, rows", lambda: {
        "name": "resnet50_1024_ring", "model": "resnet50", "parallelism": {"dp": 1024},
        "topology": {"kind": "ring", "npus": 1024}, "training": {"iterations": 1}}),
    "lingjun": ("Lingjun placement study", None),
    "llama4096": ("LLaMA-3 70B 4096 3-tier Clos", lambda: llama(4096)),
    "llama2x2048": ("2 x LLaMA-3 70B 2048 Clos", two_llamas),
    "llama16k": ("LLaMA-3 70B 16384 3-tier Clos", lambda: llama(16384)),
    "gpt4096": ("GPT-2 medium 4096 3-tier Clos", lambda: llama(4096, gpt_job)),
    "gpt2x2048": ("2 x GPT-2 medium 2048 Clos", lambda: two_llamas(gpt_job)),
    "gpt16k": ("GPT-2 medium 16384 3-tier Clos", lambda: llama(16384, gpt_job)),
}


#: What a case's runs keep of the transfers (default: none)
TRAFFIC = {"rn1024ring": "rows"}
#: The runs of a case unless `--runs` says otherwise (default: `--runs`' default)
RUNS = {"rn1024ring": "unaware:compiled,unaware:python,astrasim"}


def peak_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) * 1024


# -- one run, in its own process -----------------------------------------------------------------


def work(case: str, run: str, bundle_dir: str, out: str, timeout_s: float) -> dict[str, Any]:
    """Run one case in one mode on one engine (`run`: mode:engine): the bundle's simulation (the
    Lingjun case: the whole study)."""
    mode, _, engine = run.partition(":")
    engine = engine or "auto"
    from simstudy.backends import FlowsimBackend
    from simstudy.compiler import Bundle

    t0 = time.perf_counter()
    if case == "lingjun":
        from simstudy.spec.load import load_study
        from simstudy.sweeps import run_study

        source = ROOT / "specs" / "placement_lingjun.yaml"
        study = load_study(source)
        options = study.backend_options.model_copy(update={"congestion": mode, "timeout_s": timeout_s,
                                                            "engine": engine})
        swept = run_study(study.model_copy(update={"backend_options": options}), source, out, progress=False)
        wall = time.perf_counter() - t0
        counts = swept.counts
        return {"wall": wall, "peak": peak_bytes(), "transfers": None, "finish_ns": None,
                "runs": sum(counts.values()), "failed": counts.get("failed", 0)}
    from simstudy.backends import BackendError
    from simstudy.backends.base import Progress

    last: list[Progress] = []

    def keep(p: Progress) -> None:
        last[:] = [p]

    try:
        result = FlowsimBackend(congestion=mode, traffic=TRAFFIC.get(case, "none"), progress=keep,
                                engine=engine).run(
            Bundle.from_dir(bundle_dir), Path(out), timeout_s=timeout_s)
    except BackendError as exc:
        if "timed out" not in str(exc) or not last:
            raise
        p = last[0]  # how far it got: the fraction of its transfers, and at what rate
        return {"timeout": True, "wall": time.perf_counter() - t0, "peak": peak_bytes(), "fraction": p.fraction,
                "transfers": p.transfers, "sim_ns": p.sim_ns}
    return {"wall": time.perf_counter() - t0, "peak": peak_bytes(), "transfers": result.output.transfers,
            "finish_ns": result.finish_ns, "sim_wall": result.wall_time_s}


def compile_case(case: str, out: Path) -> Path | None:
    """The case's bundle (None for the study, which compiles its own runs)."""
    from simstudy.compiler import compile_any
    from simstudy.spec import Cluster, Scenario

    make = CASES[case][1]
    if make is None:
        return None
    raw = make()
    spec = Cluster.model_validate(raw) if raw.get("kind") == "cluster" else Scenario.model_validate(raw)
    return compile_any(spec, out).bundle.directory


def estimate_workload(case: str) -> Workload | None:
    """What `simstudy run --estimate` counts of the case (None for the study, which runs several)."""
    from simstudy.backends.estimate import count
    from simstudy.spec import Cluster, Scenario

    make = CASES[case][1]
    if make is None:
        return None
    raw = make()
    return count(Cluster.model_validate(raw) if raw.get("kind") == "cluster" else Scenario.model_validate(raw))


def needs_zoo(case: str) -> str | None:
    """Why a case cannot be built here (the zoo lacks LLaMA-3 70B or tp/pp/sp), or None."""
    if not case.startswith("llama"):
        return None
    from pydantic import ValidationError

    from simstudy.spec import Scenario

    try:
        Scenario.model_validate(llama(4096))
    except (ValidationError, ValueError) as exc:
        return f"the zoo cannot build it here: {' '.join(str(exc).split())[:100]}"
    return None


def run_child(case: str, mode: str, bundle: Path | None, out: Path, timeout_s: float) -> dict[str, Any]:
    if mode == "astrasim":  # the binary itself, its trace on (as the astrasim backend runs it)
        from scale import child  # benchmarks/scale.py: wall time and the binary's peak memory

        assert bundle is not None
        t0 = time.perf_counter()
        a = child("astrasim", {"bundle": str(bundle), "mode": "unaware", "trace": True}, out)
        if a is None:
            return {"wall": time.perf_counter() - t0, "error": "the binary failed (see above)"}
        return {"wall": a["wall"], "peak": int(a["rss_mb"] * 2**20), "finish_ns": a["finish"], "transfers": None}
    args = [sys.executable, __file__, "--child", case, mode, str(bundle or ""), str(out), str(timeout_s)]
    t0 = time.perf_counter()
    # its own process group: a study's sweep workers are stopped with it (they outlived it before)
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          start_new_session=True) as proc:
        late = False
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s + 120)
        except subprocess.TimeoutExpired:
            late = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the run past its time, or anything it left behind
        if late:
            proc.communicate()
            return {"timeout": True, "wall": time.perf_counter() - t0}
    if proc.returncode:
        err = stderr.strip().splitlines()
        timed_out = any("timed out" in line for line in err[-3:])
        return {"timeout": timed_out, "wall": time.perf_counter() - t0, "error": err[-1] if err else "?"}
    return dict(json.loads(stdout.strip().splitlines()[-1]))


def median_run(tries: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's result from its tries: the one of median wall time, with every try's wall time
    (`walls`) where there was more than one and none failed or timed out; else the first that did."""
    bad = [r for r in tries if "error" in r or r.get("timeout")]
    if bad:
        return bad[0]
    if len(tries) == 1:
        return tries[0]
    ordered = sorted(tries, key=lambda r: r["wall"])
    return {**ordered[(len(ordered) - 1) // 2], "walls": [r["wall"] for r in tries]}


def fmt_wall(r: dict[str, Any], timeout_s: float) -> str:
    if r.get("timeout"):
        return f">{r.get('wall', timeout_s):.0f}"
    if "error" in r:
        return "failed"
    return f"{r['wall']:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cases", default=",".join(CASES), help="cases to run (default: all)")
    parser.add_argument("--runs", "--modes", default="fluid:compiled,fluid:python,unaware:compiled",
                        help="congestion mode:engine of each run (engine compiled or python; the last run is the "
                             "reference)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before one run is stopped")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each case's runs this many times, in turn, and print each run's median wall time "
                             "(this machine's noise moves one run by 10-25%%)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, mode, bundle, out, timeout_s = args.child
        print(json.dumps(work(case, mode, bundle, out, float(timeout_s))))
        return
    args.runs_given = any(a.startswith(("--runs", "--modes")) for a in sys.argv[1:])
    print(f"{'case':<32} {'run':<16} {'wall s':>8} {'peak GiB':>9} {'transfers':>13} {'transfers/s':>12} "
          f"{'finish ms':>10} {'wall x ref':>10} {'mem x ref':>9}  (ref: a case's last run)")
    with tempfile.TemporaryDirectory() as tmp:
        for case in [c for c in args.cases.split(",") if c]:
            label = CASES[case][0]
            why = needs_zoo(case)
            if why:
                print(f"{label:<32} skipped: {why}")
                continue
            t0 = time.perf_counter()
            bundle = compile_case(case, Path(tmp) / case / "bundle")
            if bundle is not None:
                print(f"{label:<32} {'compile':<16} {time.perf_counter() - t0:>8.1f}", flush=True)
            workload = estimate_workload(case)
            runs = [m for m in (args.runs if args.runs_given else RUNS.get(case, args.runs)).split(",") if m]
            ref = runs[-1]
            tries: dict[str, list[dict[str, Any]]] = {m: [] for m in runs}
            for _ in range(max(1, args.repeat)):  # in turn: a slow minute of the machine falls on every run
                for m in runs:
                    tries[m].append(run_child(case, m, bundle, Path(tmp) / case / m, args.timeout))
            results = {m: median_run(tries[m]) for m in runs}
            for m in runs:
                r = results[m]
                base = results[ref]
                ratio = mem = "-"
                if "error" not in r and "error" not in base and not r.get("timeout") and not base.get("timeout"):
                    ratio = f"{r['wall'] / base['wall']:.2f}"
                    mem = f"{r['peak'] / base['peak']:.2f}" if r.get("peak") and base.get("peak") else "-"
                n = r.get("transfers")
                rate = f"{n / r['wall']:,.0f}" if n and "peak" in r else "-"
                count = f"{n:,}" if n else "-"
                finish = f"{r['finish_ns'] / 1e6:.3f}" if r.get("finish_ns") else "-"
                peak = f"{r['peak'] / GIB:.2f}" if "peak" in r else "-"
                note = f"  ({r['runs']} runs, {r['failed']} failed)" if "runs" in r else ""
                if r.get("timeout") and "fraction" in r:
                    eta = r["wall"] / max(r["fraction"], 1e-9)
                    note += (f"  stopped at {r['fraction']:.2%} of its transfers, sim {r['sim_ns'] / 1e6:.3f} ms:"
                             f" about {eta:,.0f} s in all at this rate")
                note += f"  {r['error']}" if "error" in r else ""
                if "walls" in r:
                    note += f"  (median of {len(r['walls'])}: {min(r['walls']):.2f}-{max(r['walls']):.2f} s)"
                print(f"{label:<32} {m:<16} {fmt_wall(r, args.timeout):>8} {peak:>9} {count:>13} {rate:>12} "
                      f"{finish:>10} {ratio:>10} {mem:>9}{note}", flush=True)
                if workload is not None and m != "astrasim":
                    done = "error" not in r and not r.get("timeout")
                    mode, _, eng = m.partition(":")
                    est = against(workload, "flowsim-python" if eng == "python" else "flowsim", mode,
                                  r["wall"] if done else None, r.get("peak"), rows=TRAFFIC.get(case) == "rows")
                    print(f"{'':<32} {est}", flush=True)


if __name__ == "__main__":
    main()
