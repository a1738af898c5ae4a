"""The transfers and reduction steps of every collective algorithm of the registry.

`simstudy.spec.collectives` holds each algorithm's entry (names, constraints, properties); this
module gives every entry, under its name in `PATTERNS`, which transfers one chunk makes (step by
step, rank to rank, byte for byte) and which of its steps reduce what they receive, and checks at
import that no entry lacks them. Both backends turn collectives into transfers with it; flowsim
charges the reduction cost on its reduction steps.

Sizes follow ASTRA-SIM's system layer: for all-reduce, reduce-scatter and all-to-all the size is
the data each rank holds; for all-gather it is each rank's contribution (`msg_size = data_size`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from simstudy.spec.collectives import ALGORITHMS as ENTRIES
from simstudy.spec.collectives import CollectiveAlgorithm, collective_algorithm

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


def _direct(members: IntArray, steps: int, size: int, only: int | None = None, reverse: bool = False) -> Pattern:
    """Every member sends to every other one at every step, in ring order from the next member
    (the previous one when `reverse`), as ASTRA-SIM's direct algorithm (`AllToAll`) picks them."""
    n = len(members)
    idx = np.arange(n) if only is None else np.array([only])
    k = np.arange(1, n)
    i = np.repeat(idx, n - 1)
    j = (i - np.tile(k, len(idx))) % n if reverse else (i + np.tile(k, len(idx))) % n
    src1, dst1 = members[i], members[j]
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


def binary_tree(n: int, variant: int) -> tuple[list[int], list[int]]:
    """ASTRA-SIM's binary tree over n members (`BinaryTree`): a root with one child, under it a
    complete binary tree, members numbered in order (in-order traversal). `variant` 0 is its RootMax
    tree (the root is the last member, above the subtree of the others), 1 its RootMin tree (the
    root is the first member). Returns (parent, depth) per member index; the root's parent is -1."""
    depth_levels = 1
    tmp = n
    while tmp > 1:
        depth_levels += 1
        tmp //= 2
    parent: list[int] = []
    depth: list[int] = []
    order: list[tuple[int, int]] = []  # (parent position in `order`, depth) in in-order

    def subtree(levels: int, up: int, d: int) -> None:
        """In-order: left subtree, the node, right subtree."""
        me = len(order)
        if levels > 1:
            subtree(levels - 1, -2 - me, d + 1)  # placeholder parent, fixed below
        order.append((up, d))
        mine = len(order) - 1
        if levels > 1:
            for k in range(me, mine):
                if order[k][0] == -2 - me:
                    order[k] = (mine, order[k][1])
            subtree(levels - 1, mine, d + 1)

    if variant % 2 == 0:  # RootMax: the subtree is the root's left child, the root comes last
        subtree(depth_levels - 1, -3, 1)
        order.append((-1, 0))
        root = len(order) - 1
        order = [(root if up == -3 else up, d) for up, d in order]
    else:  # RootMin: the root first, the subtree its right child
        order.append((-1, 0))
        subtree(depth_levels - 1, 0, 1)
    if len(order) != n:
        raise ValueError(f"the double binary tree needs a power-of-two group, got {n}")
    for up, d in order:
        parent.append(up)
        depth.append(d)
    return parent, depth


def _binary_tree(members: IntArray, size: int, variant: int) -> Pattern:
    """One chunk of ASTRA-SIM's double-binary-tree all-reduce (`DoubleBinaryTreeAllReduce`) on one of
    its two trees: every member sends the whole chunk to its parent once it has its children's
    (step H - depth), and the root's result goes back down (step H + depth of the sender), H being
    the depth of the leaves."""
    parent, depth = binary_tree(len(members), variant)
    h = max(depth)
    steps, srcs, dsts = [], [], []
    for v, up in enumerate(parent):
        if up < 0:
            continue
        steps += [h - depth[v], h + depth[up]]
        srcs += [v, up]
        dsts += [up, v]
    st = np.asarray(steps, dtype=np.int64)
    order = np.argsort(st, kind="stable")
    sr, ds = np.asarray(srcs, dtype=np.int64)[order], np.asarray(dsts, dtype=np.int64)[order]
    return Pattern(st[order], members[sr], members[ds], np.full(len(st), max(size, 1), dtype=np.int64))


