"""The reference reader: one record after the other, one packet at a time, with `struct` - the
definition of what `read_pcap` returns, kept beside the fast reader (record boundaries found by
strides and lanes of speculative walkers, fields decoded for blocks of packets with numpy) so
that a property test can hold the two together on random captures.

It reads whole valid files, and files cut in their last record (the rest is read, with a
warning); it stops at the first corrupt record header as the fast reader does. It is slow
(about 100,000 packets per second) and meant for tests, not for captures.
"""

from __future__ import annotations

import ipaddress
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pandas as pd

from simstudy.traffic.pcap.base import MALFORMED, MAX_CAPLEN, NON_IP, OK, Interface, PcapError
from simstudy.traffic.pcap.decode import IPV6_EXTENSIONS
from simstudy.traffic.pcap.links import LINK_TYPES, require_link

_MAGICS: Final = {0xA1B2C3D4: (False, 16), 0xA1B23C4D: (True, 16), 0xA1B2CD34: (False, 24)}
_SHB: Final = 0x0A0D0D0A
_MAX_BLOCK: Final = 64 << 20
COLUMNS: Final = ("time", "src_ip", "dst_ip", "sport", "dport", "proto", "ip_bytes", "payload_bytes", "cap_bytes",
                  "tcp_seq", "tcp_flags")


@dataclass
class Packet:
    """One decoded packet (the columns of `read_pcap`; addresses as text)."""

    status: int
    src: str = ""
    dst: str = ""
    proto: int = 0
    sport: int = 0
    dport: int = 0
    ip_bytes: int = 0
    payload: int = 0
    seq: int = 0
    flags: int = 0
    l4_truncated: bool = False


@dataclass
class ReferenceResult:
    """What the reference reader found: the packet table (addresses as text) and its counts."""

    interfaces: list[Interface] = field(default_factory=list)
    rows: list[tuple[object, ...]] = field(default_factory=list)
    records: int = 0
    non_ip: int = 0
    malformed: int = 0
    l4_truncated: int = 0
    stopped: str = ""  # why the read ended early ("truncated", "corrupt"), or "" at the end of the file

    def packets(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=list(COLUMNS))

    def add(self, time: float, frame: bytes, wire: int, link: int) -> None:
        self.records += 1
        p = decode_packet(frame, wire, link)
        if p.status == NON_IP:
            self.non_ip += 1
        elif p.status == MALFORMED:
            self.malformed += 1
        else:
            self.l4_truncated += p.l4_truncated
            self.rows.append((time, p.src, p.dst, p.sport, p.dport, p.proto, p.ip_bytes, p.payload, len(frame),
                              p.seq, p.flags))


# ---------------------------------------------------------------------------------------------
# One packet


def _u16(b: bytes, at: int) -> int:
    return int(struct.unpack_from(">H", b, at)[0])


def _u32(b: bytes, at: int) -> int:
    return int(struct.unpack_from(">I", b, at)[0])


def decode_packet(frame: bytes, wire: int, link: int) -> Packet:
    """Decode one frame's captured bytes (`wire`: its length on the wire) of link type `link`."""
    where = LINK_TYPES[link].locate_one(frame)
    if where is None:
        return Packet(MALFORMED)
    l3, version = where
    if version == 0:
        return Packet(NON_IP)
    return _ipv4(frame, wire, l3) if version == 4 else _ipv6(frame, wire, l3)


def _ipv4(frame: bytes, wire: int, l3: int) -> Packet:
    cap = len(frame)
    if cap < l3 + 20:
        return Packet(MALFORMED)
    b0 = frame[l3]
    total = _u16(frame, l3 + 2)
    ip_bytes = total if total else wire - l3  # 0: a segmentation-offload capture; the wire says
    hl = (b0 & 15) * 4
    if b0 >> 4 != 4 or hl < 20 or ip_bytes < hl:
        return Packet(MALFORMED)
    p = Packet(OK, str(ipaddress.IPv4Address(frame[l3 + 12 : l3 + 16])),
               str(ipaddress.IPv4Address(frame[l3 + 16 : l3 + 20])), frame[l3 + 9], ip_bytes=ip_bytes)
    first_fragment = _u16(frame, l3 + 6) & 0x1FFF == 0
    return _transport(p, frame, l3 + hl, first_fragment, hl)


