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


def _ring(members: IntArray, steps: int, size: int, only: int | None = None, reverse: bool = False) -> Pattern:
    """Every member sends to the next one (the previous one when `reverse`) at every step."""
    n = len(members)
    idx = np.arange(n) if only is None else np.array([only])
    nxt = (idx - 1) % n if reverse else (idx + 1) % n
    step = np.repeat(np.arange(steps, dtype=np.int64), len(idx))
    src = np.tile(members[idx], steps)
    dst = np.tile(members[nxt], steps)
    return Pattern(step, src, dst, np.full(len(step), size, dtype=np.int64))


def _direct(members: IntArray, steps: int, size: int, only: int | None = None) -> Pattern:
    n = len(members)
    i, j = np.meshgrid(np.arange(n) if only is None else np.array([only]), np.arange(n), indexing="ij")
    mask = i != j
    src1, dst1 = members[i[mask]], members[j[mask]]
    step = np.repeat(np.arange(steps, dtype=np.int64), len(src1))
    return Pattern(step, np.tile(src1, steps), np.tile(dst1, steps), np.full(len(step), size, dtype=np.int64))


def _halving_doubling(members: IntArray, size: int, reduce: bool, gather: bool, only: int | None = None) -> Pattern:
    n = len(members)
    rounds = int(np.log2(n))
    if 2**rounds != n:
        raise ValueError(f"halving-doubling needs a power-of-two group, got {n}")
    idx = np.arange(n) if only is None else np.array([only])
    steps, srcs, dsts, sizes = [], [], [], []
    order: list[tuple[int, int]] = []
    if reduce:
        order += [(k, size >> (k + 1)) for k in range(rounds)]
    if gather:
        order += [(k, size >> (k + 1)) for k in reversed(range(rounds))]
    for s, (k, nbytes) in enumerate(order):
        steps.append(np.full(len(idx), s))
        srcs.append(members[idx])
        dsts.append(members[idx ^ (1 << k)])
        sizes.append(np.full(len(idx), max(nbytes, 1)))
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


