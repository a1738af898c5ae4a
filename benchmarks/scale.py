"""LLM training at ASTRA-SIM's scale: flowsim against ASTRA-SIM's binaries on the same bundles, in one run.

LLaMA-3 70B (80 blocks, 8,192-token sequences, bf16; `--model llama3_405b`: LLaMA-3.1 405B, 126
blocks, the shape of issue 35's goals) with tensor (and sequence) parallelism over 8 GPUs,
a 1F1B pipeline of `pp` stages with `pp` microbatches, and data parallelism over the rest, one iteration:

* TP8 x PP8 x DP64: 4,096 GPUs;
* TP8 x PP16 x DP128: 16,384 GPUs;
* TP8 x PP16 x DP432: 55,296 GPUs (issue 35's largest case).

A case whose flowsim run `--estimate` puts above the memory this machine has available is not
compiled or run: the line gives `simstudy run`'s refusal (which `--force` overrides there).

flowsim runs each from its spec, as `simstudy run` does: compiled in memory (every rank's Chakra nodes,
no ET file written or read), then simulated; its wall time is the run's (the phases line adds the
compile: spec to summary). ASTRA-SIM runs the same scenario's ET files, written once per network (the
time to write them is printed). flowsim `unaware` runs against ASTRA-SIM's congestion-unaware binary on
a two-dimensional network (an 8-GPU NVSwitch-class switch, 2,400 Gbit/s per GPU, under a
400 Gbit/s switch of every node: tensor-parallel groups inside the first dimension, data-parallel groups
and pipeline neighbours in the second), and flowsim `aware` against the congestion-aware binary, which
takes one dimension only, on one 400 Gbit/s switch of every GPU. Every run is its own process; the
table gives its wall time (and in brackets its CPU time: on a shared machine the wall time includes
waiting for a core), peak memory (flowsim's own VmHWM; the binary's ru_maxrss), their ratios to
ASTRA-SIM's, and whether the finish times are equal. flowsim keeps no traffic table here (`traffic:
none`; the binary runs with its trace off); `--rows` also times flowsim keeping its rows.

3. Traffic rows at 1,024 NPUs: ResNet-50 data parallel on a ring, one iteration, flowsim `unaware`
   keeping every transfer (`traffic: rows`, streamed to Parquet) against the binary with its trace on
   (as the astrasim backend runs it).

Goals on a 2-core machine: 4,096 GPUs within 1x ASTRA-SIM's wall time and 1.5x its memory; 16,384
GPUs in under 10 minutes and 16 GiB; rows at 1,024 NPUs within 1.5x ASTRA-SIM's memory.

Under each run: each phase of spec to summary with its wall time and share (the compile, in memory;
flowsim's reading of the configs, building of the run, simulation and writing), and `simstudy run --estimate`'s
wall time and memory of it and estimate / measured.

`--modes fluid` runs flowsim's fluid model alone on the two dimensions (ASTRA-SIM has none), and
`--clos unaware,fluid` also runs flowsim alone, from the spec, on a 3-tier Clos of 8-GPU hosts
(`fluid_scale.clos`: non-blocking, 400 Gbit/s NICs; ASTRA-SIM's binaries take no graph).

Usage: ASTRA_SIM_BIN=... python benchmarks/scale.py [--sizes 4096,16384,55296] [--modes unaware,aware]
       [--skip-astrasim-above N] [--write-traces] [--rows] [--skip-rows-1024] [--model llama3_405b]
       [--clos unaware,fluid] [--force]
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

from estimate import against  # benchmarks/estimate.py: the estimate beside each run
from fluid_scale import clos  # benchmarks/fluid_scale.py: its 3-tier Clos of 8-GPU hosts

from simstudy.backends.estimate import EstimateError, Workload, check_memory, count
from simstudy.backends.locate import find_astra_sim
from simstudy.compiler import compile_scenario
from simstudy.spec import BackendSpec, Scenario

SHAPES = {4096: (8, 8, 64), 16384: (8, 16, 128), 55296: (8, 16, 432)}

CHILD = r"""
import json, resource, subprocess, sys, time
from pathlib import Path
from simstudy.backends import AstraSimBackend, FlowsimBackend
from simstudy.backends.astrasim import parse_output
from simstudy.compiler import Bundle
kind, arg, work = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3])
if kind == "flowsim":  # spec to summary: compiled in memory (no ET files), then run
    from simstudy.compiler import compile_scenario
    from simstudy.spec import Scenario
    scenario = Scenario.model_validate_json(Path(arg["spec"]).read_text())
    res = compile_scenario(scenario, work / "bundle", et_files=False)
    r = FlowsimBackend(congestion=arg["mode"], traffic=arg.get("traffic", "none")).run(res.bundle, work / "run")
    own = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
    u = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"wall": r.wall_time_s, "finish": r.finish_ns, "transfers": r.output.transfers,
                      "rss_mb": own, "cpu": u.ru_utime + u.ru_stime,
                      "phases": {"compile": res.seconds, **r.details["phases_s"]}}))
