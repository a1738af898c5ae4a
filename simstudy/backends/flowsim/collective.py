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

from simstudy.backends.network import Network
from simstudy.backends.patterns import Pattern, collective_pattern, dimension_phases, phase_pattern
from simstudy.compile.collectives import algorithm


@dataclass(frozen=True)
class CollectiveTiming:
    """One chunk's schedule: per step, offsets (ns) of its transfers from the chunk start."""

    pattern: Pattern
    step_start_ns: NDArray[np.float64]
    step_end_ns: NDArray[np.float64]
    chunk_ns: int
    #: per dimension phase (multi-dimensional collectives): its duration and its number of steps
    phase_ns: tuple[int, ...] = ()
    phase_steps: tuple[int, ...] = ()


def _processing_steps(kind: str, algorithm_name: str, n: int) -> frozenset[int]:
    return algorithm(algorithm_name).reduces(kind, n)


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
    return time_pattern(net, pattern, _processing_steps(kind, algorithm, len(members)),
                        endpoint_delay_ns=endpoint_delay_ns, local_mem_bw_bpns=local_mem_bw_bpns,
                        contention=contention, concurrent=concurrent)


def time_dimensions(
    net: Network,
    kind: str,
    algorithms: list[str],
    dim_sizes: list[int],
    chunk_bytes: int,
    *,
    optimization: str,
    endpoint_delay_ns: float,
    local_mem_bw_bpns: float,
    contention: bool,
    concurrent: int = 1,
) -> CollectiveTiming:
    """One chunk of a collective of every NPU on a multi-dimensional network, as ASTRA-SIM runs it:
    one phase per dimension (see `patterns.dimension_phases`), each on all lines of its dimension
    at once and timed like a collective of its own, the next starting when it ends."""
    patterns: list[Pattern] = []
    starts: list[NDArray[np.float64]] = []
    ends: list[NDArray[np.float64]] = []
    t, offset = 0, 0
    durations: list[int] = []
    counts: list[int] = []
    for phase in dimension_phases(kind, dim_sizes, chunk_bytes, optimization):
        algo = algorithms[phase.dim] if phase.dim < len(algorithms) else algorithms[-1]
        pattern = phase_pattern(phase, dim_sizes, algo)
        timing = time_pattern(net, pattern, _processing_steps(phase.kind, algo, dim_sizes[phase.dim]),
                              endpoint_delay_ns=endpoint_delay_ns, local_mem_bw_bpns=local_mem_bw_bpns,
                              contention=contention, concurrent=concurrent)
        patterns.append(Pattern(pattern.step + offset, pattern.src, pattern.dst, pattern.nbytes))
        starts.append(timing.step_start_ns + t)
        ends.append(timing.step_end_ns + t)
        t += timing.chunk_ns
        offset += pattern.steps
        durations.append(timing.chunk_ns)
        counts.append(pattern.steps)
    if not patterns:
        empty = np.empty(0, dtype=np.int64)
        return CollectiveTiming(Pattern(empty, empty, empty, empty), np.zeros(0), np.zeros(0), 0)
    joined = Pattern(*(np.concatenate([getattr(p, f) for p in patterns]) for f in ("step", "src", "dst", "nbytes")))
    return CollectiveTiming(joined, np.concatenate(starts), np.concatenate(ends), t, tuple(durations), tuple(counts))


def pipelined_phases(timing: CollectiveTiming, chunks: int) -> tuple[int, list[NDArray[np.float64]]]:
    """Chunks flowing through a multi-dimensional collective's phases, one chunk per phase at a
    time (ASTRA-SIM with one active chunk per dimension): chunk c starts phase p once it has left
    phase p-1 and chunk c-1 has left phase p. Returns the finish (ns from the start) and, per chunk,
    how far each of its steps is shifted from the back-to-back schedule of `timing`."""
    phases = len(timing.phase_ns)
    cum = np.concatenate([[0], np.cumsum(timing.phase_ns)])
    free = [0] * phases
    shifts: list[NDArray[np.float64]] = []
    for _ in range(chunks):
        t = 0
        begins = []
        for p, d in enumerate(timing.phase_ns):
            b = max(t, free[p])
            begins.append(b)
            free[p] = t = b + d
        shifts.append(np.repeat(np.asarray(begins, dtype=np.float64) - cum[:-1], timing.phase_steps))
    return free[-1] if phases else 0, shifts


def time_pattern(
    net: Network,
    pattern: Pattern,
    proc_steps: frozenset[int],
    *,
    endpoint_delay_ns: float,
    local_mem_bw_bpns: float,
    contention: bool,
    concurrent: int = 1,
) -> CollectiveTiming:
    """Time a pattern step by step; `proc_steps` are the steps that reduce what they receive."""
    steps = pattern.steps
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