def _ring_msg(kind: str, n: int, size: int) -> int:
    return size if kind == "all_gather" else max(size // n, 1)


def _ring_pattern(kind: str, m: IntArray, size: int, only: int | None, reverse: bool) -> Pattern:
    n = len(m)
    if kind == "all_to_all":
        # ASTRA-SIM's ring all-to-all relays every block around the ring: N(N-1)/2 steps.
        return _ring(m, n * (n - 1) // 2, _ring_msg(kind, n, size), only, reverse)
    steps = 2 * (n - 1) if kind == "all_reduce" else n - 1
    return _ring(m, steps, _ring_msg(kind, n, size), only, reverse)


def _ring_processing(kind: str, n: int, size: int) -> dict[int, int]:
    """All-reduce reduces what its first N-1 steps receive (the reduce-scatter half), reduce-scatter
    what every step receives: a message of the ring's size each time."""
    if kind not in ("all_reduce", "reduce_scatter"):
        return {}
    return dict.fromkeys(range(n - 1), _ring_msg(kind, n, size))


def _direct_pattern(kind: str, m: IntArray, size: int, only: int | None, reverse: bool) -> Pattern:
    n = len(m)
    if kind == "all_reduce":
        return _direct(m, 2, max(size // n, 1), only)
    return _direct(m, 1, size if kind == "all_gather" else max(size // n, 1), only)


def _direct_processing(kind: str, n: int, size: int) -> dict[int, int]:
    return {0: max(size // n, 1)} if kind in ("all_reduce", "reduce_scatter") else {}


def _hd_pattern(kind: str, m: IntArray, size: int, only: int | None, reverse: bool) -> Pattern:
    if kind == "all_gather":
        return _halving_doubling(m, size * len(m), reduce=False, gather=True, only=only)
    return _halving_doubling(m, size, reduce=True, gather=kind == "all_reduce", only=only)


def _hd_processing(kind: str, n: int, size: int) -> dict[int, int]:
    """ASTRA-SIM's halving-doubling reduces after each reduce step but the last, charged on the
    size of the message it sends next (step s+1 sends size / 2^(s+2))."""
    if kind not in ("all_reduce", "reduce_scatter"):
        return {}
    return {s: max(size >> (s + 2), 1) for s in range(int(math.log2(n)) - 1)}


def _dbt_pattern(kind: str, m: IntArray, size: int, only: int | None, reverse: bool) -> Pattern:
    p = _binary_tree(m, size)
    if only is None:
        return p
    sel = p.src == m[only]
    return Pattern(p.step[sel], p.src[sel], p.dst[sel], p.nbytes[sel])


def _no_processing(kind: str, n: int, size: int) -> dict[int, int]:
    return {}


@dataclass(frozen=True)
class Algorithm:
    """One collective algorithm.

    `name` is the spec name, `astra` the system.json name, `variants` other system.json names
    that run the same transfers (ASTRA-SIM's one-dimension `oneRing`...). `kinds` are the
    collectives it implements; `configured` the ones the compiler configures it for in
    system.json when a scenario picks it (the others run `ring`; all-to-all always runs
    `direct`). `pattern(kind, members, chunk_bytes)` gives one chunk's transfers,
    `processing(kind, n, chunk_bytes)` what a rank reduces after receiving each step, as
    step -> bytes (ASTRA-SIM charges 3 x bytes / local memory bandwidth: one write, two reads).
    `symmetry` says how ranks map onto each other in its pattern: `rotate` (rank r does what
    rank 0 does, shifted by r) or `xor` (shifted by XOR with r); None when ranks differ.
    """

    name: str
    astra: str
    variants: tuple[str, ...]
    kinds: frozenset[str]
    configured: frozenset[str]
    build: Callable[[str, IntArray, int, int | None, bool], Pattern]
    process: Callable[[str, int, int], dict[int, int]]
    symmetry: str | None

    def pattern(self, kind: str, members: list[int] | IntArray, size: int, *, only: int | None = None,
                reverse: bool = False) -> Pattern:
        """The transfers of one chunk of `size` bytes of collective `kind` over `members`: of every
        member, or only of the member at index `only`; a ring runs backwards when `reverse`."""
        m = np.asarray(members, dtype=np.int64)
        if len(m) < 2:
            return empty_pattern()
        if kind == "all_to_all" and self.name != "ring":
            return _direct(m, 1, max(size // len(m), 1), only)
        if kind not in self.kinds:
            raise ValueError(f"{self.astra} implements {', '.join(sorted(self.kinds))}, not {kind}")
        return self.build(kind, m, size, only, reverse)

    def processing(self, kind: str, n: int, size: int) -> dict[int, int]:
        """Step -> bytes a rank reduces after receiving that step (one chunk of `size` bytes)."""
        if n < 2 or (kind == "all_to_all" and self.name != "ring"):
            return {}
        return self.process(kind, n, size)

    def symmetry_of(self, kind: str) -> str | None:
        """The symmetry of this algorithm's pattern for collective `kind`."""
        if kind == "all_to_all" and self.name != "ring":
            return "rotate"
        return self.symmetry


_ALL = frozenset(KINDS)
ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("ring", "ring", ("oneRing",), _ALL, frozenset({"all_reduce", "all_gather", "reduce_scatter"}),
              _ring_pattern, _ring_processing, "rotate"),
    Algorithm("direct", "direct", ("oneDirect",), _ALL, frozenset({"all_reduce", "all_gather", "reduce_scatter"}),
              _direct_pattern, _direct_processing, "rotate"),
    Algorithm("halving_doubling", "halvingDoubling", ("oneHalvingDoubling",), _ALL, frozenset({"all_reduce"}),
              _hd_pattern, _hd_processing, "xor"),
    # Approximated: two complementary trees, each reducing then broadcasting half the data.
    Algorithm("double_binary_tree", "doubleBinaryTree", (), frozenset({"all_reduce", "all_to_all"}),
              frozenset({"all_reduce"}), _dbt_pattern, _no_processing, None),
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
