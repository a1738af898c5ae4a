"""flowsim's TCP model under loss against the packet network (ns-3), cell by cell.

One TCP connection between two hosts on a switch (10 Gbit/s links; each packet lost with
probability p as a host receives it, data and ACKs alike, as the capture testbed drops them),
messages sent one after the other (each when the one before has arrived, as a ring's steps go).
For every cell of the grid (loss 0.05-2%, round trip 0.1-10 ms, messages 64 KiB-256 MiB) it prints
the mean message time in ns-3 (with the half-width of its 95% confidence interval: timeouts are
rare events, so each cell runs until about `--events` of them are expected, at most `--budget`
bytes), flowsim's expected time (`flowsim.tcp.TcpPaths.mean_time_ns`) and the error. Target: the
mean error over the grid within 10%.

    python benchmarks/tcp_model.py [--quick] [--recovery rack_tlp|rfc6675] [--cache FILE]

ns-3's cells are kept in the cache (one JSON line per cell) and reused: delete it to measure again.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ns3_unshadow import unshadow_ns3

from simstudy.backends.flowsim.tcp import TcpPaths
from simstudy.backends.network import Network
from simstudy.backends.ns3 import available
from simstudy.backends.ns3.probe import message_times
from simstudy.compiler.topology_file import topology_of
from simstudy.spec import Star

unshadow_ns3()

LOSSES = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02)
RTTS_MS = (0.1, 1.0, 10.0)
SIZES = (64 << 10, 1 << 20, 16 << 20, 256 << 20)
GBPS = 10.0


RECOVERY = "rack_tlp"


def topology(loss: float, rtt_ms: float) -> Any:
    """Two hosts on a switch: a round trip of four link latencies; losses as hosts receive."""
    return topology_of(Star(npus=2, bandwidth_gbps=GBPS, latency_ns=rtt_ms * 1e6 / 4, loss=loss, loss_at="hosts",
                            transport={"loss_recovery": RECOVERY}))  # type: ignore[arg-type]


def model(loss: float, rtt_ms: float) -> tuple[TcpPaths, float, float]:
    """flowsim's view of the path: (model, path loss, round trip ns)."""
    topo = topology(loss, rtt_ms)
    net = Network.from_topology(topo)
    tcp = TcpPaths(topo.transport, net.capacity, net.latency, net.loss)
    p, rtt = tcp.path(net.route(0, 1))
    return tcp, p, rtt


def count_for(loss: float, rtt_ms: float, size: int, events: float, budget: int) -> int:
    """Messages to run: about `events` timeouts expected (by flowsim's model), within `budget` bytes."""
    tcp, p, _ = model(loss, rtt_ms)
    n = tcp.segments(size)
    tail = min(n, 3)
    # timeouts, or (with tail loss probes) probes: the rare events a cell's mean rests on
    per_msg = 1 - (1 - p) ** tail + max(n - tail, 0) * p * max(tcp.timeout_probability(p), p)
    want = math.ceil(events / max(per_msg, 1e-9))
    return max(1, min(want, budget // size))


def measure(loss: float, rtt_ms: float, size: int, count: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    times, stats = message_times(topology(loss, rtt_ms), 0, 1, size, count)
    wall = time.perf_counter() - t0
    mean = statistics.mean(times)
    half = 1.96 * statistics.stdev(times) / math.sqrt(len(times)) if len(times) > 1 else math.nan
    return {"loss": loss, "rtt_ms": rtt_ms, "size": size, "count": count, "mean_ns": mean, "ci_ns": half,
            "median_ns": statistics.median(times), "wall_s": wall, **stats}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--cache", default=None, help="default results/tcp_model/ns3_cells_<recovery>.jsonl")
    ap.add_argument("--recovery", default="rack_tlp", choices=["rack_tlp", "rfc6675"],
                    help="the hosts' loss recovery (transport.loss_recovery; default rack_tlp, Linux's)")
    ap.add_argument("--events", type=float, default=25.0, help="timeouts expected per cell (default 25)")
    ap.add_argument("--budget", type=int, default=1 << 30, help="most bytes per cell (default 1 GiB)")
    ap.add_argument("--quick", action="store_true", help="losses 0.5-2%%, round trip 1 ms, up to 16 MiB")
    ap.add_argument("--model-only", action="store_true", help="only cells already in the cache")
    args = ap.parse_args()
    if not available() and not args.model_only:
        print("the ns3 wheel is not installed: pip install 'simstudy[ns3]'", file=sys.stderr)
        return 2
    global RECOVERY
    RECOVERY = args.recovery
    cache = Path(args.cache or f"results/tcp_model/ns3_cells_{args.recovery}.jsonl")
    cache.parent.mkdir(parents=True, exist_ok=True)
    cells: dict[tuple[float, float, int], dict[str, Any]] = {}
    if cache.is_file():
        for line in cache.read_text().splitlines():
            c = json.loads(line)
            cells[(c["loss"], c["rtt_ms"], c["size"])] = c
    losses, rtts, sizes = (LOSSES[3:], (1.0,), SIZES[:3]) if args.quick else (LOSSES, RTTS_MS, SIZES)
    print(f"{'loss':>6s} {'rtt ms':>6s} {'message':>9s} {'msgs':>6s} {'ns-3 ms':>10s} {'+-95%':>8s} "
          f"{'flowsim ms':>10s} {'err':>7s} {'timeouts':>8s} {'wall s':>6s}")
    errors: list[float] = []
    for loss, rtt_ms, size in itertools.product(losses, rtts, sizes):
        key = (loss, rtt_ms, size)
        if key not in cells:
            if args.model_only:
                continue
            c = measure(loss, rtt_ms, size, count_for(loss, rtt_ms, size, args.events, args.budget))
            cells[key] = c
            with cache.open("a") as f:
                f.write(json.dumps(c) + "\n")
        c = cells[key]
        tcp, p, rtt = model(loss, rtt_ms)
        sim = tcp.mean_time_ns(size, p, rtt, GBPS / 8)
        err = sim / c["mean_ns"] - 1
        errors.append(err)
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(f"{loss:6.2%} {rtt_ms:6.1f} {label:>9s} {c['count']:6d} {c['mean_ns'] / 1e6:10.3f} "
              f"{c['ci_ns'] / c['mean_ns']:8.1%} {sim / 1e6:10.3f} {err:+7.1%} {c['timeouts']:8d} "
              f"{c['wall_s']:6.1f}", flush=True)
    if errors:
        mean_abs = statistics.mean(abs(e) for e in errors)
        within = sum(abs(e) <= 0.10 for e in errors)
        print(f"\nmean |error| over {len(errors)} cells: {mean_abs:.1%} (mean error {statistics.mean(errors):+.1%}); "
              f"cells within 10%: {within}/{len(errors)}; worst {max(errors, key=abs):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
