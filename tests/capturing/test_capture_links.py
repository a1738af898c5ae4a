"""Real captures of every link type this machine can make (marker `capture`: root, tcpdump,
torch), read by the fast reader exactly as the reference reader reads them, and analysed alike:

* around a real gloo job in a network namespace of its own: `tcpdump -i lo` (Ethernet),
  `tcpdump -i any` (Linux cooked v2), `tcpdump -i any -y LINUX_SLL` (v1) and `dumpcap -i lo -i
  any` (pcapng, two interfaces of different link types), all at the same time;
* raw IPv4 and IPv6 from a TUN device, and IPv6 fragments (an extension header) on a loopback
  whose MTU is 1280;
* `simstudy capture` with `capture.also_any`: the job's interface captures and its `tcpdump -i
  any` captures give the same features (within 1% of bytes per iteration).

This kernel has no VLAN, ipip, GRE or ip6tnl interfaces: 802.1Q/QinQ and the BSD loopback types
are covered by written captures (tests/traffic/test_pcap.py, test_pcap_reference.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.capture

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
if os.geteuid() != 0 or shutil.which("tcpdump") is None or shutil.which("ip") is None:
    pytest.skip("real captures need root, tcpdump and iproute2", allow_module_level=True)

from simstudy.traffic.features import analyze  # noqa: E402
from simstudy.traffic.pcap import read_pcap  # noqa: E402
from simstudy.traffic.pcap.reference import COLUMNS, read_reference  # noqa: E402
from simstudy.traffic.sources import load_traffic  # noqa: E402
from simstudy.validation import payload_view  # noqa: E402

JOB = r"""
import sys, torch, torch.distributed as dist
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29611", rank=rank, world_size=2)
x = torch.ones(262144)
for _ in range(12):
    dist.all_reduce(x)
dist.barrier()
dist.destroy_process_group()
"""


def _netns(name: str) -> None:
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)


def _start(argv: list[str], ns: str) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         start_new_session=True)
    return p


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
    try:
        p.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()


def _same_as_reference(path: Path) -> None:
    """The fast reader's table and counts equal the reference reader's on a real file."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = read_pcap(path)
    ref = read_reference(path)
    assert (fast.records_read, fast.skipped_non_ip, fast.skipped_malformed) == (ref.records, ref.non_ip,
                                                                                  ref.malformed)
    want = ref.packets()
    assert len(fast.packets) == len(want)
    for col in COLUMNS:
        got = fast.packets[col].astype(str) if col.endswith("_ip") else fast.packets[col]
        assert (got.to_numpy() == want[col].to_numpy(dtype=got.to_numpy().dtype)).all(), col


@pytest.fixture(scope="module")
def gloo_captures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """One real gloo job (2 ranks, 12 all-reduces of 1 MiB) in a namespace, captured four ways at once."""
    root = tmp_path_factory.mktemp("links")
    ns = f"ss{os.getpid()}-links"
    _netns(ns)
    dumps: list[subprocess.Popen[bytes]] = []
    try:
        files = {"lo": root / "lo" / "lo.pcap", "any": root / "any" / "any.pcap", "sll": root / "sll" / "sll.pcap"}
        for f in files.values():
            f.parent.mkdir()
        argv = {"lo": ["-i", "lo"], "any": ["-i", "any"], "sll": ["-i", "any", "-y", "LINUX_SLL"]}
        for key, f in files.items():
            dumps.append(_start(["tcpdump", "-n", "-s", "128", *argv[key], "-w", str(f), "tcp"], ns))
        if shutil.which("dumpcap"):
            files["pcapng"] = root / "pcapng" / "both.pcapng"
            files["pcapng"].parent.mkdir()
            dumps.append(_start(["dumpcap", "-q", "-i", "lo", "-i", "any", "-s", "128", "-f", "tcp", "-w",
                                 str(files["pcapng"])], ns))
        time.sleep(2.0)  # every capture listening
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
        ranks = [subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", JOB, str(r)], env=env)
                 for r in range(2)]
        assert all(p.wait(timeout=120) == 0 for p in ranks)
        time.sleep(1.5)  # tcpdump writes what the kernel still holds
        for p in dumps:
            _stop(p)
        yield files
    finally:
        for p in dumps:
            _stop(p)
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_a_real_job_captured_on_lo_and_any_in_three_link_types(gloo_captures: dict[str, Path]) -> None:
    types = {}
    tables = {}
    for key in ("lo", "any", "sll"):
        r = read_pcap(gloo_captures[key])
        types[key] = r.link_type
        tables[key] = r.packets
        _same_as_reference(gloo_captures[key])
    assert types == {"lo": 1, "any": 276, "sll": 113}
    # the same packets every way: `-i any` sees each loopback packet once
    sizes = {k: (len(t), int(t["payload_bytes"].sum())) for k, t in tables.items()}
    assert len(set(sizes.values())) == 1, sizes
    assert sizes["lo"][1] > 12 * 1_048_576  # the all-reduces' payload
    features = {}
    for key in ("lo", "any", "sll"):
        src = load_traffic(gloo_captures[key].parent)
        features[key] = analyze(payload_view(src.table), roles=src.roles)
        assert len(features[key].roles.workers) == 2, features[key].roles.lines()
    assert features["any"].total_bytes == features["lo"].total_bytes == features["sll"].total_bytes


