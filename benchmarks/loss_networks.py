"""The loss study on both networks: where flowsim's TCP model and the packet network (ns-3) differ.

Runs `specs/loss_sweep_ns3.yaml` (ResNet-50 and an LSTM, 4 TensorFlow workers, losses 0-2%) on
ns-3 and the same scenarios on flowsim (the reference, in the same command), prints each
network's loss findings (`report.findings.loss_effects`) and, scenario by scenario, how the two
differ (`report.findings.network_differences`), with the wall time of each sweep.

    python benchmarks/loss_networks.py [-o ~/.cache/simstudy/loss_networks]

Finished runs are reused (a sweep resumes), so a second call only prints.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from simstudy.backends.ns3 import available
from simstudy.report.findings import findings, network_differences
from simstudy.spec import load_study
from simstudy.sweeps import LocalExecutor, run_study

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("-o", "--output", default=str(Path.home() / ".cache" / "simstudy" / "loss_networks"))
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    if not available():
        print("the ns3 wheel is not installed: pip install 'simstudy[ns3]'", file=sys.stderr)
        return 2
    path = REPO / "specs" / "loss_sweep_ns3.yaml"
    study = load_study(path)
    out = Path(args.output).expanduser()
    results = {}
    for backend in ("flowsim", "ns3"):
        t0 = time.perf_counter()
        s = study.model_copy(update={"backend": backend})
        results[backend] = r = run_study(s, path, out / backend, executor=LocalExecutor(args.workers), progress=False)
        print(f"{backend}: {len(r.summary)} runs, {sum(r.summary['status'] == 'ok')} ok, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    params = results["ns3"].expansion.param_names
    cols = ["model", "topology.loss", "iteration_ms", "iteration_p90_ms", "peak_to_mean", "duty_cycle"]
    both = results["flowsim"].summary[cols].merge(results["ns3"].summary[cols], on=["model", "topology.loss"],
                                                  suffixes=(" fl", " ns3"))
    print("\n" + both.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    for backend, r in results.items():
        print(f"\n{backend}:")
        for f in findings(r.summary, params):
            if f.kind == "loss":
                print(f"- {f.sentence}")
    print("\nwhere the networks differ (ns-3 over flowsim):")
    for f in network_differences(results["flowsim"].summary, results["ns3"].summary, params):
        print(f"- {f.sentence}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