else:
    bundle = Bundle.from_dir(arg["bundle"])
    # the binary itself, with its trace on only when asked (the astrasim backend always turns it on to build
    # its traffic table; the wall time and memory are the binary's either way)
    backend = AstraSimBackend(aware=arg["mode"] == "aware")
    system = json.loads(bundle.system.read_text())
    system["trace-enabled"] = int(arg.get("trace", False))
    (work / "log").mkdir(parents=True, exist_ok=True)
    (work / "system.json").write_text(json.dumps(system))
    t0 = time.perf_counter()
    with (work / "out.txt").open("wb") as out:
        subprocess.run(backend.command(backend.binary(), bundle, work), cwd=work, stdout=out, stderr=subprocess.STDOUT,
                       check=True)
    wall = time.perf_counter() - t0
    finished, _ = parse_output((work / "out.txt").read_text(errors="replace"))
    assert len(finished) == bundle.npus, f"{len(finished)} of {bundle.npus} ranks finished"
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"wall": wall, "finish": max(f for f, _ in finished.values()), "transfers": 0,
                      "rss_mb": u.ru_maxrss / 1024, "cpu": u.ru_utime + u.ru_stime}))
"""


def child(kind: str, arg: dict[str, Any], work: Path) -> dict[str, float] | None:
    """One run in its own process; None when it fails (the error is printed)."""
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, kind, json.dumps(arg), str(work)], capture_output=True,
                         text=True)
    if out.returncode:
        print(f"  {kind} {arg.get('mode')} failed after {time.perf_counter() - t0:.0f} s: {out.stderr.strip()[-600:]}")
        return None
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


#: The models `--model` takes: zoo name -> label
MODELS = {"llama3_70b": "LLaMA-3 70B", "llama3_405b": "LLaMA-3.1 405B"}


def llama(npus: int, one_dim: bool, model: str = "llama3_70b") -> Scenario:
    tp, pp, dp = SHAPES[npus]
    if one_dim:
        topology: dict[str, Any] = {"kind": "switch", "npus": npus, "bandwidth_gbps": 400, "latency_ns": 1000}
    else:
        topology = {"kind": "multi_dim", "dims": [
            {"type": "switch", "npus": tp, "bandwidth_gbps": 2400, "latency_ns": 500},
            {"type": "switch", "npus": npus // tp, "bandwidth_gbps": 400, "latency_ns": 1000}]}
    return Scenario.model_validate({
        "name": f"{model}_{npus}", "model": model,
        "parallelism": {"dp": dp, "tp": tp, "pp": pp, "microbatches": pp, "sp": True},
        "topology": topology, "system": {"peak_tflops": 989, "efficiency": 0.4},
        "training": {"batch_size_per_worker": pp, "iterations": 1, "precision": "bf16"}})


def prepared(scenario: Scenario, mode: str, head: str, spec: Path, force: bool = False) -> Workload | None:
    """A case's workload, its spec written to `spec`; None where its estimate refuses it, as `simstudy
    run` refuses it without --force (the line is printed; with `force`, the case runs anyway)."""
    try:
        est = check_memory(scenario, BackendSpec(congestion=mode))
    except EstimateError as exc:
        if not force:
            print(f"{head}: not run: {exc}")
            return None
        print(f"{head}: run anyway (--force): {exc}")
        est = None
    spec.write_text(scenario.model_dump_json())
    return est.workload if est is not None else count(scenario)


def clos_case(n: int, mode: str, model: str, root: Path, force: bool = False) -> None:
    """flowsim alone on the 3-tier Clos of `fluid_scale.clos` (8-GPU hosts, 400 Gbit/s NICs), from the spec."""
    tp, pp, dp = SHAPES[n]
    head = f"-- {MODELS[model]} TP{tp} x PP{pp} x DP{dp} = {n} GPUs, 3-tier Clos"
    scenario = Scenario.model_validate({**llama(n, False, model).model_dump(mode="json"), "topology": clos(n)})
    spec = root / f"c{n}{mode}.json"
    w = prepared(scenario, mode, head, spec, force)
    if w is None:
        return
    print(head)
    f = child("flowsim", {"spec": str(spec), "mode": mode}, root / f"c{n}{mode}")
    row(f"flowsim {mode}", f, None)
    print(f"  {phases(f)}")
    print(f"  {against(w, 'flowsim', mode, f and f['wall'], f and f['rss_mb'] * 2**20)}")
    subprocess.run(["rm", "-rf", str(root / f"c{n}{mode}")], check=False)


def row(label: str, f: dict[str, float] | None, a: dict[str, float] | None) -> None:
    """wall s (CPU s) of each, their ratio, peak MB of each, their ratio, equal finish, transfers."""
    if f is None:
        print(f"{label:<34} {'failed':>16}")
        return
    fw = f"{f['wall']:.1f} ({f['cpu']:.0f})"
    if a is None:
        print(f"{label:<34} {fw:>16} {'-':>16} {'-':>7} {f['rss_mb']:>10.0f} {'-':>9} {'-':>7} {'-':>6} "
              f"{int(f['transfers']):>13,}")
        return
    aw = f"{a['wall']:.1f} ({a['cpu']:.0f})"
    same = "yes" if f["finish"] == a["finish"] else f"{(f['finish'] - a['finish']) / a['finish']:+.2e}"
    print(f"{label:<34} {fw:>16} {aw:>16} {f['wall'] / a['wall']:>7.2f} {f['rss_mb']:>10.0f} "
          f"{a['rss_mb']:>9.0f} {f['rss_mb'] / a['rss_mb']:>7.2f} {same:>6} {int(f['transfers']):>13,}")


def phases(f: dict[str, Any] | None) -> str:
    """Each phase of flowsim's spec to summary, its wall seconds and its share: the compile (the
    graphs and every rank's nodes, in memory), then the run's (reading the configs, building the
    run, simulating, writing)."""
    if f is None:
        return "phases: - (the run failed)"
    parts = f["phases"]
    total = sum(parts.values())
    shares = " | ".join(f"{k} {v:.1f} s ({v / total:.0%})" for k, v in parts.items())
    return f"phases: {shares} | spec to summary {total:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="4096,16384", help="GPU counts (4096, 16384, 55296)")
    parser.add_argument("--skip-astrasim-above", type=int, default=0,
                        help="do not run ASTRA-SIM above this many GPUs (0: run it everywhere)")
    parser.add_argument("--modes", default="unaware,aware",
                        help="flowsim modes against their binaries (unaware: 2 dims; aware: 1 switch; fluid: "
                             "2 dims, flowsim alone)")
    parser.add_argument("--rows", action="store_true", help="also time flowsim keeping its traffic rows")
    parser.add_argument("--write-traces", action="store_true",
                        help="write every rank's ET files where ASTRA-SIM does not run too (their time and size)")
    parser.add_argument("--skip-rows-1024", action="store_true", help="leave out the 1,024-NPU rows comparison")
    parser.add_argument("--model", choices=list(MODELS), default="llama3_70b",
                        help="the zoo's LLaMA-3 to run at every size (default: llama3_70b)")
    parser.add_argument("--clos", default="", metavar="MODES",
                        help="also run flowsim in these modes (e.g. unaware,fluid) on a 3-tier Clos of 8-GPU hosts "
                             "(non-blocking, 400 Gbit/s NICs; ASTRA-SIM takes no graph)")
    parser.add_argument("--force", action="store_true",
                        help="run a case whose memory estimate exceeds this machine's (as `simstudy run --force`)")
    args = parser.parse_args()
    if find_astra_sim() is None or find_astra_sim(aware=True) is None:
        sys.exit("no ASTRA-SIM binaries: set ASTRA_SIM_BIN to the unaware one (the aware one beside it)")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    print(f"{'case':<34} {'flowsim s (cpu)':>16} {'astra s (cpu)':>16} {'wall x':>7} {'flowsim MB':>10} "
          f"{'astra MB':>9} {'mem x':>7} {'equal':>6} {'transfers':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for n in sizes:
            tp, pp, dp = SHAPES[n]
            for mode, one_dim in (("unaware", False), ("aware", True), ("fluid", False)):
                if mode not in args.modes.split(","):
                    continue
                net = "1 switch" if one_dim else "2 dims"
                head = f"-- {MODELS[args.model]} TP{tp} x PP{pp} x DP{dp} = {n} GPUs, {net}"
                scenario = llama(n, one_dim, args.model)
                spec = root / f"s{n}{mode}.json"
                w = prepared(scenario, mode, head, spec, args.force)
                if w is None:
                    continue
                b = root / f"b{n}{mode}"
                # ASTRA-SIM has no fluid model: flowsim's fluid runs alone
                run_astra = mode != "fluid" and (not args.skip_astrasim_above or n <= args.skip_astrasim_above)
                if run_astra or args.write_traces:  # ASTRA-SIM reads ET files: every rank's written
                    res = compile_scenario(scenario, b)
                    print(f"{head}: ET files for ASTRA-SIM written in {res.seconds:.1f} s (compile included), "
                          f"{res.et_bytes / 1e9:.2f} GB")
                else:
                    print(head)
                f = child("flowsim", {"spec": str(spec), "mode": mode}, root / f"f{n}{mode}")
                a = child("astrasim", {"bundle": str(b), "mode": mode}, root / f"a{n}{mode}") if run_astra else None
                row(f"flowsim {mode} / ASTRA-SIM {mode}" if mode != "fluid" else "flowsim fluid", f, a)
                print(f"  {phases(f)}")
                print(f"  {against(w, 'flowsim', mode, f and f['wall'], f and f['rss_mb'] * 2**20)}")
                if run_astra:
                    print(f"  {against(w, 'astrasim', mode, a and a['wall'], a and a['rss_mb'] * 2**20)}")
                if args.rows:
                    fr = child("flowsim", {"spec": str(spec), "mode": mode, "traffic": "rows"}, root / f"r{n}{mode}")
                    row(f"  flowsim {mode}, rows kept", fr, a)
                    print(f"  {against(w, 'flowsim', mode, fr and fr['wall'], fr and fr['rss_mb'] * 2**20, rows=True)}")
                subprocess.run(["rm", "-rf", str(b), str(root / f"f{n}{mode}"), str(root / f"a{n}{mode}"),
                                str(root / f"r{n}{mode}")], check=False)
            for mode in (m for m in args.clos.split(",") if m):
                clos_case(n, mode, args.model, root, args.force)
        if not args.skip_rows_1024:
            b = root / "r50"
            r50 = Scenario.model_validate({
                "name": "r50", "model": "resnet50", "parallelism": {"dp": 1024},
                "topology": {"kind": "ring", "npus": 1024}, "training": {"iterations": 1}})
            compile_scenario(r50, b)
            (root / "r50.json").write_text(r50.model_dump_json())
            print("-- ResNet-50 data parallel, 1,024 NPUs on a ring, one iteration: flowsim keeping rows (spec to "
                  "summary), ASTRA-SIM with its trace")
            f = child("flowsim", {"spec": str(root / "r50.json"), "mode": "unaware", "traffic": "rows"}, root / "fr50")
            a = child("astrasim", {"bundle": str(b), "mode": "unaware", "trace": True}, root / "ar50")
            row("flowsim unaware rows / ASTRA-SIM", f, a)
            w = count(Scenario.model_validate(json.loads((b / "scenario.json").read_text())))
            print(f"  {against(w, 'flowsim', 'unaware', f and f['wall'], f and f['rss_mb'] * 2**20, rows=True)}")
            print(f"  {against(w, 'astrasim', 'unaware', a and a['wall'], a and a['rss_mb'] * 2**20)}")


if __name__ == "__main__":
    main()
