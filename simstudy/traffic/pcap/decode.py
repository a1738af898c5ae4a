"""Decoding packets: link layer, IPv4, IPv6 (extension headers), TCP/UDP, for a block of packets at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from simstudy.traffic.pcap.base import I64, MALFORMED, NON_IP, OK, Mask, Rel
from simstudy.traffic.pcap.buffer import Buf, Where
from simstudy.traffic.pcap.links import LINK_TYPES

#: IPv6 extension headers walked to the transport header: hop-by-hop, routing, fragment, AH,
#: destination options.
IPV6_EXTENSIONS: Final = (0, 43, 44, 51, 60)


_IPV6_EXT: Final = np.zeros(256, dtype=np.bool_)
_IPV6_EXT[list(IPV6_EXTENSIONS)] = True


_FIELDS: Final = ("status", "src4", "dst4", "proto", "sport", "dport", "ip_bytes", "payload", "seq", "flags",
                  "l4_truncated")


@dataclass
class Decoded:
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
    flags: NDArray[np.uint8]
    l4_truncated: Mask
    v6_rows: list[I64] = field(default_factory=list)  # rows holding IPv6 packets, and their addresses as (hi, lo)
    src6: list[NDArray[np.uint64]] = field(default_factory=list)
    dst6: list[NDArray[np.uint64]] = field(default_factory=list)

    @classmethod
    def empty(cls, n: int) -> Decoded:
        return cls(
            status=np.full(n, MALFORMED, dtype=np.uint8),
            src4=np.zeros(n, dtype=np.uint32),
            dst4=np.zeros(n, dtype=np.uint32),
            proto=np.zeros(n, dtype=np.uint8),
            sport=np.zeros(n, dtype=np.int32),
            dport=np.zeros(n, dtype=np.int32),
            ip_bytes=np.zeros(n, dtype=np.int64),
            payload=np.zeros(n, dtype=np.int64),
            seq=np.zeros(n, dtype=np.uint32),
            flags=np.zeros(n, dtype=np.uint8),
            l4_truncated=np.zeros(n, dtype=np.bool_),
        )

    def rows(self, i0: int, i1: int) -> Decoded:
        """Views of rows i0..i1-1 (IPv6 rows are not carried over)."""
        return Decoded(*(getattr(self, f)[i0:i1] for f in _FIELDS))  # type: ignore[arg-type]

    def add_v6(self, rows: I64, src6: NDArray[np.uint64], dst6: NDArray[np.uint64]) -> None:
        self.v6_rows.append(rows)
        self.src6.append(src6)
        self.dst6.append(dst6)

    def merge(self, rows: I64, part: Decoded) -> None:
        """Scatter `part` (decoded from `rows` of this block) into this block."""
        for f in _FIELDS:
            getattr(self, f)[rows] = getattr(part, f)
        for r, s6, d6 in zip(part.v6_rows, part.src6, part.dst6, strict=True):
            self.add_v6(rows[r], s6, d6)


def _sub(rel: Rel, rows: NDArray[Any]) -> Rel:
    return rel if isinstance(rel, int) else rel[rows]


def _uniform(x: Rel | NDArray[np.uint8] | int) -> Any:
    """An array whose values are all the same as that one value (the common case: every frame of a
    block behind the same link header), else the array."""
    if isinstance(x, int) or len(x) == 0:
        return x
    first = x[0]
    return int(first) if bool((x == first).all()) else x


def decode(buf: Buf, h: Headers, out: Decoded) -> None:
    """Decode a block of packets into `out`; `h.link` is one link type or one per packet."""
    link = h.link
    if not isinstance(link, int):
        kinds = np.unique(link)
        if len(kinds) > 1:
            for kind in kinds.tolist():
                rows = np.flatnonzero(link == kind)
                part = Decoded.empty(len(rows))
                decode(buf, Headers(h.data.take(rows), h.cap[rows], h.wire[rows], h.time[rows], int(kind)), part)
                out.merge(rows, part)
            return
        link = int(kinds[0])
    data, cap, wire = h.data, h.cap, h.wire
    l3, net, need = LINK_TYPES[link].locate(buf, data)
    l3, net, need = _uniform(l3), _uniform(net), _uniform(need)  # one value for all: strided reads
    short = cap < need
    if isinstance(net, int) and net == 4 and not short.any():  # IPv4 only, every link header captured
        _ipv4(buf, data, cap, wire, l3, out, None)
        return
    if isinstance(net, int):
        net = np.full(data.n, net, dtype=np.uint8)
    out.status[:] = np.where(short, MALFORMED, np.where(net == 0, NON_IP, MALFORMED))
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


def _ipv4(buf: Buf, data: Where, cap: I64, wire: I64, l3: Rel, out: Decoded, rows: I64 | None) -> None:
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
        np.multiply(bad, MALFORMED, out=out.status, casting="unsafe")
        data.read_into(buf, l3 + 12, ">u4", out.src4)
        data.read_into(buf, l3 + 16, ">u4", out.dst4)
    else:
        out.status[rows] = np.where(bad, MALFORMED, OK)
        out.src4[rows] = data.read(buf, l3 + 12, ">u4")
        out.dst4[rows] = data.read(buf, l3 + 16, ">u4")
    _transport(buf, data, cap, l3 + hl, proto, first_fragment, ip_bytes, hl, out, rows)


def _ipv6(buf: Buf, data: Where, cap: I64, wire: I64, l3: Rel, out: Decoded, rows: I64) -> None:
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
    out.status[rows] = np.where(bad, MALFORMED, OK)
    src6 = np.stack([data.read(buf, l3 + 8, ">u8"), data.read(buf, l3 + 16, ">u8")], axis=1)
    dst6 = np.stack([data.read(buf, l3 + 24, ">u8"), data.read(buf, l3 + 32, ">u8")], axis=1)
    out.add_v6(rows, src6, dst6)
    out.l4_truncated[rows] = unresolved & ~bad
    _transport(buf, data, cap, l4, proto, first_fragment, ip_bytes, l4 - l3, out, rows)


def _transport(
    buf: Buf,
    data: Where,
    cap: I64,
    l4: Rel,
    proto: NDArray[np.uint8],
    first_fragment: Mask,
    ip_bytes: I64,
    ip_hl: I64 | int,
    out: Decoded,
    rows: I64 | None,
) -> None:
    """Ports, transport header length and payload; writes every transport column of `out` at `rows`."""
    tcp = (proto == 6) & first_fragment
    if rows is None and bool(tcp.all()) and bool((cap >= l4 + 14).all()):  # all TCP, headers captured
        data.read_into(buf, l4, ">u2", out.sport)
        data.read_into(buf, l4 + 2, ">u2", out.dport)
        data.read_into(buf, l4 + 4, ">u4", out.seq)
        data.read_into(buf, l4 + 13, "u1", out.flags)
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
    flags = np.where(tcp & (cap >= l4 + 14), data.read(buf, l4 + 13, "u1"), 0).astype(np.uint8)
    have_offset = tcp & (cap >= l4 + 13)
    tcp_hl = (data.read(buf, l4 + 12, "u1") >> 4).astype(np.int64) * 4
    l4_hl = np.where(have_offset, tcp_hl, np.where(tcp, 20, np.where(udp, 8, 0)))
    truncated = (tcp & ~have_offset) | (udp & ~have_ports)
    payload = np.maximum(ip_bytes - ip_hl - l4_hl, 0)
    if rows is None:
        out.proto[:], out.sport[:], out.dport[:] = proto, sport, dport
        out.ip_bytes[:], out.payload[:], out.seq[:], out.flags[:] = ip_bytes, payload, seq, flags
        out.l4_truncated |= truncated
    else:
        out.proto[rows], out.sport[rows], out.dport[rows] = proto, sport, dport
        out.ip_bytes[rows], out.payload[rows], out.seq[rows], out.flags[rows] = ip_bytes, payload, seq, flags
        out.l4_truncated[rows] |= truncated



@dataclass(frozen=True)
class Headers:
    """Record-level facts for a block of packets."""

    data: Where
    cap: I64
    wire: I64
    time: NDArray[np.float64]
    link: int | I64
