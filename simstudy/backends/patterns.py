"""Which transfers a collective algorithm makes: step by step, rank to rank, byte for byte.

Both backends use these patterns to turn a collective into rows of the TrafficTable: flowsim
times each step itself, the astrasim backend spreads the steps over the interval ASTRA-SIM
reports for the collective. Sizes follow ASTRA-SIM's system layer: for all-reduce, reduce-scatter
and all-to-all the collective size is the data each rank holds; for all-gather it is each
rank's contribution (ASTRA-SIM's `msg_size = data_size` for all-gather).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class Pattern:
    """Transfers of one chunk of a collective.

    Row `k` is one transfer: `step[k]` (0-based, steps run in order), `src[k]` -> `dst[k]`
    (ranks), `nbytes[k]`. Steps may hold several transfers per rank.
    """

    step: IntArray
    src: IntArray
    dst: IntArray
    nbytes: IntArray

    @property
    def steps(self) -> int:
        return int(self.step.max()) + 1 if len(self.step) else 0

    @property
    def total_bytes(self) -> int:
        return int(self.nbytes.sum())


def _ring(members: IntArray, steps: int, size: int) -> Pattern:
    n = len(members)
    step = np.repeat(np.arange(steps, dtype=np.int64), n)
    src = np.tile(members, steps)
    dst = np.tile(np.roll(members, -1), steps)
    return Pattern(step, src, dst, np.full(len(step), size, dtype=np.int64))


def _direct(members: IntArray, steps: int, size: int) -> Pattern:
    n = len(members)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    mask = i != j
    src1, dst1 = members[i[mask]], members[j[mask]]
    step = np.repeat(np.arange(steps, dtype=np.int64), len(src1))
    return Pattern(step, np.tile(src1, steps), np.tile(dst1, steps), np.full(len(step), size, dtype=np.int64))


def _halving_doubling(members: IntArray, size: int, reduce: bool, gather: bool) -> Pattern:
    n = len(members)
    rounds = int(np.log2(n))
    if 2**rounds != n:
        raise ValueError(f"halving-doubling needs a power-of-two group, got {n}")
    idx = np.arange(n)
    steps, srcs, dsts, sizes = [], [], [], []
    order: list[tuple[int, int]] = []
    if reduce:
        order += [(k, size >> (k + 1)) for k in range(rounds)]
    if gather:
        order += [(k, size >> (k + 1)) for k in reversed(range(rounds))]
    for s, (k, nbytes) in enumerate(order):
        steps.append(np.full(n, s))
        srcs.append(members[idx])
        dsts.append(members[idx ^ (1 << k)])
        sizes.append(np.full(n, max(nbytes, 1)))
    return Pattern(*(np.concatenate(a).astype(np.int64) for a in (steps, srcs, dsts, sizes)))


def _binary_tree(members: IntArray, size: int) -> Pattern:
    """Two complementary binary trees, each reducing then broadcasting half the data."""
    n = len(members)
    steps, srcs, dsts, sizes = [], [], [], []
    half = max(size // 2, 1)
    depth = max(int(np.ceil(np.log2(n + 1))) - 1, 1)
    for tree in range(2):
        order = np.roll(np.arange(n), -tree * (n // 2)) if tree else np.arange(n)
        parent = (np.arange(n) - 1) // 2
        level = np.floor(np.log2(np.arange(n) + 1)).astype(int)
        child = np.arange(1, n)
        # reduce: deepest level first; broadcast: root first
        for s in range(depth):
            lvl = depth - s
            sel = child[level[child] == lvl]
            steps.append(np.full(len(sel), s))
            srcs.append(members[order[sel]])
            dsts.append(members[order[parent[sel]]])
            sizes.append(np.full(len(sel), half))
        for s in range(depth):
            sel = child[level[child] == s + 1]
            steps.append(np.full(len(sel), depth + s))
            srcs.append(members[order[parent[sel]]])
            dsts.append(members[order[sel]])
            sizes.append(np.full(len(sel), half))
    st, sr, ds, sz = (np.concatenate(a).astype(np.int64) for a in (steps, srcs, dsts, sizes))
    order_by_step = np.argsort(st, kind="stable")
    return Pattern(st[order_by_step], sr[order_by_step], ds[order_by_step], sz[order_by_step])


def collective_pattern(kind: str, algorithm: str, members: list[int] | IntArray, size: int) -> Pattern:
    """The transfers of one chunk of `size` bytes of collective `kind` over `members`.

    kind: all_reduce, all_gather, reduce_scatter, all_to_all.
    algorithm: ring, oneRing, direct, oneDirect, halvingDoubling, doubleBinaryTree.
    """
    m = np.asarray(members, dtype=np.int64)
    n = len(m)
    if n < 2:
        return Pattern(*(np.empty(0, dtype=np.int64) for _ in range(4)))
    algo = {"oneRing": "ring", "oneDirect": "direct"}.get(algorithm, algorithm)
    if algo == "ring":
        if kind == "all_to_all":
            # ASTRA-SIM's ring all-to-all relays every block around the ring: N(N-1)/2 steps.
            return _ring(m, n * (n - 1) // 2, max(size // n, 1))
        if kind == "all_reduce":
            return _ring(m, 2 * (n - 1), max(size // n, 1))
        if kind == "all_gather":
            return _ring(m, n - 1, size)
        return _ring(m, n - 1, max(size // n, 1))
    if kind == "all_to_all":
        return _direct(m, 1, max(size // n, 1))
    if algo == "direct":
        if kind == "all_reduce":
            return _direct(m, 2, max(size // n, 1))
        return _direct(m, 1, size if kind == "all_gather" else max(size // n, 1))
    if algo == "halvingDoubling":
        if kind == "all_gather":
            return _halving_doubling(m, size * n, reduce=False, gather=True)
        return _halving_doubling(m, size, reduce=True, gather=kind == "all_reduce")
    if algo == "doubleBinaryTree":
        if kind != "all_reduce":
            raise ValueError("doubleBinaryTree implements all-reduce only")
        return _binary_tree(m, size)
    raise ValueError(f"unknown collective algorithm {algorithm!r}")


def chunking(size: int, splits: int, kind: str, npus: int) -> tuple[int, int]:
    """(chunk bytes, number of chunks) as ASTRA-SIM's system layer splits a collective.

    chunk = size // splits, raised to the NPU count (except for all-gather); there are
    ceil(size / chunk) chunks, each carrying a whole chunk.
    """
    chunk = size // max(splits, 1)
    if kind != "all_gather" and npus > chunk:
        chunk = npus
        size = splits * chunk
    chunk = max(chunk, 1)
    return chunk, -(-size // chunk)


@dataclass(frozen=True)
class Phase:
    """One dimension's part of a collective over a multi-dimensional network: `kind` runs on every
    line of dimension `dim` (the ranks that differ only there) with `size` bytes per rank (for
    all-gather: each rank's contribution)."""

    kind: str
    dim: int
    size: int


def dimension_phases(kind: str, dim_sizes: list[int], size: int, optimization: str = "baseline") -> list[Phase]:
    """How ASTRA-SIM's system layer runs a collective of every NPU on several dimensions
    (`Sys::generate_collective`, one chunk): dimensions of size 1 are skipped;

    * all-reduce, `baseline`: a whole all-reduce of `size` on each dimension, innermost first;
    * all-reduce, `localBWAware`: reduce-scatter on every dimension but the last (the size
      shrinking by each dimension's NPUs), all-reduce on the last, all-gather back down;
    * reduce-scatter: innermost first, the size shrinking by each dimension's NPUs;
    * all-gather: outermost first, the contribution growing by each dimension's NPUs.
    """
    active = [k for k, n in enumerate(dim_sizes) if n > 1]
    if kind == "all_gather":
        active = active[::-1]
    phases: list[Phase] = []
    if kind == "all_reduce" and optimization != "baseline" and len(active) > 1:
        for k in active[:-1]:
            phases.append(Phase("reduce_scatter", k, size))
            size //= dim_sizes[k]
        phases.append(Phase("all_reduce", active[-1], size))
        for k in reversed(active[:-1]):
            phases.append(Phase("all_gather", k, size))
            size *= dim_sizes[k]
        return phases
    for k in active:
        phases.append(Phase(kind, k, size))
        if kind == "reduce_scatter":
            size //= dim_sizes[k]
        elif kind == "all_gather":
            size *= dim_sizes[k]
    return phases


def phase_pattern(phase: Phase, dim_sizes: list[int], algorithm: str) -> Pattern:
    """The transfers of one phase: its collective on every line of its dimension at once."""
    stride = int(np.prod(dim_sizes[: phase.dim], dtype=np.int64))
    n = dim_sizes[phase.dim]
    total = int(np.prod(dim_sizes, dtype=np.int64))
    starts = [r for r in range(total) if (r // stride) % n == 0]
    parts = [collective_pattern(phase.kind, algorithm, [s + j * stride for j in range(n)], phase.size)
             for s in starts]
    cols = [np.concatenate([getattr(p, f) for p in parts]) for f in ("step", "src", "dst", "nbytes")]
    order = np.argsort(cols[0], kind="stable")
    return Pattern(*(c[order] for c in cols))


def dimensions_pattern(kind: str, algorithms: list[str], dim_sizes: list[int], size: int,
                       optimization: str = "baseline") -> Pattern:
    """Every phase's transfers of one chunk, the phases' steps one after another."""
    parts: list[Pattern] = []
    offset = 0
    for phase in dimension_phases(kind, dim_sizes, size, optimization):
        algo = algorithms[phase.dim] if phase.dim < len(algorithms) else algorithms[-1]
        p = phase_pattern(phase, dim_sizes, algo)
        parts.append(Pattern(p.step + offset, p.src, p.dst, p.nbytes))
        offset += p.steps
    if not parts:
        return Pattern(*(np.empty(0, dtype=np.int64) for _ in range(4)))
    return Pattern(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("step", "src", "dst", "nbytes")))
