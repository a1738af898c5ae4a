"""The capture testbed simulated: flowsim and the packet network (ns-3) against real captures, at
the transport level (needs root, tcpdump, torch, TensorFlow and the ns3 wheel).

Captures the matrix with `simstudy capture` (PyTorch DDP over gloo, a gloo parameter server and
TensorFlow MultiWorkerMirroredStrategy over gRPC; the small CNN, LSTM and Transformer; 2 and 4
workers; 200 Mbit/s links, clean and with 1% loss), or reuses the captures already in the output
directory, and validates each with `--judge-transport` twice: flowsim on the testbed's network
(`validate.testbed_scenario`: a star at the recorded goodput, losses at the receivers, TCP under
loss) and the packet network on it (veths behind tc-tbf-like token buckets on both ends, read
back from its pcaps). Prints per case how many transport-level metrics each passes and the mean
and 90th percentile of the iteration time (real: what the workers logged; simulated: every
iteration but the first, which starts with cold connections as the capture's unlogged warm-up
does), then the summary the issue asks for: of the (case, metric) pairs flowsim fails, how many
ns-3 passes; and at 1% loss, iteration mean and p90 within 10% of the real ones.

    sudo python benchmarks/ns3_testbed.py [-o ~/.cache/simstudy/ns3_testbed] [--capture-only] [--cases ddp_cnn_w2]

Captures are kept under the output directory and never redone (delete one to capture it again).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity import MODELS, case_spec
from ns3_unshadow import unshadow_ns3

from simstudy import layout
from simstudy.backends.ns3 import iteration_spans
from simstudy.backends.traffic_build import WorkloadInfo
from simstudy.compiler import Bundle
from simstudy.spec import BackendSpec, Scenario
from simstudy.traffic.compare import JOB, TRANSPORT, ValidationReport
from simstudy.traffic.meta import read_meta

unshadow_ns3()


STRATEGIES = ("ddp", "ps", "mwms")
LINKS: dict[str, dict[str, Any]] = {"200mbit": {"rate_mbit": 200}, "200mbit_loss1": {"rate_mbit": 200, "loss": 0.01}}


def real_iterations(case: Path) -> list[float]:
    """Every logged iteration's duration, seconds (every worker)."""
    meta = read_meta(case)
    assert meta is not None
    return meta.iteration_durations_s()


def sim_iterations(run: Path) -> list[float]:
    """Every simulated iteration's duration but the first, seconds (every worker: parameter servers
    log no iterations in a capture)."""
    bundle = Bundle.from_dir(run / layout.BUNDLE_DIR)
    info = WorkloadInfo.from_bundle(bundle)
    scenario = Scenario.model_validate_json(bundle.scenario.read_text()) if bundle.scenario else None
    p = scenario.parallelism if scenario is not None else None
    servers = set(p.aggregation.server_hosts(p.dp)) if p is not None else set()
    spans = iteration_spans(info, pd.read_parquet(run / layout.SPANS))
    return [(b - a) / 1e9 for r, v in spans.items() if r not in servers for a, b in v[1:]]


def p90(values: list[float]) -> float:
    return float(np.percentile(values, 90)) if values else math.nan


def transport(report: ValidationReport) -> tuple[int, int, list[str]]:
    rows = [r for r in report.rows if r.level == TRANSPORT]
    failed = [r.metric for r in rows if not r.passed]
    return len(rows) - len(failed), len(rows), failed


