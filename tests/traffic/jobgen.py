"""Packet captures of training jobs with known truth, made the way tcpdump on each host makes them.

`Job` describes a data-parallel job (a ring all-reduce or one parameter server) on hosts joined by
links of one rate, and what else the capture holds: a rendezvous store's control connection, the
initial parameter broadcast, a token bucket that paces every link, a capture cut in the middle
of its last iteration, iteration-time jitter, host captures of both directions. `write(job, dir)`
writes one pcap per host (snap length `snaplen`, Ethernet/IPv4/TCP with timestamps, data
segments of `mss` payload bytes, an ACK for every second segment, per-connection sequence
numbers) and returns the truth: iteration starts, period, payload bytes per iteration per host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ETH, IP, TCP = 14, 20, 32  # TCP with the timestamps option
HEADERS = ETH + IP + TCP
EPOCH = 1_700_000_000.0
_REC = np.dtype([("sec", "<u4"), ("nsec", "<u4"), ("incl", "<u4"), ("orig", "<u4")])


@dataclass(frozen=True)
class Job:
    workers: int = 4
    strategy: str = "ring"  # "ring" (all-reduce) or "ps" (one dedicated server after the workers)
    gradient_bytes: int = 2_000_000
    buckets: tuple[float, ...] = (0.3, 0.7)  # shares of the gradient, all-reduced in this order
    rate_bps: float = 200e6
    compute_s: float = 0.030  # forward + backward before the first bucket is ready
    optimizer_s: float = 0.004
    iterations: int = 8
    jitter: float = 0.0  # relative standard deviation of the compute time
    control: bool = False  # a store on host 0 port 29500: every host connects, then heartbeats
    broadcast: bool = False  # host 0 sends the parameters to every other host before training
    pacing_packets: int = 0  # a token bucket of this many packets per refill (0: no pacing)
    cut_at: float | None = None  # cut the capture this fraction into the last iteration
    both_directions: bool = False  # each host's capture also holds what it receives
    mss: int = 1448
    snaplen: int = 100
    seed: int = 0
    extra_hosts: int = 0  # hosts that only talk to the store (a login node, a monitor)
    stall_after: int | None = None  # the machine stalls (every rank descheduled) after this iteration
    stall_s: float = 0.0


@dataclass
class Truth:
    starts_s: list[float] = field(default_factory=list)
    ends_s: list[float] = field(default_factory=list)
    sent: dict[int, float] = field(default_factory=dict)  # payload bytes each host sends per iteration
    hosts: int = 0

    @property
    def period_s(self) -> float:
        return float(np.mean(np.diff(self.starts_s)))

    @property
    def total(self) -> float:
        return float(sum(self.sent.values()))


def ip(host: int) -> int:
    return (10 << 24) + host + 1


@dataclass
class _Packets:
    t: list[np.ndarray] = field(default_factory=list)
    src: list[np.ndarray] = field(default_factory=list)
    dst: list[np.ndarray] = field(default_factory=list)
    sport: list[np.ndarray] = field(default_factory=list)
    dport: list[np.ndarray] = field(default_factory=list)
    payload: list[np.ndarray] = field(default_factory=list)
    seq: list[np.ndarray] = field(default_factory=list)
    next_seq: dict[tuple[int, int, int, int], int] = field(default_factory=dict)

    def add(self, t: np.ndarray, a: int, b: int, sp: int, dp: int, payload: np.ndarray) -> None:
        key = (a, b, sp, dp)
        start = self.next_seq.get(key, 1000)
        seq = start + np.concatenate([[0], np.cumsum(payload)[:-1]]) if len(payload) else np.zeros(0)
        self.next_seq[key] = int(start + payload.sum())
        n = len(t)
        self.t.append(np.asarray(t, dtype=np.float64))
        for lst, v in ((self.src, a), (self.dst, b), (self.sport, sp), (self.dport, dp)):
            lst.append(np.full(n, v, dtype=np.int64))
        self.payload.append(np.asarray(payload, dtype=np.int64))
        self.seq.append(np.asarray(seq, dtype=np.int64) % 2**32)


def _port(a: int, b: int) -> tuple[int, int]:
    """The ports of the connection between hosts a < b: b connects to a's listening port."""
    lo, hi = min(a, b), max(a, b)
    return 40000 + 100 * hi + lo, 29600 + lo


