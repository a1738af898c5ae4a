"""Where the ranks of a captured job run: one network namespace per rank joined by a bridge (in a
namespace of its own), every rank a process in one namespace of its own (one host), or plain
processes on the machine's loopback.

Everything the testbed creates lives in namespaces it made itself (`ss<pid>-<rank>` and
`ss<pid>-br`); removing them removes their veths, bridge, qdiscs and nftables rules. Processes
still running in them are killed first. Nothing is created in the caller's namespace.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from simstudy.addresses import rank_address
from simstudy.spec.capture import Link

PREFIX = "ss"
#: `ip netns exec NAME` bind-mounts the files of /etc/netns/NAME/ over /etc/ (hosts, resolv.conf).
NETNS_ETC = Path("/etc/netns")
_OURS = re.compile(rf"^{PREFIX}(\d+)-(br|\d+)$")


class CaptureError(RuntimeError):
    """The machine cannot run this capture (not root, a tool or kernel feature missing, a failed job)."""


@dataclass(frozen=True)
class Host:
    """One rank's place: its namespace (None on loopback), address and interface."""

    rank: int
    netns: str | None
    ip: str
    ifname: str

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.netns, *argv] if self.netns else list(argv)


def _run(argv: Sequence[str], what: str) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        raise CaptureError(f"{what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise CaptureError(f"{what}: `{' '.join(argv)}` did not finish in 30 s") from None
    if done.returncode != 0:
        raise CaptureError(f"{what}: `{' '.join(argv)}` failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def require_tools(tools: Sequence[str]) -> None:
    """CaptureError naming every missing tool."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise CaptureError(f"missing tools: {', '.join(missing)} (Debian: apt-get install "
                           f"{' '.join(sorted({_PACKAGE.get(t, t) for t in missing}))})")


_PACKAGE = {"ip": "iproute2", "tc": "iproute2", "nft": "nftables"}


def is_root() -> bool:
    return os.geteuid() == 0


def remove_stale() -> list[str]:
    """Remove namespaces left by testbeds whose process is gone (a killed `simstudy capture`)."""
    if shutil.which("ip") is None or not is_root():
        return []
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    removed = []
    for line in out.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = _OURS.match(name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            _delete_netns(name)
            removed.append(name)
    return removed


def _delete_netns(name: str) -> None:
    pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True,
                              check=False).stdout.split()
        if pids:
            time.sleep(0.05)
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


@dataclass
class Testbed:
    """A context manager that builds the hosts of `ranks` ranks and removes them on exit."""

    ranks: int
    where: str = "namespaces"
    link: Link = field(default_factory=Link)
    mtu: int = 1500
    offloads: bool = False
    #: make the machine's hostname resolve to each rank's own address inside its namespace (as on
    #: a real cluster), for frameworks that find their address from the hostname (Horovod's Gloo
    #: process-set contexts); the file goes to /etc/netns/<namespace>/hosts
    hostnames: bool = False
    hosts: list[Host] = field(default_factory=list)
    created: list[str] = field(default_factory=list)

    def __enter__(self) -> Testbed:
        try:
            self.setup()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.teardown()

    # --- setup ---------------------------------------------------------------------------------

    @property
    def one_host(self) -> bool:
        """Every rank on one address (its traffic goes through that host's loopback interface)."""
        return self.where in ("loopback", "namespace")

    def setup(self) -> None:
        if self.one_host and self.link.shaped:
            raise CaptureError(f"capture.link: shaping needs capture.where: namespaces ({self.where} puts every "
                               "rank on one host, whose loopback is left as it is)")
        if self.where == "loopback":
            self.hosts = [Host(r, None, "127.0.0.1", "lo") for r in range(self.ranks)]
            return
        if not is_root():
            raise CaptureError(f"capture.where: {self.where} needs root (run with sudo, or set where: loopback)")
        if self.where == "namespace":
            self._one_namespace()
            return
        tools = ["ip", "tc"] + ([] if self.offloads else ["ethtool"]) + (["nft"] if self.link.loss > 0 else [])
        require_tools(tools)
        remove_stale()
        base = f"{PREFIX}{os.getpid()}"
        bridge_ns = f"{base}-br"
        self._netns(bridge_ns)
        _run(["ip", "-n", bridge_ns, "link", "add", "br0", "type", "bridge"], "bridge")
        _run(["ip", "-n", bridge_ns, "link", "set", "br0", "up"], "bridge")
        for r in range(self.ranks):
            ns = f"{base}-{r}"
            self._netns(ns)
            port = f"v{r}"
            _run(["ip", "link", "add", port, "netns", bridge_ns, "type", "veth", "peer", "name", "eth0",
                  "netns", ns], "veth")
            for args in (["-n", bridge_ns, "link", "set", port, "mtu", str(self.mtu)],
                         ["-n", bridge_ns, "link", "set", port, "master", "br0"],
                         ["-n", bridge_ns, "link", "set", port, "up"],
                         ["-n", ns, "link", "set", "eth0", "mtu", str(self.mtu)],
                         ["-n", ns, "addr", "add", f"{rank_address(r)}/16", "dev", "eth0"],
                         ["-n", ns, "link", "set", "eth0", "up"],
                         ["-n", ns, "link", "set", "lo", "up"]):
                _run(["ip", *args], "veth")
            host = Host(r, ns, rank_address(r), "eth0")
            self.hosts.append(host)
            if self.hostnames:
                (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
                (NETNS_ETC / ns / "hosts").write_text(f"127.0.0.1 localhost\n{host.ip} {socket.gethostname()}\n")
            if not self.offloads:
                for where, dev in ((host.wrap([]), "eth0"), (["ip", "netns", "exec", bridge_ns], port)):
                    _run([*where, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"], "offloads")
            self._shape(host, bridge_ns, port)

    def _one_namespace(self) -> None:
        """Every rank in one namespace of its own, on the address of its eth0 (10.0.0.1; a veth whose
        peer stays in the namespace unused): one host whose ranks reach each other through its
        loopback interface."""
        require_tools(["ip"])
        remove_stale()
        ns = f"{PREFIX}{os.getpid()}-0"
        self._netns(ns)
        for args in (["link", "add", "eth0", "type", "veth", "peer", "name", "eth1"],
                     ["addr", "add", f"{rank_address(0)}/16", "dev", "eth0"], ["link", "set", "eth0", "up"],
                     ["link", "set", "eth1", "up"], ["link", "set", "lo", "up"]):
            _run(["ip", "-n", ns, *args], "namespace")
        self.hosts = [Host(r, ns, rank_address(0), "eth0") for r in range(self.ranks)]
        if self.hostnames:
            (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / ns / "hosts").write_text(f"127.0.0.1 localhost\n{rank_address(0)} {socket.gethostname()}\n")

    def _netns(self, name: str) -> None:
        _run(["ip", "netns", "add", name], "namespace")
        self.created.append(name)

    def _shape(self, host: Host, bridge_ns: str, port: str) -> None:
        link = self.link
        ends = ((host.wrap([]), "eth0"), (["ip", "netns", "exec", bridge_ns], port))  # uplink, downlink
        if link.rate_mbit is not None:
            burst = link.bucket_kib()
            for where, dev in ends:
                _run([*where, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf",
                      "rate", f"{link.rate_mbit}mbit", "burst", f"{burst:.1f}kb", "latency", "100ms"], "link.rate_mbit")
        if link.delay_ms > 0:
            parent = ["parent", "1:1"] if link.rate_mbit is not None else ["root"]
            for where, dev in ends:
                try:
                    _run([*where, "tc", "qdisc", "add", "dev", dev, *parent, "netem",
                          "delay", f"{link.delay_ms / 2}ms"], "link.delay_ms")
                except CaptureError as exc:
                    raise CaptureError(f"capture.link.delay_ms: cannot add delay here: this kernel has no "
                                       f"netem qdisc ({exc}); delay is unsupported on this machine") from None
        if link.loss > 0:
            threshold = round(link.loss * 1_000_000)
            ns = host.wrap([])
            _run([*ns, "nft", "add", "table", "inet", "simstudy"], "link.loss")
            _run([*ns, "nft", "add", "chain", "inet", "simstudy", "ingress",
                  "{ type filter hook input priority 0; }"], "link.loss")
            _run([*ns, "nft", "add", "rule", "inet", "simstudy", "ingress", "meta", "l4proto", "tcp",
                  "numgen", "random", "mod", "1000000", "<", str(threshold), "counter", "drop"], "link.loss")

    def shaping(self) -> dict[str, object]:
        """What was applied, for meta.json."""
        return {
            "where": self.where,
            "rate_mbit": self.link.rate_mbit,
            "burst_kib": self.link.bucket_kib(),
            "delay_ms": self.link.delay_ms,
            "loss": self.link.loss,
            "rate_with": "tc tbf on both ends of every veth" if self.link.rate_mbit else None,
            "loss_with": "nftables numgen random drop at each receiver's input" if self.link.loss else None,
            "mtu": self.mtu if self.where == "namespaces" else None,
            "offloads": self.offloads,
        }

    def qdisc_stats(self) -> dict[str, dict[str, int]]:
        """Packets sent and dropped by every shaping qdisc (`tc -s`), per interface."""
        out: dict[str, dict[str, int]] = {}
        if self.where != "namespaces" or self.link.rate_mbit is None:
            return out
        bridge_ns = f"{PREFIX}{os.getpid()}-br"
        for host in self.hosts:
            for where, dev, label in ((host.wrap([]), "eth0", f"rank{host.rank}.up"),
                                      (["ip", "netns", "exec", bridge_ns], f"v{host.rank}", f"rank{host.rank}.down")):
                text = subprocess.run([*where, "tc", "-s", "qdisc", "show", "dev", dev], capture_output=True,
                                      text=True, check=False).stdout
                m = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)", text)
                if m:
                    out[label] = {"bytes": int(m.group(1)), "packets": int(m.group(2)),
                                  "dropped": int(m.group(3)), "overlimits": int(m.group(4))}
        return out

    # --- teardown ------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Kill what runs in our namespaces and remove them (idempotent)."""
        for ns in reversed(self.created):
            _delete_netns(ns)
        self.created.clear()
