"""Capture directories: one directory per experiment, one capture file per host, optional meta.json."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from simstudy.traffic.pcap.base import DEFAULT_CHUNK_BYTES, PcapError, PcapResult
from simstudy.traffic.pcap.reader import read_pcap
from simstudy.traffic.pcap.table import sort_ips, to_traffic_table

# ---------------------------------------------------------------------------------------------
# Capture directories


#: Extensions read by `read_pcap_dir`.
CAPTURE_SUFFIXES: Final = (".pcap", ".pcapng", ".cap")
_DELAY = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|ms|s)$")
_DELAY_S: Final = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_experiment_name(name: str) -> dict[str, Any] | None:
    """Experiment fields from a directory named `framework-model-optimizer-batchsize-backend-delay[-topology]`.

    Returns {framework, model, optimizer, batch_size (int), backend, delay (as written, e.g. "10ms"),
    delay_s (float), topology (or None)}, or None when the name does not have that shape. The model
    may itself contain hyphens: the name is anchored on the batch size and the delay.
    """
    parts = name.split("-")
    for j in range(4, len(parts)):
        m = _DELAY.match(parts[j])
        if not m or not parts[j - 2].isdigit():
            continue
        if j - 3 < 2 or not all(parts[:j - 3]) or not parts[j - 3] or not parts[j - 1]:
            continue
        if not all(parts[j + 1 :]):
            continue
        topology = "-".join(parts[j + 1 :]) or None
        return {
            "framework": parts[0],
            "model": "-".join(parts[1 : j - 3]),
            "optimizer": parts[j - 3],
            "batch_size": int(parts[j - 2]),
            "backend": parts[j - 1],
            "delay": parts[j],
            "delay_s": float(m.group(1)) * _DELAY_S[m.group(2)],
            "topology": topology,
        }
    return None


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
    experiment: dict[str, Any] | None
    meta: dict[str, Any] | None
    warnings: list[str]

    def traffic_table(self, *, t0_s: float | None = None) -> pd.DataFrame:
        """The TrafficTable of this directory, with ranks and control endpoints from `meta.json` if present."""
        meta = self.meta or {}
        return to_traffic_table(self.packets, rank_of=ranks_from_meta(meta) or None,
                                control=control_from_meta(meta) or None, t0_s=t0_s)


def read_pcap_dir(directory: str | Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> CaptureDir:
    """Read every *.pcap, *.pcapng and *.cap file of a directory (sorted by name).

    Raises PcapError when the directory holds no capture file.
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


def read_meta(directory: Path) -> dict[str, Any] | None:
    """The directory's meta.json (None when there is none); PcapError when it is not a JSON object."""
    path = directory / "meta.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PcapError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PcapError(f"{path}: expected a JSON object")
    return data


def _endpoint_key(where: Any, field: str) -> str:
    if isinstance(where, str):
        return where
    if isinstance(where, Mapping) and "ip" in where:
        return f"{where['ip']}:{where['port']}" if where.get("port") is not None else str(where["ip"])
    raise PcapError(f"meta.json: {field}: expected \"ip:port\", \"ip\" or {{ip, port}}, got {where!r}")


def ranks_from_meta(meta: Mapping[str, Any]) -> dict[str, int]:
    """`meta["ranks"]` ({"<rank>": "ip:port", "ip", {"ip": ..., "port": ...} or a list of these}) as
    {"ip:port" or "ip": rank}."""
    ranks = meta.get("ranks") or {}
    if not isinstance(ranks, Mapping):
        raise PcapError("meta.json: ranks: expected a mapping rank -> endpoint")
    out: dict[str, int] = {}
    for rank, where in ranks.items():
        if not str(rank).lstrip("-").isdigit():
            raise PcapError(f"meta.json: ranks: {rank!r} is not a rank number")
        for w in where if isinstance(where, list) else [where]:
            out[_endpoint_key(w, f"ranks.{rank}")] = int(rank)
    return out


def control_from_meta(meta: Mapping[str, Any]) -> list[str]:
    """`meta["control"]` as a list of "ip:port" texts (entries may also be {"ip": ..., "port": ...})."""
    return [_endpoint_key(w, "control") for w in meta.get("control") or []]