def _ipv6(frame: bytes, wire: int, l3: int) -> Packet:
    cap = len(frame)
    if cap < l3 + 40 or frame[l3] >> 4 != 6:
        return Packet(MALFORMED)
    plen = _u16(frame, l3 + 4)
    ip_bytes = plen + 40 if plen else wire - l3  # 0: a jumbogram or an offload capture
    proto = frame[l3 + 6]
    l4 = l3 + 40
    first_fragment, unresolved = True, False
    for _ in range(8):
        if proto not in IPV6_EXTENSIONS:
            break
        if cap < l4 + 8:  # the extension header is cut: its transport header is not known
            unresolved = True
            break
        size = (frame[l4 + 1] + 1) * 8
        if proto == 51:  # AH: its length is in 4-byte units, minus 2
            size = (frame[l4 + 1] + 2) * 4
        elif proto == 44:  # fragment: 8 bytes; a later fragment has no transport header
            size = 8
            first_fragment = first_fragment and _u16(frame, l4 + 2) >> 3 == 0
        proto = frame[l4]
        l4 += size
    if ip_bytes + l3 < l4:
        return Packet(MALFORMED)
    p = Packet(OK, str(ipaddress.IPv6Address(frame[l3 + 8 : l3 + 24])),
               str(ipaddress.IPv6Address(frame[l3 + 24 : l3 + 40])), proto, ip_bytes=ip_bytes,
               l4_truncated=unresolved)
    return _transport(p, frame, l4, first_fragment, l4 - l3)


def _transport(p: Packet, frame: bytes, l4: int, first_fragment: bool, ip_hl: int) -> Packet:
    cap = len(frame)
    tcp = p.proto == 6 and first_fragment
    udp = p.proto == 17 and first_fragment
    if (tcp or udp) and cap >= l4 + 4:
        p.sport, p.dport = _u16(frame, l4), _u16(frame, l4 + 2)
    elif udp:
        p.l4_truncated = True
    if tcp and cap >= l4 + 8:
        p.seq = _u32(frame, l4 + 4)
    if tcp and cap >= l4 + 14:
        p.flags = frame[l4 + 13]
    if tcp and cap >= l4 + 13:
        l4_hl = (frame[l4 + 12] >> 4) * 4
    elif tcp:
        l4_hl, p.l4_truncated = 20, True  # the header length is cut: 20 bytes assumed
    else:
        l4_hl = 8 if udp else 0
    p.payload = max(p.ip_bytes - ip_hl - l4_hl, 0)
    return p


# ---------------------------------------------------------------------------------------------
# Files


def read_reference(path: str | Path) -> ReferenceResult:
    """Read a pcap or pcapng file record by record (see the module docstring)."""
    data = Path(path).read_bytes()
    if len(data) < 4:
        raise PcapError(f"{path}: not a pcap or pcapng file")
    if struct.unpack_from("<I", data)[0] == _SHB:
        return _pcapng(str(path), data)
    return _classic(str(path), data)


def _classic(path: str, data: bytes) -> ReferenceResult:
    for order in "<>":
        magic = struct.unpack_from(order + "I", data)[0]
        if magic in _MAGICS:
            break
    else:
        raise PcapError(f"{path}: not a pcap or pcapng file")
    if len(data) < 24:
        raise PcapError(f"{path}: pcap file header is truncated")
    nano, rec = _MAGICS[magic]
    snaplen, network = struct.unpack_from(order + "II", data, 16)
    link = network & 0xFFFF
    require_link(link, path)
    out = ReferenceResult([Interface(link, snaplen, 10**9 if nano else 10**6)])
    scale = 1e-9 if nano else 1e-6
    pos = 24
    while pos < len(data):
        if pos + rec > len(data):
            out.stopped = "truncated"
            break
        sec, frac, incl, orig = struct.unpack_from(order + "IIII", data, pos)
        if incl > max(snaplen, MAX_CAPLEN):
            out.stopped = "corrupt"
            break
        if pos + rec + incl > len(data):
            out.stopped = "truncated"
            break
        out.add(float(sec) + float(frac) * scale, data[pos + rec : pos + rec + incl], orig, link)
        pos += rec + incl
    return out


