"""Classic pcap (libpcap) files: the file header, record headers, and the read loop."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from simstudy.traffic.pcap.base import (
    I64,
    MAX_CAPLEN,
    ROW_BYTES,
    Interface,
    Mask,
    PcapError,
    PcapResult,
)
from simstudy.traffic.pcap.buffer import Buf, Offsets, Rows, Where
from simstudy.traffic.pcap.collect import Collector, make_result
from simstudy.traffic.pcap.decode import Headers
from simstudy.traffic.pcap.links import require_link
from simstudy.traffic.pcap.walk import WalkSpec, ended, walk_chunk

_PCAP_MAGICS: Final[dict[int, tuple[bool, int]]] = {  # magic -> (nanosecond, record header bytes)
    0xA1B2C3D4: (False, 16),
    0xA1B23C4D: (True, 16),
    0xA1B2CD34: (False, 24),  # Kuznetzov's modified pcap: 8 more bytes per record header
}


@dataclass(frozen=True)
class _ClassicHeader:
    order: str
    nanosecond: bool
    rec_hdr: int
    snaplen: int
    link: int


def _classic_header(path: Path, buf: Buf) -> _ClassicHeader:
    raw = bytes(buf.u8[:24])
    magic_le = struct.unpack_from("<I", raw + b"\0" * 4)[0]
    for order in "<>":
        magic = struct.unpack_from(order + "I", raw + b"\0" * 4)[0]
        if magic in _PCAP_MAGICS:
            break
    else:
        raise PcapError(
            f"{path}: not a pcap or pcapng file: magic number {magic_le:#010x} (read little-endian); expected "
            "a1b2c3d4 (pcap, microseconds) or a1b23c4d (pcap, nanoseconds) in either byte order, or 0a0d0d0a (pcapng)"
        )
    if len(raw) < 24:
        raise PcapError(f"{path}: pcap file header is truncated: {len(raw)} of 24 bytes")
    nano, rec_hdr = _PCAP_MAGICS[magic]
    snaplen, network = struct.unpack_from(order + "II", raw, 16)
    link = network & 0xFFFF  # the upper bits may carry the FCS length
    require_link(link, str(path))
    return _ClassicHeader(order, nano, rec_hdr, snaplen, link)


_DAY: Final = 86400


def classic_probe(frac_limit: int, fmt: str) -> Callable[[Buf, I64, int], tuple[I64, Mask]]:
    """Lengths at the given positions, and whether they look like record headers: sub-second part in
    range, wire length at least the captured length and at most MAX_CAPLEN, and a time within a day
    of the known record at `ref` (garbage rarely passes all of these).

    The 16-byte header is gathered as one opaque 16-byte item (a memcpy each: three times faster
    than two 8-byte integers, and four times faster than a structured item), read as two 8-byte
    integers (sec|frac, incl|orig) and split with shifts."""
    order = fmt[0]
    u64 = np.dtype(order + "u8")
    item = np.dtype("V16")
    low = np.int64(0xFFFFFFFF)

    def halves(x: NDArray[Any]) -> tuple[I64, I64]:
        v = x.astype(np.int64) if not x.dtype.isnative else x.view(np.int64)
        first, second = (v & low, (v >> 32) & low) if order == "<" else ((v >> 32) & low, v & low)
        return first, second

    def probe(buf: Buf, at: I64, ref: int) -> tuple[I64, Mask]:
        sec0 = int(buf.view(fmt)[ref]) if ref + 4 <= buf.n else 0
        pair = buf.gather(at.copy(), item).view(u64).reshape(-1, 2)
        sec, frac = halves(pair[:, 0])
        length, wire = halves(pair[:, 1])
        ok: Mask = (frac < frac_limit) & (wire >= length) & (wire <= MAX_CAPLEN) & (np.abs(sec - sec0) <= _DAY)
        return length, ok

    return probe


def read_classic(path: Path, buf: Buf, chunk_bytes: int) -> PcapResult:
    h = _classic_header(path, buf)
    u32 = h.order + "u4"
    spec = WalkSpec(len_off=8, hdr=h.rec_hdr, fmt=u32, min_len=0, max_len=max(h.snaplen, MAX_CAPLEN), align=1,
                     probe=classic_probe(10**9 if h.nanosecond else 10**6, u32))
    scale = 1e-9 if h.nanosecond else 1e-6
    collector = Collector(buf.n)
    problems: list[str] = []

    def headers(recs: Offsets, check: int) -> Callable[[int, int], Headers]:
        def header(i0: int, i1: int) -> Headers:
            r: Where = recs.slice(i0, i1)
            if not recs.strided_form:  # scattered records: copy their first bytes together first
                r = Rows.copy(buf, r.array(), ROW_BYTES) or r
            cap = r.read(buf, 8, u32, np.int64)
            if check >= 0:  # a lazily assumed stride: stop at the first record that breaks it
                bad = cap != check
                if bad.any():
                    k = int(bad.argmax())
                    r, cap = recs.slice(i0, i0 + k), cap[:k]
            time = r.read(buf, 0, u32, np.float64)
            time += r.read(buf, 4, u32, np.float64) * scale
            return Headers(r.shift(h.rec_hdr), cap, r.read(buf, 12, u32, np.int64), time, h.link)

        return header

    pos = 24
    while pos < buf.n:
        w = walk_chunk(buf, pos, spec, chunk_bytes, lazy=True)
        done = collector.add(buf, w.offsets.n, headers(w.offsets, w.check), (pos, w.next))
        if done < w.offsets.n:  # the assumed stride broke: go on from the record that broke it
            nxt = w.offsets.start + done * w.offsets.stride
            buf.drop_pages(pos, nxt)
            pos = nxt
            continue
        buf.drop_pages(pos, w.next)
        pos = w.next
        if ended(path, w, buf.n, collector.records, problems):
            break
    iface = Interface(h.link, h.snaplen, 10**9 if h.nanosecond else 10**6)
    return make_result(path, "pcap", h.order, h.nanosecond, (iface,), collector, problems)
