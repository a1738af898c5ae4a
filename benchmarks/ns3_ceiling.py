"""How fast the installed ns-3 itself moves packets, against the packet backend and issue 38's goal.

One command, so that every line comes from the same machine at the same hour:

1. The backend: `specs/examples/resnet50_dp8_ring.yaml` (8 ranks, a 100 Gbit/s ring) on
   `--backend ns3` without pcaps, over TCP (the example) and over RoCE (the same with
   `transport: {kind: roce}`): packets put on links per second of its simulation phase.
2. ns-3 alone on the same ring (8 nodes, 100 Gbit/s, 500 ns), as many packets as the TCP run put on
   its links, each host sending to the next at the link's rate, with nothing of simstudy
   (`benchmarks/ns3_ceiling.cpp`):
   * UDP: ns-3's internet stack (a UDP socket per host, IPv4), no transport logic at all: no
     ACKs, no windows, no resends. Every transport built on ns-3's IP stack (its TCP, simstudy's
     RoCE) does this and more per packet, so this is their ceiling.
   * raw devices: the point-to-point devices, their queues and the simulator, no IP.

The goal column is issue 38's 300,000 packets per second.

    python benchmarks/ns3_ceiling.py [--packets N] [--skip-backend]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from ns3_unshadow import unshadow_ns3
from transports import with_transport

from simstudy.backends.ns3 import Ns3Backend, available
from simstudy.backends.ns3.fabric import compile_cpp, load
from simstudy.compiler import compile_any
from simstudy.spec import Scenario, load_runnable

unshadow_ns3()

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GOAL = 300_000
SPEC = REPO / "specs" / "examples" / "resnet50_dp8_ring.yaml"


def ceiling(way: str, hosts: int, packets: int, payload: int, gbps: float, latency_ns: float) -> tuple[float, int]:
    """ns-3 alone (`ns3_ceiling.cpp`'s `Raw` or `Udp`): wall seconds of its run and packets received."""
    ns = load()
    if not hasattr(ns.cppyy.gbl, "simstudy_ceiling"):
        compile_cpp(ns, HERE / "ns3_ceiling.cpp")
    r = getattr(ns.cppyy.gbl.simstudy_ceiling, way)(hosts, packets // hosts, payload, 16, gbps, latency_ns)
    return float(r.wall_s), int(r.received)


def backend_run(spec: Scenario, tmp: Path, name: str) -> tuple[float, int]:
    """The packet backend on `spec`: its simulation phase's wall seconds and the packets it put on links."""
    backend = Ns3Backend(traffic="none")
    result = backend.run(compile_any(spec, tmp / f"b-{name}").bundle, tmp / name)
    return float(result.details["phases_s"]["simulate"]), int(result.details["ns3"]["packets_on_links"])


def line(label: str, wall: float, packets: int) -> None:
    rate = packets / wall
    print(f"{label:<44} {wall:>8.1f} {packets:>11,} {rate:>10,.0f} {rate / GOAL:>7.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=0, help="packets for ns-3 alone (default: the TCP run's)")
    ap.add_argument("--skip-backend", action="store_true", help="ns-3 alone only (then --packets, or 2,968,792)")
    args = ap.parse_args()
    if not available():
        sys.exit("ns3_ceiling: the ns3 wheel is not installed (pip install ns3)")
    tcp = load_runnable(SPEC)
    assert isinstance(tcp, Scenario)
    topo = tcp.topology
    roce = with_transport(tcp, kind="roce")
    print(f"{'what':<44} {'wall s':>8} {'packets':>11} {'packets/s':>10} {'/ goal':>7}")
    packets = args.packets or 2_968_792
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_backend:
            wall, on_links = backend_run(tcp, Path(tmp), "tcp")
            line("the backend, TCP (the example)", wall, on_links)
            packets = args.packets or on_links
            line("the backend, RoCE", *backend_run(roce, Path(tmp), "roce"))
    t0 = time.perf_counter()
    for label, way, payload in (("ns-3 alone, UDP over IPv4, no transport", "Udp", topo.transport.mss_bytes),
                                ("ns-3 alone, raw point-to-point devices", "Raw", topo.transport.mss_bytes + 28)):
        wall, received = ceiling(way, topo.npus, packets, payload, topo.bandwidth_gbps, topo.latency_ns)
        line(label, wall, received)
    print(f"(goal: {GOAL:,} packets/s; ns-3 alone took {time.perf_counter() - t0:.0f} s in all)")


if __name__ == "__main__":
    main()
