"""Write a TrafficTable as a pcap file: simulated transfers as the packets a network would carry.

Each transfer becomes IPv4/TCP packets of at most `mtu` bytes (IP total length) spread evenly
over the transfer's time span, so the IP bytes of the packets sum exactly to the transfer's
bytes. Rank r has its address (`simstudy.addresses`: 10.0.<r // 250>.<r % 250 + 1>). Packets are stored headers only
(Ethernet + IP + TCP, 54 bytes captured), as captures with a short snap length are, so pcap
tools (and simstudy's own reader) count the IP total length, not the captured length.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simstudy.addresses import rank_addresses
from simstudy.files import replacing
from simstudy.table import check_table

HEADERS = 14 + 20 + 20
_RECORD = np.dtype([
    ("ts_sec", "<u4"), ("ts_usec", "<u4"), ("incl_len", "<u4"), ("orig_len", "<u4"),
    ("eth_dst", "V6"), ("eth_src", "V6"), ("eth_type", ">u2"),
    ("ver_ihl", "u1"), ("tos", "u1"), ("ip_len", ">u2"), ("ip_id", ">u2"), ("frag", ">u2"),
    ("ttl", "u1"), ("proto", "u1"), ("ip_sum", ">u2"), ("ip_src", ">u4"), ("ip_dst", ">u4"),
    ("sport", ">u2"), ("dport", ">u2"), ("seq", ">u4"), ("ack", ">u4"), ("off", "u1"), ("flags", "u1"),
    ("win", ">u2"), ("tcp_sum", ">u2"), ("urg", ">u2"),
])
_GLOBAL = np.array([0xA1B23C4D, 2, 4, 0, 0, 65535, 1], dtype="<u4")  # nanosecond pcap, Ethernet
_GLOBAL_HEADER = _GLOBAL[:1].tobytes() + np.array([2, 4], "<u2").tobytes() + _GLOBAL[3:].tobytes()


def _sequence_numbers(src: np.ndarray, dst: np.ndarray, payload: np.ndarray) -> np.ndarray:
    """TCP sequence numbers of packets in time order: each (src, dst) pair is one connection whose
    sequence advances by every payload byte, so no packet looks like a retransmission."""
    flow = pd.factorize(src * (int(dst.max(initial=0)) + 1) + dst)[0]
    order = np.lexsort((np.arange(len(flow)), flow))
    f, size = flow[order], payload[order].astype(np.int64)
    total = np.cumsum(size)
    start = np.r_[True, f[1:] != f[:-1]]
    base = np.maximum.accumulate(np.where(start, total - size, 0))
    seq = np.empty(len(flow), dtype=np.int64)
    seq[order] = total - size - base
    return (seq & 0xFFFFFFFF).astype(np.uint32)


def write_pcap(table: pd.DataFrame, path: str | Path, *, epoch_s: float = 1.7e9, mtu: int = 1500) -> int:
    """Write `table`'s transfers as packets to `path` (a nanosecond pcap); returns the packet count."""
    check_table(table)
    if mtu <= 40:
        raise ValueError(f"mtu must exceed the 40 bytes of IP and TCP headers, got {mtu}")
    nbytes = table["bytes"].to_numpy(np.int64)
    keep = nbytes > 0
    nbytes = nbytes[keep]
    start = table["t_start_s"].to_numpy(np.float64)[keep]
    end = table["t_end_s"].to_numpy(np.float64)[keep]
    src = table["src"].to_numpy(np.int64)[keep]
    dst = table["dst"].to_numpy(np.int64)[keep]
    counts = -(-np.maximum(nbytes, 41) // mtu)  # at least one packet with a header's worth of bytes
    row = np.repeat(np.arange(len(nbytes)), counts)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    k = np.arange(len(row)) - first[row]
    last = k == counts[row] - 1
    size = np.where(last, nbytes[row] - (counts[row] - 1) * mtu, mtu)
    size = np.maximum(size, 40)
    t = start[row] + (end[row] - start[row]) * (k + 1) / counts[row]
    order = np.argsort(t, kind="stable")
    row, size, t = row[order], size[order], t[order]
    ns = np.round((t + epoch_s) * 1e9).astype(np.int64)
    rec = np.zeros(len(row), dtype=_RECORD)
    rec["ts_sec"] = ns // 1_000_000_000
    rec["ts_usec"] = ns % 1_000_000_000
    rec["incl_len"] = HEADERS
    rec["orig_len"] = 14 + size
    rec["eth_type"] = 0x0800
    rec["ver_ihl"] = 0x45
    rec["ip_len"] = size
    rec["ttl"] = 64
    rec["proto"] = 6
    rec["ip_src"] = rank_addresses(src[row])
    rec["ip_dst"] = rank_addresses(dst[row])
    rec["sport"] = 40000 + (dst[row] % 20000)
    rec["dport"] = 29500
    rec["seq"] = _sequence_numbers(src[row].astype(np.int64), dst[row].astype(np.int64), size - 40)
    rec["off"] = 0x50
    rec["flags"] = 0x10
    rec["win"] = 65535
    with replacing(path) as tmp, tmp.open("wb") as f:
        f.write(_GLOBAL_HEADER)
        rec.tofile(f)
    return len(rec)