def validate_case(case: Path, out: Path, backend: str) -> tuple[ValidationReport, list[float], float]:
    from simstudy.validation import validate

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = validate(case, out, backend=BackendSpec(name=backend, timeout_s=3600.0),  # type: ignore[arg-type]
                     judge=(JOB, TRANSPORT), testbed=True)
    return v.report, sim_iterations(out / layout.SIM_DIR), time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("-o", "--output", default=str(Path.home() / ".cache" / "simstudy" / "ns3_testbed"))
    ap.add_argument("--iterations", type=int, default=10, help="recorded iterations per capture (default 10)")
    ap.add_argument("--capture-only", action="store_true", help="capture what is missing, validate nothing")
    ap.add_argument("--cases", default="", help="comma-separated case name prefixes (default: all)")
    args = ap.parse_args()
    out = Path(args.output).expanduser()
    wanted = [c for c in args.cases.split(",") if c]
    rows: list[dict[str, Any]] = []
    print(f"{'case':32s} {'transport pass fl/ns3':>21s}  {'iter mean ms real/fl/ns3':>26s}  "
          f"{'p90 ms real/fl/ns3':>22s}  {'wall s':>11s}")
    for strategy, model, w, link in itertools.product(STRATEGIES, MODELS, (2, 4), LINKS):
        spec = case_spec(strategy, model, w, "200mbit", args.iterations)
        name = f"{strategy}_{model}_w{w}_{link}"
        if wanted and not any(name.startswith(c) for c in wanted):
            continue
        spec = spec.model_copy(update={"name": name, "capture": spec.capture.model_copy(
            update={"link": spec.capture.link.model_copy(update=LINKS[link])})})
        case = out / "captures" / name
        try:
            if not (case / layout.META).is_file():
                from simstudy.capturing.run import capture

                capture(spec, case, force=True)
            if args.capture_only:
                print(f"{name:32s} captured", flush=True)
                continue
            fl, fl_its, fl_s = validate_case(case, out / "validation" / name / "flowsim", "flowsim")
            ns, ns_its, ns_s = validate_case(case, out / "validation" / name / "ns3", "ns3")
        except Exception as exc:  # one failing case does not stop the matrix
            print(f"{name:32s} FAILED: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", flush=True)
            rows.append({"case": name, "error": str(exc)})
            continue
        real = real_iterations(case)
        fp, fn, ffail = transport(fl)
        npass, nn, nfail = transport(ns)
        row = {"case": name, "loss": LINKS[link].get("loss", 0.0),
               "flowsim_pass": fp, "ns3_pass": npass, "metrics": fn, "flowsim_fail": ffail, "ns3_fail": nfail,
               "real_mean_s": statistics.mean(real), "real_p90_s": p90(real),
               "flowsim_mean_s": statistics.mean(fl_its) if fl_its else math.nan, "flowsim_p90_s": p90(fl_its),
               "ns3_mean_s": statistics.mean(ns_its) if ns_its else math.nan, "ns3_p90_s": p90(ns_its),
               "flowsim_verdict": fl.verdict, "ns3_verdict": ns.verdict, "wall_s": [fl_s, ns_s]}
        rows.append(row)
        print(f"{name:32s} {fp:>9d}/{fn:<2d} {npass:>6d}/{nn:<2d}  "
              f"{row['real_mean_s'] * 1e3:8.1f}/{row['flowsim_mean_s'] * 1e3:7.1f}/{row['ns3_mean_s'] * 1e3:7.1f}  "
              f"{row['real_p90_s'] * 1e3:7.1f}/{row['flowsim_p90_s'] * 1e3:6.1f}/{row['ns3_p90_s'] * 1e3:7.1f}  "
              f"{fl_s:5.0f}/{ns_s:5.0f}", flush=True)
    done = [r for r in rows if "error" not in r]
    if done:
        summarise(done)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ns3_testbed.json").write_text(json.dumps(rows, indent=1))
    return 0


def summarise(rows: list[dict[str, Any]]) -> None:
    pairs = [(r["case"], m) for r in rows for m in r["flowsim_fail"]]
    rescued = [(c, m) for c, m in pairs if m not in next(r for r in rows if r["case"] == c)["ns3_fail"]]
    cases = [r for r in rows if r["flowsim_fail"]]
    clean = [r for r in cases if not r["ns3_fail"]]
    print(f"\ntransport metrics flowsim fails: {len(pairs)} (case, metric) pairs; ns-3 passes {len(rescued)} of them "
          f"({len(rescued) / max(len(pairs), 1):.0%}); cases where flowsim fails any: {len(cases)}, of them ns-3 "
          f"passes all: {len(clean)}")
    by_metric: dict[str, list[int]] = {}
    for r in rows:
        for m in set(r["flowsim_fail"]) | set(r["ns3_fail"]):
            d = by_metric.setdefault(m, [0, 0])
            d[0] += m in r["flowsim_fail"]
            d[1] += m in r["ns3_fail"]
    for m, (f, n) in sorted(by_metric.items()):
        print(f"  {m:28s} fails: flowsim {f:2d}, ns-3 {n:2d} of {len(rows)}")
    lossy = [r for r in rows if r["loss"] > 0]
    for label, key in (("mean", "mean_s"), ("p90", "p90_s")):
        fl = sum(abs(r[f"flowsim_{key}"] / r[f"real_{key}"] - 1) <= 0.10 for r in lossy)
        ns = sum(abs(r[f"ns3_{key}"] / r[f"real_{key}"] - 1) <= 0.10 for r in lossy)
        print(f"at 1% loss, iteration {label} within 10% of real: flowsim {fl}/{len(lossy)}, ns-3 {ns}/{len(lossy)}")


if __name__ == "__main__":
    sys.exit(main())
