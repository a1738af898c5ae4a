"""Collecting decoded columns across chunks into the packet table (one allocation, addresses numbered)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from simstudy.traffic.pcap.base import BLOCK_PACKETS, I64, MALFORMED, NON_IP, OK, Interface, PcapResult
from simstudy.traffic.pcap.buffer import Buf
from simstudy.traffic.pcap.decode import Decoded, Headers, decode

# ---------------------------------------------------------------------------------------------
# Collecting columns across chunks


class _Addresses:
    """Global address numbering: one code per distinct address, in order of first appearance."""

    def __init__(self) -> None:
        self.keys: list[int] = []  # IPv4: the address; IPv6: 2**128 + the address
        self._code: dict[int, int] = {}

    def _codes_for(self, keys: Iterable[int]) -> NDArray[np.int32]:
        out = []
        for k in keys:
            c = self._code.get(k)
            if c is None:
                c = self._code[k] = len(self.keys)
                self.keys.append(k)
            out.append(c)
        return np.array(out, dtype=np.int32)

    def codes4(self, addr: NDArray[np.uint32]) -> NDArray[np.int32]:
        if len(addr) and bool((addr == addr[0]).all()):  # one address (the capturing host, often)
            return np.full(len(addr), self._codes_for([int(addr[0])])[0], dtype=np.int32)
        local, uniq = pd.factorize(addr)
        codes: NDArray[np.int32] = self._codes_for(int(u) for u in uniq)[local]
        return codes

    def codes6(self, addr: NDArray[np.uint64]) -> NDArray[np.int32]:
        hi, uhi = pd.factorize(addr[:, 0])
        lo, ulo = pd.factorize(addr[:, 1])
        local, uniq = pd.factorize(hi * len(ulo) + lo)
        keys = ((1 << 128) + (int(uhi[u // len(ulo)]) << 64) + int(ulo[u % len(ulo)]) for u in uniq.tolist())
        codes: NDArray[np.int32] = self._codes_for(keys)[local]
        return codes

    def categories(self) -> tuple[list[str], NDArray[np.int32]]:
        """Address texts sorted numerically (IPv4 first), and old code -> new code."""
        order = sorted(range(len(self.keys)), key=lambda i: self.keys[i])
        remap = np.empty(len(self.keys), dtype=np.int32)
        remap[np.array(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int32)
        return [_key_text(self.keys[i]) for i in order], remap


def _key_text(key: int) -> str:
    return str(ipaddress.IPv4Address(key)) if key < (1 << 128) else str(ipaddress.IPv6Address(key - (1 << 128)))


#: Packet table columns and the dtypes they are collected in (addresses as codes, categorical at the end;
#: the code columns widen when there are more than 127 or 32767 addresses).
_COLUMNS: Final[dict[str, type[np.generic]]] = {
    "time": np.float64, "src_ip": np.int8, "dst_ip": np.int8, "sport": np.int32, "dport": np.int32,
    "proto": np.uint8, "ip_bytes": np.int64, "payload_bytes": np.int64, "cap_bytes": np.int32,
    "tcp_seq": np.uint32, "tcp_flags": np.uint8,
}


class Collector:
    """Decodes chunks of packet records block by block, straight into the output columns.

    The columns are allocated once from an estimate of the file's packet count (exact for a
    constant-stride capture) and grown if the estimate falls short, so chunks are not joined at
    the end: the peak is the output plus one chunk's scratch arrays.
    """

    def __init__(self, file_bytes: int) -> None:
        self.cols: dict[str, NDArray[Any]] = {c: np.empty(0, dtype=d) for c, d in _COLUMNS.items()}
        self.size = 0  # rows kept so far
        self.file_bytes = file_bytes
        self.addresses = _Addresses()
        self.records = 0
        self.non_ip = 0
        self.malformed = 0
        self.l4_truncated = 0

    def _reserve(self, n: int, expected: int) -> None:
        capacity = len(self.cols["time"])
        if self.size + n <= capacity:
            return
        grown = max(self.size + n, expected, capacity + capacity // 2)
        for name, old in self.cols.items():
            new = np.empty(grown, dtype=old.dtype)
            new[: self.size] = old[: self.size]
            self.cols[name] = new

    def add(self, buf: Buf, n: int, header: Callable[[int, int], Headers], span: tuple[int, int]) -> int:
        """Decode n packet records found in the file bytes `span`; returns how many were decoded.

        `header(i0, i1)` gives where records i0..i1-1 start, their lengths, times and link types; it
        may return fewer rows than asked (a record that breaks a constant stride), which ends the chunk.
        """
        if n == 0:
            return 0
        ahead = (self.file_bytes - span[1]) * n // max(span[1] - span[0], 1)
        self._reserve(n, self.size + n + ahead + 1024)
        s = self.size
        out = Decoded(
            status=np.empty(n, dtype=np.uint8), src4=np.empty(n, dtype=np.uint32),
            dst4=np.empty(n, dtype=np.uint32), proto=self.cols["proto"][s : s + n],
            sport=self.cols["sport"][s : s + n], dport=self.cols["dport"][s : s + n],
            ip_bytes=self.cols["ip_bytes"][s : s + n], payload=self.cols["payload_bytes"][s : s + n],
            seq=self.cols["tcp_seq"][s : s + n], flags=self.cols["tcp_flags"][s : s + n],
            l4_truncated=np.zeros(n, dtype=np.bool_),
        )
        time, cap_bytes = self.cols["time"][s : s + n], self.cols["cap_bytes"][s : s + n]
        done = n
        for i0 in range(0, n, BLOCK_PACKETS):
            i1 = min(n, i0 + BLOCK_PACKETS)
            h = header(i0, i1)
            m = h.data.n
            block = out.rows(i0, i0 + m)
            decode(buf, h, block)
            time[i0 : i0 + m] = h.time
            cap_bytes[i0 : i0 + m] = h.cap
            self._codes4(block, s + i0)
            for rows, s6, d6 in zip(block.v6_rows, block.src6, block.dst6, strict=True):
                out.add_v6(rows + i0, s6, d6)
            if m < i1 - i0:
                done = i0 + m
                break
        if out.v6_rows:
            self._codes6(out, s)
        self._keep(out, done)
        return done

    def _codes4(self, block: Decoded, at: int) -> None:
        """IPv4 address codes of a block's good rows, stored from row `at` (other rows are left as they are)."""
        ok = block.status == OK
        for rows in block.v6_rows:
            ok[rows] = False
        book = self.addresses
        if ok.all():
            self._put_codes(at, None, book.codes4(block.src4), book.codes4(block.dst4))
        elif ok.any():
            self._put_codes(at, np.flatnonzero(ok), book.codes4(block.src4[ok]), book.codes4(block.dst4[ok]))

    def _codes6(self, d: Decoded, at: int) -> None:
        rows = np.concatenate(d.v6_rows)
        good = d.status[rows] == OK
        if good.any():
            book = self.addresses
            src, dst = book.codes6(np.concatenate(d.src6)[good]), book.codes6(np.concatenate(d.dst6)[good])
            self._put_codes(at, rows[good], src, dst)

    def _put_codes(self, at: int, rows: I64 | None, src: NDArray[np.int32], dst: NDArray[np.int32]) -> None:
        """Store address codes (rows relative to `at`, None: len(src) rows from `at`), widening if needed."""
        top = len(self.addresses.keys) - 1
        if top > np.iinfo(self.cols["src_ip"].dtype).max:
            wider = np.int16 if top <= np.iinfo(np.int16).max else np.int32
            for name in ("src_ip", "dst_ip"):
                self.cols[name] = self.cols[name].astype(wider)
        for name, codes in (("src_ip", src), ("dst_ip", dst)):
            if rows is None:
                self.cols[name][at : at + len(codes)] = codes
            else:
                self.cols[name][at + rows] = codes

    def _keep(self, d: Decoded, n: int) -> None:
        """Count the chunk's records and drop the rows that are not (well-formed) IP packets."""
        status = d.status[:n]
        self.records += n
        self.non_ip += int(np.count_nonzero(status == NON_IP))
        self.malformed += int(np.count_nonzero(status == MALFORMED))
        keep = status == OK
        self.l4_truncated += int(np.count_nonzero(d.l4_truncated[:n] & keep))
        if keep.all():
            self.size += n
            return
        s, k = self.size, int(np.count_nonzero(keep))
        for name in self.cols:
            tail = self.cols[name][s : s + n]
            tail[:k] = tail[keep]
        self.size += k

    def frame(self) -> pd.DataFrame:
        """The packet table (columns trimmed to the rows kept; copied only when much was over-allocated)."""
        cats, remap = self.addresses.categories()
        dtype = pd.CategoricalDtype(pd.Index(cats, dtype=object))
        identity = bool((remap == np.arange(len(remap))).all())
        columns: dict[str, Any] = {}
        for name in _COLUMNS:
            full = self.cols.pop(name)
            col = full[: self.size]
            if len(full) > self.size + self.size // 10 + 1024:
                col = col.copy()
            del full
            if name in ("src_ip", "dst_ip"):
                codes = col if identity else remap.astype(col.dtype)[col]
                columns[name] = pd.Categorical.from_codes(codes, dtype=dtype, validate=False)
            else:
                columns[name] = col
        return pd.DataFrame(columns, copy=False)



def make_result(path: Path, fmt: str, order: str, nano: bool, interfaces: tuple[Interface, ...],
            collector: Collector, problems: list[str]) -> PcapResult:
    if collector.l4_truncated:
        problems.append(f"{path}: {collector.l4_truncated} TCP/UDP headers were cut by the snap length; "
                        "their payload_bytes assume 20 (TCP) or 8 (UDP) header bytes")
    return PcapResult(
        path=path, format=fmt, byte_order="little" if order == "<" else "big", nanosecond=nano,
        interfaces=interfaces, packets=collector.frame(), records_read=collector.records,
        skipped_non_ip=collector.non_ip, skipped_malformed=collector.malformed,
        l4_truncated=collector.l4_truncated, warnings=problems,
    )
