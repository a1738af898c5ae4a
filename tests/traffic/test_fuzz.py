"""Property-based fuzzing of the capture reader: valid pcap and pcapng files, mutated thousands of
times (flipped bytes, cut records, absurd lengths, spliced pieces), are read or refused with the
reader's own PcapError, never anything else. A smaller run takes the mutants through the whole
`simstudy analyze` path (ingest, roles, iterations, features), which must not crash either.
"""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simstudy.traffic.features import analyze
from simstudy.traffic.pcap import LINK_TYPES, PcapError, PcapResult, read_pcap
from simstudy.traffic.sources import SourceError, load_traffic

from .test_pcap import (
    T0_NS,
    Frame,
    _block,
    arp,
    epb,
    ether,
    idb,
    ip_tcp,
    ipv4,
    ipv6,
    shb,
    spb,
    tcp,
    udp,
)
from .test_pcap import write_pcap as write_classic

# a failing example's repr is a whole capture: long, but that is the point
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")


def _frames() -> list[Frame]:
    frames = []
    for k in range(24):
        t = T0_NS + k * 1_000_000
        if k % 6 == 0:
            frames.append(Frame(t, arp()))
        elif k % 6 == 1:
            frames.append(Frame(t, ether(ipv4("10.0.0.2", "10.0.0.1", 17, udp(5000, 6000, 64), 64))))
        elif k % 6 == 2:
            ext = bytes([6, 0]) + bytes(6)  # hop-by-hop options, then TCP
            frames.append(Frame(t, ether(ipv6("fe80::1", "fe80::2", 0, tcp(80, 40000), 32, ext), 0x86DD)))
        elif k % 6 == 3:
            frames.append(Frame(t, ether(ip_tcp("10.0.0.1", "10.0.0.3", 40001, 29500, 100, options=12)),
                                wire=1514))
        else:
            frames.append(Frame(t, ether(ip_tcp("10.0.0.1", "10.0.0.2", 40000, 29500, 1448 + k), vlans=(0x8100,))))
    return frames


def _classic(tmp: Path, order: str, nano: bool, snaplen: int) -> bytes:
    return write_classic(tmp / "seed.pcap", _frames(), order=order, nano=nano, snaplen=snaplen).read_bytes()


def _pcapng(order: str) -> bytes:
    out = shb(order) + idb(order, 1, 128, tsresol=9) + idb(order, 101, 0)
    for k, f in enumerate(_frames()):
        if k % 7 == 3:
            out += spb(order, f.data)
        else:
            out += epb(order, k % 2, f.t_ns, f.data if k % 2 == 0 else f.data[14:], snaplen=128 if k % 2 == 0 else 0)
        if k == 10:
            out += _block(order, 0x40000BAD, b"custom block simstudy does not know")  # skipped, not refused
            out += _block(order, 5, struct.pack(order + "I", 0) + bytes(8))  # interface statistics
    other = ">" if order == "<" else "<"  # a second section in the other byte order
    return out + shb(other) + idb(other, 1) + epb(other, 0, T0_NS + 10**9, _frames()[4].data)


def relink(frame: bytes, link: int) -> bytes:
    """An Ethernet frame of `_frames` as a frame of link type `link` (same IP packet, or a non-IP one)."""
    at = 12
    while frame[at:at + 2] in (b"\x81\x00", b"\x88\xa8", b"\x91\x00"):
        at += 4
    et, pkt = frame[at:at + 2], frame[at + 2:]
    v6 = et == b"\x86\xdd"
    if link == 1:
        return frame
    if link == 113:
        return struct.pack("!HHH8s", 0, 772, 0, bytes(8)) + et + pkt
    if link == 276:
        return et + struct.pack("!HIHBB8s", 0, 1, 772, 0, 0, bytes(8)) + pkt
    if link in (0, 108):
        af = 30 if v6 else 2 if et == b"\x08\x00" else 7
        return struct.pack("<I" if link == 0 else ">I", af) + pkt
    return pkt  # raw IP


