"""The TCP endpoints of this process, for mapping captured packets to ranks (shared by the
torch and TensorFlow workers, so that neither imports the other's framework)."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def local_endpoints() -> list[str]:
    """"ip:port" of this process's TCP sockets (from /proc), to map captured packets to ranks."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table, v6 in (("/proc/self/net/tcp", False), ("/proc/self/net/tcp6", True)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) < 10 or f[9] not in inodes:
                continue
            addr, port = f[1].split(":")
            raw = bytes.fromhex(addr)
            if v6:
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                ip = socket.inet_ntop(socket.AF_INET6, words)
                if ip.startswith("::ffff:"):
                    ip = ip[7:]
            else:
                ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
            out.append(f"{ip}:{int(port, 16)}")
    return sorted(set(out))