def test_pcapng_with_two_interfaces_of_different_link_types(gloo_captures: dict[str, Path]) -> None:
    if "pcapng" not in gloo_captures:
        pytest.skip("dumpcap is not installed (apt-get install tshark)")
    r = read_pcap(gloo_captures["pcapng"])
    assert r.format == "pcapng" and len(r.interfaces) == 2
    assert 1 in {i.link_type for i in r.interfaces} and len({i.link_type for i in r.interfaces}) == 2
    _same_as_reference(gloo_captures["pcapng"])
    lo = read_pcap(gloo_captures["lo"]).packets
    # every packet at least once (dumpcap may start its second interface's capture late)
    assert 0.99 * len(lo) <= len(r.packets) <= 2 * len(lo)


def test_raw_ip_from_a_tun_device_and_ipv6_fragments(tmp_path: Path) -> None:
    """Raw IPv4 and IPv6 (link type 101) from a TUN device; IPv6 fragments (a Fragment extension
    header) of UDP datagrams larger than a 1280-byte loopback MTU."""
    ns = f"ss{os.getpid()}-tun"
    _netns(ns)
    try:
        script = r"""
import os, select, socket, struct, fcntl, sys, time
fd = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(fd, 0x400454CA, struct.pack("16sH", b"tun27", 0x0001 | 0x1000))
print("up", flush=True)
sys.stdin.readline()
for k in range(20):
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); a.sendto(bytes(100 + k), ("10.9.0.2", 9000 + k))
    b = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); b.sendto(bytes(200 + k), ("fd27::2", 7000 + k))
    c = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); c.sendto(bytes(3000), ("::1", 6000 + k))
    while select.select([fd], [], [], 0.05)[0]:  # what went into the tunnel, read back
        os.read(fd, 65536)
print("sent", flush=True)
sys.stdin.readline()  # the device lives until the captures have stopped
"""
        proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", script], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "up"
        for args in (["addr", "add", "10.9.0.1/24", "dev", "tun27"], ["-6", "addr", "add", "fd27::1/64", "dev",
                     "tun27", "nodad"], ["link", "set", "tun27", "up"], ["link", "set", "lo", "mtu", "1280"]):
            subprocess.run(["ip", "-n", ns, *args], check=True)
        raw, lo = tmp_path / "raw" / "tun.pcap", tmp_path / "lo" / "lo.pcap"
        raw.parent.mkdir()
        lo.parent.mkdir()
        dumps = [_start(["tcpdump", "-n", "-U", "-i", "tun27", "-w", str(raw)], ns),
                 _start(["tcpdump", "-n", "-U", "-i", "lo", "-w", str(lo), "ip6"], ns)]
        time.sleep(2.0)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "sent"
        time.sleep(1.0)
        for p in dumps:
            _stop(p)
        proc.stdin.write("done\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
        r = read_pcap(raw)
        assert r.link_type == 101, r.link_type
        p = r.packets
        v4, v6 = p[p["src_ip"].astype(str) == "10.9.0.1"], p[p["src_ip"].astype(str) == "fd27::1"]
        assert len(v4) == 20 and sorted(v4["ip_bytes"]) == [20 + 8 + 100 + k for k in range(20)]
        assert len(v6) == 20 and sorted(v6["dport"]) == [7000 + k for k in range(20)]
        _same_as_reference(raw)
        f = read_pcap(lo).packets
        f = f[f["proto"] != 58]  # ICMPv6 port unreachable: nobody listens
        assert (f["proto"] == 17).all() and len(f) >= 3 * 20  # 3000 bytes over a 1280-byte MTU: 3 fragments each
        firsts = f[f["dport"] > 0]
        assert sorted(firsts["dport"]) == [6000 + k for k in range(20)]  # only first fragments carry the ports
        assert f["ip_bytes"].sum() == 20 * (3000 + 8) + 40 * len(f) + 8 * len(f)  # each fragment: IPv6 + its header
        _same_as_reference(lo)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


@pytest.mark.parametrize("where", ["namespaces", "namespace"])
def test_tcpdump_any_gives_the_features_of_the_interface_capture(tmp_path: Path, where: str) -> None:
    """`simstudy capture` with `capture.also_any`: the job recorded on its interfaces (each rank's
    eth0; one host: its loopback) and by `tcpdump -i any` at the same time, analysed bare."""
    from simstudy.capturing.run import capture
    from simstudy.spec.capture import CaptureSpec

    spec = CaptureSpec.model_validate({
        "name": f"any_{where}", "model": {"zoo": "small_cnn", "options": {"width": 8}}, "parallelism": {"dp": 2},
        "training": {"batch_size_per_worker": 64},
        "capture": {"iterations": 6, "warmup": 1, "calibration": 1, "where": where, "also_any": True}})
    out = tmp_path / "cap"
    capture(spec, out)
    bare = {"interface": tmp_path / "interface", "any": tmp_path / "any"}
    for name, src in (("interface", out), ("any", out / "any")):
        bare[name].mkdir()
        for f in src.glob("*.pcap"):
            shutil.copy2(f, bare[name] / f.name)
    assert {read_pcap(f).link_type for f in bare["any"].glob("*.pcap")} == {276}
    found = {}
    for name, d in bare.items():
        src = load_traffic(d)
        found[name] = analyze(payload_view(src.table), boundaries=src.boundaries, roles=src.roles)
    a, b = found["interface"], found["any"]
    assert len(a.roles.workers) == len(b.roles.workers) == 2
    assert b.bytes_per_iteration.total == pytest.approx(a.bytes_per_iteration.total, rel=0.01)
    assert b.total_bytes == pytest.approx(a.total_bytes, rel=0.01)
    assert b.period.period_s == pytest.approx(a.period.period_s, rel=0.05)
