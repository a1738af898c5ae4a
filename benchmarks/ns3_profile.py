"""Where a packet run's wall time goes: inside ns-3, or in the engine and the backend around it.

Runs one spec on the packet network (`--backend ns3`, no pcaps) and prints its simulation's wall
time, the part of it spent inside ns-3 (`run.json`'s `details.ns3.ns3_s`: every call that runs
ns-3 up to the engine's next event), the rest (flowsim's engine, the messages handed to ns-3,
reading and writing), the packets ns-3 put on links and packets per second. Then the C++-only
reference: the same messages (streams, sizes, ns-3 send times, as the run recorded them) queued in
a fresh fabric of the same network all at once and run to the last one's end with no engine in
between (over TCP, specs of at most 32 ranks, whose connections all open at the start; over RoCE,
any spec, with its queue pairs made first); the backend's speed
as a share of the reference's is the reference's wall time over the run's simulation phase's.
With `--send-buffers`, the same spec again with each host's socket buffers set to that many KiB
(receive buffers 1.5 times as large), which changes the traffic: it shows how the run's cost grows
with the segments a connection keeps in flight (ns-3 3.44's TCP walks its list of sent segments
for every segment it sends, `TcpTxBuffer::NextSeg`).

    python benchmarks/ns3_profile.py [--spec specs/examples/resnet50_dp8_ring.yaml] [--send-buffers 128] [--roce]

For a profile by function, run it under `perf record` (the results page has one).
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
from simstudy.backends.ns3.fabric import FULL_MESH_RANKS
from simstudy.backends.ns3.probe import replay
from simstudy.compiler import compile_any
from simstudy.spec import Scenario, load_runnable

unshadow_ns3()

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=REPO / "specs" / "examples" / "resnet50_dp8_ring.yaml")
    ap.add_argument("--send-buffers", default="", help="comma-separated KiB: the spec again with these buffers")
    ap.add_argument("--roce", action="store_true", help="the spec over RoCE (transport: {kind: roce})")
    args = ap.parse_args()
    if not available():
        sys.exit("ns3: the ns3 wheel is not installed (pip install ns3)")
    base = load_runnable(args.spec)
    if not isinstance(base, Scenario):
        sys.exit(f"{args.spec}: one job expected (a scenario), not a cluster")
    if args.roce:
        base = with_transport(base, kind="roce")
    cases: list[tuple[str, Scenario]] = [("default buffers", base)]
    for kib in [int(x) for x in args.send_buffers.split(",") if x]:
        buffers = with_transport(base, send_buffer_kib=kib, receive_buffer_kib=kib * 3 // 2)
        cases.append((f"send buffer {kib} KiB", buffers))
    print(f"{'case':<22} {'wall s':>8} {'sim s':>7} {'in ns-3 s':>10} {'share':>6} {'packets':>11} "
          f"{'packets/s':>10} {'iteration ms':>13}  C++-only reference")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, spec) in enumerate(cases):
            bundle = compile_any(spec, Path(tmp) / f"b{i}").bundle
            backend = Ns3Backend(traffic="none", record_sends=True)
            t0 = time.perf_counter()
            result = backend.run(bundle, Path(tmp) / str(i))
            wall = time.perf_counter() - t0
            sim = result.details["phases_s"]["simulate"]
            ns3 = result.details["ns3"]
            inside, packets = ns3["ns3_s"], ns3["packets_on_links"]
            iters = spec.training.iterations
            assert backend.info is not None and backend.sends is not None
            against = "(connections open on demand: none)"
            topology = backend.info.topology
            if topology.hosts <= FULL_MESH_RANKS or topology.transport.kind == "roce":
                ref_s, stats = replay(topology, backend.sends, backend.queue_pairs or None)
                ref_packets = int(stats["packets_on_links"])
                against = (f"{ref_s:.1f} s, {ref_packets:,} packets, {ref_packets / ref_s:,.0f}/s; the backend at "
                           f"{ref_s / sim:.0%} of its speed")
            print(f"{label:<22} {wall:>8.1f} {sim:>7.1f} {inside:>10.1f} {inside / sim:>6.0%} {packets:>11,} "
                  f"{packets / sim:>10,.0f} {result.finish_ns / iters / 1e6:>13.3f}  {against}", flush=True)


if __name__ == "__main__":
    main()
