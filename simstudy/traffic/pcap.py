"""Read pcap and pcapng captures into per-packet tables, and turn those into TrafficTables.

`read_pcap(path)` returns one row per IPv4/IPv6 packet (non-IP frames are counted and dropped):

| column | dtype | meaning |
|---|---|---|
| `time` | float64 | capture time, seconds since the epoch |
| `src_ip`, `dst_ip` | category | addresses as text (`10.0.0.1`, `fe80::1`); categories sorted numerically, IPv4 first |
| `sport`, `dport` | int32 | TCP/UDP ports (0 for other protocols and non-first fragments) |
| `proto` | uint8 | IP protocol after IPv6 extension headers (6 TCP, 17 UDP, ...) |
| `ip_bytes` | int64 | IP total length (IPv6: payload length + 40), whatever the snap length |
| `payload_bytes` | int64 | `ip_bytes` minus the IP and TCP/UDP headers (never negative) |
| `tcp_seq` | uint32 | TCP sequence number (0 for other protocols and when the snap length cut it) |
| `cap_bytes` | int32 | bytes captured for the frame (link header included) |

How it stays fast: the file is memory-mapped and read in chunks of `chunk_bytes` (default 64 MiB).
Within a chunk the record boundaries are found first (the only sequential part), then every field
is read for all packets at once with numpy, 16384 packets at a time so that their bytes stay in
cache. Boundaries are found, in order of preference:

1. constant stride: a snap-length-truncated or fixed-size capture has the same record length
   everywhere. The first 64 records prove the stride, no offset array is built, and the length of
   every further record is checked as it is decoded (a record that breaks the stride ends the chunk
   there and the walk resumes from it);
2. lanes: the chunk is cut into thousands of segments and one walker per segment steps through
   record headers, all walkers advancing together in numpy. A walker that starts inside a record
   slides byte by byte until the header looks plausible. Walkers are then stitched: a segment's
   records are accepted only from the exact position where the true chain from the previous
   segment enters it, so the result is always the sequential walk's result. The first bytes of
   scattered records are then copied together (one memcpy each) so that fields are strided reads;
3. a plain sequential walk (struct.unpack_from) for the parts the lanes could not prove, and for
   captures of large records, where it is already fast per byte.

Memory: the output columns are allocated once from an estimate of the packet count (exact for a
constant-stride capture) and chunks decode straight into them; mapped file pages are released
after each chunk. The peak is about the output table plus one chunk's scratch arrays.

`read_pcap_dir(directory)` reads the one-directory-per-experiment layout of public captures
(`framework-model-optimizer-batchsize-backend-delay[-topology]`, one pcap per worker, optional
`meta.json`), and `to_traffic_table(packets, ...)` maps endpoints to ranks and builds a checked
TrafficTable (see `simstudy.traffic.schema`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import mmap
import re
import struct
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from simstudy.table import make_table

I64 = NDArray[np.int64]
Mask = NDArray[np.bool_]
Rel = int | I64  # a byte offset relative to each packet's start: one for all, or one per packet
_DType = np.dtype[Any] | type[np.generic]

DEFAULT_CHUNK_BYTES: Final = 64 << 20
BLOCK_PACKETS: Final = 16384  # packets decoded together (their bytes stay in cache)
_ROW_BYTES: Final = 128  # bytes of each scattered record copied together (record header and packet headers)
MAX_CAPLEN: Final = 262144  # largest captured length libpcap accepts unless the snap length is larger

LINKTYPE_NULL: Final = 0
LINKTYPE_ETHERNET: Final = 1
LINKTYPE_RAW: Final = 101
LINKTYPE_LOOP: Final = 108
LINKTYPE_LINUX_SLL: Final = 113
LINKTYPE_IPV4: Final = 228
LINKTYPE_IPV6: Final = 229
LINKTYPE_LINUX_SLL2: Final = 276
#: Link types read, by number. 12 and 14 are DLT_RAW values some systems wrote into files.
LINK_TYPES: Final[dict[int, str]] = {
    LINKTYPE_NULL: "NULL (BSD loopback)",
    LINKTYPE_ETHERNET: "ETHERNET",
    12: "RAW (DLT 12)",
    14: "RAW (DLT 14)",
    LINKTYPE_RAW: "RAW",
    LINKTYPE_LOOP: "LOOP",
    LINKTYPE_LINUX_SLL: "LINUX_SLL",
    LINKTYPE_IPV4: "IPV4",
    LINKTYPE_IPV6: "IPV6",
    LINKTYPE_LINUX_SLL2: "LINUX_SLL2",
}
_RAW_LINKS: Final = (12, 14, LINKTYPE_RAW)

_OK: Final = 0
_NON_IP: Final = 1
_MALFORMED: Final = 2

_PCAP_MAGICS: Final[dict[int, tuple[bool, int]]] = {  # magic -> (nanosecond, record header bytes)
    0xA1B2C3D4: (False, 16),
    0xA1B23C4D: (True, 16),
    0xA1B2CD34: (False, 24),  # Kuznetzov's modified pcap: 8 more bytes per record header
}
_SHB: Final = 0x0A0D0D0A
_BOM: Final = 0x1A2B3C4D
_IDB: Final = 1
_OPB: Final = 2  # obsolete packet block
_SPB: Final = 3
_EPB: Final = 6
_PACKET_BLOCKS: Final = (_OPB, _SPB, _EPB)
_MAX_BLOCK: Final = 64 << 20


def _lut(size: int, items: Mapping[int, int], dtype: type[np.generic] = np.uint8) -> NDArray[Any]:
    table = np.zeros(size, dtype=dtype)
    for k, v in items.items():
        table[k] = v
    return table


_ETHERTYPE_NET: Final = _lut(65536, {0x0800: 4, 0x86DD: 6})
_VLAN: Final = _lut(65536, {0x8100: 1, 0x88A8: 1, 0x9100: 1}, np.bool_)
_VERSION_NET: Final = _lut(16, {4: 4, 6: 6})
_IPV6_EXT: Final = _lut(256, {0: 1, 43: 1, 60: 1, 44: 1, 51: 1}, np.bool_)


class PcapError(ValueError):
    """A capture file that cannot be read (wrong format, unsupported link type, unknown interface)."""


@dataclass(frozen=True)
class Interface:
    """One capture interface: classic pcap has exactly one; pcapng one per Interface Description Block."""

    link_type: int
    snaplen: int
    ts_units_per_s: int = 1_000_000  # timestamp resolution (pcapng if_tsresol)
    ts_offset_s: int = 0  # pcapng if_tsoffset


@dataclass(frozen=True, eq=False)
class PcapResult:
    """One capture file read into a packet table (columns in the module docstring)."""

    path: Path
    format: str  # "pcap" or "pcapng"
    byte_order: str  # "little" or "big" (pcapng: of the first section)
    nanosecond: bool  # timestamps finer than a microsecond
    interfaces: tuple[Interface, ...]
    packets: pd.DataFrame
    records_read: int  # packet records read, including the dropped ones
    skipped_non_ip: int  # frames whose link header says neither IPv4 nor IPv6 (ARP, LLDP...)
    skipped_malformed: int  # IP frames whose IP header is not captured or is invalid
    l4_truncated: int  # TCP/UDP packets whose transport header was cut by the snap length (20/8 assumed)
    warnings: list[str] = field(default_factory=list)

    @property
    def link_type(self) -> int:
        """The link type of the (first) interface, or -1 when a pcapng file defines none."""
        return self.interfaces[0].link_type if self.interfaces else -1

    @property
    def snaplen(self) -> int:
        """The snap length of the (first) interface, or 0 when a pcapng file defines none."""
        return self.interfaces[0].snaplen if self.interfaces else 0


# ---------------------------------------------------------------------------------------------
# Reading integers out of the mapped file


class _Buf:
    """The mapped file as bytes, with overlapping views that read an unaligned integer at any byte."""

    def __init__(self, data: NDArray[np.uint8], raw: mmap.mmap | bytes) -> None:
        self.u8 = data
        self.raw = raw
        self.n = len(data)
        self._views: dict[np.dtype[Any], NDArray[Any]] = {}

    def view(self, fmt: str | np.dtype[Any]) -> NDArray[Any]:
        """Item k of the view starts at byte k (overlapping items); `fmt` may be a structured dtype."""
        dt = np.dtype(fmt)
        v = self._views.get(dt)
        if v is None:
            size = max(self.n - dt.itemsize + 1, 0)
            v = self.u8 if dt == np.uint8 else np.ndarray((size,), dtype=dt, buffer=self.u8, strides=(1,))
            self._views[dt] = v
        return v

    def gather(self, idx: I64, fmt: str | np.dtype[Any], dtype: _DType | None = None) -> NDArray[Any]:
        """Values at byte offsets `idx` (a scratch array: it may be clamped in place; reads past the end are
        clamped, and callers mask them)."""
        v = self.view(fmt)
        if len(v) == 0:
            return np.zeros(len(idx), dtype=dtype or v.dtype.newbyteorder("="))
        if len(idx) and int(idx.max()) >= len(v):
            np.minimum(idx, len(v) - 1, out=idx)
        got = v[idx]
        if dtype is None and got.dtype.isnative:
            return got
        return got.astype(dtype or got.dtype.newbyteorder("="), copy=False)

    def strided_view(self, start: int, stride: int, n: int, fmt: str) -> NDArray[Any] | None:
        """A view of the values at start + k * stride (k < n), or None when they do not all lie in the buffer."""
        if start < 0 or (n and start + (n - 1) * stride + np.dtype(fmt).itemsize > self.n):
            return None
        return np.ndarray((n,), dtype=fmt, buffer=self.u8, offset=start, strides=(stride,))

    def strided(self, start: int, stride: int, n: int, fmt: str, dtype: _DType | None = None) -> NDArray[Any] | None:
        """A copy of the values at start + k * stride (k < n), or None when they do not all lie in the buffer."""
        view = self.strided_view(start, stride, n, fmt)
        return None if view is None else view.astype(dtype or _native(fmt))

    def release(self) -> None:
        self._views.clear()

    def drop_pages(self, start: int, stop: int) -> None:
        """Unmap the file pages in [start, stop) from this process (they stay in the page cache)."""
        if not isinstance(self.raw, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        a, b = (start // page) * page, (stop // page) * page
        if b > a:
            with contextlib.suppress(OSError):  # best effort
                self.raw.madvise(mmap.MADV_DONTNEED, a, b - a)


def _native(fmt: str) -> np.dtype[Any]:
    return np.dtype(fmt).newbyteorder("=")


class _Offsets:
    """Byte offsets of n items: `start + k * stride` when `arr` is None, else `arr`."""

    __slots__ = ("_arr", "n", "start", "stride")

    def __init__(self, n: int, start: int = 0, stride: int = 0, arr: I64 | None = None) -> None:
        self.n = n
        self.start = start
        self.stride = stride
        self._arr = arr

    @classmethod
    def of(cls, arr: I64) -> _Offsets:
        return cls(len(arr), arr=arr)

    @property
    def strided_form(self) -> bool:
        return self._arr is None

    def array(self) -> I64:
        if self._arr is None:
            self._arr = self.start + self.stride * np.arange(self.n, dtype=np.int64)
        return self._arr

    def slice(self, i0: int, i1: int) -> _Offsets:
        if self._arr is None:
            return _Offsets(i1 - i0, self.start + i0 * self.stride, self.stride)
        return _Offsets.of(self._arr[i0:i1])

    def shift(self, d: int) -> _Offsets:
        if self._arr is None:
            return _Offsets(self.n, self.start + d, self.stride)
        return _Offsets.of(self._arr + d)

    def take(self, rows: NDArray[Any]) -> _Offsets:
        return _Offsets.of(self.array()[rows])

    def read(self, buf: _Buf, rel: Rel, fmt: str, dtype: _DType | None = None) -> NDArray[Any]:
        """The `fmt` integer at byte `offset + rel` of every item, as `dtype` (default: native `fmt`), a fresh array."""
        if self._arr is None and isinstance(rel, int):
            got = buf.strided(self.start + rel, self.stride, self.n, fmt, dtype)
            if got is not None:
                return got
        return buf.gather(self.array() + rel, fmt, dtype)

    def read_into(self, buf: _Buf, rel: Rel, fmt: str, out: NDArray[Any]) -> None:
        """`read` straight into `out` (one pass, no temporary, when the items are strided)."""
        if self._arr is None and isinstance(rel, int):
            view = buf.strided_view(self.start + rel, self.stride, self.n, fmt)
            if view is not None:
                np.copyto(out, view, casting="unsafe")
                return
        out[...] = buf.gather(self.array() + rel, fmt)


class _Rows:
    """Packets copied into a compact block: row k holds `width` bytes of the file from `orig[k]`.

    Reads of fields within the row are strided reads of cache-resident memory (the copy is one 16..144
    byte memcpy per packet); reads past the row fall back to the file. Same interface as _Offsets.
    """

    __slots__ = ("_flat", "base", "block", "n", "orig", "width")

    def __init__(self, block: NDArray[np.uint8], width: int, orig: I64, base: int = 0) -> None:
        self.block = block  # n * width bytes
        self.width = width
        self.orig = orig
        self.base = base
        self.n = len(orig)
        self._flat: _Buf | None = None

    @classmethod
    def copy(cls, buf: _Buf, offsets: I64, width: int) -> _Rows | None:
        """Copy `width` bytes from each offset (None when the last would run past the file)."""
        if len(offsets) == 0 or int(offsets[-1]) + width > buf.n:
            return None
        items = buf.view(np.dtype(f"V{width}"))[offsets]
        return cls(items.view(np.uint8), width, offsets)

    def shift(self, d: int) -> _Rows:
        return _Rows(self.block, self.width, self.orig, self.base + d)

    def take(self, rows: NDArray[Any]) -> _Rows:
        block = self.block.reshape(self.n, self.width)[rows].reshape(-1)
        return _Rows(block, self.width, self.orig[rows], self.base)

    def array(self) -> I64:
        return self.orig + self.base

    def _inside(self, rel: Rel, width: int) -> bool:
        if isinstance(rel, int):
            return self.base + rel >= 0 and self.base + rel + width <= self.width
        return len(rel) == 0 or (self.base + int(rel.min()) >= 0 and self.base + int(rel.max()) + width <= self.width)

    def read(self, buf: _Buf, rel: Rel, fmt: str, dtype: _DType | None = None) -> NDArray[Any]:
        width = np.dtype(fmt).itemsize
        if not self._inside(rel, width):
            return buf.gather(self.array() + rel, fmt, dtype)
        if isinstance(rel, int):
            view = np.ndarray((self.n,), dtype=fmt, buffer=self.block, offset=self.base + rel, strides=(self.width,))
            return view.astype(dtype or _native(fmt))
        if self._flat is None:
            self._flat = _Buf(self.block, b"")
        idx = self.width * np.arange(self.n, dtype=np.int64) + (self.base + rel)
        return self._flat.gather(idx, fmt, dtype)

    def read_into(self, buf: _Buf, rel: Rel, fmt: str, out: NDArray[Any]) -> None:
        if isinstance(rel, int) and self._inside(rel, np.dtype(fmt).itemsize):
            view = np.ndarray((self.n,), dtype=fmt, buffer=self.block, offset=self.base + rel, strides=(self.width,))
            np.copyto(out, view, casting="unsafe")
        else:
            out[...] = self.read(buf, rel, fmt)


_Where = _Offsets | _Rows  # where each packet's bytes are


# ---------------------------------------------------------------------------------------------
# Finding record boundaries


@dataclass(frozen=True)
class _WalkSpec:
    """How records follow each other: next = start + hdr + length, length read at start + len_off."""

    len_off: int
    hdr: int
    fmt: str  # "<u4" or ">u4"
    min_len: int
    max_len: int
    align: int
    # For the lanes: (buf, positions, a known record start) -> (lengths, looks like a record header).
    probe: Callable[[_Buf, I64, int], tuple[I64, Mask]]

    def valid(self, length: int) -> bool:
        return self.min_len <= length <= self.max_len and length % self.align == 0

    def valid_v(self, length: I64) -> Mask:
        ok = (length >= self.min_len) & (length <= self.max_len)
        if self.align > 1:
            ok &= length % self.align == 0
        return ok


@dataclass(frozen=True)
class _Walk:
    """Records found in [pos, stop): `offsets`, where the next chunk starts, and why the walk ended."""

    offsets: _Offsets
    next: int
    reason: str  # "end" (reached stop), "partial" (record at `next` does not fit), "corrupt", "more" (go on)
    need: int = 0  # partial: the byte the record at `next` ends at
    length: int = 0  # corrupt: the invalid length read at `next`
    check: int = -1  # a lazy constant-stride run: every record's length should be this; the reader checks


_LANE_RECORDS: Final = 256
_MAX_LANES: Final = 16384
_MAX_SLIDE: Final = 4096
_SAMPLE: Final = 512
_SEQUENTIAL_RECORD_BYTES: Final = 600
_LANE_WINDOW: Final = 32 << 20


def _walk(buf: _Buf, pos: int, stop: int, spec: _WalkSpec, *, lazy: bool = False) -> _Walk:
    """All records that start at or after `pos` and end by `stop`, exactly as a sequential walk finds them.

    With `lazy`, a run whose first 64 records have one length is assumed to go on to `stop` with that
    length (`check` says so): the reader verifies each length as it decodes, saving a pass over memory.
    """
    if lazy:
        assumed = _lazy_run(buf, pos, stop, spec)
        if assumed is not None:
            return assumed
    pieces: list[_Offsets] = []
    short_runs = 0
    while short_runs < 4:
        run, pos = _fixed_run(buf, pos, stop, spec)
        pieces.append(run)
        if run.n >= 64:
            short_runs = 0
            continue
        short_runs += 1
        few = _walk_seq(buf, pos, stop, spec, limit=64)  # step over the odd records, then try a stride again
        pieces.append(few.offsets)
        if few.reason != "limit":
            return _join(pieces, few)
        pos = few.next
    while True:  # lanes, in windows small enough for their scattered reads to stay in cache
        window = min(stop, pos + _LANE_WINDOW)
        rest = _lanes(buf, pos, window, spec)
        if rest.reason == "partial" and rest.offsets.n == 0 and window < stop:
            rest = _lanes(buf, pos, min(stop, rest.need), spec)  # a record larger than the window
        pieces.append(rest.offsets)
        pos = rest.next
        if window >= stop or rest.reason not in ("end", "partial") or rest.need > stop:
            return _join(pieces, rest)


def _lazy_run(buf: _Buf, pos: int, stop: int, spec: _WalkSpec) -> _Walk | None:
    if pos + spec.len_off + 4 > stop:
        return None
    length = int(buf.view(spec.fmt)[pos + spec.len_off])
    stride = spec.hdr + length
    if not spec.valid(length) or stride <= 0 or (stop - pos) // stride < 1024:
        return None
    fit = (stop - pos) // stride
    lens = buf.strided(pos + spec.len_off, stride, 64, spec.fmt)
    if lens is None or bool((lens != length).any()):
        return None
    return _Walk(_Offsets(fit, pos, stride), pos + fit * stride, "more", check=length)


def _join(pieces: list[_Offsets], last: _Walk) -> _Walk:
    pieces = [p for p in pieces if p.n]
    if not pieces:
        offsets = _Offsets(0)
    elif len(pieces) == 1:
        offsets = pieces[0]
    else:
        offsets = _Offsets.of(np.concatenate([p.array() for p in pieces]))
    return replace(last, offsets=offsets)


def _fixed_run(buf: _Buf, pos: int, stop: int, spec: _WalkSpec) -> tuple[_Offsets, int]:
    """The longest run of equal-length records from `pos` (proved with one strided read)."""
    if pos + spec.len_off + 4 > stop:
        return _Offsets(0), pos
    length = int(buf.view(spec.fmt)[pos + spec.len_off])
    if not spec.valid(length):
        return _Offsets(0), pos
    stride = spec.hdr + length
    if stride <= 0:
        return _Offsets(0), pos
    fit = (stop - pos) // stride
    if fit == 0:
        return _Offsets(0), pos
    head = min(fit, 64)
    for count in (head, fit):
        lens = buf.strided(pos + spec.len_off, stride, count, spec.fmt)
        assert lens is not None
        bad = lens != length
        if bad.any():
            k = int(bad.argmax())
            return _Offsets(k, pos, stride), pos + k * stride
        if count == fit:
            break
    return _Offsets(fit, pos, stride), pos + fit * stride


def _walk_seq(
    buf: _Buf,
    pos: int,
    stop: int,
    spec: _WalkSpec,
    *,
    limit: int | None = None,
    until: int | None = None,
    join: Mapping[int, int] | None = None,
) -> _Walk:
    """The sequential walk (the definition of where records are). Stops after `limit` records
    (reason "limit"), at or past `until` ("until"), or on a position in `join` ("join")."""
    unpack = struct.Struct(spec.fmt.replace("u4", "I")).unpack_from
    raw = buf.raw
    out: list[int] = []
    hdr, len_off = spec.hdr, spec.len_off
    reason, need, bad_len = "end", 0, 0
    while True:
        if limit is not None and len(out) >= limit:
            reason = "limit"
            break
        if until is not None and pos >= until:
            reason = "until"
            break
        if join is not None and pos in join:
            reason = "join"
            break
        if pos >= stop:
            break
        if pos + max(len_off + 4, hdr) > stop:
            reason, need = "partial", pos + max(len_off + 4, hdr)
            break
        length = unpack(raw, pos + len_off)[0]
        if not spec.valid(length):
            reason, bad_len = "corrupt", length
            break
        nxt = pos + hdr + length
        if nxt > stop:
            reason, need = "partial", nxt
            break
        out.append(pos)
        pos = nxt
    return _Walk(_Offsets.of(np.array(out, dtype=np.int64)), pos, reason, need, bad_len)


def _lanes(buf: _Buf, pos: int, stop: int, spec: _WalkSpec) -> _Walk:
    """Walk [pos, stop) with many speculative walkers at once, keeping only what the true chain proves."""
    sample = _walk_seq(buf, pos, stop, spec, limit=_SAMPLE)
    if sample.reason != "limit":
        return sample
    mean = (sample.next - pos) / _SAMPLE
    start = sample.next
    expected = (stop - start) / max(mean, 1.0)
    if mean > _SEQUENTIAL_RECORD_BYTES or expected < 16 * _LANE_RECORDS:
        rest = _walk_seq(buf, start, stop, spec)
        return _join([sample.offsets, rest.offsets], rest)
    lanes = int(min(_MAX_LANES, max(2, expected // _LANE_RECORDS)))
    rest = _stitch(buf, start, stop, spec, _run_lanes(buf, start, stop, spec, lanes, expected / lanes))
    return _join([sample.offsets, rest.offsets], rest)


_IDLE: Final = np.iinfo(np.int64).max  # a lane's position once it has stopped


@dataclass
class _LaneRun:
    """What the lockstep walkers saw: positions[row, lane] (_IDLE once stopped), step[row, lane] (a record
    step, not a one-byte slide), and per lane the last row that slid."""

    seg_end: I64
    positions: I64
    step: Mask
    last_slide: I64
    exit: I64  # where each lane stopped (its first position at or past its segment end, or a partial record)
    state: NDArray[np.int8]  # 1 reached its segment end, 2 stopped at a partial record, 3 abandoned
    need: I64  # state 2: where the partial record ends


def _run_lanes(buf: _Buf, pos: int, stop: int, spec: _WalkSpec, lanes: int, per_lane: float) -> _LaneRun:
    """Step all lanes together; arrays named *_l hold the lanes still walking (`live`)."""
    seg = (stop - pos) // lanes
    seg_end = np.append(pos + seg * np.arange(1, lanes, dtype=np.int64), stop)
    live = np.arange(lanes)
    cur = pos + seg * live.astype(np.int64)
    end_l = seg_end.copy()
    slides = np.zeros(lanes, dtype=np.int64)
    last_slide = np.full(lanes, -1, dtype=np.int64)
    exit_ = np.full(lanes, -1, dtype=np.int64)
    need = np.zeros(lanes, dtype=np.int64)
    state = np.full(lanes, 3, dtype=np.int8)  # abandoned unless it ends otherwise
    positions = np.empty((int(per_lane * 1.5) + 64, lanes), dtype=np.int64)
    steps = np.empty(positions.shape, dtype=np.bool_)
    max_rows = int(4 * per_lane) + 2 * _MAX_SLIDE
    head = max(spec.len_off + 4, spec.hdr)
    row = 0
    while row < max_rows and len(live):
        if row == len(positions):
            positions = np.concatenate([positions, np.empty_like(positions)])
            steps = np.concatenate([steps, np.empty_like(steps)])
        length, plausible = spec.probe(buf, cur, pos)
        nxt = cur + spec.hdr + length
        header_cut = cur + head > stop
        ok = ~header_cut & spec.valid_v(length) & plausible
        partial = header_cut | (ok & (nxt > stop))
        step = ok & ~partial
        positions[row] = _IDLE
        positions[row, live] = np.where(partial, _IDLE, cur)
        steps[row] = False
        steps[row, live] = step
        last_slide[live[~partial & ~step]] = row
        ended = live[partial]
        exit_[ended], need[ended], state[ended] = cur[partial], np.where(header_cut, cur + head, nxt)[partial], 2
        cur = np.where(step, nxt, cur + 1)
        slides = np.where(step, 0, slides + 1)
        done = ~partial & (cur >= end_l)
        exit_[live[done]], state[live[done]] = cur[done], 1
        going = ~partial & ~done & (slides <= _MAX_SLIDE)
        if not going.all():
            live, cur, end_l, slides = live[going], cur[going], end_l[going], slides[going]
        row += 1
    return _LaneRun(seg_end, positions[:row], steps[:row], last_slide, exit_, state, need)


def _stitch(buf: _Buf, pos: int, stop: int, spec: _WalkSpec, run: _LaneRun) -> _Walk:
    """Follow the true chain from `pos` through the lanes; walk sequentially wherever a lane cannot prove it."""
    rows, lanes = run.positions.shape
    usable = (run.state == 1) | (run.state == 2)
    entry = np.append(pos, run.exit[:-1])
    # Each lane's positions increase down its column, so the row holding `entry` is the count of smaller ones.
    first = np.count_nonzero(run.positions < entry[None, :], axis=0).astype(np.int64)
    at = np.minimum(first, max(rows - 1, 0))
    lane_ix = np.arange(lanes)
    found = (first < rows) & (run.positions[at, lane_ix] == entry) & run.step[at, lane_ix] if rows else usable & False
    good = usable & found & (first > run.last_slide)
    bad_lanes = np.flatnonzero(~good)

    pieces: list[_Offsets] = []
    accepted_from = np.full(lanes, rows, dtype=np.int64)  # per lane: first accepted row (rows = none)
    lane, here = 0, pos
    while lane < lanes:
        if good[lane] and here == entry[lane]:
            later = bad_lanes[bad_lanes > lane]
            upto = int(later[0]) if len(later) else lanes
            partial = np.flatnonzero(run.state[lane:upto] == 2)
            if len(partial):
                upto = lane + int(partial[0]) + 1
            accepted_from[lane:upto] = first[lane:upto]
            pieces.append(_lane_rows(run, accepted_from, lane, upto))
            here, lane = int(run.exit[upto - 1]), upto
            if run.state[upto - 1] == 2:
                return _join(pieces, _Walk(_Offsets(0), here, "partial", int(run.need[upto - 1])))
            continue
        join: dict[int, int] = {}
        if usable[lane]:
            col = run.positions[:, lane]
            ok_rows = np.flatnonzero((np.arange(rows) > run.last_slide[lane]) & run.step[:, lane])
            join = dict(zip(col[ok_rows].tolist(), ok_rows.tolist(), strict=True))
        seq = _walk_seq(buf, here, stop, spec, until=int(run.seg_end[lane]), join=join)
        pieces.append(seq.offsets)
        if seq.reason == "join":
            accepted_from[lane] = join[seq.next]
            pieces.append(_lane_rows(run, accepted_from, lane, lane + 1))
            here = int(run.exit[lane])
            if run.state[lane] == 2:
                return _join(pieces, _Walk(_Offsets(0), here, "partial", int(run.need[lane])))
        elif seq.reason == "until":
            here = seq.next
        else:
            return _join(pieces, seq)
        lane += 1
    return _join(pieces, _Walk(_Offsets(0), here, "end"))


def _lane_rows(run: _LaneRun, accepted_from: I64, lo: int, hi: int) -> _Offsets:
    """The accepted positions of lanes lo..hi-1, lane after lane (each lane's rows are increasing).

    Read 64 lanes at a time, so that the column-wise reads stay in cache."""
    rows = np.arange(run.positions.shape[0], dtype=np.int64)[:, None]
    parts = []
    for a in range(lo, hi, 64):
        b = min(hi, a + 64)
        pos = run.positions[:, a:b]
        keep = run.step[:, a:b] & (rows >= accepted_from[None, a:b])
        parts.append(pos.T[keep.T])
    return _Offsets.of(np.concatenate(parts) if parts else np.empty(0, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# Decoding packets


_FIELDS: Final = ("status", "src4", "dst4", "proto", "sport", "dport", "ip_bytes", "payload", "seq", "l4_truncated")


@dataclass
class _Decoded:
    """Per-packet results (arrays may be views into a chunk's columns); IPv6 rows are listed apart."""

    status: NDArray[np.uint8]
    src4: NDArray[np.uint32]
    dst4: NDArray[np.uint32]
    proto: NDArray[np.uint8]
    sport: NDArray[np.int32]
    dport: NDArray[np.int32]
    ip_bytes: I64
    payload: I64
    seq: NDArray[np.uint32]
    l4_truncated: Mask
    v6_rows: list[I64] = field(default_factory=list)  # rows holding IPv6 packets, and their addresses as (hi, lo)
    src6: list[NDArray[np.uint64]] = field(default_factory=list)
    dst6: list[NDArray[np.uint64]] = field(default_factory=list)

    @classmethod
    def empty(cls, n: int) -> _Decoded:
        return cls(
            status=np.full(n, _MALFORMED, dtype=np.uint8),
            src4=np.zeros(n, dtype=np.uint32),
            dst4=np.zeros(n, dtype=np.uint32),
            proto=np.zeros(n, dtype=np.uint8),
            sport=np.zeros(n, dtype=np.int32),
            dport=np.zeros(n, dtype=np.int32),
            ip_bytes=np.zeros(n, dtype=np.int64),
            payload=np.zeros(n, dtype=np.int64),
            seq=np.zeros(n, dtype=np.uint32),
            l4_truncated=np.zeros(n, dtype=np.bool_),
        )

    def rows(self, i0: int, i1: int) -> _Decoded:
        """Views of rows i0..i1-1 (IPv6 rows are not carried over)."""
        return _Decoded(*(getattr(self, f)[i0:i1] for f in _FIELDS))  # type: ignore[arg-type]

    def add_v6(self, rows: I64, src6: NDArray[np.uint64], dst6: NDArray[np.uint64]) -> None:
        self.v6_rows.append(rows)
        self.src6.append(src6)
        self.dst6.append(dst6)

    def merge(self, rows: I64, part: _Decoded) -> None:
        """Scatter `part` (decoded from `rows` of this block) into this block."""
        for f in _FIELDS:
            getattr(self, f)[rows] = getattr(part, f)
        for r, s6, d6 in zip(part.v6_rows, part.src6, part.dst6, strict=True):
            self.add_v6(rows[r], s6, d6)


def _sub(rel: Rel, rows: NDArray[Any]) -> Rel:
    return rel if isinstance(rel, int) else rel[rows]


def _link_layer(buf: _Buf, data: _Where, cap: I64, link: int) -> tuple[Rel, NDArray[np.uint8] | int, Mask]:
    """(offset of the IP header, IP version 4/6/0 per packet or 4 for all, link header not captured)."""
    l3: Rel
    net: NDArray[np.uint8] | int
    if link == LINKTYPE_ETHERNET:
        et = data.read(buf, 12, ">u2")
        l3 = 14
        if bool((et == 0x0800).all()):
            net = 4
        else:
            tagged = _VLAN[et]
            if tagged.any():  # 802.1Q / 802.1ad, up to two tags (QinQ)
                l3 = np.where(tagged, 18, 14)
                et = np.where(tagged, data.read(buf, 16, ">u2"), et)
                inner = tagged & _VLAN[et]
                if inner.any():
                    l3 = np.where(inner, 22, l3)
                    et = np.where(inner, data.read(buf, 20, ">u2"), et)
            net = _ETHERTYPE_NET[et]
    elif link == LINKTYPE_LINUX_SLL:
        l3, net = 16, _ETHERTYPE_NET[data.read(buf, 14, ">u2")]
    elif link == LINKTYPE_LINUX_SLL2:
        l3, net = 20, _ETHERTYPE_NET[data.read(buf, 0, ">u2")]
    elif link in _RAW_LINKS:
        l3, net = 0, _VERSION_NET[data.read(buf, 0, "u1") >> 4]
    elif link in (LINKTYPE_IPV4, LINKTYPE_IPV6):
        l3, net = 0, np.full(data.n, 4 if link == LINKTYPE_IPV4 else 6, dtype=np.uint8)
    elif link in (LINKTYPE_NULL, LINKTYPE_LOOP):
        af = data.read(buf, 0, "<u4" if link == LINKTYPE_NULL else ">u4")
        if link == LINKTYPE_NULL:  # host byte order of the capturing machine: either
            af = np.where(af > 0xFFFF, af.byteswap(), af)
        l3 = 4
        net = np.where(af == 2, 4, np.where(np.isin(af, (10, 24, 28, 30)), 6, 0)).astype(np.uint8)
    else:  # pragma: no cover - callers check the link type first
        raise AssertionError(link)
    return l3, net, cap < l3


def _decode(buf: _Buf, h: _Headers, out: _Decoded) -> None:
    """Decode a block of packets into `out`; `h.link` is one link type or one per packet."""
    link = h.link
    if not isinstance(link, int):
        kinds = np.unique(link)
        if len(kinds) > 1:
            for kind in kinds.tolist():
                rows = np.flatnonzero(link == kind)
                part = _Decoded.empty(len(rows))
                _decode(buf, _Headers(h.data.take(rows), h.cap[rows], h.wire[rows], h.time[rows], int(kind)), part)
                out.merge(rows, part)
            return
        link = int(kinds[0])
    data, cap, wire = h.data, h.cap, h.wire
    l3, net, short = _link_layer(buf, data, cap, link)
    if isinstance(net, int) and not short.any():
        _ipv4(buf, data, cap, wire, l3, out, None)
        return
    if isinstance(net, int):
        net = np.full(data.n, net, dtype=np.uint8)
    out.status[:] = np.where(short, _MALFORMED, np.where(net == 0, _NON_IP, _MALFORMED))
    v4 = (net == 4) & ~short
    if v4.all():
        _ipv4(buf, data, cap, wire, l3, out, None)
        return
    rows = np.flatnonzero(v4)
    if len(rows):
        _ipv4(buf, data.take(rows), cap[rows], wire[rows], _sub(l3, rows), out, rows)
    rows = np.flatnonzero((net == 6) & ~short)
    if len(rows):
        _ipv6(buf, data.take(rows), cap[rows], wire[rows], _sub(l3, rows), out, rows)


def _ipv4(buf: _Buf, data: _Where, cap: I64, wire: I64, l3: Rel, out: _Decoded, rows: I64 | None) -> None:
    b0 = data.read(buf, l3, "u1")
    total = data.read(buf, l3 + 2, ">u2", np.int64)
    # Segmentation offload captures can carry total length 0: take the length from the wire length.
    ip_bytes = total if total.all() else np.where(total == 0, wire - l3, total)
    first_fragment = (data.read(buf, l3 + 6, ">u2") & 0x1FFF) == 0
    proto = data.read(buf, l3 + 9, "u1")
    if bool((b0 == 0x45).all()):  # no IP options
        hl: I64 | int = 20
        bad = (cap < l3 + 20) | (ip_bytes < 20)
    else:
        hl = (b0 & 15).astype(np.int64) * 4
        bad = (cap < l3 + 20) | ((b0 >> 4) != 4) | (hl < 20) | (ip_bytes < hl)
    if rows is None:
        np.multiply(bad, _MALFORMED, out=out.status, casting="unsafe")
        data.read_into(buf, l3 + 12, ">u4", out.src4)
        data.read_into(buf, l3 + 16, ">u4", out.dst4)
    else:
        out.status[rows] = np.where(bad, _MALFORMED, _OK)
        out.src4[rows] = data.read(buf, l3 + 12, ">u4")
        out.dst4[rows] = data.read(buf, l3 + 16, ">u4")
    _transport(buf, data, cap, l3 + hl, proto, first_fragment, ip_bytes, hl, out, rows)


def _ipv6(buf: _Buf, data: _Where, cap: I64, wire: I64, l3: Rel, out: _Decoded, rows: I64) -> None:
    b0 = data.read(buf, l3, "u1")
    plen = data.read(buf, l3 + 4, ">u2", np.int64)
    ip_bytes = np.where(plen == 0, wire - l3, plen + 40)  # 0: jumbogram or offload; use the wire length
    proto = data.read(buf, l3 + 6, "u1")
    bad = (cap < l3 + 40) | ((b0 >> 4) != 6)
    l4 = np.broadcast_to(np.asarray(l3, dtype=np.int64) + 40, (data.n,)).copy()
    first_fragment = np.ones(data.n, dtype=np.bool_)
    unresolved = np.zeros(data.n, dtype=np.bool_)
    for _ in range(8):  # hop-by-hop, routing, fragment, destination options, AH
        ext = _IPV6_EXT[proto] & ~bad
        if not ext.any():
            break
        seen = ext & (cap >= l4 + 8)
        unresolved |= ext & ~seen
        nxt = data.read(buf, l4, "u1")
        size = (data.read(buf, l4 + 1, "u1").astype(np.int64) + 1) * 8
        size = np.where(proto == 51, (size // 8 + 1) * 4, np.where(proto == 44, 8, size))
        fragment = seen & (proto == 44)
        first_fragment &= ~(fragment & ((data.read(buf, l4 + 2, ">u2") >> 3) != 0))
        proto = np.where(seen, nxt, proto)
        l4 = np.where(seen, l4 + size, l4)
    bad |= ip_bytes + l3 < l4
    out.status[rows] = np.where(bad, _MALFORMED, _OK)
    src6 = np.stack([data.read(buf, l3 + 8, ">u8"), data.read(buf, l3 + 16, ">u8")], axis=1)
    dst6 = np.stack([data.read(buf, l3 + 24, ">u8"), data.read(buf, l3 + 32, ">u8")], axis=1)
    out.add_v6(rows, src6, dst6)
    out.l4_truncated[rows] = unresolved & ~bad
    _transport(buf, data, cap, l4, proto, first_fragment, ip_bytes, l4 - l3, out, rows)


def _transport(
    buf: _Buf,
    data: _Where,
    cap: I64,
    l4: Rel,
    proto: NDArray[np.uint8],
    first_fragment: Mask,
    ip_bytes: I64,
    ip_hl: I64 | int,
    out: _Decoded,
    rows: I64 | None,
) -> None:
    """Ports, transport header length and payload; writes every transport column of `out` at `rows`."""
    tcp = (proto == 6) & first_fragment
    if rows is None and bool(tcp.all()) and bool((cap >= l4 + 13).all()):  # all TCP, headers captured
        data.read_into(buf, l4, ">u2", out.sport)
        data.read_into(buf, l4 + 2, ">u2", out.dport)
        data.read_into(buf, l4 + 4, ">u4", out.seq)
        out.proto[:] = 6
        out.ip_bytes[:] = ip_bytes
        tcp_hl = (data.read(buf, l4 + 12, "u1") >> 4).astype(np.int64) * 4
        np.maximum(ip_bytes - ip_hl - tcp_hl, 0, out=out.payload)
        return
    udp = (proto == 17) & first_fragment
    have_ports = (tcp | udp) & (cap >= l4 + 4)
    sport = np.where(have_ports, data.read(buf, l4, ">u2", np.int32), 0)
    dport = np.where(have_ports, data.read(buf, l4 + 2, ">u2", np.int32), 0)
    seq = np.where(tcp & (cap >= l4 + 8), data.read(buf, l4 + 4, ">u4", np.uint32), 0).astype(np.uint32)
    have_offset = tcp & (cap >= l4 + 13)
    tcp_hl = (data.read(buf, l4 + 12, "u1") >> 4).astype(np.int64) * 4
    l4_hl = np.where(have_offset, tcp_hl, np.where(tcp, 20, np.where(udp, 8, 0)))
    truncated = (tcp & ~have_offset) | (udp & ~have_ports)
    payload = np.maximum(ip_bytes - ip_hl - l4_hl, 0)
    if rows is None:
        out.proto[:], out.sport[:], out.dport[:] = proto, sport, dport
        out.ip_bytes[:], out.payload[:], out.seq[:] = ip_bytes, payload, seq
        out.l4_truncated |= truncated
    else:
        out.proto[rows], out.sport[rows], out.dport[rows] = proto, sport, dport
        out.ip_bytes[rows], out.payload[rows], out.seq[rows] = ip_bytes, payload, seq
        out.l4_truncated[rows] |= truncated


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
    "tcp_seq": np.uint32,
}


class _Collector:
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

    def add(self, buf: _Buf, n: int, header: Callable[[int, int], _Headers], span: tuple[int, int]) -> int:
        """Decode n packet records found in the file bytes `span`; returns how many were decoded.

        `header(i0, i1)` gives where records i0..i1-1 start, their lengths, times and link types; it
        may return fewer rows than asked (a record that breaks a constant stride), which ends the chunk.
        """
        if n == 0:
            return 0
        ahead = (self.file_bytes - span[1]) * n // max(span[1] - span[0], 1)
        self._reserve(n, self.size + n + ahead + 1024)
        s = self.size
        out = _Decoded(
            status=np.empty(n, dtype=np.uint8), src4=np.empty(n, dtype=np.uint32),
            dst4=np.empty(n, dtype=np.uint32), proto=self.cols["proto"][s : s + n],
            sport=self.cols["sport"][s : s + n], dport=self.cols["dport"][s : s + n],
            ip_bytes=self.cols["ip_bytes"][s : s + n], payload=self.cols["payload_bytes"][s : s + n],
            seq=self.cols["tcp_seq"][s : s + n], l4_truncated=np.zeros(n, dtype=np.bool_),
        )
        time, cap_bytes = self.cols["time"][s : s + n], self.cols["cap_bytes"][s : s + n]
        done = n
        for i0 in range(0, n, BLOCK_PACKETS):
            i1 = min(n, i0 + BLOCK_PACKETS)
            h = header(i0, i1)
            m = h.data.n
            block = out.rows(i0, i0 + m)
            _decode(buf, h, block)
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

    def _codes4(self, block: _Decoded, at: int) -> None:
        """IPv4 address codes of a block's good rows, stored from row `at` (other rows are left as they are)."""
        ok = block.status == _OK
        for rows in block.v6_rows:
            ok[rows] = False
        book = self.addresses
        if ok.all():
            self._put_codes(at, None, book.codes4(block.src4), book.codes4(block.dst4))
        elif ok.any():
            self._put_codes(at, np.flatnonzero(ok), book.codes4(block.src4[ok]), book.codes4(block.dst4[ok]))

    def _codes6(self, d: _Decoded, at: int) -> None:
        rows = np.concatenate(d.v6_rows)
        good = d.status[rows] == _OK
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

    def _keep(self, d: _Decoded, n: int) -> None:
        """Count the chunk's records and drop the rows that are not (well-formed) IP packets."""
        status = d.status[:n]
        self.records += n
        self.non_ip += int(np.count_nonzero(status == _NON_IP))
        self.malformed += int(np.count_nonzero(status == _MALFORMED))
        keep = status == _OK
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


@dataclass(frozen=True)
class _Headers:
    """Record-level facts for a block of packets."""

    data: _Where
    cap: I64
    wire: I64
    time: NDArray[np.float64]
    link: int | I64


# ---------------------------------------------------------------------------------------------
# Files


class _Mapped:
    """The file memory-mapped read-only (an empty file maps to no bytes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "rb")  # noqa: SIM115 - closed in close()
        size = self._file.seek(0, 2)
        self._file.seek(0)
        raw: mmap.mmap | bytes
        if size == 0:
            raw = b""
        else:
            raw = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
            if hasattr(mmap, "MADV_SEQUENTIAL"):
                raw.madvise(mmap.MADV_SEQUENTIAL)
        self.buf = _Buf(np.frombuffer(raw, dtype=np.uint8), raw)

    def close(self) -> None:
        raw = self.buf.raw
        self.buf.release()
        del self.buf
        if isinstance(raw, mmap.mmap):
            with contextlib.suppress(BufferError):  # a view escaped: the map closes when it is collected
                raw.close()
        self._file.close()


def read_pcap(path: str | Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> PcapResult:
    """Read a pcap or pcapng file into one row per IP packet (see the module docstring).

    Raises PcapError (a ValueError) for a file that is neither pcap nor pcapng, an unsupported link
    type, or a packet on an undefined interface. A truncated last record or a corrupt record header
    ends the read with a warning (in `warnings`, and through `warnings.warn`) that says how many
    records were read.
    """
    path = Path(path)
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    mapped = _Mapped(path)
    try:
        head = bytes(mapped.buf.u8[:4])
        if len(head) < 4:
            raise PcapError(f"{path}: not a pcap or pcapng file: it is only {mapped.buf.n} bytes long")
        if struct.unpack("<I", head)[0] == _SHB:
            result = _read_pcapng(path, mapped.buf, chunk_bytes)
        else:
            result = _read_classic(path, mapped.buf, chunk_bytes)
    finally:
        mapped.close()
    for message in result.warnings:
        warnings.warn(message, stacklevel=2)
    return result


@dataclass(frozen=True)
class _ClassicHeader:
    order: str
    nanosecond: bool
    rec_hdr: int
    snaplen: int
    link: int


def _classic_header(path: Path, buf: _Buf) -> _ClassicHeader:
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
    if link not in LINK_TYPES:
        raise PcapError(f"{path}: unsupported link type {link}; supported: {_supported()}")
    return _ClassicHeader(order, nano, rec_hdr, snaplen, link)


def _supported() -> str:
    return ", ".join(f"{k} {v}" for k, v in LINK_TYPES.items())


_DAY: Final = 86400


def _record_dtype(fmt: str) -> np.dtype[Any]:
    """A classic pcap record header as one 16-byte item."""
    return np.dtype({"names": ["sec", "frac", "incl", "orig"], "formats": [fmt] * 4, "offsets": [0, 4, 8, 12],
                     "itemsize": 16})


def _classic_probe(frac_limit: int, fmt: str) -> Callable[[_Buf, I64, int], tuple[I64, Mask]]:
    """Lengths at the given positions, and whether they look like record headers: sub-second part in
    range, wire length at least the captured length and at most MAX_CAPLEN, and a time within a day
    of the known record at `ref` (garbage rarely passes all of these)."""
    record = _record_dtype(fmt)

    def probe(buf: _Buf, at: I64, ref: int) -> tuple[I64, Mask]:
        sec0 = int(buf.view(fmt)[ref]) if ref + 4 <= buf.n else 0
        h = buf.gather(at.copy(), record)  # one 16-byte read per position
        length = h["incl"].astype(np.int64)
        wire = h["orig"].astype(np.int64)
        sec = h["sec"].astype(np.int64)
        ok: Mask = (h["frac"] < frac_limit) & (wire >= length) & (wire <= MAX_CAPLEN) & (np.abs(sec - sec0) <= _DAY)
        return length, ok

    return probe


def _read_classic(path: Path, buf: _Buf, chunk_bytes: int) -> PcapResult:
    h = _classic_header(path, buf)
    u32 = h.order + "u4"
    spec = _WalkSpec(len_off=8, hdr=h.rec_hdr, fmt=u32, min_len=0, max_len=max(h.snaplen, MAX_CAPLEN), align=1,
                     probe=_classic_probe(10**9 if h.nanosecond else 10**6, u32))
    scale = 1e-9 if h.nanosecond else 1e-6
    collector = _Collector(buf.n)
    problems: list[str] = []

    def headers(recs: _Offsets, check: int) -> Callable[[int, int], _Headers]:
        def header(i0: int, i1: int) -> _Headers:
            r: _Where = recs.slice(i0, i1)
            if not recs.strided_form:  # scattered records: copy their first bytes together first
                r = _Rows.copy(buf, r.array(), _ROW_BYTES) or r
            cap = r.read(buf, 8, u32, np.int64)
            if check >= 0:  # a lazily assumed stride: stop at the first record that breaks it
                bad = cap != check
                if bad.any():
                    k = int(bad.argmax())
                    r, cap = recs.slice(i0, i0 + k), cap[:k]
            time = r.read(buf, 0, u32, np.float64)
            time += r.read(buf, 4, u32, np.float64) * scale
            return _Headers(r.shift(h.rec_hdr), cap, r.read(buf, 12, u32, np.int64), time, h.link)

        return header

    pos = 24
    while pos < buf.n:
        w = _walk_chunk(buf, pos, spec, chunk_bytes, lazy=True)
        done = collector.add(buf, w.offsets.n, headers(w.offsets, w.check), (pos, w.next))
        if done < w.offsets.n:  # the assumed stride broke: go on from the record that broke it
            nxt = w.offsets.start + done * w.offsets.stride
            buf.drop_pages(pos, nxt)
            pos = nxt
            continue
        buf.drop_pages(pos, w.next)
        pos = w.next
        if _ended(path, w, buf.n, collector.records, problems):
            break
    iface = Interface(h.link, h.snaplen, 10**9 if h.nanosecond else 10**6)
    return _result(path, "pcap", h.order, h.nanosecond, (iface,), collector, problems)


def _walk_chunk(buf: _Buf, pos: int, spec: _WalkSpec, chunk_bytes: int, *, lazy: bool = False) -> _Walk:
    """Walk one chunk from `pos`; a chunk grows until it holds at least one record."""
    stop = min(buf.n, pos + chunk_bytes)
    while True:
        w = _walk(buf, pos, stop, spec, lazy=lazy)
        if w.offsets.n or w.reason != "partial" or stop == buf.n or w.need > buf.n:
            return w
        stop = min(buf.n, max(w.need, stop + chunk_bytes))


def _ended(path: Path, w: _Walk, size: int, records: int, problems: list[str]) -> bool:
    """Whether the read ends after this walk; adds a warning for a truncated or corrupt record."""
    if w.reason == "corrupt":
        problems.append(f"{path}: corrupt record header at byte {w.next}: length {w.length} is impossible; "
                        f"read {records} records and stopped there")
        return True
    if w.reason == "partial" and w.need > size:
        problems.append(f"{path}: the last record (at byte {w.next}) is truncated: it needs {w.need - w.next} "
                        f"bytes but the file has {size - w.next}; read {records} records")
        return True
    return w.next >= size


def _result(path: Path, fmt: str, order: str, nano: bool, interfaces: tuple[Interface, ...],
            collector: _Collector, problems: list[str]) -> PcapResult:
    if collector.l4_truncated:
        problems.append(f"{path}: {collector.l4_truncated} TCP/UDP headers were cut by the snap length; "
                        "their payload_bytes assume 20 (TCP) or 8 (UDP) header bytes")
    return PcapResult(
        path=path, format=fmt, byte_order="little" if order == "<" else "big", nanosecond=nano,
        interfaces=interfaces, packets=collector.frame(), records_read=collector.records,
        skipped_non_ip=collector.non_ip, skipped_malformed=collector.malformed,
        l4_truncated=collector.l4_truncated, warnings=problems,
    )


# ---------------------------------------------------------------------------------------------
# pcapng


@dataclass
class _Section:
    order: str
    interfaces: list[Interface]


def _pcapng_probe(fmt: str) -> Callable[[_Buf, I64, int], tuple[I64, Mask]]:
    """Block lengths at the given positions, and whether they look like blocks: a known block type
    and a trailing length equal to the leading one."""
    block = np.dtype({"names": ["kind", "length"], "formats": [fmt] * 2, "offsets": [0, 4], "itemsize": 8})

    def probe(buf: _Buf, at: I64, ref: int) -> tuple[I64, Mask]:
        h = buf.gather(at.copy(), block)
        kind, length = h["kind"], h["length"].astype(np.int64)
        trailer = buf.gather(at + length - 4, fmt)
        known: Mask = (((kind >= 1) & (kind <= 10)) | (kind == _SHB)) & (trailer == length)
        return length, known

    return probe


def _read_pcapng(path: Path, buf: _Buf, chunk_bytes: int) -> PcapResult:
    collector = _Collector(buf.n)
    problems: list[str] = []
    all_interfaces: list[Interface] = []
    first_order = ""
    section: _Section | None = None
    pos = 0
    while pos < buf.n:
        if _is_shb(buf, pos):
            section, size = _section_header(path, buf, pos, collector.records, problems)
            if section is None:
                break
            first_order = first_order or section.order
            pos += size
            continue
        assert section is not None  # the file starts with a section header
        u32 = section.order + "u4"
        spec = _WalkSpec(len_off=4, hdr=0, fmt=u32, min_len=12, max_len=_MAX_BLOCK, align=4,
                         probe=_pcapng_probe(u32))
        w = _cut_blocks(buf, _walk_chunk(buf, pos, spec, chunk_bytes), u32)
        _pcapng_chunk(path, buf, w.offsets, section, all_interfaces, collector, (pos, w.next))
        buf.drop_pages(pos, w.next)
        pos = w.next
        if w.reason != "section" and _ended(path, w, buf.n, collector.records, problems):
            break
    nano = any(i.ts_units_per_s > 10**6 for i in all_interfaces)
    return _result(path, "pcapng", first_order or "<", nano, tuple(all_interfaces), collector, problems)


def _is_shb(buf: _Buf, pos: int) -> bool:
    return pos + 4 <= buf.n and bool(struct.unpack_from("<I", buf.raw, pos)[0] == _SHB)


def _section_header(path: Path, buf: _Buf, pos: int, records: int, problems: list[str]) -> tuple[_Section | None, int]:
    """The section starting at `pos` and its header's length (None with a warning when it is cut short)."""
    if pos + 28 > buf.n:
        problems.append(f"{path}: pcapng section header at byte {pos} is truncated; read {records} records")
        return None, 0
    bom = bytes(buf.u8[pos + 8 : pos + 12])
    if bom == struct.pack("<I", _BOM):
        order = "<"
    elif bom == struct.pack(">I", _BOM):
        order = ">"
    else:
        raise PcapError(f"{path}: pcapng section header at byte {pos} has byte-order magic {bom.hex()}; "
                        "expected 1a2b3c4d in either byte order")
    size = struct.unpack_from(order + "I", buf.raw, pos + 4)[0]
    if size < 28 or size % 4 or pos + size > buf.n:
        problems.append(f"{path}: pcapng section header at byte {pos} is truncated or corrupt (length {size}); "
                        f"read {records} records")
        return None, 0
    return _Section(order, []), size


def _cut_blocks(buf: _Buf, w: _Walk, u32: str) -> _Walk:
    """End the chunk before a new section header, or at a block whose trailing length disagrees."""
    if w.reason in ("corrupt", "partial") and _is_shb(buf, w.next):
        w = replace(w, reason="section")  # a section in the other byte order: its length read wrong
    if w.offsets.n == 0:
        return w
    kind = w.offsets.read(buf, 0, u32)
    length = w.offsets.read(buf, 4, u32).astype(np.int64)
    trailer = buf.gather(w.offsets.array() + length - 4, u32)
    shb = np.flatnonzero(kind == _SHB)
    bad = np.flatnonzero(trailer != length)
    cut_shb = int(shb[0]) if len(shb) else w.offsets.n
    cut_bad = int(bad[0]) if len(bad) else w.offsets.n
    if cut_shb == w.offsets.n and cut_bad == w.offsets.n:
        return w
    cut = min(cut_shb, cut_bad)
    at = int(w.offsets.array()[cut])
    offsets = w.offsets.slice(0, cut)
    if cut_shb <= cut_bad:
        return _Walk(offsets, at, "section")
    return _Walk(offsets, at, "corrupt", length=int(length[cut]))


def _pcapng_chunk(path: Path, buf: _Buf, blocks: _Offsets, section: _Section, all_interfaces: list[Interface],
                  collector: _Collector, span: tuple[int, int]) -> None:
    if blocks.n == 0:
        return
    u32 = section.order + "u4"
    kind = blocks.read(buf, 0, u32)
    for at in blocks.array()[kind == _IDB].tolist():
        iface = _interface(path, buf, int(at), section.order)
        section.interfaces.append(iface)
        all_interfaces.append(iface)
    is_packet = np.isin(kind, _PACKET_BLOCKS)
    if not is_packet.any():
        return
    packets = blocks if is_packet.all() else blocks.take(np.flatnonzero(is_packet))
    kinds = kind[is_packet]
    table = _InterfaceTable(path, section.interfaces)
    only_epb = bool((kinds == _EPB).all())

    def header(i0: int, i1: int) -> _Headers:
        r = packets.slice(i0, i1)
        if only_epb:
            return _epb_headers(buf, r, u32, table)
        return _mixed_headers(buf, r, kinds[i0:i1], section.order, table)

    collector.add(buf, packets.n, header, span)


class _InterfaceTable:
    """Per-interface arrays for vectorised lookups; refuses unsupported link types and unknown interfaces."""

    def __init__(self, path: Path, interfaces: Sequence[Interface]) -> None:
        self.path = path
        self.interfaces = list(interfaces)
        self.link = np.array([i.link_type for i in interfaces], dtype=np.int64)

    def check(self, ids: I64) -> None:
        if len(ids) == 0:
            return
        top = int(ids.max())
        if top >= len(self.interfaces):
            raise PcapError(f"{self.path}: a packet refers to interface {top}, but its section defines "
                            f"{len(self.interfaces)} interface(s)")
        if all(i.link_type in LINK_TYPES for i in self.interfaces):
            return
        for i in np.unique(ids).tolist():
            lt = self.interfaces[i].link_type
            if lt not in LINK_TYPES:
                raise PcapError(f"{self.path}: unsupported link type {lt} (interface {i}); supported: {_supported()}")

    def links(self, ids: I64) -> int | I64:
        first = int(ids[0]) if len(ids) else 0
        if len(self.interfaces) == 1 or (len(ids) and bool((ids == first).all())):
            return int(self.link[first]) if len(self.interfaces) else LINKTYPE_ETHERNET
        return self.link[ids]

    def times(self, ids: I64, ticks: NDArray[np.uint64]) -> NDArray[np.float64]:
        """Seconds since the epoch from timestamp ticks, in each packet's interface resolution."""
        out = np.empty(len(ticks), dtype=np.float64)
        single = len(self.interfaces) == 1 or (len(ids) and bool((ids == ids[0]).all()))
        for i in [int(ids[0])] if single and len(ids) else np.unique(ids).tolist():
            iface = self.interfaces[i]
            rows: slice | I64 = slice(None) if single else np.flatnonzero(ids == i)
            t = ticks[rows]
            units = np.uint64(iface.ts_units_per_s)
            out[rows] = (t // units).astype(np.float64) + (t % units).astype(np.float64) / iface.ts_units_per_s
            if iface.ts_offset_s:
                out[rows] += iface.ts_offset_s
        return out


def _epb_headers(buf: _Buf, offsets: _Offsets, u32: str, table: _InterfaceTable) -> _Headers:
    r: _Where = offsets
    if not offsets.strided_form:
        r = _Rows.copy(buf, offsets.array(), _ROW_BYTES + 16) or offsets
    ids = r.read(buf, 8, u32).astype(np.int64)
    table.check(ids)
    ticks = (r.read(buf, 12, u32).astype(np.uint64) << np.uint64(32)) | r.read(buf, 16, u32).astype(np.uint64)
    cap = r.read(buf, 20, u32).astype(np.int64)
    wire = r.read(buf, 24, u32).astype(np.int64)
    length = r.read(buf, 4, u32).astype(np.int64)
    cap = np.minimum(cap, np.maximum(length - 32, 0))  # never past the block
    return _Headers(r.shift(28), cap, wire, table.times(ids, ticks), table.links(ids))


def _mixed_headers(buf: _Buf, r: _Offsets, kinds: NDArray[Any], order: str, table: _InterfaceTable) -> _Headers:
    """Enhanced, obsolete and simple packet blocks together (simple ones have no time: NaN)."""
    u32 = order + "u4"
    simple = kinds == _SPB
    obsolete = kinds == _OPB
    ids = np.where(obsolete, r.read(buf, 8, order + "u2"), r.read(buf, 8, u32)).astype(np.int64)
    ids[simple] = 0
    table.check(ids)
    ticks = (r.read(buf, 12, u32).astype(np.uint64) << np.uint64(32)) | r.read(buf, 16, u32).astype(np.uint64)
    length = r.read(buf, 4, u32).astype(np.int64)
    wire = np.where(simple, r.read(buf, 8, u32), r.read(buf, 24, u32)).astype(np.int64)
    snap0 = table.interfaces[0].snaplen if table.interfaces else 0
    simple_cap = np.minimum(wire, np.maximum(length - 16, 0))
    if snap0:
        simple_cap = np.minimum(simple_cap, snap0)
    cap = np.where(simple, simple_cap, np.minimum(r.read(buf, 20, u32).astype(np.int64), np.maximum(length - 32, 0)))
    time = table.times(ids, ticks)
    time[simple] = np.nan
    data = _Offsets.of(r.array() + np.where(simple, 12, 28))
    return _Headers(data, cap, wire, time, table.links(ids))


def _interface(path: Path, buf: _Buf, at: int, order: str) -> Interface:
    """An Interface Description Block: link type, snap length, if_tsresol and if_tsoffset."""
    length = struct.unpack_from(order + "I", buf.raw, at + 4)[0]
    if length < 20:
        raise PcapError(f"{path}: interface description block at byte {at} is too short ({length} bytes)")
    link, snaplen = struct.unpack_from(order + "H2xI", buf.raw, at + 8)
    units, offset = 10**6, 0
    pos, end = at + 16, at + length - 4
    while pos + 4 <= end:
        code, size = struct.unpack_from(order + "HH", buf.raw, pos)
        value = bytes(buf.u8[pos + 4 : min(pos + 4 + size, end)])
        if code == 0:
            break
        if code == 9 and len(value) >= 1:
            exponent = value[0] & 0x7F
            units = 2**exponent if value[0] & 0x80 else 10**exponent
            if units > 2**63:
                raise PcapError(f"{path}: interface at byte {at} has an unsupported if_tsresol {value[0]:#04x}")
        elif code == 14 and len(value) >= 8:
            offset = struct.unpack(order + "q", value[:8])[0]
        pos += 4 + size + (-size % 4)
    return Interface(link, snaplen, units, offset)


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
    cats = _sort_ips({c for f in frames for col in ("src_ip", "dst_ip") for c in f[col].cat.categories})
    for f in frames:
        for col in ("src_ip", "dst_ip"):
            f[col] = f[col].cat.set_categories(cats)
    out = pd.concat(frames, ignore_index=True)
    frames.clear()
    return out


def _ip_key(text: str) -> tuple[int, int]:
    a = ipaddress.ip_address(text)
    return (a.version, int(a))


def _sort_ips(ips: Iterable[str]) -> list[str]:
    return sorted(ips, key=_ip_key)


# ---------------------------------------------------------------------------------------------
# TrafficTable


def _endpoint(text: str) -> tuple[str, int | None]:
    """'ip', 'ip:port' or '[ipv6]:port' -> (normalised ip, port or None)."""
    text = text.strip()
    try:
        return str(ipaddress.ip_address(text)), None
    except ValueError:
        pass
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not an endpoint (ip, ip:port or [ipv6]:port): {text!r}")
    return str(ipaddress.ip_address(host.strip("[]"))), int(port)


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


def retransmitted_payload(packets: pd.DataFrame) -> NDArray[np.int64]:
    """Per packet, how many of its TCP payload bytes its flow already carried earlier in the same
    file (a retransmission, whole or in part); 0 for new data and for everything but TCP.

    Flows are (file, src ip, dst ip, sport, dport), in capture order; sequence numbers are
    unwrapped through their 32-bit wrap. A capture that starts mid-flow counts from its first
    packet. Needs the `tcp_seq` column of `read_pcap`."""
    n = len(packets)
    out = np.zeros(n, dtype=np.int64)
    payload = packets["payload_bytes"].to_numpy(dtype=np.int64)
    data = np.flatnonzero((packets["proto"].to_numpy() == 6) & (payload > 0))
    if len(data) < 2:
        return out
    key = [c for c in ("file", "src_ip", "dst_ip", "sport", "dport") if c in packets]
    flow = packets.iloc[data].groupby(key, sort=False, observed=True).ngroup().to_numpy(dtype=np.int64)
    order = np.lexsort((data, flow))  # by flow, then capture order
    f = flow[order]
    seq = packets["tcp_seq"].to_numpy().astype(np.int64)[data][order]
    size = payload[data][order]
    first = np.r_[True, f[1:] != f[:-1]]
    step = np.r_[0, ((seq[1:] - seq[:-1] + 2**31) % 2**32) - 2**31]  # signed 32-bit differences
    step[first] = 0
    rel = np.cumsum(step)  # sequence position within the flow (plus a constant per flow)
    end = rel + size
    # the highest sequence number each flow carried before this packet (none before a flow's first)
    seen = pd.Series(end).groupby(f).cummax().to_numpy()
    before = np.r_[rel[0], seen[:-1]]
    before[first] = rel[first]
    again = np.clip(np.minimum(end, before) - rel, 0, size)
    out[data[order]] = again
    return out


def to_traffic_table(
    packets: pd.DataFrame,
    *,
    rank_of: Mapping[str, int] | None = None,
    control: Iterable[str] | None = None,
    t0_s: float | None = None,
) -> pd.DataFrame:
    """Build a checked TrafficTable (one row per packet, start == end) from a packet table.

    - times: `time - t0_s`, t0_s defaulting to the earliest packet; rows without a time (pcapng
      simple packet blocks) are dropped with a warning; rows keep their input order.
    - bytes: `ip_bytes`; optional columns `sport`, `dport`, `payload_bytes` are kept.
    - src/dst ranks: with `rank_of` ("ip:port" or "ip" -> rank), an endpoint is looked up as
      ip:port first, then ip. Without it, ranks number the distinct IPs (sources and destinations)
      in numeric order; when all packets share one IP (a loopback capture), ranks number instead the
      distinct (ip, port) endpoints that are the lower-port side of some packet (the listening side,
      in (ip, port) order). Endpoints that are not mapped get rank -1.
    - flow: one id per directional 5-tuple (src ip, dst ip, sport, dport, proto), numbered in order
      of first appearance.
    - op: "control" for packets to or from an endpoint in `control` ("ip:port", or "ip" for any port
      of that host), else "tcp", "udp", or "ip" for other protocols.
    """
    time = packets["time"].to_numpy(dtype=np.float64)
    timed = np.isfinite(time)
    if not timed.all():
        warnings.warn(f"{int((~timed).sum())} packets have no timestamp and are left out of the traffic table",
                      stacklevel=2)
        packets = packets[timed]
        time = time[timed]
    cats = _sort_ips(set(_categories(packets["src_ip"])) | set(_categories(packets["dst_ip"])))
    sport = packets["sport"].to_numpy(dtype=np.int64)
    dport = packets["dport"].to_numpy(dtype=np.int64)
    flows = _Flows(_codes(packets["src_ip"], cats), _codes(packets["dst_ip"], cats), sport, dport,
                   packets["proto"].to_numpy(dtype=np.int64), len(cats))
    ranks = _rank_lookup(cats, flows, rank_of)  # per endpoint
    op = np.where(flows.proto == 6, 0, np.where(flows.proto == 17, 1, 3)).astype(np.int8)  # per flow
    if control is not None:
        op[flows.touches(cats, _control_keys(control))] = 2
    t0 = float(np.min(time)) if t0_s is None and len(time) else (t0_s or 0.0)
    rel = time - t0
    return make_table({
        "t_start_s": rel,
        "t_end_s": rel,
        "src": ranks[flows.src_end][flows.codes],
        "dst": ranks[flows.dst_end][flows.codes],
        "bytes": packets["ip_bytes"].to_numpy(dtype=np.int64),
        "flow": flows.codes,
        "op": pd.Categorical.from_codes(op[flows.codes], categories=["tcp", "udp", "control", "ip"]),
        "sport": sport.astype(np.int32),
        "dport": dport.astype(np.int32),
        "payload_bytes": packets["payload_bytes"].to_numpy(dtype=np.int64),
    })


def _categories(col: pd.Series) -> list[str]:
    if isinstance(col.dtype, pd.CategoricalDtype):
        return [str(c) for c in col.cat.categories]
    return [str(c) for c in pd.unique(col.astype(str))]


def _codes(col: pd.Series, cats: list[str]) -> I64:
    """Codes of `col` in `cats` (int64)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        own = [str(c) for c in col.cat.categories]
        index = {c: i for i, c in enumerate(cats)}
        lut = np.array([index[c] for c in own], dtype=np.int64)
        codes = col.cat.codes.to_numpy(dtype=np.int64)
        out: I64 = lut[codes] if len(lut) else codes
        return out
    return np.asarray(pd.Categorical(col.astype(str), categories=cats).codes, dtype=np.int64)


class _Flows:
    """Directional 5-tuples: `codes` numbers each packet's flow in order of first appearance; per flow,
    the source and destination IP codes, ports and protocol, and the source/destination endpoint
    (index into `end_ip`/`end_port`, the distinct (ip, port) endpoints)."""

    def __init__(self, src_ip: I64, dst_ip: I64, sport: I64, dport: I64, proto: I64, n_ips: int) -> None:
        ports = (sport << 24) | (dport << 8) | proto  # < 2**40
        if n_ips <= 2048:  # the (src, dst) pair < 2**22 fits beside 40 bits: one key per packet
            codes, keys = pd.factorize((src_ip * n_ips + dst_ip) << 40 | ports)
            keys = np.asarray(keys, dtype=np.int64)
            pair, ports_f = keys >> 40, keys & ((1 << 40) - 1)
            self.src, self.dst = pair // max(n_ips, 1), pair % max(n_ips, 1)
        else:
            frame = pd.DataFrame({"a": src_ip, "b": dst_ip, "p": ports})
            codes = frame.groupby(["a", "b", "p"], sort=False).ngroup().to_numpy(dtype=np.int64)
            _, first = np.unique(codes, return_index=True)
            self.src, self.dst, ports_f = src_ip[first], dst_ip[first], ports[first]
        self.codes: I64 = np.asarray(codes, dtype=np.int64)
        self.sport, self.dport, self.proto = ports_f >> 24, (ports_f >> 8) & 0xFFFF, ports_f & 0xFF
        ends, uniq = pd.factorize(np.concatenate([self.src * 65536 + self.sport, self.dst * 65536 + self.dport]))
        self.src_end, self.dst_end = ends[: len(self.src)], ends[len(self.src) :]
        self.end_ip = np.asarray(uniq, dtype=np.int64) // 65536
        self.end_port = np.asarray(uniq, dtype=np.int64) % 65536

    def touches(self, cats: list[str], endpoints: tuple[set[tuple[str, int]], set[str]]) -> Mask:
        """Flows with an endpoint among `endpoints` ((ip, port) pairs, and hosts meaning any port)."""
        pairs, hosts = endpoints
        hit = np.array([(cats[i], p) in pairs or cats[i] in hosts
                        for i, p in zip(self.end_ip.tolist(), self.end_port.tolist(), strict=True)], dtype=np.bool_)
        if not len(hit):
            return np.zeros(len(self.src), dtype=np.bool_)
        found: Mask = hit[self.src_end] | hit[self.dst_end]
        return found

    def listening(self) -> set[int]:
        """Endpoints that are the lower-port side of some flow."""
        return set(np.unique(np.where(self.sport < self.dport, self.src_end, self.dst_end)).tolist())


def _rank_lookup(cats: list[str], flows: _Flows, rank_of: Mapping[str, int] | None) -> NDArray[np.int32]:
    """Rank of each distinct endpoint (-1 when unmapped)."""
    ips, ports = flows.end_ip.tolist(), flows.end_port.tolist()
    if rank_of is not None:
        by_port: dict[tuple[str, int], int] = {}
        by_ip: dict[str, int] = {}
        for key, rank in rank_of.items():
            ip, port = _endpoint(str(key))
            if port is None:
                by_ip[ip] = int(rank)
            else:
                by_port[(ip, port)] = int(rank)
        ranks = [by_port.get((cats[i], p), by_ip.get(cats[i], -1)) for i, p in zip(ips, ports, strict=True)]
    elif len(set(ips)) != 1:
        order = {ip: r for r, ip in enumerate(sorted(set(ips)))}  # cats are sorted numerically, so codes are too
        ranks = [order[i] for i in ips]
    else:
        number = {s: r for r, s in enumerate(sorted((ips[e], ports[e]) for e in flows.listening()))}
        ranks = [number.get((i, p), -1) for i, p in zip(ips, ports, strict=True)]
    return np.array(ranks, dtype=np.int32)


def _control_keys(control: Iterable[str]) -> tuple[set[tuple[str, int]], set[str]]:
    """Control endpoints as (ip, port) pairs, and control hosts given without a port."""
    pairs, hosts = set(), set()
    for text in control:
        ip, port = _endpoint(text)
        if port is None:
            hosts.add(ip)
        else:
            pairs.add((ip, port))
    return pairs, hosts
