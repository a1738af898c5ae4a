"""pcap ingest speed and memory: simstudy's reader against dpkt and tshark on the same files.

Generates two classic pcap files of about --size-mb MB each (default 1024):
  header.pcap  1514-byte TCP/IPv4 frames captured with a 100-byte snap length (116 bytes per record)
  full.pcap    the same frames captured whole (1530 bytes per record)
and a third, mixed.pcap (header-only, data frames interleaved with 66-byte ACKs and odd sizes), which
exercises the variable-length record walk. Then, per file, it prints packets per second and MB/s of

  simstudy  read_pcap (in a child process; best of --repeat runs, and the first run, with user and
            system CPU: on some virtual machines first-touch page faults on new memory cost a lot
            of system time, which the later runs in the same process mostly avoid)
  dpkt      pcap.Reader + Ethernet/IP/TCP parse of each packet (stopped after --dpkt-packets)
  tshark    -T fields -e frame.time_epoch -e ip.src -e ip.dst -e tcp.srcport -e tcp.dstport -e ip.len,
            TCP sequence analysis off (stopped after --tshark-packets with -c; start-up time left out)

the ratios simstudy/dpkt and simstudy/tshark, and simstudy's peak memory against the size of the
table it returns (a separate child: tracemalloc peak of numpy/Python allocations, and the growth
of the resident set, which also counts mapped file pages). MB = 10**6 bytes, GB = 10**9 bytes.

Targets (from the issues): >= 8 million packets/s on header.pcap, >= 3 GB/s on full.pcap, peak
memory <= 2x the output table; and on mixed.pcap, the realistic case (real captures interleave
66-byte ACKs with snap-length data packets, so records have no constant stride), >= 8 million
packets/s, and >= 4 million on the first run in a new process.

Link types: every link type read (Ethernet, with an 802.1Q tag too, Linux cooked v1 and v2, raw
IPv4/IPv6, BSD and OpenBSD loopback) on a mixed-length file of its own (--link-mb, default 256;
the same 1500-byte data packets and 52-byte ACKs behind each link header), simstudy's packets
per second (best of --repeat runs, and the first run in a new process, the better of two
processes: the machine's other work moves a single run by tens of percent) against dpkt and
tshark on the same file. Target: >= 8 million packets/s warm and >= 5 million on the first run, every link type.

Usage: python benchmarks/ingest.py [--size-mb 1024] [--link-mb 256] [--dir DIR] [--repeat 3] [--only-links]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SNAP = 100
WIRE = 1514
T0 = 1_700_000_000

CHILD_TIME = r"""
import json, resource, sys, time
from simstudy.traffic.pcap import read_pcap
runs = []
for _ in range(int(sys.argv[2])):
    u = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    r = read_pcap(sys.argv[1])
    wall = time.perf_counter() - t
    v = resource.getrusage(resource.RUSAGE_SELF)
    runs.append({"wall": wall, "user": v.ru_utime - u.ru_utime, "sys": v.ru_stime - u.ru_stime})
    rows = len(r.packets)
    del r
best = min(runs, key=lambda x: x["wall"])
print(json.dumps({"first": runs[0], "best": best, "rows": rows}))
"""

CHILD_FRESH = r"""
import json, sys, time
import numpy as np
t = time.perf_counter()
a = np.ones(int(sys.argv[1]), dtype=np.uint8)
print(json.dumps({"seconds": time.perf_counter() - t}))
"""

CHILD_MEMORY = r"""
import json, resource, sys, tracemalloc
import numpy, pandas
from simstudy.traffic.pcap import read_pcap
with open("/proc/self/statm") as f:
    before = int(f.read().split()[1]) * resource.getpagesize()  # resident now, after the imports
