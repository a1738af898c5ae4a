"""Where a packet run's wall time goes: inside ns-3, or in the engine and the backend around it.

Runs one spec on the packet network (`--backend ns3`, no pcaps) and prints its simulation's wall
time, the part of it spent inside ns-3 (`run.json`'s `details.ns3.ns3_s`: every call that runs
ns-3 up to the engine's next event), the rest (flowsim's engine, the messages handed to ns-3,
reading and writing), the packets ns-3 put on links and packets per second. With `--send-buffers`,
the same spec again with each host's socket buffers set to that many KiB (receive buffers 1.5
times as large), which changes the traffic: it shows how the run's cost grows with the segments
a connection keeps in flight (ns-3 3.44's TCP walks its list of sent segments for every segment it
sends, `TcpTxBuffer::NextSeg`).

    python benchmarks/ns3_profile.py [--spec specs/examples/resnet50_dp8_ring.yaml] [--send-buffers 128]

For a profile by function, run it under `perf record` (the results page has one).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# this directory's ns3.py (benchmarks/ns3.py) would shadow the ns3 wheel: off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from simstudy.backends import simulate  # noqa: E402
from simstudy.backends.ns3 import available  # noqa: E402
from simstudy.spec import BackendSpec, Scenario, load_runnable  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=REPO / "specs" / "examples" / "resnet50_dp8_ring.yaml")
    ap.add_argument("--send-buffers", default="", help="comma-separated KiB: the spec again with these buffers")
    args = ap.parse_args()
    if not available():
        sys.exit("ns3: the ns3 wheel is not installed (pip install ns3)")
    base = load_runnable(args.spec)
    if not isinstance(base, Scenario):
        sys.exit(f"{args.spec}: one job expected (a scenario), not a cluster")
    cases: list[tuple[str, Scenario]] = [("default buffers", base)]
    for kib in [int(x) for x in args.send_buffers.split(",") if x]:
        transport = base.topology.transport.model_copy(update={"send_buffer_kib": kib,
                                                               "receive_buffer_kib": kib * 3 // 2})
        topology = base.topology.model_copy(update={"transport": transport})
        cases.append((f"send buffer {kib} KiB", base.model_copy(update={"topology": topology})))
    print(f"{'case':<22} {'wall s':>8} {'in ns-3 s':>10} {'share':>6} {'rest s':>7} {'packets':>11} "
          f"{'packets/s':>10} {'iteration ms':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, spec) in enumerate(cases):
            t0 = time.perf_counter()
            result = simulate(spec, Path(tmp) / str(i), BackendSpec(name="ns3"))
            wall = time.perf_counter() - t0
            ns3 = result.details["ns3"]
            inside, packets = ns3["ns3_s"], ns3["packets_on_links"]
            iters = spec.training.iterations
            print(f"{label:<22} {wall:>8.1f} {inside:>10.1f} {inside / wall:>6.0%} {wall - inside:>7.1f} "
                  f"{packets:>11,} {packets / wall:>10,.0f} {result.finish_ns / iters / 1e6:>13.3f}", flush=True)


if __name__ == "__main__":
    main()
