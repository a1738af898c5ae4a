"""The Zhejiang Lab Llama-2-7B job simulated against its training log.

Runs specs/examples/llama2_7b_zero1_zhejiang.yaml on flowsim (fluid, keeping per-link bytes) and
prints the simulated time per optimizer step against the median logged step (the time between
consecutive steps' log lines, specs/examples/data/zhejiang_llama2_7b/steps.csv), what the simulated
step is made of, the compute efficiency the logged step implies, and the bytes each host's NICs send
per step against DeepSpeed's ZeRO-1 traffic (every bucket all-reduced, the parameters all-gathered:
3 (N-1)/N x 2 bytes x parameters per rank) and the ZeRO paper's (reduce-scatter + all-gather:
2 (N-1)/N x 2 x parameters).

Usage: python benchmarks/zhejiang.py
"""

from __future__ import annotations

import csv
import statistics
import tempfile
from pathlib import Path

import pandas as pd

from simstudy.backends import simulate
from simstudy.compiler import resolve
from simstudy.spec import BackendSpec, load_scenario

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "examples" / "llama2_7b_zero1_zhejiang.yaml"
STEPS = ROOT / "specs" / "examples" / "data" / "zhejiang_llama2_7b" / "steps.csv"


def logged_steps() -> list[float]:
    """Seconds between consecutive optimizer steps' log lines (every step but the first)."""
    with STEPS.open() as f:
        return [float(row["step_s"]) for row in csv.DictReader(f) if row["step_s"]]


def main() -> None:
    steps = logged_steps()
    scenario = resolve(load_scenario(SPEC), source=SPEC)
    p, t = scenario.parallelism, scenario.training
    n, params = p.dp, scenario.resolved_model.params
    flops = 3 * scenario.resolved_model.fwd_flops_per_sample * t.batch_size_per_worker
    rate = scenario.system.peak_tflops * 1e12
    with tempfile.TemporaryDirectory() as tmp:
        result = simulate(scenario, Path(tmp) / "run", BackendSpec(name="flowsim", traffic="links"), source=SPEC)
        links = pd.read_parquet(Path(tmp) / "run" / "links.parquet")
    iters = t.iterations
    step_s = result.finish_ns / iters / 1e9
    exposed = max(r.exposed_comm_ns for r in result.ranks) / iters / 1e9
    compute = flops / (rate * scenario.system.efficiency)
    optimizer = (scenario.system.measured.optimizer_us or 0) / 1e6 if scenario.system.measured else 0.0
    median = statistics.median(steps)
    nic = links[links["tier"] == "nic"]
    out = nic[nic["name"].str.contains(r"^n\d+->", regex=True)].groupby("name", observed=True)["bytes"].sum() / iters
    host_out = out.groupby(out.index.str.extract(r"^(n\d+)->", expand=False)).sum()
    deepspeed = 3 * (n - 1) / n * t.dtype_bytes * params
    paper = 2 * (n - 1) / n * t.dtype_bytes * params
    print(f"logged: {len(steps)} steps, median {median:.2f} s (p10 {sorted(steps)[len(steps) // 10]:.2f}, "
          f"p90 {sorted(steps)[9 * len(steps) // 10]:.2f})")
    print(f"simulated: {step_s:.2f} s per step ({(step_s / median - 1) * 100:+.1f}% against the median): compute "
          f"{compute:.2f} s ({flops / 1e15:.2f} PFLOP at {scenario.system.efficiency:.0%} of "
          f"{scenario.system.peak_tflops:.0f} TFLOPS), optimizer {optimizer:.2f} s, exposed communication "
          f"{exposed:.2f} s")
    implied = flops / ((median - optimizer - exposed) * rate)
    print(f"the logged median implies {implied:.1%} of peak for the compute (with the simulated optimizer and "
          f"communication)")
    nics = len(out[out > 0]) // max(len(host_out), 1)
    print(f"bytes out of each host's NICs per step: simulated {host_out.min() / 1e9:.2f}-{host_out.max() / 1e9:.2f} GB "
          f"on {nics} NIC(s) per host; DeepSpeed ZeRO-1 (all-reduce + all-gather) "
          f"{deepspeed / 1e9:.2f} GB, {deepspeed / 4e9:.2f} GB per NIC over 4 NICs; ZeRO paper (reduce-scatter + "
          f"all-gather) {paper / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
