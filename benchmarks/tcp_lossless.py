"""TCP without loss: the packet network (ns-3) against flowsim's fluid model, cell by cell.

Issue 38, point 4: without loss flowsim's fluid mode moves a message at the link rate from its
first byte, where TCP sends headers with every segment, ACKs on the reverse links, and a window that
starts at 10 segments and grows. This benchmark measures how far that is from the packet network,
which a TCP model without loss must close (goal: within 5% on the calibration grid's mean).

Two hosts on a switch (`Star`, round trip of four link latencies), Linux's TCP defaults
(`spec.transport`: CUBIC, MSS 1448 with timestamps, delayed ACKs). For every cell (link rate, round
trip, message size, one way or both ways at once, as a two-rank ring step sends), `count` messages
go one after the other on one connection (each when the one before has arrived, as ring steps go);
the table prints ns-3's first message (a fresh window) and its last (the window as the messages
before left it), flowsim fluid's time (the path's latency plus the bytes at the narrowest link), the
time headers alone would give (every segment's IP, TCP and point-to-point bytes on the wire), and
each error against ns-3's last message.

    python benchmarks/tcp_lossless.py [--quick] [--count 5]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time

from ns3_unshadow import unshadow_ns3

from simstudy.backends.network import Network
from simstudy.backends.ns3 import available
from simstudy.backends.ns3.fabric import FRAME_BYTES
from simstudy.backends.ns3.probe import message_times
from simstudy.compiler.topology_file import topology_of
from simstudy.spec import Star

unshadow_ns3()

GBPS = (1.0, 10.0)
RTTS_MS = (0.2, 2.0)
SIZES = (1 << 20, 16 << 20)


def cell(gbps: float, rtt_ms: float, size: int, both: bool, count: int) -> dict[str, float]:
    topo = topology_of(Star(npus=2, bandwidth_gbps=gbps, latency_ns=rtt_ms * 1e6 / 4))
    net = Network.from_topology(topo)
    route = net.route(0, 1)
    latency = sum(net.latency[k] for k in route)
    rate = min(net.capacity[k] for k in route)  # bytes per ns
    t = topo.transport
    wire = (t.mss_bytes + t.header_bytes + FRAME_BYTES) / t.mss_bytes
    t0 = time.perf_counter()
    times, _ = message_times(topo, 0, 1, size, count, both_ways=both)
    return {"first": times[0], "last": times[-1], "fluid": latency + size / rate,
            "headers": latency + size * wire / rate, "wall": time.perf_counter() - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--count", type=int, default=5, help="messages per cell (default 5)")
    ap.add_argument("--quick", action="store_true", help="1 Gbit/s only")
    args = ap.parse_args()
    if not available():
        print("the ns3 wheel is not installed: pip install 'simstudy[ns3]'", file=sys.stderr)
        return 2
    print(f"{'Gbit/s':>6s} {'rtt ms':>6s} {'message':>8s} {'ways':>4s} {'ns-3 first':>10s} {'ns-3 last':>10s} "
          f"{'fluid':>8s} {'err':>7s} {'headers':>8s} {'err':>7s} {'wall s':>6s}")
    fluid_err: list[float] = []
    header_err: list[float] = []
    for gbps, rtt_ms, size, both in itertools.product(GBPS[:1] if args.quick else GBPS, RTTS_MS, SIZES,
                                                      (False, True)):
        c = cell(gbps, rtt_ms, size, both, args.count)
        fe, he = c["fluid"] / c["last"] - 1, c["headers"] / c["last"] - 1
        fluid_err.append(fe)
        header_err.append(he)
        print(f"{gbps:6.0f} {rtt_ms:6.1f} {size >> 20:5d} MiB {'2' if both else '1':>4s} {c['first'] / 1e6:10.2f} "
              f"{c['last'] / 1e6:10.2f} {c['fluid'] / 1e6:8.2f} {fe:+7.1%} {c['headers'] / 1e6:8.2f} {he:+7.1%} "
              f"{c['wall']:6.1f}", flush=True)
    print(f"\nmean |error| against ns-3's last message over {len(fluid_err)} cells: fluid "
          f"{statistics.mean(abs(e) for e in fluid_err):.1%}, headers alone "
          f"{statistics.mean(abs(e) for e in header_err):.1%} (goal of a TCP model: 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
