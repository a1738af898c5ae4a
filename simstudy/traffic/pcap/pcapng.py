"""pcapng files: sections, interface description blocks, and enhanced/simple/obsolete packet blocks."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from simstudy.traffic.pcap.base import (
    I64,
    ROW_BYTES,
    Interface,
    Mask,
    PcapError,
    PcapResult,
)
from simstudy.traffic.pcap.buffer import Buf, Offsets, Rows, Where
from simstudy.traffic.pcap.collect import Collector, make_result
from simstudy.traffic.pcap.decode import Headers
from simstudy.traffic.pcap.links import LINK_TYPES, LINKTYPE_ETHERNET, require_link
from simstudy.traffic.pcap.walk import Walk, WalkSpec, ended, walk_chunk

SHB: Final = 0x0A0D0D0A
_BOM: Final = 0x1A2B3C4D
_IDB: Final = 1
_OPB: Final = 2  # obsolete packet block
_SPB: Final = 3
_EPB: Final = 6
_PACKET_BLOCKS: Final = (_OPB, _SPB, _EPB)
_MAX_BLOCK: Final = 64 << 20




@dataclass
class _Section:
    order: str
    interfaces: list[Interface]


def _pcapng_probe(fmt: str) -> Callable[[Buf, I64, int], tuple[I64, Mask]]:
    """Block lengths at the given positions, and whether they look like blocks: a known block type
    and a trailing length equal to the leading one."""
    block = np.dtype({"names": ["kind", "length"], "formats": [fmt] * 2, "offsets": [0, 4], "itemsize": 8})

    def probe(buf: Buf, at: I64, ref: int) -> tuple[I64, Mask]:
        h = buf.gather(at.copy(), block)
        kind, length = h["kind"], h["length"].astype(np.int64)
        trailer = buf.gather(at + length - 4, fmt)
        known: Mask = (((kind >= 1) & (kind <= 10)) | (kind == SHB)) & (trailer == length)
        return length, known

    return probe


def read_pcapng(path: Path, buf: Buf, chunk_bytes: int) -> PcapResult:
    collector = Collector(buf.n)
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
        spec = WalkSpec(len_off=4, hdr=0, fmt=u32, min_len=12, max_len=_MAX_BLOCK, align=4,
                         probe=_pcapng_probe(u32))
        w = _cut_blocks(buf, walk_chunk(buf, pos, spec, chunk_bytes), u32)
        _pcapng_chunk(path, buf, w.offsets, section, all_interfaces, collector, (pos, w.next))
        buf.drop_pages(pos, w.next)
        pos = w.next
        if w.reason != "section" and ended(path, w, buf.n, collector.records, problems):
            break
    nano = any(i.ts_units_per_s > 10**6 for i in all_interfaces)
    return make_result(path, "pcapng", first_order or "<", nano, tuple(all_interfaces), collector, problems)


def _is_shb(buf: Buf, pos: int) -> bool:
    return pos + 4 <= buf.n and bool(struct.unpack_from("<I", buf.raw, pos)[0] == SHB)


def _section_header(path: Path, buf: Buf, pos: int, records: int, problems: list[str]) -> tuple[_Section | None, int]:
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


def _cut_blocks(buf: Buf, w: Walk, u32: str) -> Walk:
    """End the chunk before a new section header, or at a block whose trailing length disagrees."""
    if w.reason in ("corrupt", "partial") and _is_shb(buf, w.next):
        w = replace(w, reason="section")  # a section in the other byte order: its length read wrong
    if w.offsets.n == 0:
        return w
    kind = w.offsets.read(buf, 0, u32)
    length = w.offsets.read(buf, 4, u32).astype(np.int64)
    trailer = buf.gather(w.offsets.array() + length - 4, u32)
    shb = np.flatnonzero(kind == SHB)
    bad = np.flatnonzero(trailer != length)
    cut_shb = int(shb[0]) if len(shb) else w.offsets.n
    cut_bad = int(bad[0]) if len(bad) else w.offsets.n
    if cut_shb == w.offsets.n and cut_bad == w.offsets.n:
        return w
    cut = min(cut_shb, cut_bad)
    at = int(w.offsets.array()[cut])
    offsets = w.offsets.slice(0, cut)
    if cut_shb <= cut_bad:
        return Walk(offsets, at, "section")
    return Walk(offsets, at, "corrupt", length=int(length[cut]))


def _pcapng_chunk(path: Path, buf: Buf, blocks: Offsets, section: _Section, all_interfaces: list[Interface],
                  collector: Collector, span: tuple[int, int]) -> None:
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

    def header(i0: int, i1: int) -> Headers:
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
            require_link(self.interfaces[i].link_type, f"{self.path} (interface {i})")

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


def _epb_headers(buf: Buf, offsets: Offsets, u32: str, table: _InterfaceTable) -> Headers:
    r: Where = offsets
    if not offsets.strided_form:
        r = Rows.copy(buf, offsets.array(), ROW_BYTES + 16) or offsets
    ids = r.read(buf, 8, u32).astype(np.int64)
    table.check(ids)
    ticks = (r.read(buf, 12, u32).astype(np.uint64) << np.uint64(32)) | r.read(buf, 16, u32).astype(np.uint64)
    cap = r.read(buf, 20, u32).astype(np.int64)
    wire = r.read(buf, 24, u32).astype(np.int64)
    length = r.read(buf, 4, u32).astype(np.int64)
    cap = np.minimum(cap, np.maximum(length - 32, 0))  # never past the block
    return Headers(r.shift(28), cap, wire, table.times(ids, ticks), table.links(ids))


def _mixed_headers(buf: Buf, r: Offsets, kinds: NDArray[Any], order: str, table: _InterfaceTable) -> Headers:
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
    data = Offsets.of(r.array() + np.where(simple, 12, 28))
    return Headers(data, cap, wire, time, table.links(ids))


def _interface(path: Path, buf: Buf, at: int, order: str) -> Interface:
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
