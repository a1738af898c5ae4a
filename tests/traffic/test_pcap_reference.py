"""The fast reader equals the reference reader (`simstudy.traffic.pcap.reference`: one record and
one packet at a time with struct) on random captures: every link type, both file formats and
their variants (byte orders, micro- and nanosecond pcaps, Kuznetzov's records, pcapng with
several interfaces of different link types and resolutions, simple and obsolete packet blocks),
VLAN and QinQ tags, IPv4 options and fragments, IPv6 extension headers, non-IP frames, snap
lengths that cut any header, offload lengths of 0, and files cut in their last record. Enough
records (up to 3,000) and small chunks so that constant strides, lanes and chunk edges all run.
"""

from __future__ import annotations

import ipaddress
import math
import struct
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simstudy.traffic.pcap import LINK_TYPES, PcapError, read_pcap
from simstudy.traffic.pcap.links import VLAN_TPIDS
from simstudy.traffic.pcap.reference import COLUMNS, decode_packet, read_reference

from .test_pcap import _block, idb, shb

T0 = 1_700_000_000


def _tcp(sport: int, dport: int, seq: int, flags: int, options: int) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, seq, 7, (5 + options // 4) << 4, flags, 65535, 0, 0) + \
        bytes(options)


@st.composite
def ip_packets(draw: st.DrawFn) -> bytes:
    """An IPv4 or IPv6 packet (TCP, UDP, ICMP, fragments, options, extension headers), or junk."""
    kind = draw(st.sampled_from(["v4", "v4", "v6", "v6", "junk"]))
    if kind == "junk":
        return draw(st.binary(min_size=0, max_size=80))
    proto = draw(st.sampled_from([6, 6, 17, 1]))
    payload = draw(st.sampled_from([0, 1, 100, 1448, draw(st.integers(0, 3000))]))
    sport, dport = draw(st.integers(0, 65535)), draw(st.integers(0, 65535))
    if proto == 6:
        l4 = _tcp(sport, dport, draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 255)),
                  draw(st.sampled_from([0, 12, 40])))
    elif proto == 17:
        l4 = struct.pack("!HHHH", sport, dport, 8 + payload, 0)
    else:
        l4 = bytes(8)
    body = l4 + bytes(payload)
    if kind == "v4":
        options = draw(st.sampled_from([0, 0, 4, 40]))
        frag = draw(st.sampled_from([0, 0, 0x2000, 0x0010, 0x4000]))
        total = 20 + options + len(body)
        if draw(st.integers(0, 9)) == 0:
            total = 0  # as offloaded segments are sometimes captured
        src, dst = draw(st.integers(0, 2**32 - 1)), draw(st.sampled_from([0x0A000001, 0x7F000001, 0xC0A80102]))
        head = struct.pack("!BBHHHBBHII", 0x40 | (5 + options // 4), 0, total, 7, frag, 64, proto, 0, src, dst)
        return head + bytes(options) + body
    exts = draw(st.lists(st.sampled_from([0, 43, 44, 51, 60]), max_size=3))
    chain = b""
    nxt = proto
    for ext in reversed(exts):
        if ext == 44:
            hdr = struct.pack("!BBHI", nxt, 0, draw(st.sampled_from([0, 0x0008, 0x0001])), 99)
        elif ext == 51:
            hdr = struct.pack("!BB", nxt, 1) + bytes(10)  # (1 + 2) * 4 = 12 bytes
        else:
            hdr = struct.pack("!BB", nxt, 0) + bytes(6)
        chain = hdr + chain
        nxt = ext
    plen = len(chain) + len(body)
    if draw(st.integers(0, 9)) == 0:
        plen = 0  # a jumbogram, or an offloaded segment
    src = draw(st.sampled_from(["fe80::1", "::1", "2001:db8::7"]))
    head = struct.pack("!IHBB16s16s", 0x60000000, plen % 65536, nxt, 64, ipaddress.IPv6Address(src).packed,
                       ipaddress.IPv6Address("2001:db8::2").packed)
    return head + chain + body


def _version(pkt: bytes) -> int:
    return pkt[0] >> 4 if pkt else 0


@st.composite
def frames(draw: st.DrawFn, link: int) -> bytes:
    """A frame of link type `link` around an IP packet (or a non-IP frame)."""
    pkt = draw(ip_packets())
    v = _version(pkt)
    et = {4: 0x0800, 6: 0x86DD}.get(v, 0x0800)
    if draw(st.integers(0, 7)) == 0:
        et = draw(st.sampled_from([0x0806, 0x88CC, 0x0800, 0x86DD]))  # ARP, LLDP, or a wrong version
    if link == 1:
        tags = b"".join(struct.pack("!HH", draw(st.sampled_from(VLAN_TPIDS)), 5)
                        for _ in range(draw(st.sampled_from([0, 0, 1, 2, 3]))))
        return b"\x02" * 12 + tags + struct.pack("!H", et) + pkt
    if link == 113:
        return struct.pack("!HHH8sH", 0, 772, 0, bytes(8), et) + pkt
    if link == 276:
        return struct.pack("!HHIHBB8s", et, 0, 1, 772, 0, 0, bytes(8)) + pkt
    if link in (0, 108):
        af = {4: 2, 6: draw(st.sampled_from([10, 24, 28, 30]))}.get(v, 7)
        order = draw(st.sampled_from("<>")) if link == 0 else ">"
        return struct.pack(order + "I", af) + pkt
    return pkt  # raw IP: 12, 14, 101, 228, 229


@st.composite
def captures(draw: st.DrawFn) -> tuple[bytes, int]:
    """A whole capture file and a chunk size to read it with."""
    pcapng = draw(st.booleans())
    snaplen = draw(st.sampled_from([14, 40, 68, 100, 128, 65535]))
    n = draw(st.sampled_from([1, 5, 200, 3000]))
    if not pcapng:
        link = draw(st.sampled_from(sorted(LINK_TYPES)))
        pool = draw(st.lists(frames(link), min_size=1, max_size=8))
        order = draw(st.sampled_from("<>"))
        magic, rec = draw(st.sampled_from([(0xA1B2C3D4, 16), (0xA1B23C4D, 16), (0xA1B2CD34, 24)]))
        out = bytearray(struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, link))
        picks = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).integers(0, len(pool), n)
        frac_max = 10**9 if magic == 0xA1B23C4D else 10**6
        for k, i in enumerate(picks.tolist()):
            f = pool[i]
            incl = min(len(f), snaplen)
            out += struct.pack(order + "IIII", T0 + k // 1000, (k * 997) % frac_max, incl, len(f)) + bytes(rec - 16)
            out += f[:incl]
    else:
        order = draw(st.sampled_from("<>"))
        links = draw(st.lists(st.sampled_from(sorted(LINK_TYPES)), min_size=1, max_size=3))
        out = bytearray(shb(order))
        for lt in links:
            out += idb(order, lt, snaplen, tsresol=draw(st.sampled_from([None, 6, 9, 0x80 | 20])),
                       tsoffset=draw(st.sampled_from([None, 0, 3600])))
        pools = [draw(st.lists(frames(lt), min_size=1, max_size=4)) for lt in links]
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        kinds = draw(st.sampled_from([(6,), (6, 3), (6, 2), (6, 3, 2)]))
        for k in range(n):
            kind = int(rng.choice(kinds))
            iface = 0 if kind == 3 else int(rng.integers(0, len(links)))
            f = pools[iface][int(rng.integers(0, len(pools[iface])))]
            cap = f[:snaplen]
            ticks = (T0 + k) * 10**6 + k * 17
            if kind == 3:
                out += _block(order, 3, struct.pack(order + "I", len(f)) + cap)
            else:
                head = struct.pack(order + ("HH" if kind == 2 else "I") + "IIII", *(
                    (iface, 0) if kind == 2 else (iface,)), ticks >> 32, ticks & 0xFFFFFFFF, len(cap), len(f))
                out += _block(order, kind, head + cap)
    if draw(st.integers(0, 4)) == 0:
        del out[-draw(st.integers(1, 30)):]  # cut in the last record
    return bytes(out), draw(st.sampled_from([256, 4096, 65536, 64 << 20]))


def _same(a: pd.Series, b: pd.Series) -> bool:
    x, y = a.to_numpy(), b.to_numpy()
    if len(x) == 0:
        return len(y) == 0
    if x.dtype.kind == "f":
        y = y.astype(np.float64)
        return bool(((x == y) | (np.isnan(x) & np.isnan(y))).all())
    return bool((x == y).all())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(captures())
def test_fast_reader_equals_the_reference(tmp_path_factory: pytest.TempPathFactory,
                                          capture: tuple[bytes, int]) -> None:
    data, chunk = capture
    path = tmp_path_factory.mktemp("ref") / "x.pcap"
    path.write_bytes(data)
    try:
        ref = read_reference(path)
    except PcapError:
        with pytest.raises(PcapError):
            read_pcap(path, chunk_bytes=chunk)
        return
    if ref.records == 0 and ref.stopped:
        with pytest.raises(PcapError):
            read_pcap(path, chunk_bytes=chunk)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = read_pcap(path, chunk_bytes=chunk)
    assert any("truncated" in w or "corrupt" in w for w in got.warnings if "headers were cut" not in w) == bool(
        ref.stopped), (got.warnings, ref.stopped)
    assert (got.records_read, got.skipped_non_ip, got.skipped_malformed, got.l4_truncated) == (
        ref.records, ref.non_ip, ref.malformed, ref.l4_truncated)
    assert [(i.link_type, i.snaplen, i.ts_units_per_s, i.ts_offset_s) for i in got.interfaces] == [
        (i.link_type, i.snaplen, i.ts_units_per_s, i.ts_offset_s) for i in ref.interfaces]
    want = ref.packets()
    have = got.packets
    assert list(have.columns) == list(COLUMNS)
    assert len(have) == len(want)
    for col in COLUMNS:
        h = have[col].astype(str) if col.endswith("_ip") else have[col]
        assert _same(h.reset_index(drop=True), want[col]), col


def test_reference_decodes_what_the_writers_of_test_pcap_wrote() -> None:
    """The reference on its own, against hand-made frames (so that it is not only equal to the
    fast reader but right)."""
    pkt = struct.pack("!BBHHHBBHII", 0x45, 0, 40 + 100, 1, 0, 64, 6, 0, 0x0A000001, 0x0A000002) + \
        _tcp(40000, 29500, 5, 0x12, 0)
    p = decode_packet(b"\x02" * 12 + struct.pack("!HHH", 0x8100, 7, 0x0800) + pkt, 14 + 4 + 140, 1)
    assert (p.src, p.dst, p.sport, p.dport, p.ip_bytes, p.payload, p.seq, p.flags) == (
        "10.0.0.1", "10.0.0.2", 40000, 29500, 140, 100, 5, 0x12)
    assert decode_packet(struct.pack(">I", 2) + pkt[:19], 100, 108).status == 2  # IP header cut: malformed
    assert decode_packet(struct.pack("<I", 7) + pkt, 100, 0).status == 1  # another address family: not IP
    assert math.isclose(decode_packet(pkt, 140, 101).ip_bytes, 140)
