"""The collective algorithms: one registry entry each, with its pattern, reduction steps and names.

An entry says everything simstudy knows about an algorithm: its spec name (`aggregation.algorithm`),
the name ASTRA-SIM's system.json gives it (and the variants that run the same pattern), the
collectives it implements, which transfers one chunk makes (step by step, rank to rank, byte for
byte), and which of its steps reduce what they receive. The compiler writes system.json from it;
both backends turn collectives into transfers with it; flowsim charges the reduction cost on its
reduction steps.

Sizes follow ASTRA-SIM's system layer: for all-reduce, reduce-scatter and all-to-all the size is
the data each rank holds; for all-gather it is each rank's contribution (`msg_size = data_size`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]

#: The collectives ASTRA-SIM's system layer simulates, by simstudy's kind name.
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


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


def empty_pattern() -> Pattern:
    return Pattern(*(np.empty(0, dtype=np.int64) for _ in range(4)))


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


# -- the algorithms ----------------------------------------------------------------------------


def _ring_pattern(kind: str, m: IntArray, size: int) -> Pattern:
    n = len(m)
    if kind == "all_to_all":
        # ASTRA-SIM's ring all-to-all relays every block around the ring: N(N-1)/2 steps.
        return _ring(m, n * (n - 1) // 2, max(size // n, 1))
    if kind == "all_reduce":
        return _ring(m, 2 * (n - 1), max(size // n, 1))
    if kind == "all_gather":
        return _ring(m, n - 1, size)
    return _ring(m, n - 1, max(size // n, 1))


def _ring_reduces(kind: str, n: int) -> frozenset[int]:
    """All-reduce reduces on its first N-1 steps (the reduce-scatter half); reduce-scatter on all."""
    return frozenset(range(n - 1)) if kind in ("all_reduce", "reduce_scatter") else frozenset()


def _direct_pattern(kind: str, m: IntArray, size: int) -> Pattern:
    n = len(m)
    if kind == "all_reduce":
        return _direct(m, 2, max(size // n, 1))
    return _direct(m, 1, size if kind == "all_gather" else max(size // n, 1))


def _direct_reduces(kind: str, n: int) -> frozenset[int]:
    return frozenset({0}) if kind in ("all_reduce", "reduce_scatter") else frozenset()


def _hd_pattern(kind: str, m: IntArray, size: int) -> Pattern:
    if kind == "all_gather":
        return _halving_doubling(m, size * len(m), reduce=False, gather=True)
    return _halving_doubling(m, size, reduce=True, gather=kind == "all_reduce")


def _hd_reduces(kind: str, n: int) -> frozenset[int]:
    """The reduce steps after the first one process what they receive (as measured against ASTRA-SIM)."""
    return frozenset(range(1, int(math.log2(n)))) if kind in ("all_reduce", "reduce_scatter") else frozenset()


def _dbt_pattern(kind: str, m: IntArray, size: int) -> Pattern:
    return _binary_tree(m, size)


def _no_reduces(kind: str, n: int) -> frozenset[int]:
    return frozenset()


@dataclass(frozen=True)
class Algorithm:
    """One collective algorithm.

    `name` is the spec name, `astra` the system.json name, `variants` other system.json names
    that run the same transfers (ASTRA-SIM's one-dimension `oneRing`...). `kinds` are the
    collectives it implements; `configured` the ones the compiler configures it for in
    system.json when a scenario picks it (the others run `ring`; all-to-all always runs
    `direct`). `pattern(kind, members, chunk_bytes)` gives one chunk's transfers,
    `reduces(kind, n)` the steps that reduce what they receive on a group of n ranks.
    """

    name: str
    astra: str
    variants: tuple[str, ...]
    kinds: frozenset[str]
    configured: frozenset[str]
    build: Callable[[str, IntArray, int], Pattern]
    reduce_steps: Callable[[str, int], frozenset[int]]

    def pattern(self, kind: str, members: list[int] | IntArray, size: int) -> Pattern:
        """The transfers of one chunk of `size` bytes of collective `kind` over `members`."""
        m = np.asarray(members, dtype=np.int64)
        if len(m) < 2:
            return empty_pattern()
        if kind == "all_to_all" and self.name != "ring":
            return _direct(m, 1, max(size // len(m), 1))
        if kind not in self.kinds:
            raise ValueError(f"{self.astra} implements {', '.join(sorted(self.kinds))}, not {kind}")
        return self.build(kind, m, size)

    def reduces(self, kind: str, n: int) -> frozenset[int]:
        """The steps of one chunk that reduce what they receive (local-memory cost)."""
        if kind == "all_to_all" and self.name != "ring":
            return frozenset()
        return self.reduce_steps(kind, n)


_ALL = frozenset(KINDS)
ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("ring", "ring", ("oneRing",), _ALL, frozenset({"all_reduce", "all_gather", "reduce_scatter"}),
              _ring_pattern, _ring_reduces),
    Algorithm("direct", "direct", ("oneDirect",), _ALL, frozenset({"all_reduce", "all_gather", "reduce_scatter"}),
              _direct_pattern, _direct_reduces),
    Algorithm("halving_doubling", "halvingDoubling", ("oneHalvingDoubling",), _ALL, frozenset({"all_reduce"}),
              _hd_pattern, _hd_reduces),
    Algorithm("double_binary_tree", "doubleBinaryTree", (), frozenset({"all_reduce", "all_to_all"}),
              frozenset({"all_reduce"}), _dbt_pattern, _no_reduces),
)}
_BY_ASTRA: dict[str, Algorithm] = {n: a for a in ALGORITHMS.values() for n in (a.astra, *a.variants)}
#: What all-to-all runs on every dimension (the compiler's choice; ASTRA-SIM's ring all-to-all relays).
ALL_TO_ALL = "direct"


def algorithm(name: str) -> Algorithm:
    """An algorithm by its spec name (`ring`, `halving_doubling`...) or its ASTRA-SIM name."""
    found = ALGORITHMS.get(name) or _BY_ASTRA.get(name)
    if found is None:
        raise ValueError(f"unknown collective algorithm {name!r}; known: "
                         + ", ".join(sorted({*ALGORITHMS, *_BY_ASTRA})))
    return found


def system_implementations(name: str) -> dict[str, str]:
    """The ASTRA-SIM algorithm of every collective when a scenario picks algorithm `name`."""
    chosen = algorithm(name)
    ring = ALGORITHMS["ring"]
    out = {kind: (chosen if kind in chosen.configured else ring).astra for kind in KINDS}
    out["all_to_all"] = algorithm(ALL_TO_ALL).astra
    return out


def collective_pattern(kind: str, algorithm_name: str, members: list[int] | IntArray, size: int) -> Pattern:
    """The transfers of one chunk of `size` bytes of collective `kind` over `members` with the
    algorithm of that (spec or ASTRA-SIM) name."""
    return algorithm(algorithm_name).pattern(kind, members, size)
