"""The packet network's speed and its agreement with flowsim, measured (needs the ns3 wheel).

1. Every shipped example of at most 16 ranks (`specs/examples/`) on ns-3 and on flowsim `fluid`
   (the reference, in the same command): iteration time of each, their ratio, and the packets
   ns-3 simulated per second of wall time; `fluid` with the ideal transport (the link rate from a
   message's first byte) and with flowsim's TCP model (`transport: {model: tcp}`): its iteration
   time, its ratio to ns-3 and its wall time. On RoCE (`transport: {kind: roce}`) flowsim has no
   TCP model: its columns show `-`, and the last column the packet run's PFC pauses and CNPs.
2. Scale: ResNet-50 data parallel (ring all-reduce, one iteration) on a 25 Gbit/s switch of 4, 8,
   16, 32, ... ranks until a run takes more than `--budget` seconds (10 minutes): wall time,
   packets put on links, packets per second, and the ratio to flowsim's wall time; the largest
   scenario that ran within the budget.

    python benchmarks/ns3.py [--examples-only | --scale-only] [--only NAME ...] [--budget 600]

Packets count every hop (a data packet between two hosts of a switch is two) and every ACK.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ns3_unshadow import unshadow_ns3
from transports import with_transport

from simstudy.backends import BackendError, simulate
from simstudy.backends.ns3 import available
from simstudy.spec import BackendSpec, Scenario, load_runnable

unshadow_ns3()  # this file has the wheel's name

REPO = Path(__file__).resolve().parents[1]


def run(scenario: Any, out: Path, backend: BackendSpec) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = simulate(scenario, out, backend)
    return result, time.perf_counter() - t0


def iteration_ms(result: Any, scenario: Any) -> float:
    iters = max(j.training.iterations for j in scenario.jobs) if hasattr(scenario, "jobs") else \
        scenario.training.iterations
    return result.finish_ns / 1e6 / iters


def examples(tmp: Path, only: list[str] | None = None) -> None:
    print(f"{'example':24s} {'ranks':>5s} {'fluid ms':>10s} {'ns-3 ms':>10s} {'ratio':>7s} {'packets':>11s} "
          f"{'pkts/s':>9s} {'wall s':>8s} {'lost':>6s} {'q drops':>7s} {'RTOs':>5s} {'tcp ms':>9s} {'ns-3/tcp':>8s} "
          f"{'tcp wall s':>10s}")
    for path in sorted((REPO / "specs" / "examples").glob("*.yaml")):
        if only and path.stem not in only:
            continue
        sc = load_runnable(path)
        n = sc.npus if hasattr(sc, "npus") else sc.topology.total_npus
        if n > 16:
            continue
        roce = sc.topology.transport.kind == "roce"
        fluid, _ = run(sc if roce else with_transport(sc, model="ideal"), tmp / path.stem / "fluid", BackendSpec())
        ns3, wall = run(sc, tmp / path.stem / "ns3", BackendSpec(name="ns3"))
        d = ns3.details["ns3"]
        a, b = iteration_ms(fluid, sc), iteration_ms(ns3, sc)
        row = (f"{path.stem:24s} {n:5d} {a:10.2f} {b:10.2f} {b / a:7.3f} {d['packets_on_links']:11,d} "
               f"{d['packets_on_links'] / ns3.wall_time_s:9,.0f} {wall:8.1f} {d['packets_lost']:6d} "
               f"{d['queue_drops'] + d.get('headroom_drops', 0):7d} {d['timeouts'] + d.get('roce_timeouts', 0):5d}")
        if roce:  # flowsim's fluid with RoCE's headers (no TCP model)
            print(f"{row} {'-':>9s} {'-':>8s} {'-':>10s}  RoCE: {d['pfc_pauses']} PFC pauses, {d['cnps']} CNPs, "
                  f"{d['ecn_marks']} ECN marks", flush=True)
            continue
        tcp, tcp_wall = run(with_transport(sc, model="tcp"), tmp / path.stem / "tcp", BackendSpec())
        c = iteration_ms(tcp, sc)
        print(f"{row} {c:9.2f} {b / c:8.3f} {tcp_wall:10.1f}", flush=True)


def scale(tmp: Path, budget: float) -> None:
    print(f"\n{'ranks':>5s} {'GB':>7s} {'packets':>12s} {'wall s':>8s} {'pkts/s':>9s} {'flowsim s':>9s} "
          f"{'ns-3/flowsim':>12s}")
    largest = None
    n = 4
    while True:
        sc = Scenario.model_validate({
            "name": f"r50_dp{n}", "model": "resnet50", "parallelism": {"dp": n},
            "topology": {"kind": "switch", "npus": n, "bandwidth_gbps": 25, "latency_ns": 1000},
            "system": {"peak_tflops": 120, "efficiency": 0.4},
            "training": {"batch_size_per_worker": 32, "iterations": 1}})
        _, fl_wall = run(sc, tmp / f"scale{n}" / "fluid", BackendSpec())
        try:
            ns3, wall = run(sc, tmp / f"scale{n}" / "ns3", BackendSpec(name="ns3", timeout_s=budget))
        except BackendError as exc:
            print(f"{n:5d} did not finish in {budget:.0f} s ({exc})", flush=True)
            break
        pk = ns3.details["ns3"]["packets_on_links"]
        print(f"{n:5d} {ns3.output.total_bytes / 1e9:7.2f} {pk:12,d} {wall:8.1f} {pk / ns3.wall_time_s:9,.0f} "
              f"{fl_wall:9.2f} {wall / fl_wall:12.0f}", flush=True)
        if wall > budget:
            break
        largest = (n, wall)
        if wall * 2.2 > budget:  # the next size (twice the bytes and more) would not fit
            break
        n *= 2
    if largest:
        print(f"largest within {budget:.0f} s: ResNet-50 on {largest[0]} ranks, one iteration, {largest[1]:.0f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--examples-only", action="store_true")
    ap.add_argument("--scale-only", action="store_true")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="these examples only (their file names without .yaml)")
    ap.add_argument("--budget", type=float, default=600.0, help="seconds a scale run may take (default 600)")
    args = ap.parse_args()
    if not available():
        print("the ns3 wheel is not installed: pip install 'simstudy[ns3]'", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if not args.scale_only:
            examples(tmp, args.only)
        if not args.examples_only:
            scale(tmp, args.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
