"""pcap/pcapng ingest: every format variant and link type, written here byte by byte, read back exactly."""

from __future__ import annotations

import ipaddress
import json
import random
import shutil
import struct
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simstudy.traffic import check_table
from simstudy.traffic.pcap import (
    PcapError,
    PcapResult,
    parse_experiment_name,
    read_pcap,
    read_pcap_dir,
    to_traffic_table,
)
from simstudy.traffic.pcap.buffer import Buf
from simstudy.traffic.pcap.classic import classic_probe
from simstudy.traffic.pcap.walk import WalkSpec, walk, walk_seq

# ---------------------------------------------------------------------------------------------
# A small capture writer: real Ethernet / IP / TCP / UDP bytes built with struct.

T0_NS = 1_700_000_000_123_456_789  # an epoch time in nanoseconds


def tcp(sport: int, dport: int, options: int = 0, seq: int = 1) -> bytes:
    """A TCP header with `options` bytes of options (a multiple of 4)."""
    head = struct.pack("!HHIIBBHHH", sport, dport, seq, 2, (5 + options // 4) << 4, 0x18, 65535, 0, 0)
    return head + b"\x01" * options


def udp(sport: int, dport: int, payload: int) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + payload, 0)


def ipv4(src: str, dst: str, proto: int, l4: bytes, payload: int, *, options: int = 0, frag: int = 0) -> bytes:
    total = 20 + options + len(l4) + payload
    head = struct.pack("!BBHHHBBH4s4s", 0x40 | (5 + options // 4), 0, total, 7, frag, 64, proto, 0,
                       ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    return head + b"\x00" * options + l4 + bytes(payload)


def ipv6(src: str, dst: str, nh: int, l4: bytes, payload: int, ext: bytes = b"") -> bytes:
    plen = len(ext) + len(l4) + payload
    head = struct.pack("!IHBB16s16s", 0x60000000, plen, nh, 64,
                       ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed)
    return head + ext + l4 + bytes(payload)


def ether(packet: bytes, ethertype: int = 0x0800, vlans: tuple[int, ...] = ()) -> bytes:
    tags = b"".join(struct.pack("!HH", tpid, 100 + i) for i, tpid in enumerate(vlans))
    return b"\x02" * 6 + b"\x04" * 6 + tags + struct.pack("!H", ethertype) + packet


def arp() -> bytes:
    return ether(bytes(28), 0x0806)


@dataclass
class Frame:
    t_ns: int
    data: bytes
    wire: int | None = None  # wire length when larger than data (a capture of a longer frame)


def write_pcap(path: Path, frames: list[Frame], *, order: str = "<", nano: bool = False, snaplen: int = 65535,
               link: int = 1, cut_last: int = 0) -> Path:
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = bytearray(struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, link))
    for f in frames:
        sec, ns = divmod(f.t_ns, 10**9)
        frac = ns if nano else ns // 1000
        incl = min(len(f.data), snaplen)
        out += struct.pack(order + "IIII", sec, frac, incl, f.wire or len(f.data)) + f.data[:incl]
    if cut_last:
        del out[-cut_last:]
    path.write_bytes(bytes(out))
    return path


def _block(order: str, kind: int, body: bytes) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    size = len(body) + 12
    return struct.pack(order + "II", kind, size) + body + struct.pack(order + "I", size)


def shb(order: str) -> bytes:
    return _block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(order: str, link: int, snaplen: int = 0, tsresol: int | None = None, tsoffset: int | None = None) -> bytes:
    options = b""
    if tsresol is not None:
        options += struct.pack(order + "HHB3x", 9, 1, tsresol)
    if tsoffset is not None:
        options += struct.pack(order + "HHq", 14, 8, tsoffset)
    if options:
        options += struct.pack(order + "HH", 0, 0)
    return _block(order, 1, struct.pack(order + "HHI", link, 0, snaplen) + options)


def epb(order: str, iface: int, ticks: int, data: bytes, wire: int | None = None, snaplen: int = 0) -> bytes:
    cap = data[:snaplen] if snaplen else data
    body = struct.pack(order + "IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(cap), wire or len(data)) + cap
    return _block(order, 6, body)


def spb(order: str, data: bytes) -> bytes:
    return _block(order, 3, struct.pack(order + "I", len(data)) + data)


def ip_tcp(src: str, dst: str, sport: int, dport: int, payload: int, **kw: int) -> bytes:
    return ipv4(src, dst, 6, tcp(sport, dport, kw.pop("options", 0), kw.pop("seq", 1)), payload, **kw)


# ---------------------------------------------------------------------------------------------
# Classic pcap


def three_frames() -> list[Frame]:
    return [
        Frame(T0_NS, ether(ip_tcp("10.0.0.1", "10.0.0.2", 40000, 29500, 1000))),
        Frame(T0_NS + 1_500, ether(ipv4("10.0.0.2", "10.0.0.1", 17, udp(5000, 6000, 100), 100))),
        Frame(T0_NS + 2_000_000_001, ether(ip_tcp("10.0.0.1", "10.0.0.3", 40001, 29501, 0, options=12,
                                                  seq=0xFFFF_FFF0))),
    ]


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
def test_classic_pcap_both_byte_orders_and_resolutions(tmp_path: Path, order: str, nano: bool) -> None:
    path = write_pcap(tmp_path / "x.pcap", three_frames(), order=order, nano=nano)
    r = read_pcap(path)
    assert (r.format, r.byte_order, r.nanosecond, r.link_type, r.snaplen) == (
        "pcap", "little" if order == "<" else "big", nano, 1, 65535)
    assert (r.records_read, r.skipped_non_ip, r.skipped_malformed, r.warnings) == (3, 0, 0, [])
    p = r.packets
    assert list(p.columns) == ["time", "src_ip", "dst_ip", "sport", "dport", "proto", "ip_bytes", "payload_bytes",
                               "cap_bytes", "tcp_seq", "tcp_flags"]
    assert p["tcp_seq"].tolist() == [1, 0, 0xFFFF_FFF0]  # UDP has none
    assert p["tcp_flags"].tolist() == [0x18, 0, 0x18]  # PSH ACK
    assert list(p["src_ip"].astype(str)) == ["10.0.0.1", "10.0.0.2", "10.0.0.1"]
    assert list(p["dst_ip"].astype(str)) == ["10.0.0.2", "10.0.0.1", "10.0.0.3"]
    assert p["sport"].tolist() == [40000, 5000, 40001]
    assert p["dport"].tolist() == [29500, 6000, 29501]
    assert p["proto"].tolist() == [6, 17, 6]
    assert p["ip_bytes"].tolist() == [1040, 128, 52]
    assert p["payload_bytes"].tolist() == [1000, 100, 0]
    assert p["cap_bytes"].tolist() == [1054, 142, 66]
    assert {str(c): str(t) for c, t in p.dtypes.items()} == {
        "time": "float64", "src_ip": "category", "dst_ip": "category", "sport": "int32", "dport": "int32",
        "proto": "uint8", "ip_bytes": "int64", "payload_bytes": "int64", "cap_bytes": "int32",
        "tcp_seq": "uint32", "tcp_flags": "uint8"}
    step = 1e-9 if nano else 1e-6
    want = [(T0_NS + d) // round(step * 1e9) * step for d in (0, 1_500, 2_000_000_001)]
    np.testing.assert_allclose(p["time"], want, rtol=0, atol=5e-7)
    assert p["time"].iloc[1] - p["time"].iloc[0] == pytest.approx(1.5e-6 if nano else 2e-6, abs=5e-7)


@pytest.mark.parametrize("nano", [False, True])
def test_times_are_exact_to_the_resolution(tmp_path: Path, nano: bool) -> None:
    frames = [Frame(1000 * 10**9 + 123_456_789, ether(ip_tcp("1.1.1.1", "2.2.2.2", 1, 2, 0)))]
    t = read_pcap(write_pcap(tmp_path / "t.pcap", frames, nano=nano)).packets["time"].iloc[0]
    assert t == pytest.approx(1000.123456789 if nano else 1000.123456, abs=1e-12)


def test_snap_length_truncation_keeps_ip_total_length(tmp_path: Path) -> None:
    frames = [Frame(T0_NS + i, ether(ip_tcp("10.0.0.1", "10.0.0.2", 1234, 80, 1448, options=12))) for i in range(5)]
    r = read_pcap(write_pcap(tmp_path / "s.pcap", frames, snaplen=100))
    p = r.packets
    assert r.snaplen == 100 and len(p) == 5
    assert (p["ip_bytes"] == 1500).all() and (p["payload_bytes"] == 1448).all() and (p["cap_bytes"] == 100).all()
    assert r.l4_truncated == 0 and r.warnings == []


def test_tcp_header_cut_by_the_snap_length_is_assumed_20_bytes_and_recorded(tmp_path: Path) -> None:
    frames = [Frame(T0_NS, ether(ip_tcp("10.0.0.1", "10.0.0.2", 1234, 80, 500, options=8))),
              Frame(T0_NS, ether(ipv4("10.0.0.1", "10.0.0.2", 17, udp(53, 53, 10), 10)))]
    with pytest.warns(UserWarning, match="1 TCP/UDP headers were cut"):
        r = read_pcap(write_pcap(tmp_path / "c.pcap", frames, snaplen=14 + 20 + 6))
    p = r.packets
    assert r.l4_truncated == 1
    assert p["sport"].tolist() == [1234, 53] and p["dport"].tolist() == [80, 53]
    assert p["ip_bytes"].tolist() == [548, 38]
    assert p["payload_bytes"].tolist() == [548 - 20 - 20, 10]


def test_vlan_and_qinq_tags(tmp_path: Path) -> None:
    pkt = ip_tcp("192.168.1.1", "192.168.1.2", 1, 2, 10)
    frames = [Frame(T0_NS, ether(pkt)), Frame(T0_NS, ether(pkt, vlans=(0x8100,))),
              Frame(T0_NS, ether(pkt, vlans=(0x88A8, 0x8100))), Frame(T0_NS, ether(bytes(28), 0x0806, (0x8100,)))]
    r = read_pcap(write_pcap(tmp_path / "v.pcap", frames))
    assert r.records_read == 4 and r.skipped_non_ip == 1
    assert r.packets["ip_bytes"].tolist() == [50] * 3
    assert r.packets["payload_bytes"].tolist() == [10] * 3
    assert r.packets["cap_bytes"].tolist() == [64, 68, 72]


def test_ipv6_with_extension_headers_and_fragments(tmp_path: Path) -> None:
    a, b = "fd00::1", "fd00::2"
    hop = struct.pack("!BB6x", 6, 0)  # hop-by-hop, 8 bytes, then TCP
    dest = struct.pack("!BB14x", 17, 1)  # destination options, 16 bytes, then UDP
    frag_first = struct.pack("!BxHI", 6, 0x0001, 9)  # offset 0, more fragments
    frag_later = struct.pack("!BxHI", 6, (100 << 3), 9)  # offset 800 bytes: no TCP header here
    frames = [
        Frame(T0_NS, ether(ipv6(a, b, 6, tcp(1000, 2000), 100), 0x86DD)),
        Frame(T0_NS, ether(ipv6(b, a, 0, tcp(2000, 1000), 5, ext=hop), 0x86DD)),
        Frame(T0_NS, ether(ipv6(a, b, 60, udp(7, 8, 4), 4, ext=dest), 0x86DD)),
        Frame(T0_NS, ether(ipv6(a, b, 44, tcp(1, 2), 40, ext=frag_first), 0x86DD)),
        Frame(T0_NS, ether(ipv6(a, b, 44, bytes(30), 0, ext=frag_later), 0x86DD)),
        Frame(T0_NS, ether(ip_tcp("10.0.0.1", "10.0.0.2", 5, 6, 0))),
    ]
    p = read_pcap(write_pcap(tmp_path / "6.pcap", frames)).packets
    assert p["src_ip"].astype(str).tolist() == [a, b, a, a, a, "10.0.0.1"]
    assert p["ip_bytes"].tolist() == [160, 73, 68, 108, 78, 40]
    assert p["proto"].tolist() == [6, 6, 17, 6, 6, 6]
    assert p["sport"].tolist() == [1000, 2000, 7, 1, 0, 5]
    assert p["payload_bytes"].tolist() == [100, 5, 4, 40, 30, 0]
    assert list(p["src_ip"].cat.categories) == ["10.0.0.1", "10.0.0.2", a, b]  # numeric, IPv4 first


def test_many_addresses(tmp_path: Path) -> None:
    """Address codes start small and widen as addresses appear (here across chunks)."""
    hosts = [f"10.{i // 250}.{i % 250}.1" for i in range(40000)]
    frames = [Frame(T0_NS + i, ether(ip_tcp(h, "10.255.0.1", 1, 2, 0))) for i, h in enumerate(hosts)]
    path = write_pcap(tmp_path / "many.pcap", frames)
    for chunk in (200_000, 100 << 20):
        p = read_pcap(path, chunk_bytes=chunk).packets
        assert p["src_ip"].astype(str).tolist() == hosts
        assert len(p["src_ip"].cat.categories) == 40001
    t = to_traffic_table(p)  # more than 2048 addresses: flows are numbered by grouping
    assert t["flow"].tolist() == list(range(40000))
    assert t["src"].tolist() == list(range(40000)) and set(t["dst"]) == {40000}


def test_non_ip_and_malformed_frames_are_counted_and_dropped(tmp_path: Path) -> None:
    good = ether(ip_tcp("10.0.0.1", "10.0.0.2", 1, 2, 3))
    frames = [Frame(T0_NS, arp()), Frame(T0_NS, good), Frame(T0_NS, b"\x00" * 10),
              Frame(T0_NS, ether(b"\x45" + bytes(8), 0x0800)), Frame(T0_NS, ether(b"\x65" + bytes(40)))]
    r = read_pcap(write_pcap(tmp_path / "n.pcap", frames))
    assert (r.records_read, r.skipped_non_ip, r.skipped_malformed, len(r.packets)) == (5, 1, 3, 1)


SLL = struct.pack("!HHH8sH", 0, 1, 6, bytes(8), 0x0800)
SLL6 = struct.pack("!HHH8sH", 0, 1, 6, bytes(8), 0x86DD)
SLL2 = struct.pack("!HHIHBB8s", 0x0800, 0, 2, 1, 0, 6, bytes(8))


@pytest.mark.parametrize(("link", "header", "v6"), [
    (0, struct.pack("<I", 2), False),  # BSD loopback, little-endian machine
    (0, struct.pack(">I", 2), False),  # BSD loopback, big-endian machine
    (0, struct.pack("<I", 30), True),
    (0, struct.pack(">I", 24), True),
    (108, struct.pack(">I", 2), False),  # OpenBSD loop: network order
    (108, struct.pack(">I", 28), True),
    (101, b"", False), (101, b"", True), (12, b"", False), (14, b"", True),
    (228, b"", False), (229, b"", True),
    (113, SLL, False), (113, SLL6, True), (276, SLL2, False),
])
def test_link_types(tmp_path: Path, link: int, header: bytes, v6: bool) -> None:
    pkt = ipv6("::1", "::1", 6, tcp(50000, 29500), 64) if v6 else ip_tcp("127.0.0.1", "127.0.0.1", 50000, 29500, 64)
    r = read_pcap(write_pcap(tmp_path / "l.pcap", [Frame(T0_NS, header + pkt)] * 3, link=link))
    assert r.link_type == link and len(r.packets) == 3
    assert r.packets["ip_bytes"].tolist() == [len(pkt)] * 3
    assert r.packets["payload_bytes"].tolist() == [64] * 3
    assert r.packets["dport"].tolist() == [29500] * 3
    assert r.packets["src_ip"].astype(str).tolist() == ["::1" if v6 else "127.0.0.1"] * 3


def test_loopback_with_a_non_ip_family_is_skipped(tmp_path: Path) -> None:
    frames = [Frame(T0_NS, struct.pack("<I", 2) + ip_tcp("127.0.0.1", "127.0.0.1", 1, 2, 0)),
              Frame(T0_NS, struct.pack("<I", 7) + bytes(40))]
    r = read_pcap(write_pcap(tmp_path / "n.pcap", frames, link=0))
    assert (len(r.packets), r.skipped_non_ip) == (1, 1)


def test_ip_options_fragments_and_offload_lengths(tmp_path: Path) -> None:
    later_fragment = ipv4("10.0.0.1", "10.0.0.2", 6, b"", 100, frag=0x0010)  # offset 128 bytes: no TCP header
    tso = bytearray(ether(ip_tcp("10.0.0.1", "10.0.0.2", 1, 2, 100)))
    tso[16:18] = b"\x00\x00"  # total length 0, as offloaded segments are sometimes captured
    frames = [Frame(T0_NS, ether(ipv4("10.0.0.1", "10.0.0.2", 6, tcp(7, 8, options=4), 30, options=8))),
              Frame(T0_NS, ether(later_fragment)),
              Frame(T0_NS, bytes(tso), wire=65000)]
    p = read_pcap(write_pcap(tmp_path / "o.pcap", frames)).packets
    assert p["ip_bytes"].tolist() == [82, 120, 65000 - 14]
    assert p["payload_bytes"].tolist() == [30, 100, 65000 - 14 - 40]
    assert p["sport"].tolist() == [7, 0, 1]


def test_modified_pcap_magic_and_an_empty_capture(tmp_path: Path) -> None:
    pkt = ether(ip_tcp("10.0.0.1", "10.0.0.2", 1, 2, 5))
    data = struct.pack("<IHHiIII", 0xA1B2CD34, 2, 4, 0, 0, 65535, 1)
    data += struct.pack("<IIII", 100, 5, len(pkt), len(pkt)) + bytes(8) + pkt
    (tmp_path / "k.pcap").write_bytes(data)
    r = read_pcap(tmp_path / "k.pcap")
    assert r.packets["ip_bytes"].tolist() == [45] and r.packets["time"].tolist() == [pytest.approx(100.000005)]
    empty = read_pcap(write_pcap(tmp_path / "e.pcap", []))
    assert (len(empty.packets), empty.records_read, empty.warnings) == (0, 0, [])
    t = to_traffic_table(empty.packets)
    check_table(t)
    assert len(t) == 0


# ---------------------------------------------------------------------------------------------
# pcapng


@pytest.mark.parametrize("order", ["<", ">"])
def test_pcapng_two_interfaces_with_tsresol(tmp_path: Path, order: str) -> None:
    eth = ether(ip_tcp("10.1.0.1", "10.1.0.2", 1111, 2222, 100))
    raw = ip_tcp("10.2.0.1", "10.2.0.2", 3333, 4444, 200)
    body = shb(order) + idb(order, 1, 0) + idb(order, 101, 96, tsresol=9)
    body += epb(order, 0, 1_700_000_000_250_000, eth)  # microseconds (default resolution)
    body += _block(order, 0x40000BAD, b"custom block, skipped")
    body += epb(order, 1, 1_700_000_000_500_000_001, raw, snaplen=96)  # nanoseconds
    body += epb(order, 0, 1_700_000_001_000_000, eth)
    path = tmp_path / "x.pcapng"
    path.write_bytes(body)
    r = read_pcap(path)
    assert (r.format, r.byte_order, r.nanosecond, r.records_read) == ("pcapng", "little" if order == "<" else "big",
                                                                      True, 3)
    assert [(i.link_type, i.snaplen, i.ts_units_per_s) for i in r.interfaces] == [(1, 0, 10**6), (101, 96, 10**9)]
    p = r.packets
    np.testing.assert_allclose(p["time"], [1_700_000_000.25, 1_700_000_000.500000001, 1_700_000_001.0], atol=5e-7)
    assert p["ip_bytes"].tolist() == [140, 240, 140]
    assert p["payload_bytes"].tolist() == [100, 200, 100]
    assert p["cap_bytes"].tolist() == [154, 96, 154]
    assert p["sport"].tolist() == [1111, 3333, 1111]


def test_pcapng_sections_in_both_byte_orders_offsets_and_simple_packets(tmp_path: Path) -> None:
    pkt = ether(ip_tcp("10.0.0.1", "10.0.0.2", 1, 2, 10))
    body = shb("<") + idb("<", 1, tsresol=0x80 | 10, tsoffset=100) + epb("<", 0, 3 * 1024 + 512, pkt)
    body += shb(">") + idb(">", 1, snaplen=60) + epb(">", 0, 5_000_000, pkt) + spb(">", pkt[:60] + bytes(0))
    path = tmp_path / "s.pcapng"
    path.write_bytes(body)
    r = read_pcap(path)
    assert r.records_read == 3 and r.interfaces[0].ts_units_per_s == 1024
    t = r.packets["time"].tolist()
    assert t[0] == pytest.approx(103.5) and t[1] == pytest.approx(5.0) and np.isnan(t[2])
    assert r.packets["ip_bytes"].tolist() == [50, 50, 50]
    with pytest.warns(UserWarning, match="no timestamp"):
        table = to_traffic_table(r.packets)
    assert len(table) == 2


def test_pcapng_obsolete_packet_blocks(tmp_path: Path) -> None:
    pkt = ether(ip_tcp("10.0.0.1", "10.0.0.2", 1, 2, 10))
    opb = _block("<", 2, struct.pack("<HHIIII", 0, 0, 0, 2_000_000, len(pkt), len(pkt)) + pkt)
    path = tmp_path / "o.pcapng"
    path.write_bytes(shb("<") + idb("<", 1) + opb + epb("<", 0, 3_000_000, pkt))
    r = read_pcap(path)
    assert r.packets["time"].tolist() == [pytest.approx(2.0), pytest.approx(3.0)]
    assert r.packets["ip_bytes"].tolist() == [50, 50]


def test_pcapng_packet_on_an_undefined_interface(tmp_path: Path) -> None:
    path = tmp_path / "u.pcapng"
    path.write_bytes(shb("<") + idb("<", 1) + epb("<", 3, 0, ether(ip_tcp("1.1.1.1", "2.2.2.2", 1, 2, 0))))
    with pytest.raises(PcapError, match=r"u\.pcapng.*interface 3"):
        read_pcap(path)


def test_pcapng_unknown_link_type_of_a_used_interface(tmp_path: Path) -> None:
    path = tmp_path / "k.pcapng"
    path.write_bytes(shb("<") + idb("<", 147) + epb("<", 0, 0, b"\x00" * 40))
    with pytest.raises(PcapError, match=r"k\.pcapng.*link type 147"):
        read_pcap(path)


def test_pcapng_truncated_last_block(tmp_path: Path) -> None:
    pkt = ether(ip_tcp("10.0.0.1", "10.0.0.2", 1, 2, 10))
    path = tmp_path / "t.pcapng"
    path.write_bytes((shb("<") + idb("<", 1) + epb("<", 0, 1, pkt) * 4)[:-7])
    with pytest.warns(UserWarning, match="read 3 records"):
        r = read_pcap(path)
    assert len(r.packets) == 3


# ---------------------------------------------------------------------------------------------
# Errors


def test_truncated_last_record_warns_with_the_count(tmp_path: Path) -> None:
    frames = [Frame(T0_NS + i, ether(ip_tcp("10.0.0.1", "10.0.0.2", 1, 2, 100))) for i in range(4)]
    path = write_pcap(tmp_path / "cut.pcap", frames, cut_last=30)
    with pytest.warns(UserWarning, match=r"cut\.pcap: the last record .* truncated.*read 3 records"):
        r = read_pcap(path)
    assert r.records_read == 3 and len(r.packets) == 3 and len(r.warnings) == 1
    path = write_pcap(tmp_path / "cut2.pcap", frames)
    path.write_bytes(path.read_bytes() + b"\x01\x02\x03")  # a few stray bytes: not even a record header
    with pytest.warns(UserWarning, match="read 4 records"):
        assert len(read_pcap(path).packets) == 4


def test_bad_magic_names_the_file_and_what_was_expected(tmp_path: Path) -> None:
    path = tmp_path / "notes.pcap"
    path.write_bytes(b"hello, this is not a capture" * 3)
    with pytest.raises(PcapError, match=r"notes\.pcap.*a1b2c3d4") as info:
        read_pcap(path)
    assert isinstance(info.value, ValueError) and "pcapng" in str(info.value)
    (tmp_path / "empty.pcap").write_bytes(b"")
    with pytest.raises(PcapError, match=r"empty\.pcap"):
        read_pcap(tmp_path / "empty.pcap")


def test_unknown_link_type_names_it_and_the_file(tmp_path: Path) -> None:
    path = write_pcap(tmp_path / "usb.pcap", [Frame(T0_NS, bytes(40))], link=189)
    with pytest.raises(PcapError, match=r"usb\.pcap: unsupported link type 189"):
        read_pcap(path)


def test_corrupt_record_length_stops_with_a_warning(tmp_path: Path) -> None:
    frames = [Frame(T0_NS, ether(ip_tcp("10.0.0.1", "10.0.0.2", 1, 2, 10)))] * 3
    path = write_pcap(tmp_path / "bad.pcap", frames)
    data = bytearray(path.read_bytes())
    second = 24 + 16 + len(frames[0].data)
    data[second + 8 : second + 12] = struct.pack("<I", 10**8)
    path.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="corrupt record header.*read 1 records"):
        assert len(read_pcap(path).packets) == 1


# ---------------------------------------------------------------------------------------------
# Chunking and the record walk


def mixed_frames(n: int, seed: int) -> list[Frame]:
    """Data, ACK and odd-sized frames; payloads hold fake record headers to mislead speculative walkers."""
    rng = random.Random(seed)
    fake = struct.pack("<IIII", 1_700_000_000, 5, 40, 60) + struct.pack("<IIII", 1_700_000_000, 7, 0, 0)
    frames = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.6:
            payload = (fake * 100)[: rng.choice((1448, 1448, 46, 200))]
            frame = ether(ip_tcp("10.0.0.1", f"10.0.0.{2 + i % 3}", 40000 + i % 7, 29500, 0)) + payload
            frame = frame[:14] + ipv4_total(frame[14:], 40 + len(payload))
        elif kind < 0.9:
            frame = ether(ip_tcp(f"10.0.0.{2 + i % 3}", "10.0.0.1", 29500, 40000 + i % 7, 0))
        else:
            frame = ether(ipv4("10.0.0.9", "10.0.0.1", 17, udp(9, 9, 0), rng.randrange(0, 60)))
        frames.append(Frame(T0_NS + i * 1000 + rng.randrange(1000), frame))
    return frames


def ipv4_total(packet: bytes, total: int) -> bytes:
    return packet[:2] + struct.pack("!H", total) + packet[4:]


def reference_walk(path: Path) -> tuple[int, int, list[int]]:
    """A plain sequential reader: record count, captured bytes, and IP total lengths of IPv4 frames."""
    data = path.read_bytes()
    pos, count, captured, lengths = 24, 0, 0, []
    while pos + 16 <= len(data):
        incl = struct.unpack_from("<I", data, pos + 8)[0]
        if pos + 16 + incl > len(data):
            break
        frame = data[pos + 16 : pos + 16 + incl]
        if frame[12:14] == b"\x08\x00":
            lengths.append(struct.unpack_from("!H", frame, 16)[0])
        count, captured, pos = count + 1, captured + incl, pos + 16 + incl
    return count, captured, lengths


@pytest.mark.parametrize("snaplen", [100, 65535])
def test_chunked_reads_equal_the_whole_file_read(tmp_path: Path, snaplen: int) -> None:
    frames = mixed_frames(12000, seed=snaplen)
    path = write_pcap(tmp_path / "m.pcap", frames, snaplen=snaplen)
    whole = read_pcap(path)
    count, captured, lengths = reference_walk(path)
    assert whole.records_read == count == 12000 and len(whole.packets) == count
    assert int(whole.packets["cap_bytes"].sum()) == captured
    assert whole.packets["ip_bytes"].tolist() == lengths
    for chunk in (4096, 65536, 1_000_000):
        part = read_pcap(path, chunk_bytes=chunk)
        pd.testing.assert_frame_equal(part.packets, whole.packets)
        assert part.records_read == count
    small = write_pcap(tmp_path / "s.pcap", frames[:800], snaplen=snaplen)
    for chunk in (1, 100):  # every chunk grows to hold one record
        pd.testing.assert_frame_equal(read_pcap(small, chunk_bytes=chunk).packets, whole.packets.iloc[:800])


def test_chunked_pcapng_equals_the_whole_file_read(tmp_path: Path) -> None:
    frames = mixed_frames(12000, seed=5)
    path = tmp_path / "m.pcapng"
    blocks = b"".join(epb(">", 0, f.t_ns, f.data, snaplen=100) for f in frames)  # small blocks: lanes walk them
    path.write_bytes(shb(">") + idb(">", 1, snaplen=100, tsresol=9) + blocks)
    whole = read_pcap(path)
    assert whole.records_read == 12000
    assert whole.packets["cap_bytes"].tolist() == [min(100, len(f.data)) for f in frames]
    want = [struct.unpack_from("!H", f.data, 16)[0] for f in frames]
    assert whole.packets["ip_bytes"].tolist() == want
    np.testing.assert_allclose(whole.packets["time"], [f.t_ns / 1e9 for f in frames], atol=5e-7)
    for chunk in (4096, 100_000):
        pd.testing.assert_frame_equal(read_pcap(path, chunk_bytes=chunk).packets, whole.packets)


def test_a_record_breaking_a_long_constant_stride(tmp_path: Path) -> None:
    """The reader assumes a stride from the first records and checks it while decoding."""
    frames = [Frame(T0_NS + i, ether(ip_tcp("10.0.0.1", "10.0.0.2", 1, 2, 1448))) for i in range(6000)]
    frames[4321] = Frame(T0_NS, ether(ipv4("10.0.0.7", "10.0.0.2", 17, udp(3, 4, 1), 1)))
    frames[5555] = Frame(T0_NS, arp())
    path = write_pcap(tmp_path / "b.pcap", frames, snaplen=100)
    r = read_pcap(path)
    assert (r.records_read, r.skipped_non_ip, len(r.packets)) == (6000, 1, 5999)
    assert r.packets["ip_bytes"].sum() == 5998 * 1488 + 29
    assert r.packets["src_ip"].astype(str).iloc[4321] == "10.0.0.7"
    for chunk in (10_000, 300_000):
        pd.testing.assert_frame_equal(read_pcap(path, chunk_bytes=chunk).packets, r.packets)


def test_constant_stride_capture_in_tiny_chunks(tmp_path: Path) -> None:
    frames = [Frame(T0_NS + i, ether(ip_tcp("10.0.0.1", "10.0.0.2", 1, 2, 1448))) for i in range(3000)]
    path = write_pcap(tmp_path / "c.pcap", frames, snaplen=100)
    whole = read_pcap(path)
    assert len(whole.packets) == 3000 and (whole.packets["ip_bytes"] == 1488).all()
    pd.testing.assert_frame_equal(read_pcap(path, chunk_bytes=1000).packets, whole.packets)


def walk_spec() -> WalkSpec:
    return WalkSpec(len_off=8, hdr=16, fmt="<u4", min_len=0, max_len=262144, align=1,
                     probe=classic_probe(10**6, "<u4"))


@pytest.mark.parametrize("seed", range(4))
def test_speculative_walk_equals_the_sequential_walk(seed: int) -> None:
    """Random record lengths and payloads full of fake headers; lanes must find exactly the true records."""
    rng = np.random.default_rng(seed)
    out = bytearray(24)
    for i in range(30000):
        incl = int(rng.choice([0, 3, 40, 54, 60, 66, 100, int(rng.integers(0, 120))]))
        body = rng.integers(0, 256, incl, dtype=np.uint8).tobytes()
        if incl >= 32 and rng.random() < 0.5:  # a fake plausible header inside the data
            at = int(rng.integers(0, incl - 16))
            body = body[:at] + struct.pack("<IIII", i, 1, int(rng.integers(0, 100)), 100) + body[at + 16 :]
        out += struct.pack("<IIII", 1_700_000_000 + i, i % 10**6, incl, max(incl, 60)) + body
    data = np.frombuffer(bytes(out), dtype=np.uint8)
    buf = Buf(data, bytes(out))
    for stop in (len(out), len(out) - 5, len(out) // 3):
        fast, slow = walk(buf, 24, stop, walk_spec()), walk_seq(buf, 24, stop, walk_spec())
        np.testing.assert_array_equal(fast.offsets.array(), slow.offsets.array())
        assert (fast.next, fast.reason, fast.need) == (slow.next, slow.reason, slow.need)


@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
def test_corrupted_files_never_fail_outside_pcap_error(tmp_path: Path, kind: str) -> None:
    """Random byte damage: a result (with warnings) or a PcapError, and the same whatever the chunk size."""
    frames = mixed_frames(400, seed=9)
    if kind == "pcap":
        base = write_pcap(tmp_path / "b.pcap", frames, snaplen=100).read_bytes()
    else:
        base = shb("<") + idb("<", 1, tsresol=9) + idb("<", 113) + b"".join(
            epb("<", i % 2, f.t_ns, f.data if i % 2 == 0 else SLL + f.data[14:]) for i, f in enumerate(frames))
    rng = random.Random(kind)
    read = refused = 0
    for trial in range(40):
        data = bytearray(base)
        if trial % 3 == 0:
            del data[rng.randrange(24, len(data)) :]
        for _ in range(rng.randrange(1, 12)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path = tmp_path / f"f.{kind}"
        path.write_bytes(bytes(data))
        results: list[PcapResult | str] = []
        for chunk in (1 << 20, 3000):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    results.append(read_pcap(path, chunk_bytes=chunk))
                except PcapError as exc:
                    results.append(str(exc))
        big, small = results
        if isinstance(big, str) or isinstance(small, str):  # refused: whatever the chunk size, for the same reason
            assert big == small, (trial, big, small)
            refused += 1
            continue
        assert big.records_read == small.records_read
        pd.testing.assert_frame_equal(big.packets, small.packets)
        assert (big.packets["payload_bytes"] >= 0).all()
        read += 1
    assert read >= 10, (read, refused)  # most damage is read around, with warnings


# ---------------------------------------------------------------------------------------------
# Directories and TrafficTables


def test_experiment_names() -> None:
    got = parse_experiment_name("pytorch-resnet50-sgd-32-gloo-0ms")
    assert got is not None and got.model_dump() == {
        "framework": "pytorch", "model": "resnet50", "optimizer": "sgd", "batch_size": 32, "backend": "gloo",
        "delay": "0ms", "delay_s": 0.0, "topology": None}
    got = parse_experiment_name("tensorflow-vgg16-adam-64-nccl-10ms-ring")
    assert got is not None and got.topology == "ring" and got.delay_s == pytest.approx(0.01)
    got = parse_experiment_name("pytorch-resnet-50-sgd-128-nccl-2.5ms")
    assert got is not None and (got.model, got.batch_size, got.delay) == ("resnet-50", 128, "2.5ms")
    got = parse_experiment_name("mxnet-bert-large-adamw-8-ps-1s-fat-tree")
    assert got is not None and (got.model, got.topology, got.delay_s) == ("bert-large", "fat-tree", 1.0)
    for bad in ("pytorch-resnet50-sgd-gloo-0ms", "results", "pytorch-resnet50-sgd-32-gloo-fast", "a--b-1-c-1ms",
                "pytorch-resnet50-sgd-32-gloo-0ms-"):
        assert parse_experiment_name(bad) is None, bad


def test_capture_directory(tmp_path: Path) -> None:
    exp = tmp_path / "pytorch-resnet50-sgd-32-gloo-10ms-star"
    exp.mkdir()
    a, b = "10.0.0.1", "10.0.0.2"
    write_pcap(exp / "worker1.pcap", [Frame(T0_NS + 10, ether(ip_tcp(b, a, 29501, 40000, 100)))], order=">")
    write_pcap(exp / "worker0.pcap", [Frame(T0_NS, ether(ip_tcp(a, b, 40000, 29501, 1000))),
                                      Frame(T0_NS + 5, ether(ip_tcp(a, "10.0.0.250", 40001, 29400, 10)))])
    (exp / "notes.txt").write_text("ignored")
    (exp / "meta.json").write_text(json.dumps({"ranks": {"0": {"ip": a, "port": 40000}, "1": f"{b}:29501"},
                                               "control": ["10.0.0.250:29400"], "world_size": 2}))
    d = read_pcap_dir(exp)
    assert [f.name for f in d.files] == ["worker0.pcap", "worker1.pcap"]
    assert d.packets["file"].tolist() == [0, 0, 1]
    assert d.packets["src_ip"].astype(str).tolist() == [a, a, b]
    assert list(d.packets["dst_ip"].cat.categories) == [a, b, "10.0.0.250"]
    assert d.experiment is not None and d.experiment.delay == "10ms" and d.experiment.topology == "star"
    assert d.meta is not None and d.meta.model_extra == {"world_size": 2}  # kept, not refused
    assert [r.records_read for r in d.results] == [2, 1]
    assert d.meta.rank_of == {f"{a}:40000": 0, f"{b}:29501": 1}
    assert d.meta.control_keys == ["10.0.0.250:29400"]
    t = d.traffic_table()
    check_table(t)
    assert t["src"].tolist() == [0, -1, 1] and t["dst"].tolist() == [1, -1, 0]  # 10.0.0.1:40001 is not a rank
    assert t["op"].astype(str).tolist() == ["tcp", "control", "tcp"]
    assert t["t_start_s"].tolist() == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)  # within one microsecond


def test_a_directory_without_captures(tmp_path: Path) -> None:
    (tmp_path / "readme.txt").write_text("no captures here")
    with pytest.raises(PcapError, match="no capture files"):
        read_pcap_dir(tmp_path)


def test_to_traffic_table_ranks_flows_and_control(tmp_path: Path) -> None:
    frames = [
        Frame(T0_NS, ether(ip_tcp("10.0.0.3", "10.0.0.1", 40000, 29500, 100))),
        Frame(T0_NS + 1000, ether(ip_tcp("10.0.0.1", "10.0.0.3", 29500, 40000, 0))),
        Frame(T0_NS + 2000, ether(ip_tcp("10.0.0.3", "10.0.0.1", 40000, 29500, 200))),
        Frame(T0_NS + 3000, ether(ipv4("10.0.0.2", "10.0.0.10", 17, udp(5353, 5353, 20), 20))),
        Frame(T0_NS + 4000, ether(ip_tcp("10.0.0.2", "10.0.0.1", 41000, 29400, 7))),
    ]
    p = read_pcap(write_pcap(tmp_path / "t.pcap", frames)).packets
    t = to_traffic_table(p, control=["10.0.0.1:29400"])
    check_table(t)
    assert t["src"].tolist() == [2, 0, 2, 1, 1]  # 10.0.0.1 < 10.0.0.2 < 10.0.0.3 < 10.0.0.10 (numeric order)
    assert t["dst"].tolist() == [0, 2, 0, 3, 0]
    assert t["flow"].tolist() == [0, 1, 0, 2, 3]
    assert t["op"].astype(str).tolist() == ["tcp", "tcp", "tcp", "udp", "control"]
    assert t["bytes"].tolist() == [140, 40, 240, 48, 47]
    assert t["payload_bytes"].tolist() == [100, 0, 200, 20, 7]
    np.testing.assert_allclose(t["t_start_s"], [0, 1e-6, 2e-6, 3e-6, 4e-6], atol=5e-7)
    assert (t["t_end_s"] == t["t_start_s"]).all()
    t = to_traffic_table(p, control=["10.0.0.10"])  # a host: any of its ports
    assert t["op"].astype(str).tolist() == ["tcp", "tcp", "tcp", "control", "tcp"]
    t = to_traffic_table(p, rank_of={"10.0.0.3:40000": 5, "10.0.0.1": 7}, t0_s=p["time"].iloc[0] - 1.0)
    assert t["src"].tolist() == [5, 7, 5, -1, -1] and t["dst"].tolist() == [7, 5, 7, -1, 7]
    assert t["t_start_s"].iloc[0] == pytest.approx(1.0)


def test_to_traffic_table_on_a_single_ip_capture() -> None:
    """Loopback: ranks are processes of `ip:port` endpoints (simstudy.traffic.processes). Two
    connections whose SYNs name 29500 and 29501 as listening ports: each listener is a process,
    and each client port belongs to the other one (the fewest processes), as two gRPC tasks
    that call each other look."""
    p = pd.DataFrame({
        "time": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5],
        "src_ip": ["127.0.0.1"] * 6, "dst_ip": ["127.0.0.1"] * 6,
        "sport": [50000, 29500, 50001, 29501, 50000, 50001], "dport": [29500, 50000, 29501, 50001, 29500, 29501],
        "proto": [6] * 6, "ip_bytes": [52, 52, 52, 52, 1000, 1000], "payload_bytes": [0, 0, 0, 0, 948, 948],
        "tcp_flags": [0x02, 0x12, 0x02, 0x12, 0x18, 0x18],
    })
    t = to_traffic_table(p)
    assert t["src"].tolist() == [1, 0, 0, 1, 1, 0] and t["dst"].tolist() == [0, 1, 1, 0, 0, 1]
    assert t.attrs["rank_labels"] == {0: "127.0.0.1:29500", 1: "127.0.0.1:29501"}
    assert t.attrs["places"][0].endpoints == ("127.0.0.1:29500", "127.0.0.1:50001")
    t = to_traffic_table(p, rank_of={"127.0.0.1:29500": 0, "127.0.0.1:29501": 1, "127.0.0.1:50000": 1,
                                     "127.0.0.1:50001": 0})
    assert t["src"].tolist() == [1, 0, 0, 1, 1, 0] and t["dst"].tolist() == [0, 1, 1, 0, 0, 1]
    assert t["flow"].tolist() == [0, 1, 2, 3, 0, 2]


def test_a_ring_of_hosts_with_two_listeners_on_one_host_is_four_hosts() -> None:
    """Horovod on 4 hosts: a ring of training connections, and the host of rank 0 listens on two
    ports (one per gloo context), each with one of its ring connections. The hosts already make a
    ring, so 10.0.0.1 is one rank, not two processes in a chain (a real 4-host Horovod capture
    was read as 5 workers)."""
    ring = [("10.0.0.1", 29600, "10.0.0.2", 41000), ("10.0.0.2", 29700, "10.0.0.3", 41001),
            ("10.0.0.3", 29800, "10.0.0.4", 41002), ("10.0.0.1", 29601, "10.0.0.4", 41003)]
    rows = []
    for k, (lip, lport, cip, cport) in enumerate(ring):
        t = 1.0 + 0.01 * k
        rows += [(t, cip, lip, cport, lport, 52, 0, 0x02), (t + 1e-4, lip, cip, lport, cport, 52, 0, 0x12)]
        for i in range(20):  # training bytes both ways
            rows += [(2.0 + 0.01 * i + 1e-3 * k, lip, cip, lport, cport, 1500, 1448, 0x18),
                     (2.0 + 0.01 * i + 1e-3 * k + 5e-4, cip, lip, cport, lport, 1500, 1448, 0x18)]
    rows.sort()
    p = pd.DataFrame(rows, columns=["time", "src_ip", "dst_ip", "sport", "dport", "ip_bytes", "payload_bytes",
                                    "tcp_flags"]).assign(proto=6)
    t = to_traffic_table(p)
    assert t.attrs["rank_labels"] == {0: "10.0.0.1", 1: "10.0.0.2", 2: "10.0.0.3", 3: "10.0.0.4"}


# ---------------------------------------------------------------------------------------------
# Optional cross-checks against other readers


def test_cross_check_with_tshark(tmp_path: Path) -> None:
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark is not installed")
    path = write_pcap(tmp_path / "m.pcap", mixed_frames(500, seed=1), snaplen=100)
    out = subprocess.run([tshark, "-r", str(path), "-T", "fields", "-e", "ip.len", "-e", "frame.time_epoch"],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    rows = [line.split("\t") for line in out if line.strip()]
    p = read_pcap(path).packets
    assert p["ip_bytes"].tolist() == [int(r[0]) for r in rows]
    np.testing.assert_allclose(p["time"], [float(r[1]) for r in rows], atol=1e-6)


def test_cross_check_with_dpkt(tmp_path: Path) -> None:
    dpkt = pytest.importorskip("dpkt", reason="dpkt is not installed")
    path = write_pcap(tmp_path / "m.pcap", mixed_frames(500, seed=2), order=">", nano=True)
    with path.open("rb") as f:
        want = [(ts, dpkt.ethernet.Ethernet(buf).data.len) for ts, buf in dpkt.pcap.Reader(f)]
    p = read_pcap(path).packets
    assert p["ip_bytes"].tolist() == [w[1] for w in want]
    np.testing.assert_allclose(p["time"], [float(w[0]) for w in want], atol=1e-6)
