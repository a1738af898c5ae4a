"""What a lost packet at a message's tail costs on this machine's Linux, against flowsim's TCP model.

Two network namespaces of their own joined by a veth (offloads off, so that a packet is a
segment), the receiver dropping a share of the data packets as they arrive (nftables, as the
capture testbed drops them), one TCP connection with Linux's defaults (RACK-TLP). The client sends
a message of n segments and waits for a one-byte answer before the next, as a request and its
reply go; per size it prints the share of messages that took 100 ms or more over the median (a
retransmission timeout, or a tail loss probe armed 2 SRTT plus the minimum RTO on: Linux's
`tcp_schedule_loss_probe` with one segment out), the share that took 3-100 ms more (a probe), and
the mean extra time, against what flowsim's model (`flowsim.tcp.TcpPaths`) expects for the same
message on a path of the same loss.

    sudo python benchmarks/linux_tail_loss.py [--loss 0.01] [--messages 3000] [--segments 1,2,3,4,10,100]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from simstudy.backends.flowsim.tcp import TcpPaths
from simstudy.spec.transport import Transport

A, B = "sstlp_a", "sstlp_b"
ADDR = "10.203.0.2"
PORT = 5555
MSS = 1448

PEER = """
import socket, sys, time
size, n, role, addr, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
if role == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(1); c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(n):
        got = 0
        while got < size:
            b = c.recv(size - got)
            if not b:
                sys.exit(0)
            got += len(b)
        c.sendall(b"x")
    sys.exit(0)
for _ in range(100):
    try:
        c = socket.create_connection((addr, port)); break
    except OSError:
        time.sleep(0.05)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
msg = b"a" * size
for _ in range(n):
    t = time.perf_counter(); c.sendall(msg); c.recv(1); print((time.perf_counter() - t) * 1e3)
"""


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def setup(loss: float) -> None:
    teardown()
    sh("ip", "netns", "add", A)
    sh("ip", "netns", "add", B)
    sh("ip", "link", "add", "sstlpa", "type", "veth", "peer", "name", "sstlpb")
    for ns, dev, ip in ((A, "sstlpa", "10.203.0.1"), (B, "sstlpb", ADDR)):
        sh("ip", "link", "set", dev, "netns", ns)
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off")
    rule = ["ip", "netns", "exec", B, "nft"]
    sh(*rule, "add", "table", "inet", "sstlp")
    sh(*rule, "add", "chain", "inet", "sstlp", "ingress", "{ type filter hook input priority 0; }")
    sh(*rule, "add", "rule", "inet", "sstlp", "ingress", "tcp", "dport", str(PORT), "numgen", "random", "mod",
       "1000000", "<", str(round(loss * 1_000_000)), "counter", "drop")


def teardown() -> None:
    for ns in (A, B):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def times_ms(size: int, n: int) -> list[float]:
    def peer(ns: str, role: str) -> list[str]:
        return ["ip", "netns", "exec", ns, sys.executable, "-c", PEER, str(size), str(n), role, ADDR, str(PORT)]

    server = subprocess.Popen(peer(B, "server"))
    try:
        out = subprocess.run(peer(A, "client"), check=True, capture_output=True, text=True, timeout=600).stdout
    finally:
        server.wait(timeout=60)
    return [float(x) for x in out.split()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--loss", type=float, default=0.01)
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--segments", default="1,2,3,4,10,100")
    args = ap.parse_args()
    missing = [t for t in ("ip", "nft", "ethtool") if shutil.which(t) is None]
    if missing:
        print(f"needs {', '.join(missing)} and root", file=sys.stderr)
        return 2
    tcp = TcpPaths(Transport(), [1.25], [0.0], [args.loss])
    p, rtt = tcp.path((0,))
    print(f"Linux {Path('/proc/sys/kernel/osrelease').read_text().strip()}, {args.loss:.2%} of the data packets "
          f"dropped, {args.messages} messages a size")
    print(f"{'segments':>8s} {'>=100 ms':>9s} {'3-100 ms':>9s} {'mean extra ms':>14s} {'flowsim ms':>11s} "
          f"{'flowsim >=100':>14s} {'wall s':>7s}")
    setup(args.loss)
    try:
        for n in (int(x) for x in args.segments.split(",")):
            t0 = time.perf_counter()
            t = times_ms(n * MSS, args.messages)
            base = statistics.median(t)
            extra = [x - base for x in t]
            long = sum(x >= 100 for x in extra) / len(t)
            short = sum(3 <= x < 100 for x in extra) / len(t)
            _, alone = tcp.tail_probabilities(n, p)
            print(f"{n:8d} {long:9.2%} {short:9.2%} {statistics.mean(extra):14.2f} "
                  f"{tcp.mean_delay_ns(n * MSS, p, rtt) / 1e6:11.2f} {alone:14.2%} {time.perf_counter() - t0:7.1f}",
                  flush=True)
    finally:
        teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
