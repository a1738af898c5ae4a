"""Keep a capture that the iteration finder once got wrong as what the finder reads: its training
rows' bytes in 1 ms bins per sender, found from the pcaps alone (as `simstudy.traffic.features`
hands them to `find_iterations`), and what the capture's meta.json logged.

    python tests/data/bin_capture.py CAPTURE_DIR NAME

A capture of four ranks is megabytes of pcaps; its bins are tens of kilobytes, and the finder
reads them exactly as it reads the pcaps (it bins at 1 ms itself). Writes tests/data/binned/NAME.csv.gz
(t_start_s, t_end_s, src, bytes: one row per busy bin and sender, at the bin's middle, the first
at 0 so that the bins fall where they fell) and NAME.json (`period_s`: the interquartile mean of
the logged intervals between iteration starts; `bytes_per_iteration`: payload bytes per marked
iteration, all senders; `iterations`). tests/traffic/test_iterations.py reads them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from simstudy.traffic.features import training_rows
from simstudy.traffic.iterations import BIN_S, interquartile_mean
from simstudy.traffic.meta import read_meta
from simstudy.traffic.sources import load_traffic
from simstudy.traffic.timeline import sender_bytes
from simstudy.validation import payload_view

HERE = Path(__file__).resolve().parent / "binned"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("capture", type=Path)
    ap.add_argument("name")
    args = ap.parse_args()
    meta = read_meta(args.capture)
    assert meta is not None, f"{args.capture}: no meta.json"
    with tempfile.TemporaryDirectory() as tmp:  # the pcaps alone, as a capture from elsewhere comes
        for f in sorted(args.capture.glob("*.pcap")):
            shutil.copy2(f, Path(tmp) / f.name)
        rows = training_rows(payload_view(load_traffic(Path(tmp)).table))
    t0 = float(rows["t_start_s"].min())
    ids, volume = sender_bytes(rows, BIN_S, t0)
    b, e = np.nonzero(volume)
    t = (b + 0.5) * BIN_S
    t[t == t.min()] = 0.0
    binned = pd.DataFrame({"t_start_s": t, "t_end_s": t, "src": ids[e], "bytes": np.round(volume[b, e], 3)})
    HERE.mkdir(exist_ok=True)
    binned.sort_values(["t_start_s", "src"]).to_csv(HERE / f"{args.name}.csv.gz", index=False)
    marked = payload_view(load_traffic(args.capture).table)
    marked = marked[marked["op"] != "control"]
    n = int(marked["iteration"].nunique())
    truth = {"period_s": interquartile_mean(np.asarray(meta.start_intervals_s())),
             "bytes_per_iteration": float(marked["bytes"].sum()) / n, "iterations": n}
    (HERE / f"{args.name}.json").write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
