"""Fidelity of the simulation against real captures (needs root, tcpdump, ethtool and torch).

Captures a matrix of real jobs with `simstudy capture` (PyTorch DDP, a PyTorch parameter server
and TensorFlow MultiWorkerMirroredStrategy, each simulated with its framework preset; a CNN, an
LSTM and a Transformer; 2 and 4 workers; an unshaped link and a 200 Mbit/s one),
validates each against its simulation with the measured compute (`simstudy validate`, flowsim),
and prints per case: bytes per iteration per worker (real, simulated, relative error), the
iteration period (real, simulated, relative error), the Wasserstein distance of the 1 ms
throughput distributions (relative to the real mean) and `send/link`: how fast the busiest sender
moved its payload while sending, as a fraction of the link goodput the simulation used (near 1
where the link sets the pace; far below it where the CPU does). Targets: bytes within 2 %,
period within 10 %.

    sudo python benchmarks/fidelity.py [--quick] [--iterations 5] [--links unshaped,200mbit]
                                       [--burst-kib K] [-o results/fidelity]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from simstudy.capturing.run import capture
from simstudy.spec.capture import CaptureSpec
from simstudy.traffic.meta import read_meta
from simstudy.traffic.sources import load_traffic
from simstudy.validation import validate

MODELS: dict[str, dict[str, Any]] = {
    "cnn": {"zoo": "small_cnn"},
    "lstm": {"zoo": "lstm_lm", "options": {"layers": 1, "hidden": 128, "vocab": 2000, "seq_len": 20}},
    "transformer": {"zoo": "encoder", "options": {"layers": 2, "hidden": 128, "heads": 4, "seq_len": 32,
                                                  "vocab": 2000}},
}
STRATEGIES: dict[str, dict[str, Any]] = {
    "ddp": {"aggregation": {"kind": "allreduce", "algorithm": "ring"}},
    "ps": {"aggregation": {"kind": "parameter_server", "servers": 1, "mode": "sync"}},
    "mwms": {"aggregation": {"kind": "allreduce", "algorithm": "ring"}},
    "hvd": {"aggregation": {"kind": "allreduce", "algorithm": "ring"}},
}
#: The framework that runs each strategy's job (its preset simulates it).
FRAMEWORK_OF = {"ddp": "pytorch", "ps": "pytorch", "mwms": "tensorflow", "hvd": "horovod"}
LINKS: dict[str, dict[str, Any]] = {"unshaped": {}, "200mbit": {"rate_mbit": 200}}


def case_spec(strategy: str, model: str, workers: int, link: str, iterations: int,
              burst_kib: float | None = None) -> CaptureSpec:
    shaping = dict(LINKS[link])
    if burst_kib is not None and shaping:
        shaping["burst_kib"] = burst_kib
    return CaptureSpec.model_validate({
        "name": f"{strategy}_{model}_w{workers}_{link}",
        "framework": FRAMEWORK_OF[strategy],
        "model": MODELS[model],
        "parallelism": {"dp": workers, **STRATEGIES[strategy]},
        "training": {"batch_size_per_worker": 16},
        "capture": {"iterations": iterations, "link": shaping},
    })


def send_rate(path: Path) -> float:
    """How fast the busiest sender of each recorded iteration moved its payload while it was
    sending (payload bytes / time from its first to its last payload packet; gaps included), as a
    fraction of the link goodput the simulation used; the median over iterations."""
    meta = read_meta(path)
    goodput = meta.link.goodput_bps if meta and meta.link else None
    t = load_traffic(path).table
    t = t[(t["op"] != "control") & (t["payload_bytes"] > 0) & (t["iteration"] >= 0)]
    rates = []
    for _, per_it in t.groupby("iteration", observed=True):
        g = per_it.groupby("src", observed=True).agg(b=("payload_bytes", "sum"), t0=("t_start_s", "min"),
                                                     t1=("t_start_s", "max"))
        top = g.loc[g["b"].idxmax()]
        if top["t1"] > top["t0"]:
            rates.append(top["b"] * 8 / (top["t1"] - top["t0"]))
    return float(statistics.median(rates)) / goodput if rates and goodput else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("-o", "--output", default="results/fidelity")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 workers, the 200 Mbit/s link only")
    ap.add_argument("--links", default=",".join(LINKS), help="comma-separated links to run (%(default)s)")
    ap.add_argument("--burst-kib", type=float, default=None, help="tbf bucket of the shaped links")
    ap.add_argument("--strategies", default="ddp,ps", help=f"comma-separated, of {', '.join(STRATEGIES)} "
                    "(mwms: TensorFlow MultiWorkerMirroredStrategy; hvd: Horovod, where horovod.torch imports) "
                    "(%(default)s)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated models (%(default)s)")
    args = ap.parse_args()
    out = Path(args.output)
    rows: list[dict[str, Any]] = []
    workers = (2,) if args.quick else (2, 4)
    links = ("200mbit",) if args.quick else tuple(k for k in args.links.split(",") if k)
    strategies = tuple(k for k in args.strategies.split(",") if k)
    models = tuple(k for k in args.models.split(",") if k)
    for given, known, what in ((links, LINKS, "link"), (strategies, STRATEGIES, "strategy"), (models, MODELS, "model")):
        unknown = sorted(set(given) - set(known))
        if unknown:
            ap.error(f"unknown {what} {unknown}: expected some of {sorted(known)}")
    header = (f"{'case':34s} {'B/iter real':>12s} {'sim':>12s} {'err':>7s}  {'period real':>11s} {'sim':>9s} "
              f"{'err':>7s}  {'W1(1ms)/mean':>12s}  {'send/link':>9s}  {'msgs':>4s} {'msg KiB med/max':>15s}  "
              f"{'flows r/s':>9s}  {'burst ms r/s':>12s}  {'duty r/s':>9s}")
    print(header)
    for strategy, model, w, link in itertools.product(strategies, models, workers, links):
        spec = case_spec(strategy, model, w, link, args.iterations, args.burst_kib)
        t0 = time.monotonic()
        try:
            capture(spec, out / spec.name, force=True)
            v = validate(out / spec.name, out / spec.name / "validation")
        except Exception as exc:  # one failing case does not stop the matrix
            print(f"{spec.name:34s} FAILED: {str(exc).splitlines()[0]}", flush=True)
            rows.append({"case": spec.name, "error": str(exc)})
            continue
        rb, sb = v.real_features.bytes_per_iteration.mean, v.sim_features.bytes_per_iteration.mean
        rp, sp = v.real_features.period.period_s, v.sim_features.period.period_s
        dist = next((r for r in v.report.rows if r.metric == "throughput_1ms:wasserstein"), None)
        w1 = dist.distance if dist is not None else float("nan")
        use = send_rate(out / spec.name)
        meta = read_meta(out / spec.name)
        msgs = sorted(meta.buckets or []) if meta else []
        rf, sf = v.real_features, v.sim_features
        row = {"case": spec.name, "framework": spec.framework, "preset": spec.parallelism.framework.name,
               "bytes_real": rb, "bytes_sim": sb, "bytes_err": sb / rb - 1,
               "period_real_s": rp, "period_sim_s": sp, "period_err": sp / rp - 1, "w1_rel": w1,
               "send_rate_of_link": use, "messages": msgs,
               "flows_real": rf.flows.count, "flows_sim": sf.flows.count,
               "flow_size_median_real": rf.flows.sizes.median, "flow_size_median_sim": sf.flows.sizes.median,
               "burst_mean_real_s": rf.on_off.bursts.mean, "burst_mean_sim_s": sf.on_off.bursts.mean,
               "duty_real": rf.on_off.duty_cycle, "duty_sim": sf.on_off.duty_cycle,
               "wall_s": time.monotonic() - t0}
        rows.append(row)
        med = statistics.median(msgs) / 1024 if msgs else float("nan")
        top = max(msgs) / 1024 if msgs else float("nan")
        print(f"{spec.name:34s} {rb:12,.0f} {sb:12,.0f} {row['bytes_err']:+7.2%}  {rp * 1e3:9.1f}ms "
              f"{sp * 1e3:7.1f}ms {row['period_err']:+7.1%}  {w1:12.3f}  {use:9.2f}  {len(msgs):4d} "
              f"{med:7.0f}/{top:<7.0f}  {rf.flows.count:4d}/{sf.flows.count:<4d}  "
              f"{rf.on_off.bursts.mean * 1e3:5.1f}/{sf.on_off.bursts.mean * 1e3:<6.1f}  "
              f"{rf.on_off.duty_cycle:4.2f}/{sf.on_off.duty_cycle:<4.2f}", flush=True)
    ok = [r for r in rows if "error" not in r]
    bytes_ok = sum(abs(r["bytes_err"]) <= 0.02 for r in ok)
    period_ok = sum(abs(r["period_err"]) <= 0.10 for r in ok)
    print(f"\nbytes per iteration within 1%: {sum(abs(r['bytes_err']) <= 0.01 for r in ok)}/{len(ok)}; "
          f"within 2%: {bytes_ok}/{len(ok)}; period within 10%: {period_ok}/{len(ok)}; "
          f"failed cases: {len(rows) - len(ok)}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "fidelity.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