def _pcapng(path: str, data: bytes) -> ReferenceResult:
    out = ReferenceResult()
    order, interfaces = "<", list[Interface]()
    pos = 0
    while pos < len(data):
        if pos + 4 <= len(data) and struct.unpack_from("<I", data, pos)[0] == _SHB:
            if pos + 28 > len(data):
                out.stopped = "truncated"
                break
            bom = data[pos + 8 : pos + 12]
            order = "<" if bom == struct.pack("<I", 0x1A2B3C4D) else ">" if bom == struct.pack(">I", 0x1A2B3C4D) else ""
            if not order:
                raise PcapError(f"{path}: pcapng section header at byte {pos} has a bad byte-order magic")
            size = struct.unpack_from(order + "I", data, pos + 4)[0]
            if size < 28 or size % 4 or pos + size > len(data):
                out.stopped = "truncated"
                break
            interfaces = []
            pos += size
            continue
        if pos + 8 > len(data):
            out.stopped = "truncated"
            break
        kind, length = struct.unpack_from(order + "II", data, pos)
        if length < 12 or length > _MAX_BLOCK or length % 4:
            out.stopped = "corrupt"
            break
        if pos + length > len(data):
            out.stopped = "truncated"
            break
        if struct.unpack_from(order + "I", data, pos + length - 4)[0] != length:
            out.stopped = "corrupt"
            break
        block = data[pos : pos + length]
        if kind == 1:
            iface = _interface(path, block, order)
            interfaces.append(iface)
            out.interfaces.append(iface)
        elif kind in (2, 3, 6):
            _packet_block(path, block, kind, order, interfaces, out)
        pos += length
    return out


def _interface(path: str, block: bytes, order: str) -> Interface:
    link, snaplen = struct.unpack_from(order + "H2xI", block, 8)
    units, offset = 10**6, 0
    pos, end = 16, len(block) - 4
    while pos + 4 <= end:
        code, size = struct.unpack_from(order + "HH", block, pos)
        value = block[pos + 4 : min(pos + 4 + size, end)]
        if code == 0:
            break
        if code == 9 and value:
            e = value[0] & 0x7F
            units = 2**e if value[0] & 0x80 else 10**e
            if units > 2**63:
                raise PcapError(f"{path}: an interface has an unsupported if_tsresol")
        elif code == 14 and len(value) >= 8:
            offset = struct.unpack(order + "q", value[:8])[0]
        pos += 4 + size + (-size % 4)
    return Interface(link, snaplen, units, offset)


def _packet_block(path: str, block: bytes, kind: int, order: str, interfaces: list[Interface],
                  out: ReferenceResult) -> None:
    length = len(block)
    if kind == 3:  # simple packet block: interface 0, no time
        iface_id, (wire,) = 0, struct.unpack_from(order + "I", block, 8)
        cap = min(wire, max(length - 16, 0))
        if interfaces and interfaces[0].snaplen:
            cap = min(cap, interfaces[0].snaplen)
        start, time = 12, math.nan
    else:
        iface_id = struct.unpack_from(order + ("H" if kind == 2 else "I"), block, 8)[0]
        hi, lo, cap, wire = struct.unpack_from(order + "IIII", block, 12)
        cap = min(cap, max(length - 32, 0))
        start, time = 28, math.nan
    if iface_id >= len(interfaces):
        raise PcapError(f"{path}: a packet refers to interface {iface_id}, but its section defines "
                        f"{len(interfaces)} interface(s)")
    iface = interfaces[iface_id]
    require_link(iface.link_type, f"{path} (interface {iface_id})")
    if kind != 3:
        ticks, units = (hi << 32) | lo, iface.ts_units_per_s
        time = float(ticks // units) + float(ticks % units) / units
        if iface.ts_offset_s:
            time += iface.ts_offset_s
    out.add(time, block[start : start + cap], wire, iface.link_type)