tracemalloc.start()
r = read_pcap(sys.argv[1])
_, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
high = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # resident high-water mark
table = int(r.packets.memory_usage(deep=True).sum())
print(json.dumps({"peak": peak, "rss_growth": high - before, "table": table, "rows": len(r.packets)}))
"""


#: Link-layer headers in front of the same IPv4 packets, per case of the link-type table:
#: (name, link type, header bytes).
LINK_HEADERS: list[tuple[str, int, bytes]] = [
    ("ETHERNET", 1, b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00"),
    ("ETHERNET + 802.1Q", 1, b"\x02" * 6 + b"\x04" * 6 + b"\x81\x00\x00\x64\x08\x00"),
    ("LINUX_SLL", 113, struct.pack("!HHH8sH", 0, 772, 0, bytes(8), 0x0800)),
    ("LINUX_SLL2", 276, struct.pack("!HHIHBB8s", 0x0800, 0, 1, 772, 0, 0, bytes(8))),
    ("RAW", 101, b""),
    ("IPV4", 228, b""),
    ("NULL", 0, struct.pack("<I", 2)),
    ("LOOP", 108, struct.pack(">I", 2)),
]
IP_BYTES = WIRE - 14  # every case carries 1500-byte IP packets, and 52-byte ACKs


def frame_template(link_header: bytes = LINK_HEADERS[0][2]) -> bytes:
    """A link header and a 1500-byte IPv4/TCP packet (TCP timestamps option: 32-byte TCP header)."""
    tcp = struct.pack("!HHIIBBHHH", 40000, 29500, 1, 1, 8 << 4, 0x10, 65535, 0, 0) + b"\x01\x01\x08\x0a" + bytes(8)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, IP_BYTES, 0, 0x4000, 64, 6, 0, bytes([10, 0, 0, 1]),
                     bytes([10, 0, 0, 2]))
    frame = link_header + ip + tcp
    return frame + bytes(len(link_header) + IP_BYTES - len(frame))


def write_capture(path: Path, size_mb: int, snaplen: int, *, mixed: bool = False, link: int = 1,
                  link_header: bytes = LINK_HEADERS[0][2]) -> None:
    """Write a classic pcap of about size_mb MB (whole records only), numpy-built a batch at a time."""
    frame = np.frombuffer(frame_template(link_header), dtype=np.uint8)
    room = size_mb * 10**6 - 24
    rng = np.random.default_rng(0)
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, max(snaplen, SNAP), link))
        first = 0
        per_batch = max(1, (64 << 20) // (16 + min(snaplen, WIRE)))
        while room > 0:
            batch = _mixed_records(rng, frame, snaplen, first, per_batch, len(link_header)) if mixed else \
                _fixed_records(frame, snaplen, first, per_batch)
            data, ends = batch
            whole = int(np.searchsorted(ends, room, side="right"))
            if whole == 0:
                break
            cut = int(ends[whole - 1])
            f.write(data[:cut])
            room -= cut
            first += whole


def _headers(n: int, first: int, incl: np.ndarray, wire: np.ndarray) -> np.ndarray:
    idx = first + np.arange(n, dtype=np.int64)
    usec = idx * 12 // 10  # 1514 bytes at 10 Gb/s: 1.2 us apart
    header = np.empty((n, 4), dtype="<u4")
    header[:, 0] = T0 + usec // 10**6
    header[:, 1] = usec % 10**6
    header[:, 2] = incl
    header[:, 3] = wire
    return header


def _seq(k: np.ndarray) -> np.ndarray:
    """TCP sequence numbers (big-endian bytes) of the k-th full segment of a flow."""
    return ((k * (WIRE - 66)) % 2**32).astype(">u4").view(np.uint8).reshape(len(k), 4)


def _fixed_records(frame: np.ndarray, snaplen: int, first: int, n: int) -> tuple[bytes, np.ndarray]:
    incl = min(snaplen, WIRE)
    rec = np.empty((n, 16 + incl), dtype=np.uint8)
    rec[:, 16:] = frame[:incl]
    rec[:, :16] = _headers(n, first, np.full(n, incl), np.full(n, WIRE)).view(np.uint8)
    idx = first + np.arange(n, dtype=np.int64)
    rec[:, 16 + 33] = 2 + idx % 4  # destination 10.0.0.2 .. 10.0.0.5
    rec[:, 16 + 35] = idx % 8  # source port 40000..40007 (low byte)
    rec[:, 16 + 38 : 16 + 42] = _seq(idx // 8)  # each of the 8 flows' sequence numbers advance
    return rec.tobytes(), (16 + incl) * np.arange(1, n + 1, dtype=np.int64)


def _mixed_records(rng: np.random.Generator, frame: np.ndarray, snaplen: int, first: int,
                   n: int, link_bytes: int = 14) -> tuple[bytes, np.ndarray]:
    """Data frames (60%), ACKs (30%, 66 bytes on Ethernet) and frames of random size (10%), in random order."""
    kind = rng.random(n)
    ip_len = np.where(kind < 0.6, IP_BYTES, np.where(kind < 0.9, 52, rng.integers(46, IP_BYTES, n)))
    wire = ip_len + link_bytes
    incl = np.minimum(wire, snaplen)
    ends = np.cumsum(16 + incl)
    starts = ends - (16 + incl)
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    out[starts[:, None] + np.arange(16)] = _headers(n, first, incl, wire).view(np.uint8)
    for size in np.unique(incl).tolist():
        rows = np.flatnonzero(incl == size)
        out[(starts[rows] + 16)[:, None] + np.arange(size)] = frame[:size]
    ip_bytes = ip_len.astype(">u2").view(np.uint8).reshape(n, 2)
    out[(starts + 16 + link_bytes + 2)[:, None] + np.arange(2)] = ip_bytes
    out[(starts + 16 + link_bytes + 24)[:, None] + np.arange(4)] = _seq(first + np.arange(n, dtype=np.int64))
    return out.tobytes(), ends


def run_child(code: str, *args: str) -> dict[str, Any]:
    """Run `code` in a fresh interpreter; its last output line is a JSON object."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def bench_dpkt(path: Path, cap: int, link: int = 1) -> tuple[int, float] | None:
    """Packets and seconds: dpkt's reader, each packet parsed down to the TCP ports."""
    if importlib.util.find_spec("dpkt") is None:
        return None
    import dpkt  # type: ignore[import-untyped]

    def layer3(buf: bytes) -> Any:
        if link == 1:
            return dpkt.ethernet.Ethernet(buf).data
        if link == 113:
            return dpkt.sll.SLL(buf).data
        if link == 276:
            return dpkt.sll2.SLL2(buf).data
        if link in (0, 108):
            return dpkt.loopback.Loopback(buf).data
        return dpkt.ip.IP(buf)

    t = time.perf_counter()
    n = 0
    total = 0
    with path.open("rb") as f:
        for ts, buf in dpkt.pcap.Reader(f):
            ip = layer3(buf)
            tcp = ip.data
            total += ip.len + (tcp.sport if isinstance(tcp, dpkt.tcp.TCP) else 0) + int(ts)
            n += 1
            if n >= cap:
                break
    return n, time.perf_counter() - t


