"""RoCE: the packet network (ns-3, `backends/ns3/roce.h`) against flowsim's fluid, cell by cell.

Issue 38, point 3. On `transport: {kind: roce}` flowsim's fluid moves a message at its max-min fair
share of every link it crosses, each link's rate less RoCE's headers (1024 payload bytes in 1070 on
the wire: `Transport.goodput`); that is DCQCN's steady state, where every flow on a bottleneck gets
an equal share (Zhu et al., SIGCOMM 2015, section 4). The packet network runs what happens on the
way there: every sender starts at its line rate, the switch's queue grows past K_min, ECN marks
come back as CNPs, DCQCN cuts each sender (by half, while alpha is near 1) and raises it again on
its 55 us timer and 10 MB byte counter; past xoff PFC pauses the senders' links.

Every cell is one round of messages on a star of `hosts` at `Gbit/s` (1 us a link), all sent at
once: `one` (one flow), `two` (two senders to one receiver), `incast8` (eight to one) and `ring4`
(four hosts, each to the next: no link shared). A switch marks each packet at random (RED), and
where flows meet the first marks decide how deep the queue gets before the first cuts and how far
DCQCN cuts: the packet network runs every cell with `--seeds` seeds of its marking coins (the
transport's `seed`). The table prints the last arrival on the packet network (the mean over the
seeds, their smallest and largest), on the fluid, the fluid's error against the packets' mean, the
PFC pauses and CNPs of the packet runs (mean); then the grid's mean |error| against the goal (10%).

    python benchmarks/roce_fluid.py [--quick] [--seeds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from ns3_unshadow import unshadow_ns3

from simstudy.backends.flowsim.probe import arrivals as fluid_arrivals
from simstudy.backends.network import Network
from simstudy.backends.ns3 import available
from simstudy.backends.ns3.probe import arrivals as packet_arrivals
from simstudy.compiler.topology_file import topology_of
from simstudy.spec import Star
from simstudy.spec.transport import Transport

unshadow_ns3()

GBPS = (25.0, 100.0)
SIZES = (64 << 10, 1 << 20, 16 << 20)
#: name -> (hosts, (src, dst) of each message)
PATTERNS: dict[str, tuple[int, list[tuple[int, int]]]] = {
    "one": (2, [(1, 0)]),
    "two": (3, [(1, 0), (2, 0)]),
    "incast8": (9, [(s, 0) for s in range(1, 9)]),
    "ring4": (4, [(i, (i + 1) % 4) for i in range(4)]),
}
GOAL = 0.10


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 Gbit/s only")
    ap.add_argument("--seeds", type=int, default=5, help="packet runs per cell, each with its own marking seed")
    args = ap.parse_args()
    if not available():
        print("ns-3's wheel is not installed (pip install '.[ns3]')")
        return 2
    errors: list[float] = []
    print(f"{'Gbit/s':>6} {'pattern':<8} {'size':>9}  {'ns-3 us':>10} {'(min':>10} {'max)':>10} {'fluid us':>10} "
          f"{'error':>7}  {'pauses':>6} {'CNPs':>6} {'wall s':>6}")
    for gbps in GBPS[1:] if args.quick else GBPS:
        for name, (hosts, pairs) in PATTERNS.items():
            for size in SIZES:
                sends = [(src, dst, size, 0) for src, dst in pairs]
                t0 = time.perf_counter()
                lasts, pauses, cnps = [], [], []
                for seed in range(1, args.seeds + 1):
                    topo = topology_of(Star(npus=hosts, bandwidth_gbps=gbps, latency_ns=1000,
                                            transport=Transport(kind="roce", seed=seed)))
                    packets, stats, _, _ = packet_arrivals(topo, sends)
                    lasts.append(max(packets))
                    pauses.append(stats["pfc_pauses"])
                    cnps.append(stats["cnps"])
                wall = time.perf_counter() - t0
                fluid = max(fluid_arrivals(Network.from_topology(topo), sends))
                mean = statistics.fmean(lasts)
                error = fluid / mean - 1
                errors.append(abs(error))
                print(f"{gbps:6.0f} {name:<8} {size >> 10:>5} KiB  {mean / 1e3:10.1f} {min(lasts) / 1e3:10.1f} "
                      f"{max(lasts) / 1e3:10.1f} {fluid / 1e3:10.1f} {error:+7.1%}  {statistics.fmean(pauses):6.1f} "
                      f"{statistics.fmean(cnps):6.1f} {wall:6.1f}", flush=True)
    mean = statistics.fmean(errors)
    print(f"mean |error| over {len(errors)} cells: fluid with RoCE's headers against ns-3's RoCE {mean:.1%} "
          f"(goal: {GOAL:.0%}){'' if mean <= GOAL else ': NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