# -- the algorithms ----------------------------------------------------------------------------


def _ring_msg(kind: str, n: int, size: int) -> int:
    return size if kind == "all_gather" else max(size // n, 1)


def _ring_steps(kind: str, n: int) -> int:
    """A ring's steps: ASTRA-SIM's ring all-to-all relays every block around the ring (N(N-1)/2
    steps), an all-reduce is a reduce-scatter then an all-gather (2(N-1)), the others N-1."""
    return n * (n - 1) // 2 if kind == "all_to_all" else 2 * (n - 1) if kind == "all_reduce" else n - 1


def _ring_pattern(kind: str, m: IntArray, size: int, only: int | None, reverse: bool, variant: int) -> Pattern:
    n = len(m)
    return _ring(m, _ring_steps(kind, n), _ring_msg(kind, n, size), only, reverse)


def _ring_first_step(kind: str, m: IntArray, size: int, only: int | None, reverse: bool) -> tuple[Pattern, int]:
    """A ring's first step and its number of steps: every step sends what the first one does."""
    n = len(m)
    return _ring(m, 1, _ring_msg(kind, n, size), only, reverse), _ring_steps(kind, n)


def _ring_processing(kind: str, n: int, size: int) -> dict[int, int]:
    """All-reduce reduces what its first N-1 steps receive (the reduce-scatter half), reduce-scatter
    what every step receives: a message of the ring's size each time."""
    if kind not in ("all_reduce", "reduce_scatter"):
        return {}
    return dict.fromkeys(range(n - 1), _ring_msg(kind, n, size))


def _direct_pattern(kind: str, m: IntArray, size: int, only: int | None, reverse: bool, variant: int) -> Pattern:
    n = len(m)
    if kind == "all_reduce":
        return _direct(m, 2, max(size // n, 1), only, reverse)
    return _direct(m, 1, size if kind == "all_gather" else max(size // n, 1), only, reverse)


def _direct_processing(kind: str, n: int, size: int) -> dict[int, int]:
    return {0: max(size // n, 1)} if kind in ("all_reduce", "reduce_scatter") else {}


def _hd_pattern(kind: str, m: IntArray, size: int, only: int | None, reverse: bool, variant: int) -> Pattern:
    if kind == "all_gather":
        return _halving_doubling(m, size * len(m), reduce=False, gather=True, only=only)
    return _halving_doubling(m, size, reduce=True, gather=kind == "all_reduce", only=only)


def _hd_processing(kind: str, n: int, size: int) -> dict[int, int]:
    """ASTRA-SIM's halving-doubling reduces after each reduce step but the last, charged on the
    size of the message it sends next (step s+1 sends size / 2^(s+2))."""
    if kind not in ("all_reduce", "reduce_scatter"):
        return {}
    return {s: max(size >> (s + 2), 1) for s in range(int(math.log2(n)) - 1)}


def _dbt_pattern(kind: str, m: IntArray, size: int, only: int | None, reverse: bool, variant: int) -> Pattern:
    p = _binary_tree(m, size, variant)
    if only is None:
        return p
    sel = p.src == m[only]
    return Pattern(p.step[sel], p.src[sel], p.dst[sel], p.nbytes[sel])


def _dbt_processing(kind: str, n: int, size: int) -> dict[int, int]:
    """Every member but a leaf reduces what it receives, the whole chunk: its children's data on the
    way up, the result on the way down (a leaf only stores it: the last step)."""
    h = max(binary_tree(n, 0)[1])
    return dict.fromkeys(range(2 * h - 1), max(size, 1))


#: What builds one chunk's transfers: (kind, members, chunk bytes, only the member at this index
#: or None, a ring backwards, the chunk's turn for an algorithm that `alternates`).
Build = Callable[[str, IntArray, int, int | None, bool, int], Pattern]
#: Step -> bytes a rank reduces after receiving that step: (kind, members, chunk bytes).
Process = Callable[[str, int, int], dict[int, int]]

#: What builds the first step of an algorithm whose steps all send the same, and their number:
#: (kind, members, chunk bytes, only, backwards) -> (the first step's transfers, steps).
FirstStep = Callable[[str, IntArray, int, int | None, bool], tuple[Pattern, int]]
#: The algorithms whose steps all send the same (a ring's 2(N-1) steps): the engine plans their
#: first step only, without building N x steps transfers first.
REPEATING: dict[str, FirstStep] = {"ring": _ring_first_step}

#: Every registry entry's transfers and reduction steps, under the entry's name.
PATTERNS: dict[str, tuple[Build, Process]] = {
    "ring": (_ring_pattern, _ring_processing),
    "direct": (_direct_pattern, _direct_processing),
    "halving_doubling": (_hd_pattern, _hd_processing),
    "double_binary_tree": (_dbt_pattern, _dbt_processing),
}


@dataclass(frozen=True)
class Algorithm(CollectiveAlgorithm):
    """A registry entry with its transfers: `pattern(kind, members, chunk_bytes)` gives one chunk's
    transfers, `processing(kind, n, chunk_bytes)` what a rank reduces after receiving each step,
    as step -> bytes (ASTRA-SIM charges 3 x bytes / local memory bandwidth: one write, two reads)."""

    build: Build = field(kw_only=True)
    process: Process = field(kw_only=True)
    #: its first step and the number of steps, where every step sends the same (`REPEATING`)
    first: FirstStep | None = field(default=None, kw_only=True)

    def pattern(self, kind: str, members: list[int] | IntArray, size: int, *, only: int | None = None,
                reverse: bool = False, variant: int = 0) -> Pattern:
        """The transfers of one chunk of `size` bytes of collective `kind` over `members`: of every
        member, or only of the member at index `only`; a ring runs backwards when `reverse`;
        `variant` is the chunk's turn when the algorithm `alternates`."""
        m = np.asarray(members, dtype=np.int64)
        if len(m) < 2:
            return empty_pattern()
        if kind not in self.kinds:
            raise ValueError(f"{self.astra} implements {', '.join(sorted(self.kinds))}, not {kind}")
        return self.build(kind, m, size, only, reverse, variant)

    def first_step(self, kind: str, members: list[int] | IntArray, size: int, *, only: int | None = None,
                   reverse: bool = False) -> tuple[Pattern, int] | None:
        """`pattern`'s first step and its number of steps, where every step sends what the first
        does in the same order (a ring's); None for an algorithm whose steps differ."""
        m = np.asarray(members, dtype=np.int64)
        if self.first is None or len(m) < 2 or kind not in self.kinds:
            return None
        return self.first(kind, m, size, only, reverse)

    def processing(self, kind: str, n: int, size: int) -> dict[int, int]:
        """Step -> bytes a rank reduces after receiving that step (one chunk of `size` bytes)."""
        if n < 2:
            return {}
        return self.process(kind, n, size)

    def symmetry_of(self, kind: str) -> str | None:
        """The symmetry of this algorithm's pattern for collective `kind`."""
        return self.symmetry


def registered(entries: Mapping[str, CollectiveAlgorithm],
               patterns: Mapping[str, tuple[Build, Process]]) -> dict[str, Algorithm]:
    """Every entry with its transfers; RuntimeError naming an entry without transfers or transfers
    without an entry."""
    unmatched = set(entries) ^ set(patterns)
    if unmatched:
        raise RuntimeError(f"collective algorithms without both a registry entry (simstudy.spec.collectives) "
                           f"and transfers (PATTERNS): {', '.join(sorted(unmatched))}")
    return {name: Algorithm(**vars(entry), build=patterns[name][0], process=patterns[name][1],
                            first=REPEATING.get(name))
            for name, entry in entries.items()}


#: Every algorithm of the registry with its transfers, by spec name.
ALGORITHMS: dict[str, Algorithm] = registered(ENTRIES, PATTERNS)


def algorithm(name: str) -> Algorithm:
    """An algorithm by its spec name (`ring`, `halving_doubling`...) or its ASTRA-SIM name."""
    return ALGORITHMS[collective_algorithm(name).name]


def collective_pattern(kind: str, algorithm_name: str, members: list[int] | IntArray, size: int, *,
                       variant: int = 0) -> Pattern:
    """The transfers of one chunk of `size` bytes of collective `kind` over `members` with the
    algorithm of that (spec or ASTRA-SIM) name (`variant`: the chunk's turn, for an algorithm
    that `alternates`)."""
    return algorithm(algorithm_name).pattern(kind, members, size, variant=variant)
