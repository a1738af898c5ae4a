"""Several jobs on one network: what sharing costs the simulator.

Prints, for two jobs whose all-reduces contend for the same links (the interleave study's
cluster at offset 0, and a larger 2 x 16-GPU version on a leaf-spine), flowsim's wall time in
`fluid` (max-min sharing: rates recomputed whenever a flow starts or ends) against `unaware`
(ASTRA-SIM's congestion-unaware model) on the same bundle, in one run, and their ratio (target:
fluid <= 3x unaware). With --lingjun it also times one run of the Lingjun placement study's
cluster (spread placement) in fluid mode.

Usage: python benchmarks/multijob.py [--repeat N] [--lingjun]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from simstudy.backends import FlowsimBackend
from simstudy.compiler import Bundle, compile_cluster
from simstudy.spec import Cluster
from simstudy.spec.load import resolve_references

ROOT = Path(__file__).resolve().parents[1]


def interleave(jobs_gpus: int, hosts_per_leaf: int) -> Cluster:
    """Two ResNet-50 jobs, each with half its GPUs under each leaf: every all-reduce crosses the spine."""
    half = jobs_gpus // 2
    a = [*range(half), *range(hosts_per_leaf, hosts_per_leaf + half)]
    b = [*range(half, 2 * half), *range(hosts_per_leaf + half, hosts_per_leaf + 2 * half)]
    return Cluster.model_validate({
        "kind": "cluster", "name": f"contend{jobs_gpus}",
        "topology": {"kind": "leaf_spine", "leaves": 2, "spines": 1, "hosts_per_leaf": hosts_per_leaf,
                     "bandwidth_gbps": 100, "uplink_bandwidth_gbps": 100 * half, "latency_ns": 1000},
        "system": {"peak_tflops": 120, "efficiency": 0.4},
        "jobs": [{"name": n, "model": "resnet50", "gpus": jobs_gpus, "placement": p,
                  "training": {"batch_size_per_worker": 32, "iterations": 4}} for n, p in (("a", a), ("b", b))]})


def wall(bundle: Bundle, mode: str, work: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    r = FlowsimBackend(congestion=mode, traffic="none").run(bundle, work / mode)
    return time.perf_counter() - t0, r.finish_ns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode (the median is printed)")
    parser.add_argument("--lingjun", action="store_true", help="also time one Lingjun placement run")
    args = parser.parse_args()
    print(f"{'case':<24} {'ranks':>6} {'unaware s':>10} {'fluid s':>9} {'fluid/unaware':>14} "
          f"{'finish unaware ms':>18} {'finish fluid ms':>16}")
    with tempfile.TemporaryDirectory() as tmp:
        for gpus, per_leaf in ((2, 2), (16, 16)):
            cluster = interleave(gpus, per_leaf)
            bundle = compile_cluster(cluster, Path(tmp) / cluster.name / "bundle").bundle
            times: dict[str, list[float]] = {"unaware": [], "fluid": []}
            finish: dict[str, int] = {}
            for i in range(args.repeat):
                for mode in ("unaware", "fluid"):
                    w, finish[mode] = wall(bundle, mode, Path(tmp) / cluster.name / f"w{i}")
                    times[mode].append(w)
            u, f = statistics.median(times["unaware"]), statistics.median(times["fluid"])
            print(f"{'2 jobs x ' + str(gpus) + ' GPUs, shared':<24} {cluster.npus:>6} {u:>10.3f} {f:>9.3f} "
                  f"{f / u:>13.2f}x {finish['unaware'] / 1e6:>18.3f} {finish['fluid'] / 1e6:>16.3f}")
        if args.lingjun:
            study = ROOT / "specs" / "placement_lingjun.yaml"
            base, _ = resolve_references(yaml.safe_load(study.read_text())["base"], study)
            base = {**base, "name": "lingjun_spread"}
            base["jobs"] = [{**j, "placement": "spread"} for j in base["jobs"]]
            cluster = Cluster.model_validate(base)
            t0 = time.perf_counter()
            bundle = compile_cluster(cluster, Path(tmp) / "lingjun" / "bundle").bundle
            compiled = time.perf_counter() - t0
            w, fin = wall(bundle, "fluid", Path(tmp) / "lingjun")
            print(f"Lingjun spread ({sum(j.ranks for j in cluster.jobs)} GPUs of {cluster.npus}): compile "
                  f"{compiled:.1f} s, fluid run {w:.1f} s, finish {fin / 1e6:.3f} ms")


if __name__ == "__main__":
    main()
