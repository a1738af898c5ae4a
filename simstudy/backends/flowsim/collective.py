"""Timing of one collective the way ASTRA-SIM's system layer times it, on flowsim's network.

Measured against ASTRA-SIM c459ab61's analytical backend (see benchmarks/agreement.py), one
chunk of a collective on one network dimension is a sequence of steps; each step costs

    send + processing + endpoint_delay,       plus one endpoint_delay per chunk,

where `send` is the slowest transfer of the step (ASTRA-SIM: int(hops x latency + bytes /
bandwidth), no sharing; flowsim with contention: path latency + bytes / max-min fair rate)
and `processing` is the local reduction of a received message, 3 x int(bytes / local_mem_bw)
(one write, two reads), on the reduce-scatter steps of an algorithm:

* ring: all-reduce 2(N-1) steps of S/N (the first N-1 reduce), reduce-scatter N-1 steps of
  S/N (all reduce), all-gather N-1 steps of S, all-to-all N(N-1)/2 relay steps of S/N;
* direct: one step per phase, every peer at once (all-reduce: two phases, the first reduces);
* halving-doubling: log2 N steps of S/2, S/4, ... to the partner 2^k away, then back for
  all-gather (reduce steps after the first one process);
* double binary tree: two trees each reducing then broadcasting S/2 (an approximation).

Chunks (preferred-dataset-splits) run one after another; `active-chunks-per-dimension` of
them run at once and, with contention on, share the links.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simstudy.backends.flowsim.network import Network
from simstudy.backends.patterns import Pattern, collective_pattern


@dataclass(frozen=True)
class CollectiveTiming:
    """One chunk's schedule: per step, offsets (ns) of its transfers from the chunk start."""

    pattern: Pattern
    step_start_ns: NDArray[np.float64]
    step_end_ns: NDArray[np.float64]
    chunk_ns: int


def _processing_steps(kind: str, algorithm: str, n: int) -> set[int]:
    algo = {"oneRing": "ring", "oneDirect": "direct"}.get(algorithm, algorithm)
    if kind not in ("all_reduce", "reduce_scatter"):
        return set()
    if algo == "ring":
        return set(range(n - 1))
    if algo == "direct":
        return {0}
    if algo == "halvingDoubling":
        return set(range(1, int(math.log2(n))))
    return set()


def time_chunk(
    net: Network,
    kind: str,
    algorithm: str,
    members: list[int],
    chunk_bytes: int,
    *,
    endpoint_delay_ns: float,
    local_mem_bw_bpns: float,
    contention: bool,
    concurrent: int = 1,
) -> CollectiveTiming:
    """The step schedule of one chunk of a collective over `members`."""
    pattern = collective_pattern(kind, algorithm, members, chunk_bytes)
    steps = pattern.steps
    proc_steps = _processing_steps(kind, algorithm, len(members))
    starts = np.zeros(steps)
    ends = np.zeros(steps)
    t = float(endpoint_delay_ns)
    bounds = np.searchsorted(pattern.step, np.arange(steps + 1))
    cache: dict[tuple[bytes, bytes, bytes], float] = {}
    for s in range(steps):
        sel = np.arange(bounds[s], bounds[s + 1])
        src, dst, nbytes = pattern.src[sel], pattern.dst[sel], pattern.nbytes[sel]
        key = (src.tobytes(), dst.tobytes(), nbytes.tobytes())
        send = cache.get(key)
        if send is None:
            send = cache[key] = _step_send_ns(net, src, dst, nbytes, s, contention, concurrent)
        starts[s] = t
        ends[s] = t + send
        proc = 0.0
        if s in proc_steps and len(sel):
            m = float(nbytes.max())
            proc = 3 * math.floor(m / local_mem_bw_bpns)
        t += send + proc + endpoint_delay_ns
    return CollectiveTiming(pattern, starts, ends, int(t))


def _step_send_ns(
    net: Network, src: NDArray[np.int64], dst: NDArray[np.int64], nbytes: NDArray[np.int64],
    step: int, contention: bool, concurrent: int,
) -> float:
    """The slowest transfer of one step: int(path latency + bytes / rate)."""
    if len(src) == 0:
        return 0.0
    paths = [net.route(int(a), int(b), step) for a, b in zip(src.tolist(), dst.tolist(), strict=True)]
    lat = np.array([net.path_latency(p) for p in paths])
    if contention:
        rates = net.maxmin_rates(paths * concurrent)[: len(paths)]
    else:
        cap = np.asarray(net.capacity)
        rates = np.array([cap[list(p)].min() for p in paths])
    return float(np.floor(lat + nbytes.astype(np.float64) / rates).max())
