"""A run's per-rank timeline in the Chrome trace event format (`simstudy trace RUN -o trace.json`),
to open in Perfetto (ui.perfetto.dev) or chrome://tracing beside PyTorch profiler and Chakra
timeline traces.

Format (Trace Event Format, the JSON Object Format): `{"traceEvents": [...], "displayTimeUnit": "ms"}`.
Every event has `ph` (phase), `ts` (microseconds), `pid`, `tid`; we write:
* `X` complete events (`name`, `cat`, `ts`, `dur`, `args`) for every compute and collective span of
  the run's ET nodes (spans.parquet) and for every transfer (traffic.parquet), a transfer twice:
  on its sender (`send`) and on its receiver (`recv`);
* flow events `s` (on the sending slice) and `f` with `bp: "e"` (bound to the enclosing receiving
  slice) sharing an `id`: the arrow from sender to receiver;
* `M` metadata events `process_name` (a process per rank), `thread_name` and `thread_sort_index`.
Slices of one thread must nest; transfers of one rank overlap in time, so they are dealt onto
lanes (threads) where they do not, at most MAX_LANES per direction; what does not fit is counted
and left out.

Bounded output: the first `iterations` time slots (finish / iterations each), the first `ranks`
ranks, and at most `transfers` transfers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simstudy import layout
from simstudy.backends.rundir import run_iterations
from simstudy.report.files import write_text
from simstudy.table import read_table

MAX_LANES = 8
_COMPUTE_TID, _COMM_TID, _SEND_TID, _RECV_TID = 1, 2, 10, 30


class TraceError(ValueError):
    """A directory that is not a run with spans: one line naming it and what was expected."""


@dataclass(frozen=True)
class ChromeTrace:
    events: list[dict[str, Any]]
    spans: int
    transfers: int
    left_out: int
    window_s: tuple[float, float]

    def counts(self) -> str:
        lost = f", {self.left_out:,} transfers left out (lanes full or over the cap)" if self.left_out else ""
        return (f"{self.spans:,} spans, {self.transfers:,} transfers with flow arrows{lost}; "
                f"{self.window_s[0] * 1e3:.3f}-{self.window_s[1] * 1e3:.3f} ms")


def _lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane per interval (in start order) where it overlaps no other of that lane; -1: none free."""
    free_at = np.full(MAX_LANES, -np.inf)
    out = np.full(len(start), -1, dtype=np.int64)
    for i in np.argsort(start, kind="stable"):
        k = int(np.argmax(free_at <= start[i]))
        if free_at[k] <= start[i]:
            out[i] = k
            free_at[k] = end[i]
    return out


def _span_events(s: pd.DataFrame, events: list[dict[str, Any]]) -> int:
    """Append a complete event per span of `s` (compute, collectives, sends, receives), overlapping
    spans of a rank on lanes of their own; the number appended."""
    n_spans = 0
    for kind, tid in (("compute", _COMPUTE_TID), ("collective", _COMM_TID), ("send", _COMM_TID),
                      ("recv", _COMM_TID)):
        part = s[s["kind"] == kind]
        for rank, grp in part.groupby("rank"):
            lanes = _lanes(grp["start_ns"].to_numpy(np.float64), grp["end_ns"].to_numpy(np.float64))
            for (_, row), lane in zip(grp.iterrows(), lanes, strict=True):
                events.append({"ph": "X", "name": str(row["name"]), "cat": kind, "pid": int(rank),
                               "tid": tid + 100 * max(int(lane), 0), "ts": row["start_ns"] / 1e3,
                               "dur": (row["end_ns"] - row["start_ns"]) / 1e3,
                               "args": {"node": int(row["node"]), "kind": kind}})
                n_spans += 1
    return n_spans


