"""Compile time and bundle size at scale.

1. ResNet-50 data parallel at 8, 64 and 1024 ranks.
2. LLaMA-3 70B, TP8 x PP8 x DP64 (4,096 ranks) and TP8 x PP16 x DP128 (16,384 ranks), sequence
   parallel, a 1F1B pipeline of pp microbatches, one iteration, on a two-dimensional network: every
   rank of a pipeline stage runs the same program on its own groups and peers (bound to one template).

Prints each time as a ratio to the 8-rank compile in the same process (machines are noisy), and the
compile's peak memory (this process's VmHWM after each case).
Usage: python benchmarks/compile_scale.py [--resnet 8,64,1024] [--llama 4096,16384]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from simstudy.compiler import compile_scenario
from simstudy.spec import Scenario

LLAMA = {512: (8, 8, 8), 4096: (8, 8, 64), 16384: (8, 16, 128)}


def peak_mb() -> float:
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) / 1024


def resnet(n: int) -> Scenario:
    return Scenario.model_validate({"name": "resnet50", "model": "resnet50", "parallelism": {"dp": n},
                                    "topology": {"kind": "ring", "npus": n}, "training": {"iterations": 2}})


def llama(n: int) -> Scenario:
    tp, pp, dp = LLAMA[n]
    return Scenario.model_validate({
        "name": "llama3_70b", "model": "llama3_70b",
        "parallelism": {"dp": dp, "tp": tp, "pp": pp, "microbatches": pp, "sp": True},
        "topology": {"kind": "multi_dim",
                     "dims": [{"type": "switch", "npus": tp}, {"type": "switch", "npus": n // tp}]},
        "training": {"batch_size_per_worker": pp, "iterations": 1, "precision": "bf16"}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--resnet", default="8,64,1024")
    parser.add_argument("--llama", default="4096,16384")
    args = parser.parse_args()
    cases = [(f"resnet50 dp{n}", resnet(n)) for n in (int(x) for x in args.resnet.split(",") if x)]
    cases += [(f"llama3_70b tp{LLAMA[n][0]} pp{LLAMA[n][1]} dp{LLAMA[n][2]}", llama(n))
              for n in (int(x) for x in args.llama.split(",") if x)]
    print(f"{'case':<28} {'ranks':>6} {'ET files MB':>12} {'bundle MB':>10} {'compile s':>10} {'x 8-rank':>9} "
          f"{'peak MB':>8}")
    ref: float | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for name, scenario in cases:
            out = Path(tmp) / name.replace(" ", "_")
            res = compile_scenario(scenario, out)
            size = sum(p.stat().st_size for p in out.iterdir())
            ref = ref or res.seconds
            print(f"{name:<28} {scenario.npus:>6} {res.et_bytes / 1e6:>12.2f} {size / 1e6:>10.2f} {res.seconds:>10.3f} "
                  f"{res.seconds / ref:>9.2f} {peak_mb():>8.0f}")
            for p in out.iterdir():
                p.unlink()


if __name__ == "__main__":
    main()