def _transfer(p: _Packets, job: Job, t0: float, a: int, b: int, nbytes: int) -> float:
    """Send `nbytes` from host a to b from t0 at the link rate (paced if the job says so), with an
    ACK back for every second segment; returns when the last segment left."""
    n = -(-nbytes // job.mss)
    size = np.full(n, job.mss, dtype=np.int64)
    size[-1] = nbytes - job.mss * (n - 1)
    gap = (job.mss + HEADERS) * 8 / job.rate_bps
    i = np.arange(n)
    if job.pacing_packets:
        k = job.pacing_packets
        t = t0 + (i // k) * k * gap + (i % k) * gap / 10  # a bucket's worth at 10x the rate, then wait
    else:
        t = t0 + i * gap
    ap, bp = _port(a, b)
    sp, dp = (bp, ap) if a < b else (ap, bp)
    p.add(t, a, b, sp, dp, size)
    acks = t[1::2] + 30e-6
    p.add(acks, b, a, dp, sp, np.zeros(len(acks), dtype=np.int64))
    return float(t[-1] + gap)


def _simulate(job: Job) -> tuple[_Packets, Truth]:
    rng = np.random.default_rng(job.seed)
    p = _Packets()
    hosts = job.workers + (1 if job.strategy == "ps" else 0)
    truth = Truth(hosts=hosts + job.extra_hosts)
    t = 0.05
    if job.control:
        for h in range(1, hosts + job.extra_hosts):  # rendezvous: every host talks to the store
            for k in range(3):
                p.add(np.array([t + 0.001 * k]), h, 0, 50000 + h, 29500, np.array([60]))
                p.add(np.array([t + 0.001 * k + 2e-4]), 0, h, 29500, 50000 + h, np.array([40]))
        t += 0.05
    if job.broadcast:
        end = t
        for h in range(1, hosts):
            end = _transfer(p, job, end, 0, h, job.gradient_bytes)
        t = end + 0.2
    per_host: dict[int, float] = dict.fromkeys(range(hosts), 0.0)
    for it in range(job.iterations):
        start = t
        truth.starts_s.append(start)
        t += job.compute_s * (1 + job.jitter * rng.standard_normal())
        for share in job.buckets:
            nbytes = int(job.gradient_bytes * share)
            if job.strategy == "ring":
                n = job.workers
                chunk = nbytes // n
                for _ in range(2 * (n - 1)):
                    step_end = t
                    for w in range(n):
                        step_end = max(step_end, _transfer(p, job, t, w, (w - 1) % n, chunk))
                        if it == 0:
                            per_host[w] += chunk
                    t = step_end
            else:
                server = job.workers
                push_end = t
                for w in range(job.workers):  # pushes share the server's link
                    push_end = max(push_end, _transfer(p, job, t + w * 1e-4, w, server, nbytes))
                    if it == 0:
                        per_host[w] += nbytes
                t = push_end
                pull_end = t
                for w in range(job.workers):
                    pull_end = max(pull_end, _transfer(p, job, t + w * 1e-4, server, w, nbytes))
                    if it == 0:
                        per_host[server] += nbytes
                t = pull_end
        t += job.optimizer_s
        truth.ends_s.append(t)
        if it == job.stall_after:
            t += job.stall_s
        if job.control and it % 3 == 2:  # heartbeats on the store connection
            for h in range(1, hosts + job.extra_hosts):
                p.add(np.array([t - 0.002]), h, 0, 50000 + h, 29500, np.array([24]))
    truth.sent = per_host
    return p, truth


def write(job: Job, directory: Path) -> Truth:
    """Write one pcap per host into `directory` (made if needed) and return the truth."""
    p, truth = _simulate(job)
    t = np.concatenate(p.t)
    src, dst = np.concatenate(p.src), np.concatenate(p.dst)
    sport, dport = np.concatenate(p.sport), np.concatenate(p.dport)
    payload, seq = np.concatenate(p.payload), np.concatenate(p.seq)
    if job.cut_at is not None:
        last = truth.starts_s[-1]
        cut = last + job.cut_at * (truth.ends_s[-1] - last)
        keep = t < cut
        t, src, dst, sport, dport, payload, seq = (x[keep] for x in (t, src, dst, sport, dport, payload, seq))
    order = np.argsort(t, kind="stable")
    t, src, dst, sport, dport, payload, seq = (x[order] for x in (t, src, dst, sport, dport, payload, seq))
    directory.mkdir(parents=True, exist_ok=True)
    for h in range(truth.hosts):
        mine = (src == h) | ((dst == h) & job.both_directions)
        _write_pcap(directory / f"worker{h}.pcap", job.snaplen, t[mine], src[mine], dst[mine], sport[mine],
                    dport[mine], payload[mine], seq[mine])
    truth.starts_s = [EPOCH + s for s in truth.starts_s]
    truth.ends_s = [EPOCH + s for s in truth.ends_s]
    return truth


def _write_pcap(path: Path, snaplen: int, t: np.ndarray, src: np.ndarray, dst: np.ndarray, sport: np.ndarray,
                dport: np.ndarray, payload: np.ndarray, seq: np.ndarray) -> None:
    n = len(t)
    wire = HEADERS + payload
    incl = np.minimum(wire, snaplen)
    frame = np.zeros((n, snaplen), dtype=np.uint8)
    frame[:, 12:14] = [0x08, 0x00]
    frame[:, 14] = 0x45
    frame[:, 16:18] = ((IP + TCP + payload).astype(">u2")).view(np.uint8).reshape(n, 2)
    frame[:, 22] = 64
    frame[:, 23] = 6
    frame[:, 26:30] = ((src + ip(0)).astype(">u4")).view(np.uint8).reshape(n, 4)
    frame[:, 30:34] = ((dst + ip(0)).astype(">u4")).view(np.uint8).reshape(n, 4)
    frame[:, 34:36] = sport.astype(">u2").view(np.uint8).reshape(n, 2)
    frame[:, 36:38] = dport.astype(">u2").view(np.uint8).reshape(n, 2)
    frame[:, 38:42] = seq.astype(">u4").view(np.uint8).reshape(n, 4)
    frame[:, 46] = (TCP // 4) << 4
    frame[:, 47] = 0x10
    frame[:, 48:50] = [0xFF, 0xFF]
    ns = np.round((t + EPOCH) * 1e9).astype(np.int64)
    head = np.zeros(n, dtype=_REC)
    head["sec"], head["nsec"], head["incl"], head["orig"] = ns // 10**9, ns % 10**9, incl, wire
    ends = np.cumsum(16 + incl)
    starts = ends - (16 + incl)
    out = np.zeros(int(ends[-1]) if n else 0, dtype=np.uint8)
    if n:
        out[starts[:, None] + np.arange(16)] = head.view(np.uint8).reshape(n, 16)
        for size in np.unique(incl).tolist():  # records of a few lengths: copy each length's frames at once
            rows = np.flatnonzero(incl == size)
            out[(starts[rows] + 16)[:, None] + np.arange(size)] = frame[rows, :size]
    with path.open("wb") as f:
        f.write(np.array([0xA1B23C4D], "<u4").tobytes() + np.array([2, 4], "<u2").tobytes()
                + np.array([0, 0, snaplen, 1], "<u4").tobytes())
        f.write(out.tobytes())