def _transfer_events(t: pd.DataFrame, keep: set[int], hi: float, transfers: int,
                     events: list[dict[str, Any]]) -> tuple[int, int]:
    """Append the send and receive events of the transfers between ranks `keep` that start before
    `hi` (at most `transfers`, when positive), joined by flow arrows; (transfers drawn, left out)."""
    n_tr = left = 0
    t = t[t["src"].isin(keep) & t["dst"].isin(keep) & (t["t_start_s"] < hi)].sort_values("t_start_s")
    if transfers > 0 and len(t) > transfers:
        left += len(t) - transfers
        t = t.head(transfers)
    start = t["t_start_s"].to_numpy(np.float64)
    end = np.maximum(t["t_end_s"].to_numpy(np.float64), start + 1e-9)
    send_lane = np.full(len(t), -1, dtype=np.int64)
    recv_lane = np.full(len(t), -1, dtype=np.int64)
    src = t["src"].to_numpy()
    dst = t["dst"].to_numpy()
    for r in keep:
        m = np.flatnonzero(src == r)
        send_lane[m] = _lanes(start[m], end[m])
        m = np.flatnonzero(dst == r)
        recv_lane[m] = _lanes(start[m], end[m])
    cols = {c: t[c].to_numpy() for c in ("op", "bytes", "iteration", "flow") if c in t.columns}
    used: set[tuple[int, int]] = set()
    for i in range(len(t)):
        if send_lane[i] < 0 or recv_lane[i] < 0:
            left += 1
            continue
        name = str(cols["op"][i]) if "op" in cols else "transfer"
        args = {"bytes": int(cols["bytes"][i]), "src": int(src[i]), "dst": int(dst[i])}
        if "iteration" in cols:
            args["iteration"] = int(cols["iteration"][i])
        if "flow" in cols:
            args["flow"] = int(cols["flow"][i])
        ts, dur = start[i] * 1e6, (end[i] - start[i]) * 1e6
        stid, rtid = _SEND_TID + int(send_lane[i]), _RECV_TID + int(recv_lane[i])
        used.update({(int(src[i]), stid), (int(dst[i]), rtid)})
        events.append({"ph": "X", "name": f"{name} -> {int(dst[i])}", "cat": "send", "pid": int(src[i]),
                       "tid": stid, "ts": ts, "dur": dur, "args": args})
        events.append({"ph": "X", "name": f"{name} <- {int(src[i])}", "cat": "recv", "pid": int(dst[i]),
                       "tid": rtid, "ts": ts, "dur": dur, "args": args})
        events.append({"ph": "s", "name": name, "cat": "transfer", "id": i, "pid": int(src[i]), "tid": stid,
                       "ts": ts})
        events.append({"ph": "f", "bp": "e", "name": name, "cat": "transfer", "id": i, "pid": int(dst[i]),
                       "tid": rtid, "ts": ts})
        n_tr += 1
    for pid, tid in sorted(used):
        label = f"send {tid - _SEND_TID}" if tid < _RECV_TID else f"recv {tid - _RECV_TID}"
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                       "args": {"sort_index": tid}})
    return n_tr, left


def chrome_trace(run: Path, *, iterations: int = 2, ranks: int = 64, transfers: int = 20_000) -> ChromeTrace:
    """The trace of run directory `run` (0 for any limit: no limit)."""
    if not run.is_dir() or not (run / layout.RUN_JSON).is_file():
        raise TraceError(f"{run}: not a run directory (expected {layout.RUN_JSON}; make one with simstudy run)")
    if not (run / layout.SPANS).is_file():
        raise TraceError(f"{run / layout.SPANS}: missing: this run kept no per-node spans (rerun it with simstudy run)")
    info = json.loads((run / layout.RUN_JSON).read_text())
    finish_s = float(info.get("finish_ns", 0)) * 1e-9
    spans = pd.read_parquet(run / layout.SPANS)
    n_it = max(run_iterations(run), 1)
    hi = finish_s if iterations <= 0 or iterations >= n_it else finish_s * iterations / n_it
    window = (0.0, hi)
    all_ranks = sorted(int(r) for r in spans["rank"].unique())
    keep = set(all_ranks if ranks <= 0 else all_ranks[:ranks])
    events: list[dict[str, Any]] = []
    for r in sorted(keep):
        events.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}})
        for tid, name in ((_COMPUTE_TID, "compute"), (_COMM_TID, "collectives")):
            events.append({"ph": "M", "name": "thread_name", "pid": r, "tid": tid, "args": {"name": name}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": r, "tid": tid, "args": {"sort_index": tid}})
    s = spans[spans["rank"].isin(keep) & (spans["start_ns"] * 1e-9 < hi) & (spans["kind"] != "other")]
    n_spans = _span_events(s, events)
    n_tr = left = 0
    if (run / layout.TRAFFIC).is_file() and transfers != 0:
        n_tr, left = _transfer_events(read_table(run / layout.TRAFFIC), keep, hi, transfers, events)
    return ChromeTrace(events, n_spans, n_tr, left, window)


def write_trace(trace: ChromeTrace, out: Path) -> Path:
    """Write `{"traceEvents": ..., "displayTimeUnit": "ms"}` atomically."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_text(out, json.dumps({"traceEvents": trace.events, "displayTimeUnit": "ms",
                                       "otherData": {"generator": "simstudy trace"}}))
