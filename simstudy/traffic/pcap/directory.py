"""Capture directories: one directory per experiment, one capture file per host, optional meta.json."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd

from simstudy.traffic.meta import CaptureMeta, Experiment, parse_experiment_name, read_meta
from simstudy.traffic.pcap.base import DEFAULT_CHUNK_BYTES, PcapError, PcapResult
from simstudy.traffic.pcap.reader import read_pcap
from simstudy.traffic.pcap.table import sort_ips, to_traffic_table

#: Extensions read by `read_pcap_dir`.
CAPTURE_SUFFIXES: Final = (".pcap", ".pcapng", ".cap")


@dataclass(frozen=True, eq=False)
class CaptureDir:
    """All captures of one experiment directory.

    `packets` concatenates the files' packet tables (file order) with a `file` column indexing
    `files`; `results` keeps each file's summary (their `packets` are empty).
    """

    directory: Path
    files: tuple[Path, ...]
    packets: pd.DataFrame
    results: tuple[PcapResult, ...]
    experiment: Experiment | None
    meta: CaptureMeta | None
    warnings: list[str]

    def traffic_table(self, *, t0_s: float | None = None) -> pd.DataFrame:
        """The TrafficTable of this directory, with ranks and control endpoints from `meta.json` if present."""
        meta = self.meta
        return to_traffic_table(self.packets, rank_of=(meta.rank_of or None) if meta else None,
                                control=(meta.control_keys or None) if meta else None, t0_s=t0_s)


def read_pcap_dir(directory: str | Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> CaptureDir:
    """Read every *.pcap, *.pcapng and *.cap file of a directory (sorted by name).

    Raises PcapError when the directory holds no capture file, MetaError when its meta.json is not valid.
    """
    directory = Path(directory)
    files = tuple(sorted(p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in CAPTURE_SUFFIXES))
    if not files:
        raise PcapError(f"{directory}: no capture files ({', '.join('*' + s for s in CAPTURE_SUFFIXES)})")
    results: list[PcapResult] = []
    frames: list[pd.DataFrame] = []
    for i, f in enumerate(files):
        r = read_pcap(f, chunk_bytes=chunk_bytes)
        frame = r.packets
        frame["file"] = np.full(len(frame), i, dtype=np.int32)
        frames.append(frame)
        results.append(replace(r, packets=frame.iloc[:0]))
    meta = read_meta(directory)
    return CaptureDir(
        directory=directory,
        files=files,
        packets=_concat_packets(frames),
        results=tuple(results),
        experiment=parse_experiment_name(directory.resolve().name),
        meta=meta,
        warnings=[w for r in results for w in r.warnings],
    )


def _concat_packets(frames: list[pd.DataFrame]) -> pd.DataFrame:
    cats = sort_ips({c for f in frames for col in ("src_ip", "dst_ip") for c in f[col].cat.categories})
    for f in frames:
        for col in ("src_ip", "dst_ip"):
            f[col] = f[col].cat.set_categories(cats)
    out = pd.concat(frames, ignore_index=True)
    frames.clear()
    return out
