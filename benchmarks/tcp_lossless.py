"""TCP without loss: the packet network (ns-3) against flowsim, cell by cell.

Issue 38, point 4. Without loss flowsim's `fluid` mode with the ideal transport (the default) moves
a message at the link rate from its first byte, where TCP sends headers with every segment, ACKs on
the reverse links, and a window that starts at 10 segments and grows. `transport: {model: tcp}`
models that (`flowsim.tcp`); this benchmark measures both against the packet network (goal of the
TCP model: within 5% on the grid's mean and on the 2-rank LSTM).

Two hosts on a switch (`Star`, round trip of four link latencies), Linux's TCP defaults
(`spec.transport`: CUBIC, MSS 1448 with timestamps, delayed ACKs). For every cell (link rate, round
trip, message size, one way or both ways at once, as a two-rank ring step sends), `count` messages
go one after the other on one connection (each when the one before has arrived, as ring steps go);
the table prints ns-3's first message (a fresh window) and its last (the window as the messages
before left it), `fluid` with the ideal transport (the path's latency plus the bytes at the narrowest
link) and its error against ns-3's last message, then flowsim's TCP model (`fluid`, the same
messages through `flowsim.tcp.message_times`) against ns-3's first and last.

Then messages with idle time between them (past the minimum RTO the window restarts, as Linux's
does: `transport.slow_start_after_idle`, on both networks), and the 2-rank LSTM of issue 38
(`lstm_lm`, DP 2, a 1 Gbit/s star, 0.5 ms a hop: a 2 ms round trip), 4 iterations on ns-3, on
`fluid` ideal and on `fluid` and `unaware` with the TCP model: each one's finish and its error
against ns-3's.

    python benchmarks/tcp_lossless.py [--quick] [--count 5] [--no-lstm]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from typing import Any

from ns3_unshadow import unshadow_ns3

import simstudy
from simstudy.backends.flowsim.tcp import message_times as model_times
from simstudy.backends.network import Network
from simstudy.backends.ns3 import available
from simstudy.backends.ns3.probe import message_times
from simstudy.compiler.topology_file import topology_of
from simstudy.spec import Star
from simstudy.spec.transport import Transport

unshadow_ns3()

GBPS = (1.0, 10.0)
RTTS_MS = (0.2, 2.0)
SIZES = (1 << 20, 16 << 20)


#: After idle time: (Gbit/s, round trip ms, MiB, ms between an arrival and the next send, both ways). Past
#: the minimum RTO (200 ms) the window restarts (Linux's slow start after idle, which the packet network runs).
IDLE = ((10.0, 2.0, 1, 300.0, False), (1.0, 2.0, 1, 500.0, False), (10.0, 0.2, 16, 450.0, False),
        (10.0, 2.0, 1, 100.0, False), (1.0, 2.0, 1, 300.0, True), (1.0, 0.2, 1, 300.0, True),
        (10.0, 0.2, 16, 300.0, True), (10.0, 2.0, 16, 300.0, True))

#: The 2-rank LSTM of issue 38: the model's gradients each way at once every iteration, on a 2 ms round trip.
LSTM = {"name": "lstm2_1g", "model": "lstm_lm", "parallelism": {"dp": 2},
        "topology": {"kind": "star", "npus": 2, "bandwidth_gbps": 1, "latency_ns": 500_000},
        "training": {"iterations": 4}}


def idle_cell(gbps: float, rtt_ms: float, size: int, gap_ms: float, both: bool,
              count: int) -> tuple[list[int], list[int], int]:
    """ns-3's and the TCP model's message times with `gap_ms` between an arrival and the next send,
    and how many times ns-3 restarted a window."""
    star = {"npus": 2, "bandwidth_gbps": gbps, "latency_ns": rtt_ms * 1e6 / 4}
    gap = round(gap_ms * 1e6)
    real, stats = message_times(topology_of(Star(**star)), 0, 1, size, count, gap_ns=gap, both_ways=both)
    tcp = Network.from_topology(topology_of(Star(**star, transport=Transport(model="tcp"))))
    return real, model_times(tcp, 0, 1, size, count, gap_ns=gap, both_ways=both), int(stats["idle_restarts"])


def cell(gbps: float, rtt_ms: float, size: int, both: bool, count: int) -> dict[str, float]:
    topo = topology_of(Star(npus=2, bandwidth_gbps=gbps, latency_ns=rtt_ms * 1e6 / 4))
    net = Network.from_topology(topo)
    route = net.route(0, 1)
    latency = sum(net.latency[k] for k in route)
    rate = min(net.capacity[k] for k in route)  # bytes per ns
    t0 = time.perf_counter()
    times, _ = message_times(topo, 0, 1, size, count, both_ways=both)
    wall = time.perf_counter() - t0
    tcp = topology_of(Star(npus=2, bandwidth_gbps=gbps, latency_ns=rtt_ms * 1e6 / 4, transport=Transport(model="tcp")))
    model = model_times(Network.from_topology(tcp), 0, 1, size, count, both_ways=both)
    return {"first": times[0], "last": times[-1], "fluid": latency + size / rate,
            "model_first": model[0], "model_last": model[-1], "wall": wall}


def lstm_case() -> list[tuple[str, float]]:
    """The 2-rank LSTM's finish (ms) on ns-3 and on flowsim, each way the table names."""
    cases: list[tuple[str, dict[str, Any], str, str]] = [
        ("ns-3", LSTM, "ns3", "fluid"),
        ("fluid, ideal transport", LSTM, "flowsim", "fluid"),
        ("fluid, TCP model", {**LSTM, "topology": {**LSTM["topology"], "transport": {"model": "tcp"}}}, "flowsim",
         "fluid"),
        ("unaware, TCP model", {**LSTM, "topology": {**LSTM["topology"], "transport": {"model": "tcp"}}}, "flowsim",
         "unaware"),
    ]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, spec, backend, mode) in enumerate(cases):
            run = simstudy.run(spec, f"{tmp}/{i}", backend=backend, congestion=mode, traffic="none", render=False)
            out.append((label, run.finish_ms))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--count", type=int, default=5, help="messages per cell (default 5)")
    ap.add_argument("--quick", action="store_true", help="1 Gbit/s only")
    ap.add_argument("--no-lstm", action="store_true", help="leave out the 2-rank LSTM (about 40 s of ns-3)")
    args = ap.parse_args()
    if not available():
        print("the ns3 wheel is not installed: pip install 'simstudy[ns3]'", file=sys.stderr)
        return 2
    print(f"{'Gbit/s':>6s} {'rtt ms':>6s} {'message':>8s} {'ways':>4s} {'ns-3 first':>10s} {'ns-3 last':>10s} "
          f"{'fluid':>8s} {'err':>7s} {'tcp first':>9s} {'err':>7s} {'tcp last':>8s} {'err':>7s} {'wall s':>6s}")
    fluid_err: list[float] = []
    first_err: list[float] = []
    last_err: list[float] = []
    for gbps, rtt_ms, size, both in itertools.product(GBPS[:1] if args.quick else GBPS, RTTS_MS, SIZES,
                                                      (False, True)):
        c = cell(gbps, rtt_ms, size, both, args.count)
        fe, me1, me = c["fluid"] / c["last"] - 1, c["model_first"] / c["first"] - 1, c["model_last"] / c["last"] - 1
        fluid_err.append(fe)
        first_err.append(me1)
        last_err.append(me)
        print(f"{gbps:6.0f} {rtt_ms:6.1f} {size >> 20:5d} MiB {'2' if both else '1':>4s} {c['first'] / 1e6:10.2f} "
              f"{c['last'] / 1e6:10.2f} {c['fluid'] / 1e6:8.2f} {fe:+7.1%} {c['model_first'] / 1e6:9.2f} {me1:+7.1%} "
              f"{c['model_last'] / 1e6:8.2f} {me:+7.1%} {c['wall']:6.1f}", flush=True)
    print(f"\nmean |error| over {len(fluid_err)} cells: ideal fluid against ns-3's last message "
          f"{statistics.mean(abs(e) for e in fluid_err):.1%}; the TCP model against ns-3's last "
          f"{statistics.mean(abs(e) for e in last_err):.1%} (goal: 5%), against its first "
          f"{statistics.mean(abs(e) for e in first_err):.1%}")
    print("\nafter idle time: each message's time, ns-3 against the TCP model")
    idle_err: list[float] = []
    for gbps, rtt_ms, mib, gap_ms, both in IDLE:
        real, model, restarts = idle_cell(gbps, rtt_ms, mib << 20, gap_ms, both, args.count)
        errs = [m / r - 1 for m, r in zip(model, real, strict=True)]
        idle_err += errs
        print(f"{gbps:6.0f} {rtt_ms:6.1f} {mib:5d} MiB {'2' if both else '1':>4s}  idle {gap_ms:5.0f} ms  "
              f"ns-3 (restarts {restarts:2d}) "
              f"{' '.join(f'{t / 1e6:7.2f}' for t in real)}  model {' '.join(f'{t / 1e6:7.2f}' for t in model)}  "
              f"worst {max(errs, key=abs):+.1%}", flush=True)
    print(f"mean |error| over {len(idle_err)} messages: {statistics.mean(abs(e) for e in idle_err):.1%}")
    if not args.no_lstm:
        print(f"\nthe 2-rank LSTM (lstm_lm, DP 2, 1 Gbit/s star, 2 ms round trip), {LSTM['training']['iterations']} "
              "iterations:")
        found = lstm_case()
        ref = found[0][1]
        for label, ms in found:
            err = "" if label == "ns-3" else f"  {ms / ref - 1:+.1%} against ns-3"
            print(f"  {label:24s} {ms:9.1f} ms{err}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
