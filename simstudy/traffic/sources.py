"""Where a TrafficTable comes from: a capture directory (pcaps + meta.json) or a run directory.

A capture directory holds one or more pcap/pcapng files (one per host, or one for all) and,
when simstudy made it, a `meta.json` (`simstudy.traffic.meta.CaptureMeta`; all optional):

- `ranks`: rank -> endpoint, `{"0": "10.0.0.1:29500", ...}` (or `"ip"`, or `{"ip":..,"port":..}`)
- `control`: endpoints of the torch.distributed store/control connection, `["10.0.0.1:29400"]`
- `servers`: the ranks that are parameter servers
- `iterations`: rank -> `[[start_s, end_s], ...]`, wall-clock seconds on the pcap clock; the
  table then keeps only the packets of these iterations and numbers them in an `iteration` column
- `scenario`: the resolved scenario of the job (used by `validate`)

Without `ranks` (a capture from elsewhere), or when the user gives `--ranks`, who is who comes
from `simstudy.traffic.roles` (or the user): `TrafficSource.roles` says which and why.

The time origin of a capture is its first training iteration when `iterations` is given
(packets before it, such as the rendezvous, are dropped), else its first training packet.
A run directory holds `traffic.parquet` (simulated; its time origin is the start of the job).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from simstudy import layout
from simstudy.table import read_table
from simstudy.traffic.meta import CaptureMeta, Experiment, MetaError, RankMap
from simstudy.traffic.pcap import (
    CAPTURE_SUFFIXES,
    PcapError,
    read_pcap_dir,
    sequence_advance,
    to_traffic_table,
)
from simstudy.traffic.roles import Roles, apply, classify, given, shifted

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
    roles: Roles | None = None
    """Who is who (captures: from --ranks, meta.json or the traffic; runs: None, found by `analyze`)."""

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


#: Packets further than this from every other packet at either end of a capture are stray
#: timestamps (a corrupt record, a clock that jumped), dropped with a warning.
STRAY_GAP_S = 3600.0
#: A capture spanning more than this (after stray packets are dropped) is refused: its 1 ms
#: series would not fit in memory.
MAX_SPAN_S = 86400.0


def _drop_strays(packets: pd.DataFrame, directory: Path, warnings: list[str]) -> pd.DataFrame:
    """Packets separated from the rest by more than STRAY_GAP_S at either end, when they are at
    most 1% of the capture, dropped with a warning; SourceError when what is left spans more
    than MAX_SPAN_S."""
    t = np.sort(packets["time"].to_numpy())
    t = t[np.isfinite(t)]
    if len(t) < 2:
        return packets
    gaps = np.flatnonzero(np.diff(t) > STRAY_GAP_S)
    few = max(1, len(t) // 100)
    lo_i = max((g + 1 for g in gaps if g + 1 <= few), default=0)
    hi_i = min((g + 1 for g in gaps if len(t) - (g + 1) <= few), default=len(t))
    lo, hi = t[lo_i], t[hi_i - 1]
    if hi - lo > MAX_SPAN_S:
        raise SourceError(f"{directory}: the packets span {(hi - lo) / 3600:,.1f} hours (at most "
                          f"{MAX_SPAN_S / 3600:g}): split the capture, or check its timestamps")
    if lo_i == 0 and hi_i == len(t):
        return packets
    time = packets["time"].to_numpy()
    keep = (time >= lo) & (time <= hi)
    warnings.append(f"{directory}: {int((~keep).sum())} packet(s) more than {STRAY_GAP_S:g} s away from all "
                    "others were left out (stray timestamps)")
    return packets[keep].reset_index(drop=True)


def _whole_processes(packets: pd.DataFrame, rank_of: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """`rank_of` with, for every rank given by an `address:port` of a process among others on its
    address (loopback, one host), the other ports of that process (`simstudy.traffic.processes`):
    a rank may be named by one of its endpoints, its listening port say. Returns the map and what
    it added."""
    if not any(":" in key.rsplit("]", 1)[-1] for key in rank_of):
        return rank_of, {}
    places = to_traffic_table(packets, t0_s=0.0).attrs.get("places", {})
    added: dict[str, int] = {}
    for place in places.values():
        if not place.process:
            continue
        named = {rank_of[e] for e in place.endpoints if e in rank_of}
        if len(named) == 1:
            r = named.pop()
            added.update({e: r for e in place.endpoints if e not in rank_of})
    return {**rank_of, **added}, added


def load_capture(directory: Path, *, rank_map: RankMap | None = None) -> TrafficSource:
    """A capture directory's packets as a TrafficTable aligned on its first training iteration.

    Ranks and control endpoints come from `rank_map` (`--ranks`), else from meta.json, else
    from the traffic itself (`simstudy.traffic.roles`): workers first, then parameter servers,
    control endpoints marked `op == "control"` and hosts without training traffic rank -1. A rank
    given by one `address:port` of a process that shares its address with others stands for
    every port of that process (`simstudy.traffic.processes`)."""
    cap = read_pcap_dir(directory)
    meta = cap.meta
    stated = rank_map if rank_map is not None else (meta if meta is not None and meta.ranks else None)
    iterations = {r: list(v) for r, v in meta.iterations.items()} if meta and meta.iterations else None
    warnings = list(cap.warnings)
    if meta and meta.model_extra:
        warnings.append(f"{directory / META}: keys simstudy does not read: {', '.join(sorted(meta.model_extra))}")
    packets = _drop_strays(cap.packets, directory, warnings)
    # payload counts what the application sent: a retransmitted byte once, a byte the capture missed too
    sent = sequence_advance(packets)
    diff = sent - packets["payload_bytes"].to_numpy(dtype=np.int64)
    again, missed = np.maximum(-diff, 0), np.maximum(diff, 0)
    packets["payload_bytes"] = sent
    if again.any():
        warnings.append(f"{directory}: {int(again.sum()):,} TCP payload bytes in {int(np.count_nonzero(again)):,} "
                        "packets were retransmissions; payload_bytes counts them once (bytes, on the wire, "
                        "counts them every time)")
    if missed.any():
        warnings.append(f"{directory}: {int(missed.sum()):,} TCP payload bytes in {int(np.count_nonzero(missed)):,} "
                        "gaps of sequence numbers were carried by no packet the capture holds (not captured, or "
                        "captured later out of order); payload_bytes counts them at the packet after each gap")
    if stated is not None:
        control = stated.control_keys or (meta.control_keys if meta and rank_map is not None else [])
        rank_of, found = _whole_processes(packets, stated.rank_of)
        table = to_traffic_table(packets, rank_of=rank_of, control=control or None, t0_s=0.0)
        source = "rank map" if rank_map is not None else "meta.json"
        servers = rank_map.servers if rank_map is not None else sorted(meta.servers) if meta else []
        ends = {r: [e.key for e in ends] for r, ends in stated.ranks.items()}
        for key, r in found.items():
            ends.setdefault(r, []).append(f"{key} (its process)")
        roles = given(source, ends, servers, control, table)
    else:  # meta.json may still name the control endpoints
        control = meta.control_keys if meta else []
        table = to_traffic_table(packets, control=control or None, t0_s=0.0)
        roles, renumber, control_row = classify(table, table.attrs.get("rank_labels"),
                                                places=table.attrs.get("places"))
        if table.attrs.get("processes"):
            roles = replace(roles, reason=f"{roles.reason}; {table.attrs['processes']}")
        table = apply(table, renumber, control_row)
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
    roles = shifted(roles, -t0)
    bounds = {r: [s - t0 for s, _ in v] for r, v in iterations.items()} if iterations else None
    return TrafficSource(directory, "capture", table, meta, cap.experiment, bounds, warnings, roles)


def load_traffic(path: str | Path, *, rank_map: RankMap | None = None) -> TrafficSource:
    """Load a capture directory, a run directory, a pcap file or a traffic.parquet file
    (`rank_map`: the ranks and roles of a capture's endpoints, instead of meta.json or the traffic)."""
    path = Path(path)
    try:
        return _load(path, rank_map)
    except OSError as exc:  # unreadable: permissions, a device, a file that vanished
        raise SourceError(f"{exc.filename or path}: cannot be read: {exc.strerror or exc}") from None


def _load(path: Path, rank_map: RankMap | None) -> TrafficSource:
    if not path.exists():
        raise SourceError(f"{path}: no such file or directory")
    if not path.is_file() and not path.is_dir():
        raise SourceError(f"{path}: not a directory or a regular file: expected a capture directory (pcap/pcapng "
                          f"files), a run directory or a traffic.parquet file")
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
        source = load_capture(path, rank_map=rank_map)
    except (PcapError, MetaError) as exc:
        raise SourceError(str(exc)) from None
    if len(source.table) == 0:
        raise SourceError(f"{path}: the capture files hold no IPv4/IPv6 packets"
                          + (f" ({'; '.join(source.warnings)})" if source.warnings else ""))
    return source
