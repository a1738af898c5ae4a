"""Captures from elsewhere: real training captured here, then analysed as if it came from
elsewhere (the pcaps only, no meta.json), against the truth the workers logged.

Captures a matrix of real torch.distributed jobs with `simstudy capture` (gloo DDP and a
parameter server; a CNN, an LSTM and a Transformer; 2 and 4 workers; 200 Mbit/s links, clean and
with 1% loss), copies each capture's pcaps into a directory of their own, and analyses that
directory as a new user would (`simstudy analyze DIR`: roles and iterations from the traffic).
Prints per case the roles found, the period and the payload bytes per iteration found against
the truth in the capture's meta.json (the typical time between logged iteration starts of every
worker, the interquartile mean the analysis takes too: with 1% loss a TCP retransmission
timeout stalls an iteration now and then, and on one host compute on 2 shared cores alternates
between paces, so that the median of 20 iterations jumps between two clusters by 10% and more
with one sample; the median and the mean are kept in the JSON, and the median's error is
printed too; and how well that truth is known, `+-`: the standard error of the interquartile
mean by the bootstrap, a few percent for a job whose iterations jitter by tens of percent; payload
per marked iteration), and the verdict of `simstudy validate --real DIR --spec S` on the bare
directory with the capture's own scenario (as `validate --real` takes it from meta.json: its ranks
on the capture's hosts, sharing the cores it recorded). Targets: period within 5% and bytes per iteration
within 2% in every case.

A second matrix puts every rank on one host, where ranks share an address and are told apart
by their ports (`simstudy.traffic.processes`): gloo DDP and the parameter server, the same
three models, 2 and 4 workers, one process per rank, either as plain processes on the machine's
loopback (127.0.0.1, `where: loopback`: the machine's other loopback traffic is in the capture
too) or in one network namespace of their own (`where: namespace`, on 10.0.0.1), captured on the
loopback interface; 20 recorded iterations (compute, not a link, sets their pace, and 2 shared
cores make it jitter). Same targets.

    sudo python benchmarks/bare_captures.py [-o results/bare] [--reuse] [--fit] [--quick] [--iterations 5]
                                            [--matrix hosts|one-host|all] [--one-host-iterations 20]

`--fit` also validates each whole capture (with its meta.json) with its compute fitted to what
it logged, as `simstudy validate --real DIR --fit` does, and prints that verdict beside. Every
FAIL is followed by one line per failing metric: its real and simulated values, its distance and
the tolerance (kept in the JSON as `failures` and `failures_fit`).
`--reuse` analyses the captures already in the output directory instead of capturing again
(rerun one case by deleting its directory). Captures are CPU-sensitive: the load average at the
start and the end is printed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fidelity import MODELS, STRATEGIES, case_spec

from simstudy.capturing.run import capture
from simstudy.spec import Scenario
from simstudy.spec.capture import CaptureSpec
from simstudy.traffic.features import analyze
from simstudy.traffic.iterations import interquartile_mean
from simstudy.traffic.meta import read_meta
from simstudy.traffic.sources import load_traffic
from simstudy.validation import payload_view, shared_hosts_scenario, validate

LINKS: dict[str, dict[str, Any]] = {"200mbit": {"rate_mbit": 200}, "200mbit_loss1": {"rate_mbit": 200, "loss": 0.01}}


def truth(directory: Path) -> dict[str, float]:
    """What the capture's meta.json logged: the typical time between iteration starts of every
    worker (their interquartile mean, as the analysis takes it; the median and the mean are kept
    too), and payload bytes per marked iteration (all training endpoints, and per worker)."""
    meta = read_meta(directory)
    assert meta is not None
    diffs = meta.start_intervals_s()
    src = load_traffic(directory)
    t = payload_view(src.table)
    t = t[t["op"] != "control"]
    n = int(t["iteration"].nunique())
    workers = sorted(meta.iterations)
    sent = t.groupby("src")["bytes"].sum()
    return {"period_s": interquartile_mean(np.asarray(diffs)), "period_se": truth_se(diffs),
            "period_median_s": statistics.median(diffs), "period_mean_s": statistics.mean(diffs),
            "total": float(t["bytes"].sum()) / n,
            "per_worker": float(sent.reindex(workers).fillna(0).mean()) / n, "iterations": n}


def truth_se(intervals: list[float], draws: int = 2000) -> float:
    """How well the logged intervals know their own typical one: the standard error of their
    interquartile mean, relative to it, by the bootstrap (the intervals resampled with replacement,
    `draws` times, seeded). A job whose iterations jitter by tens of percent knows its period from a
    dozen iterations to no better than a few percent, whatever reads it."""
    x = np.asarray(intervals, dtype=np.float64)
    rng = np.random.default_rng(0)
    means = [interquartile_mean(rng.choice(x, len(x))) for _ in range(draws)]
    return float(np.std(means) / interquartile_mean(x))


def bare_copy(directory: Path, bare: Path) -> Path:
    """The capture files only, in a directory of their own."""
    shutil.rmtree(bare, ignore_errors=True)
    bare.mkdir(parents=True)
    for f in sorted(directory.glob("*.pcap")):
        shutil.copy2(f, bare / f.name)
    return bare


def failures(report: Any) -> list[dict[str, Any]]:
    """Each failing metric of a verdict: its real and simulated values, its distance and tolerance."""
    return [{"metric": r.metric, "real": r.real, "simulated": r.simulated, "distance": r.distance,
             "tolerance": r.tolerance} for r in report.failures]


def failure_lines(label: str, rows: list[dict[str, Any]]) -> str:
    return "".join(f"\n    {label}{r['metric']}: real {r['real']:.4g}, simulated {r['simulated']:.4g} "
                   f"(distance {r['distance']:.3f}, tolerance {r['tolerance']:.2f})" for r in rows)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


#: Where the ranks of the one-host matrix run (`capture.where`).
ONE_HOST = ("loopback", "namespace")


def cases(args: argparse.Namespace) -> list[CaptureSpec]:
    """The capture specs of the matrices asked for."""
    workers = (2,) if args.quick else (2, 4)
    out: list[CaptureSpec] = []
    if args.matrix in ("hosts", "all"):
        links = ("200mbit",) if args.quick else tuple(LINKS)
        for strategy, model, w, link in itertools.product(STRATEGIES, MODELS, workers, links):
            spec = case_spec(strategy, model, w, "200mbit", args.iterations)
            out.append(spec.model_copy(update={
                "name": f"{strategy}_{model}_w{w}_{link}",
                "capture": spec.capture.model_copy(update={"link": spec.capture.link.model_copy(
                    update=LINKS[link])})}))
    if args.matrix in ("one-host", "all"):
        for strategy, model, w, where in itertools.product(("ddp", "ps"), MODELS, workers, ONE_HOST):
            spec = case_spec(strategy, model, w, "unshaped", args.one_host_iterations)
            out.append(spec.model_copy(update={
                "name": f"{strategy}_{model}_w{w}_{where}",
                "capture": spec.capture.model_copy(update={"where": where})}))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("-o", "--output", default="results/bare")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--one-host-iterations", type=int, default=20)
    ap.add_argument("--matrix", choices=("hosts", "one-host", "all"), default="all")
    ap.add_argument("--quick", action="store_true", help="2 workers, no lossy links")
    ap.add_argument("--reuse", action="store_true", help="analyse captures already in the output directory")
    ap.add_argument("--fit", action="store_true",
                    help="also validate each whole capture with its compute fitted to what it logged (--fit)")
    args = ap.parse_args()
    out = Path(args.output)
    print(f"load average at the start: {load()} (2 cores)")
    header = (f"{'case':34s} {'roles found':16s} {'period found':>12s} {'truth':>9s} {'+-':>6s} {'err':>7s} "
              f"{'(median)':>8s}  {'B/iter found':>13s} {'truth':>13s} {'err':>7s}  {'n':>2s}  verdict")
    print(header)
    rows: list[dict[str, Any]] = []
    for spec in cases(args):
        case = out / spec.name
        t0 = time.monotonic()
        try:
            if not (args.reuse and (case / "meta.json").is_file()):
                capture(spec, case, force=True)
            bare = bare_copy(case, out / "bare" / spec.name)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                real = load_traffic(bare)
                f = analyze(payload_view(real.table), boundaries=real.boundaries, roles=real.roles)
                scenario = out / "bare" / f"{spec.name}.yaml"
                meta = read_meta(case)
                assert meta is not None and meta.scenario is not None
                # the capture's own scenario as `validate --real` takes it from meta.json (its ranks on
                # the capture's hosts, sharing the cores it recorded)
                own = shared_hosts_scenario(Scenario.model_validate(meta.scenario), meta)
                scenario.write_text(yaml.safe_dump(own.model_dump(mode="json")))
                v = validate(bare, out / "validation" / spec.name, spec=scenario)
            want = truth(case)
        except Exception as exc:  # one failing case does not stop the matrix
            print(f"{spec.name:34s} FAILED: {str(exc).splitlines()[0]}", flush=True)
            rows.append({"case": spec.name, "error": str(exc)})
            continue
        r, p, b = f.roles, f.period, f.bytes_per_iteration
        roles = f"{len(r.workers)}w" + (f"+{len(r.servers)}s" if r.servers else "") + f", {len(r.control)} ctl"
        row = {"case": spec.name, "roles": roles, "workers": len(r.workers), "servers": len(r.servers),
               "period_s": p.period_s, "period_truth_s": want["period_s"], "period_median_s": want["period_median_s"],
               "period_mean_s": want["period_mean_s"],
               "period_err": p.period_s / want["period_s"] - 1, "period_truth_se": want["period_se"],
               "period_err_median": p.period_s / want["period_median_s"] - 1,
               "bytes": b.total, "bytes_truth": want["total"], "bytes_err": b.total / want["total"] - 1,
               "per_worker": b.mean, "per_worker_truth": want["per_worker"], "iterations": b.iterations,
               "verdict": v.report.verdict, "wall_s": time.monotonic() - t0}
        row["failures"] = failures(v.report)
        if v.report.failures:
            row["verdict"] += ": " + ", ".join(r.metric for r in v.report.failures)
        if args.fit:  # the whole capture, its compute fitted to what it logged (`validate --real DIR --fit`)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                vf = validate(case, out / "validation-fit" / spec.name, fit=True)
            row["verdict_fit"] = vf.report.verdict + (
                ": " + ", ".join(r.metric for r in vf.report.failures) if vf.report.failures else "")
            row["failures_fit"] = failures(vf.report)
        rows.append(row)
        ok = abs(row["period_err"]) <= 0.05 and abs(row["bytes_err"]) <= 0.02
        print(f"{spec.name:34s} {roles:16s} {p.period_s * 1e3:10.1f}ms {want['period_s'] * 1e3:7.1f}ms "
              f"{want['period_se']:6.1%} {row['period_err']:+7.1%} {row['period_err_median']:+8.1%}  "
              f"{b.total:13,.0f} {want['total']:13,.0f} {row['bytes_err']:+7.2%}  "
              f"{b.iterations:2d}  {row['verdict']}{'' if ok else '   <- off target'}"
              + (f"  | --fit: {row['verdict_fit']}" if args.fit else "")
              + failure_lines("", row["failures"]) + failure_lines("--fit: ", row.get("failures_fit", [])),
              flush=True)
    done = [r for r in rows if "error" not in r]
    period_ok = sum(abs(r["period_err"]) <= 0.05 for r in done)
    bytes_ok = sum(abs(r["bytes_err"]) <= 0.02 for r in done)
    passed = sum(r["verdict"].startswith("PASS") for r in done)
    worst_p = max((abs(r["period_err"]) for r in done), default=math.nan)
    worst_b = max((abs(r["bytes_err"]) for r in done), default=math.nan)
    fit_passed = sum(r.get("verdict_fit", "").startswith("PASS") for r in done)
    # the periods off target that their truth does not know to 5% either (two standard errors)
    unsure = sum(0.05 < abs(r["period_err"]) <= 2 * r["period_truth_se"] for r in done)
    print(f"\nperiod within 5%: {period_ok}/{len(done)} (worst {worst_p:.1%}; of the rest, {unsure} within two "
          f"standard errors of a truth known to no better than 5%); bytes per iteration within 2%: "
          f"{bytes_ok}/{len(done)} (worst {worst_b:.2%}); validate PASS: {passed}/{len(done)}"
          + (f", with --fit: {fit_passed}/{len(done)}" if args.fit else "")
          + f"; failed cases: {len(rows) - len(done)}")
    print(f"load average at the end: {load()}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "bare_captures.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
