"""Measure one link before a capture: `python -m simstudy.capturing.probe serve IP PORT` on one host,
`python -m simstudy.capturing.probe measure IP PORT SECONDS` on another; the latter prints JSON with
the round-trip time of small TCP messages and the goodput (payload bytes/s) of one bulk stream."""

from __future__ import annotations

import json
import socket
import statistics
import sys
import time

CHUNK = 1 << 16


def serve(ip: str, port: int) -> None:
    with socket.create_server((ip, port)) as srv:
        conn, _ = srv.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:  # ping-pong until the client sends "B" (bulk)
                b = conn.recv(1)
                if not b or b == b"B":
                    break
                conn.sendall(b)
            got = 0
            while True:
                data = conn.recv(CHUNK)
                if not data:
                    break
                got += len(data)
            conn.sendall(str(got).encode())


def measure(ip: str, port: int, seconds: float, pings: int = 50) -> dict[str, float]:
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = socket.create_connection((ip, port), timeout=10)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for _ in range(pings):
            t = time.perf_counter()
            conn.sendall(b"p")
            conn.recv(1)
            rtts.append(time.perf_counter() - t)
        conn.sendall(b"B")
        payload = b"\0" * CHUNK
        sent = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            conn.sendall(payload)
            sent += CHUNK
        conn.shutdown(socket.SHUT_WR)
        got = int(conn.recv(64).decode() or 0)
        elapsed = time.perf_counter() - t0
    return {"rtt_s": statistics.median(rtts), "goodput_bps": got / elapsed * 8, "bytes": float(got),
            "seconds": elapsed}


def main(argv: list[str]) -> int:
    if argv[0] == "serve":
        serve(argv[1], int(argv[2]))
    else:
        print(json.dumps(measure(argv[1], int(argv[2]), float(argv[3]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