def _every_link(tmp: Path) -> list[bytes]:
    """One classic pcap per link type read, and a pcapng with one interface of each (mixed)."""
    out = [write_classic(tmp / f"l{link}.pcap", [Frame(f.t_ns, relink(f.data, link), f.wire) for f in _frames()],
                         link=link, snaplen=100 if link % 2 else 65535).read_bytes() for link in sorted(LINK_TYPES)]
    links = sorted(LINK_TYPES)
    mixed = shb("<") + b"".join(idb("<", link, 0, tsresol=9 if k % 2 else None) for k, link in enumerate(links))
    for k, f in enumerate(_frames() * 2):
        i = k % len(links)
        mixed += epb("<", i, f.t_ns // (1 if i % 2 else 1000), relink(f.data, links[i]))
    one_host = [Frame(f.t_ns, ether(ip_tcp("127.0.0.1", "127.0.0.1", 40000 + k % 3, 29500 + k % 2, 1448)))
                for k, f in enumerate(_frames())]  # ranks that share an address: endpoints are ports
    out.append(write_classic(tmp / "lo.pcap", one_host).read_bytes())
    return [*out, mixed]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    tmp = tmp_path_factory.mktemp("seeds")
    out = [_classic(tmp, "<", False, 65535), _classic(tmp, ">", True, 96), _classic(tmp, "<", True, 60),
           _pcapng("<"), _pcapng(">"), *_every_link(tmp)]
    for data in out:  # the seeds themselves are valid and read whole
        (tmp / "s").write_bytes(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = read_pcap(tmp / "s")
        assert r.records_read >= 20 and not any("corrupt" in w or "truncated" in w for w in r.warnings), r.warnings
        assert len(r.packets) >= 4, r.link_type  # the IP frames of every link type are read
    return out


ABSURD = (0, 1, 3, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFF0, 65535, 262145, 1 << 24)


@st.composite
def mutants(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "length", "splice", "zero"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[draw(st.integers(0, len(data))):]
        elif kind == "length" and at + 4 <= len(data):
            order = draw(st.sampled_from("<>"))
            data[at:at + 4] = struct.pack(order + "I", draw(st.sampled_from(ABSURD)))
        elif kind == "splice":
            end = min(len(data), at + draw(st.integers(1, 64)))
            piece = bytes(data[at:end])
            where = draw(st.integers(0, len(data)))
            data[where:where] = piece
        elif kind == "zero":
            end = min(len(data), at + draw(st.integers(1, 32)))
            data[at:end] = bytes(end - at)
    return bytes(data)


def _read(path: Path) -> PcapResult | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return read_pcap(path)
        except PcapError:
            return None


def test_mutated_captures_are_read_or_refused_clearly(seeds: list[bytes], tmp_path: Path) -> None:
    path = tmp_path / "mutant.pcap"

    @settings(max_examples=3000, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(mutants(seeds))
    def check(data: bytes) -> None:
        path.write_bytes(data)
        r = _read(path)
        if r is not None:
            assert r.records_read >= len(r.packets)
            assert r.skipped_non_ip + r.skipped_malformed + len(r.packets) == r.records_read
            assert (r.packets["ip_bytes"] >= 0).all() and (r.packets["payload_bytes"] >= 0).all()

    check()


def test_mutated_capture_directories_analyse_or_fail_clearly(seeds: list[bytes], tmp_path: Path) -> None:
    directory = tmp_path / "experiment"
    directory.mkdir()

    @settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(mutants(seeds), mutants(seeds))
    def check(a: bytes, b: bytes) -> None:
        (directory / "worker0.pcap").write_bytes(a)
        (directory / "worker1.pcapng").write_bytes(b)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                source = load_traffic(directory)
            except SourceError:
                return
            analyze(source.table, boundaries=source.boundaries, roles=source.roles)

    check()


def test_mutated_captures_through_the_command(seeds: list[bytes], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`simstudy analyze` (reading, roles, iterations, features, report and plots) on mutants of every
    link type: exit 0, or one error line and exit 2; never a traceback."""
    from simstudy.cli import main

    directory = tmp_path / "capture"
    directory.mkdir()

    def run(a: bytes) -> None:
        (directory / "host.pcap").write_bytes(a)
        code = main(["analyze", str(directory), "-o", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert code in (0, 2), err
        assert "Traceback" not in err
        if code == 2:
            assert len([line for line in err.splitlines() if line.startswith("simstudy: error")]) == 1, err

    for seed in seeds:  # the seeds as they are: every link type, and ranks sharing one address
        run(seed)

    @settings(max_examples=12, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture])
    @given(mutants(seeds))
    def check(a: bytes) -> None:
        run(a)

    check()
