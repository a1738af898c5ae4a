"""Regenerate the small real captures in tests/data/real/ (needs root, tcpdump, ethtool and torch).

    sudo python tests/data/make_real_captures.py
    python tests/data/make_real_captures.py --from CAPTURE_DIR NAME   # keep a capture made elsewhere
    python tests/data/make_real_captures.py --binned CAPTURE_DIR NAME # keep it as the finder reads it

Each is a real torch.distributed job captured by `simstudy capture` (a narrow CNN; 2 workers on
200 Mbit/s links, or 3-4 workers and a parameter server as processes of one host; snap length
100), kept as its pcaps only, as a capture from elsewhere would come, and `truth.json`: what the
capture's meta.json logged (the typical time between iteration starts, their interquartile mean
as the analysis takes it, and their median; payload bytes per marked iteration, workers and
servers, and on one host every rank's ports). `--from` keeps a capture directory that
`simstudy capture` wrote elsewhere (a case of benchmarks/bare_captures.py that the analysis once
got wrong) in the same way. tests/traffic/test_real.py
checks that `analyze` finds the roles, the period and the bytes per iteration from the pcaps
alone. Run this only when a change is meant to move them, and say why in the commit.

`--binned` keeps a capture whose pcaps are too large to keep (four ranks are megabytes) as what the
iteration finder reads: its training rows' bytes in 1 ms bins per sender, found from the pcaps
alone, in tests/data/binned/NAME.csv.gz (t_start_s, t_end_s, src, bytes: one row per busy bin and
sender, at the bin's middle, the first at 0 so that the bins fall where they fell; tens of
kilobytes, read exactly as the pcaps are, since the finder bins at 1 ms itself), with NAME.json,
the same truth. tests/traffic/test_iterations.py reads them.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simstudy.capturing.run import capture
from simstudy.spec.capture import CaptureSpec
from simstudy.traffic.features import training_rows
from simstudy.traffic.iterations import BIN_S, interquartile_mean
from simstudy.traffic.meta import read_meta
from simstudy.traffic.sources import load_traffic
from simstudy.traffic.timeline import sender_bytes
from simstudy.validation import payload_view

HERE = Path(__file__).resolve().parent / "real"
BINNED = Path(__file__).resolve().parent / "binned"
MODEL = {"zoo": "small_cnn", "options": {"width": 8}}
PS = {"kind": "parameter_server", "servers": 1, "mode": "sync"}
#: Two workers on a 200 Mbit/s link (one host each), and jobs whose ranks are processes of one host
#: (every rank in one network namespace, on one address: captured on its loopback), 20 iterations.
JOBS = {
    "ddp_w2": {"parallelism": {"dp": 2}},
    "ps_w2": {"parallelism": {"dp": 2, "aggregation": PS}},
    "one_host_ddp_w4": {"parallelism": {"dp": 4}, "where": "namespace"},
    "one_host_ps_w3": {"parallelism": {"dp": 3, "aggregation": PS}, "where": "namespace"},
}


def truth_of(cap: Path) -> dict[str, Any]:
    """What a capture's meta.json logged: the typical time between iteration starts, payload bytes
    per marked iteration, workers and servers, and every worker's iteration starts."""
    meta = read_meta(cap)
    assert meta is not None, f"{cap} has no meta.json"
    diffs = meta.start_intervals_s()
    table = payload_view(load_traffic(cap).table)
    table = table[table["op"] != "control"]
    n = int(table["iteration"].nunique())
    return {"period_s": interquartile_mean(np.asarray(diffs)), "period_median_s": statistics.median(diffs),
            "payload_per_iteration": float(table["bytes"].sum()) / n,
            "workers": len(meta.iterations), "servers": len(meta.ranks) - len(meta.iterations),
            "iterations_marked": n,
            "starts_s": {str(r): [s for s, _ in spans] for r, spans in meta.iterations.items()}}


def keep(cap: Path, name: str) -> None:
    """Copy a capture's pcaps to tests/data/real/NAME with the truth its meta.json logged."""
    meta = read_meta(cap)
    assert meta is not None, f"{cap} has no meta.json"
    out = HERE / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in sorted(cap.glob("*.pcap")):
        shutil.copy2(f, out / f.name)
    truth = truth_of(cap)
    # a listening socket's unspecified address ([::]:29500, the store's) is no host
    hosts = {e.ip for ends in meta.ranks.values() for e in ends if not ipaddress.ip_address(e.ip).is_unspecified}
    if len(hosts) == 1:  # one host: each rank's ports (its sockets, from /proc)
        truth["endpoints"] = {str(r): [e.key for e in ends] for r, ends in meta.ranks.items()}
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    sizes = ", ".join(f"{f.name} {f.stat().st_size:,} B" for f in sorted(out.glob("*.pcap")))
    print(f"{name}: {sizes}; {truth}")


def keep_binned(cap: Path, name: str) -> None:
    """A capture's training bytes in 1 ms bins per sender, found from its pcaps alone, to
    tests/data/binned/NAME.csv.gz, and the truth its meta.json logged to NAME.json."""
    with tempfile.TemporaryDirectory() as tmp:  # the pcaps alone, as a capture from elsewhere comes
        for f in sorted(cap.glob("*.pcap")):
            shutil.copy2(f, Path(tmp) / f.name)
        rows = training_rows(payload_view(load_traffic(Path(tmp)).table))
    ids, volume = sender_bytes(rows, BIN_S, float(rows["t_start_s"].min()))
    b, e = np.nonzero(volume)
    t = (b + 0.5) * BIN_S
    t[t == t.min()] = 0.0
    binned = pd.DataFrame({"t_start_s": t, "t_end_s": t, "src": ids[e], "bytes": np.round(volume[b, e], 3)})
    BINNED.mkdir(exist_ok=True)
    binned.sort_values(["t_start_s", "src"]).to_csv(BINNED / f"{name}.csv.gz", index=False)
    (BINNED / f"{name}.json").write_text(json.dumps(truth_of(cap), indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--from", dest="source", nargs=2, metavar=("CAPTURE_DIR", "NAME"))
    ap.add_argument("--binned", nargs=2, metavar=("CAPTURE_DIR", "NAME"))
    args = ap.parse_args()
    if args.source:
        keep(Path(args.source[0]), args.source[1])
        return
    if args.binned:
        keep_binned(Path(args.binned[0]), args.binned[1])
        return
    for name, job in JOBS.items():
        where = job.pop("where", "namespaces")
        settings = {"iterations": 6, "link": {"rate_mbit": 200}} if where == "namespaces" else {
            "iterations": 20, "where": where}
        spec = CaptureSpec.model_validate({
            "name": name, "model": MODEL, **job, "training": {"batch_size_per_worker": 256},
            "capture": {"warmup": 1, "calibration": 1, "snaplen": 100, **settings},
        })
        with tempfile.TemporaryDirectory() as tmp:
            cap = Path(tmp) / name
            capture(spec, cap)
            shutil.copytree(cap, Path(tempfile.gettempdir()) / f"real-{name}", dirs_exist_ok=True)  # for a look
            keep(cap, name)


if __name__ == "__main__":
    main()