def bench_tshark(path: Path, cap: int) -> tuple[int, float, float] | None:
    """Packets, seconds, and seconds of tshark's start-up (a run that stops after one packet)."""
    tshark = shutil.which("tshark")
    if tshark is None:
        return None
    fields = ["frame.time_epoch", "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport", "ip.len"]
    # Only header fields are wanted: leave out TCP sequence analysis and reassembly (much faster).
    prefs = ["tcp.analyze_sequence_numbers:FALSE", "tcp.desegment_tcp_streams:FALSE",
             "tcp.calculate_timestamps:FALSE", "tcp.track_bytes_in_flight:FALSE"]

    def run(count: int) -> tuple[int, float]:
        cmd = [tshark, "-n", "-r", str(path), "-c", str(count), "-T", "fields"]
        for pref in prefs:
            cmd += ["-o", pref]
        for f in fields:
            cmd += ["-e", f]
        t = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, check=True).stdout
        return out.count(b"\n"), time.perf_counter() - t

    _, startup = run(1)
    n, seconds = run(cap)
    return n, seconds, startup


def report(name: str, path: Path, args: argparse.Namespace) -> dict[str, float]:
    size = path.stat().st_size
    sim = run_child(CHILD_TIME, str(path), str(args.repeat))
    mem = run_child(CHILD_MEMORY, str(path))
    fresh = run_child(CHILD_FRESH, str(int(mem["table"])))
    rows, best, first = int(sim["rows"]), sim["best"], sim["first"]
    sec = best["wall"]
    pps, mbs = rows / sec, size / sec / 1e6
    print(f"\n== {name}: {path.name}, {size / 1e6:,.0f} MB, {rows:,} packets ==")
    print(f"{'reader':<10} {'packets':>12} {'seconds':>9} {'Mpackets/s':>11} {'MB/s':>9}")
    print(f"{'simstudy':<10} {rows:>12,} {sec:>9.3f} {pps / 1e6:>11.2f} {mbs:>9,.0f}   best of {args.repeat} "
          f"(cpu user {best['user']:.3f} s, sys {best['sys']:.3f} s)")
    print(f"{'':<10} {'first run':>12} {first['wall']:>9.3f} {rows / first['wall'] / 1e6:>11.2f} "
          f"{size / first['wall'] / 1e6:>9,.0f}   (cpu user {first['user']:.3f} s, sys {first['sys']:.3f} s)")
    for label, got in (("dpkt", bench_dpkt(path, args.dpkt_packets)),
                       ("tshark", bench_tshark(path, args.tshark_packets))):
        if got is None:
            print(f"{label:<10} not available")
            continue
        n, s = got[0], got[1]
        note = ""
        if len(got) == 3:  # tshark: leave its start-up out of the rate
            s -= got[2]
            note = f" (excluding {got[2]:.2f} s start-up)"
        rate = n / s
        print(f"{label:<10} {n:>12,} {s:>9.3f} {rate / 1e6:>11.2f} {rate * size / rows / 1e6:>9,.0f}"
              f"   simstudy/{label} = {pps / rate:,.1f}x{note}")
    ratio = mem["peak"] / mem["table"]
    print(f"memory: table {mem['table'] / 1e6:,.0f} MB, tracemalloc peak {mem['peak'] / 1e6:,.0f} MB "
          f"({ratio:.2f}x table), resident peak {mem['rss_growth'] / 1e6:,.0f} MB above the start "
          f"({mem['rss_growth'] / mem['table']:.2f}x table; counts mapped file pages too)")
    print(f"this machine: writing {mem['table'] / 1e6:,.0f} MB of new memory in a new process takes "
          f"{fresh['seconds']:.3f} s")
    return {"pps": pps, "first_pps": rows / first["wall"], "gbs": size / sec / 1e9, "mem": ratio}


