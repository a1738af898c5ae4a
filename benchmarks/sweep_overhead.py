"""Sweep harness overhead and parallel speed-up, measured on a 100-scenario flowsim sweep.

    python benchmarks/sweep_overhead.py [--scenarios 100] [--dir DIR]

Runs the same generated study twice from scratch, with 1 and with 2 local workers, and prints
- harness overhead = (sweep wall time x workers - sum of run times) / sum of run times, where a
  run time is what one scenario costs on its own (compile, simulate, analyse, write its run
  directory, as `simstudy run` does) and the rest is the sweep's: expansion, hashing, cache
  checks, the process pool, progress, the summary;
- the share of each run spent in the backend itself (simulation only), for reference;
- speed-up = wall time with 1 worker / wall time with 2 workers.
Targets (issue 4): overhead at most 5%, speed-up at least 1.8x. Reference: the 1-worker run of
the same command. A run directory is reused when it exists, so each sweep gets a fresh one.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import yaml

from simstudy.spec import load_study
from simstudy.sweeps import LocalExecutor, SweepResult, run_study


def study_text(n: int) -> str:
    """A study of `n` scenarios (a multiple of 20): 4 models x 5 topologies x n/20 link speeds,
    8 workers, ring all-reduce, 2 iterations each, like the shipped studies."""
    bws = [5.0 * 2 ** (i / 2) for i in range(max(1, n // 20))]
    topologies = [
        {"kind": "ring", "npus": 8},
        {"kind": "switch", "npus": 8},
        {"kind": "fully_connected", "npus": 8},
        {"kind": "star", "npus": 8},
        {"kind": "fat_tree", "k": 4, "npus": 8},
    ]
    study = {
        "name": "overhead",
        "base": {
            "system": {"peak_tflops": 120, "efficiency": 0.4},
            "training": {"batch_size_per_worker": 32, "iterations": 2},
        },
        "axes": {
            "model": ["resnet50", "mobilenetv2", "lstm_lm", "bert_base"],
            "topology": topologies,
            "topology.bandwidth_gbps": [round(b, 2) for b in bws],
        },
    }
    return yaml.safe_dump(study, sort_keys=False)


def sweep(path: Path, out: Path, workers: int) -> SweepResult:
    if out.exists():
        shutil.rmtree(out)
    return run_study(load_study(path), path, out, executor=LocalExecutor(workers), progress=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--scenarios", type=int, default=100)
    ap.add_argument("--dir", type=Path, help="scratch directory (default: a temporary one)")
    args = ap.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="simstudy-overhead-"))
    root.mkdir(parents=True, exist_ok=True)
    path = root / "overhead.yaml"
    path.write_text(study_text(args.scenarios))
    results = {w: sweep(path, root / f"w{w}", w) for w in (1, 2)}
    one, two = results[1], results[2]
    assert one.all_ok and two.all_ok, "a run failed"
    n = len(one.records)
    print(f"{n} scenarios, flowsim; reference: the 1-worker sweep of this command")
    print(f"{'workers':>7} {'wall s':>8} {'runs s':>8} {'backend s':>10} {'overhead':>9} {'speed-up':>9}")
    for w, r in results.items():
        runs = sum(rec.seconds for rec in r.records.values())
        overhead = (r.wall_s * w - runs) / runs
        print(f"{w:>7} {r.wall_s:>8.2f} {runs:>8.2f} {r.backend_s:>10.2f} {overhead:>9.1%} "
              f"{one.wall_s / r.wall_s:>8.2f}x")
    runs1 = sum(rec.seconds for rec in one.records.values())
    print(f"harness overhead (1 worker) = {(one.wall_s - runs1) / runs1:.1%}  (target <= 5%)")
    print(f"speed-up 2 workers over 1 = {one.wall_s / two.wall_s:.2f}x  (target >= 1.8x)")
    print(f"backend share of a run (simulation only) = {one.backend_s / runs1:.0%}; the rest is compiling, "
          "analysing and writing the run directory")
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
