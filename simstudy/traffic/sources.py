"""Where a TrafficTable comes from: a capture directory (pcaps + meta.json) or a run directory.

A capture directory holds one or more pcap/pcapng files and, when simstudy made it, a
`meta.json` with (all optional):

- `ranks`: rank -> endpoint, `{"0": "10.0.0.1:29500", ...}` (or `"ip"`, or `{"ip":..,"port":..}`)
- `control`: endpoints of the torch.distributed store/control connection, `["10.0.0.1:29400"]`
- `iterations`: rank -> `[[start_s, end_s], ...]`, wall-clock seconds on the pcap clock; the
  table then keeps only the packets of these iterations and numbers them in an `iteration` column
- `scenario`: the resolved scenario of the job (used by `validate`)

The time origin of a capture is its first training iteration when `iterations` is given
(packets before it, such as the rendezvous, are dropped), else its first training packet.
A run directory holds `traffic.parquet` (simulated; its time origin is the start of the job).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from simstudy import layout
from simstudy.table import read_table
from simstudy.traffic.meta import CaptureMeta, Experiment, MetaError
from simstudy.traffic.pcap import (
    CAPTURE_SUFFIXES,
    PcapError,
    read_pcap_dir,
    retransmitted_payload,
    to_traffic_table,
)

META = layout.META
RUN_TRAFFIC = layout.TRAFFIC


class SourceError(ValueError):
    """A path that is neither a capture directory nor a run directory, or a bad meta.json."""


@dataclass(frozen=True)
class TrafficSource:
    """A traffic table and what is known about where it came from."""

    path: Path
    kind: Literal["capture", "run"]
    table: pd.DataFrame
    meta: CaptureMeta | None = None
    experiment: Experiment | None = None
    boundaries: dict[int, list[float]] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.path.name


def _label_iterations(table: pd.DataFrame, spans: dict[int, list[tuple[float, float]]]) -> pd.DataFrame:
    """Keep the packets of the marked iterations and number them: iteration k runs from the
    earliest start of k on any rank to the earliest start of k + 1; the last one ends at the
    latest end of the last iteration of any rank (packets after it, such as the final barrier and the teardown, are
    dropped). Without end times the last iteration runs to the end of the capture."""
    n = max(len(v) for v in spans.values())
    starts = np.array([min(v[k][0] for v in spans.values() if len(v) > k) for k in range(n)])
    ends = [v[-1][1] for v in spans.values() if v]
    end = max(ends) if ends and all(math.isfinite(e) for e in ends) else math.inf
    t = table["t_start_s"].to_numpy()
    keep = (t >= starts[0]) & (t <= end)
    out = table[keep].copy()
    out["iteration"] = (np.searchsorted(starts, t[keep], side="right") - 1).astype("int32")
    return out


def load_capture(directory: Path) -> TrafficSource:
    """A capture directory's packets as a TrafficTable aligned on its first training iteration."""
    cap = read_pcap_dir(directory)
    meta = cap.meta
    rank_of = (meta.rank_of or None) if meta else None
    control = (meta.control_keys or None) if meta else None
    iterations = {r: list(v) for r, v in meta.iterations.items()} if meta and meta.iterations else None
    warnings = list(cap.warnings)
    if meta and meta.model_extra:
        warnings.append(f"{directory / META}: keys simstudy does not read: {', '.join(sorted(meta.model_extra))}")
    packets = cap.packets
    again = retransmitted_payload(packets)
    if again.any():  # payload counts what the application sent: a retransmitted byte once
        packets["payload_bytes"] -= again
        warnings.append(f"{directory}: {int(again.sum()):,} TCP payload bytes in {int(np.count_nonzero(again)):,} "
                        "packets were retransmissions; payload_bytes counts them once (bytes, on the wire, "
                        "counts them every time)")
    table = to_traffic_table(packets, rank_of=rank_of, control=control, t0_s=0.0)
    if iterations and all(iterations.values()):
        table = _label_iterations(table, iterations)
        t0 = min(v[0][0] for v in iterations.values())
    else:
        iterations = None
        training = table[table["op"] != "control"]
        t0 = float(training["t_start_s"].min()) if len(training) else 0.0
        table = table[table["t_start_s"] >= t0].copy()
    table["t_start_s"] -= t0
    table["t_end_s"] -= t0
    table = table.reset_index(drop=True)
    bounds = {r: [s - t0 for s, _ in v] for r, v in iterations.items()} if iterations else None
    return TrafficSource(directory, "capture", table, meta, cap.experiment, bounds, warnings)


def load_traffic(path: str | Path) -> TrafficSource:
    """Load a capture directory, a run directory, a pcap file or a traffic.parquet file."""
    path = Path(path)
    if not path.exists():
        raise SourceError(f"{path}: no such file or directory")
    if path.is_file():
        if path.suffix == ".parquet":
            return TrafficSource(path.parent, "run", read_table(path))
        if path.suffix.lower() in CAPTURE_SUFFIXES:
            raise SourceError(f"{path}: give the directory that holds the capture files, not one file")
        raise SourceError(f"{path}: expected a capture directory, a run directory or a traffic.parquet file")
    if (path / RUN_TRAFFIC).is_file():
        return TrafficSource(path, "run", read_table(path / RUN_TRAFFIC))
    if not any(p.suffix.lower() in CAPTURE_SUFFIXES for p in path.iterdir()):
        raise SourceError(f"{path}: neither a run directory (no {RUN_TRAFFIC}) nor a capture directory "
                          f"(no {', '.join('*' + s for s in CAPTURE_SUFFIXES)} files)")
    try:
        return load_capture(path)
    except (PcapError, MetaError) as exc:
        raise SourceError(str(exc)) from None