def link_types(args: argparse.Namespace) -> list[dict[str, float]]:
    """Every link type on a mixed-length file of its own: packets per second of simstudy (best of
    --repeat, and the first run in a new process), dpkt and tshark on the same file."""
    rows = []
    print(f"\n== link types: mixed-length files of {args.link_mb} MB (snap length {SNAP}: 1500-byte data packets, "
          "52-byte ACKs, 10% of random size), Mpackets/s ==")
    print(f"{'link type':<20} {'packets':>11} {'simstudy':>9} {'first run':>10} {'dpkt':>7} {'tshark':>7} "
          f"{'x dpkt':>7} {'x tshark':>9}")
    for name, link, header in LINK_HEADERS:
        path = args.dir / f"mixed_{name.replace(' ', '').replace('+', '_').replace('.', '')}.pcap"
        if not path.exists() or abs(path.stat().st_size - args.link_mb * 10**6) > 70_000:
            write_capture(path, args.link_mb, SNAP, mixed=True, link=link, link_header=header)
        sims = [run_child(CHILD_TIME, str(path), str(args.repeat)) for _ in range(2)]  # two new processes
        n = int(sims[0]["rows"])
        best = n / min(x["best"]["wall"] for x in sims)
        first = n / min(x["first"]["wall"] for x in sims)
        dp, ts = bench_dpkt(path, args.dpkt_packets, link), bench_tshark(path, args.tshark_packets)
        dpkt_rate = dp[0] / dp[1] if dp else float("nan")
        tshark_rate = ts[0] / (ts[1] - ts[2]) if ts else float("nan")
        print(f"{name:<20} {n:>11,} {best / 1e6:>9.2f} {first / 1e6:>10.2f} {dpkt_rate / 1e6:>7.3f} "
              f"{tshark_rate / 1e6:>7.3f} {best / dpkt_rate:>7.0f} {best / tshark_rate:>9.0f}", flush=True)
        rows.append({"name": name, "pps": best, "first_pps": first})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--dir", type=Path, default=None, help="where to write the captures (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dpkt-packets", type=int, default=500_000)
    ap.add_argument("--tshark-packets", type=int, default=200_000)
    ap.add_argument("--no-mixed", action="store_true", help="skip the variable-length capture")
    ap.add_argument("--link-mb", type=int, default=256, help="size of each link type's mixed-length file")
    ap.add_argument("--only-links", action="store_true", help="only the link-type table")
    args = ap.parse_args()
    tmp = None
    if args.dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ingest-")
        args.dir = Path(tmp.name)
    args.dir.mkdir(parents=True, exist_ok=True)
    files = [("header-only", "header.pcap", SNAP, False), ("full-size", "full.pcap", 65535, False)]
    if not args.no_mixed:
        files.append(("mixed header-only", "mixed.pcap", SNAP, True))
    try:
        links = link_types(args)
        worst_best = min(links, key=lambda r: r["pps"])
        worst_first = min(links, key=lambda r: r["first_pps"])
        warm, cold = worst_best["pps"], worst_first["first_pps"]
        print(f"every link type: warm >= {warm / 1e6:.2f} M packets/s ({worst_best['name']}; target >= 8): "
              f"{'PASS' if warm >= 8e6 else 'FAIL'}; first run >= {cold / 1e6:.2f} M ({worst_first['name']}; "
              f"target >= 5): {'PASS' if cold >= 5e6 else 'FAIL'}")
        if args.only_links:
            return
        results = {}
        for name, fname, snap, mixed in files:
            path = args.dir / fname
            if not path.exists() or abs(path.stat().st_size - args.size_mb * 10**6) > 70_000:
                t = time.perf_counter()
                write_capture(path, args.size_mb, snap, mixed=mixed)
                print(f"wrote {path} ({path.stat().st_size / 1e6:,.0f} MB) in {time.perf_counter() - t:.1f} s")
            results[name] = report(name, path, args)
        print("\n== targets ==")
        h, f = results["header-only"], results["full-size"]
        worst = max(r["mem"] for r in results.values())
        print(f"header-only: {h['pps'] / 1e6:.2f} M packets/s (target >= 8): {'PASS' if h['pps'] >= 8e6 else 'FAIL'}")
        print(f"full-size:   {f['gbs']:.2f} GB/s (target >= 3): {'PASS' if f['gbs'] >= 3 else 'FAIL'}")
        verdict = "PASS" if worst <= 2 else "FAIL"
        print(f"memory:      worst peak {worst:.2f}x the output table (target <= 2): {verdict}")
        if "mixed header-only" in results:
            m = results["mixed header-only"]
            best, first = m["pps"], m["first_pps"]
            print(f"mixed:       {best / 1e6:.2f} M packets/s (target >= 8): {'PASS' if best >= 8e6 else 'FAIL'}; "
                  f"first run {first / 1e6:.2f} M (target >= 4): {'PASS' if first >= 4e6 else 'FAIL'}")
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
