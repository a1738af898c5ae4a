"""What a collective sends: the one definition both backends use.

As ASTRA-SIM c459ab6's system layer runs a collective (`Sys::generate_collective`): it is cut
into chunks (`chunking`); each chunk runs one phase per network dimension it uses, or one phase
over its members (`collective_phases`); each phase is one collective algorithm on every line of
its dimension (the ranks that differ only there) or over the members (`phase_messages`), whose
transfers step by step are the collective registry's (`simstudy.compiler.collectives`). flowsim's
system layer executes these messages; the astrasim backend spreads them over the intervals of
ASTRA-SIM's own trace (`traffic_build`). So the two tables hold the same transfers between the
same ranks, and a change here changes both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simstudy.backends.base import BackendError
from simstudy.compiler.collectives import Pattern, algorithm, collective_pattern, empty_pattern
from simstudy.spec.collectives import FALLBACK, KINDS

__all__ = ["GROUP_DELAY_NS", "CollectiveConfig", "Pattern", "Phase", "PhaseSpec", "TreeTurns", "broadcast_messages",
           "broadcast_root", "chunk_messages", "chunking", "collective_pattern", "collective_phases",
           "dimension_phases", "first_member_messages", "phase_messages", "uses_trees"]

#: The MemBus delay of a communicator group's ring (ASTRA-SIM's `Transmition::Fast`).
GROUP_DELAY_NS = 10


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


def dimension_phases(kind: str, dim_sizes: Sequence[int], size: int, optimization: str = "baseline") -> list[Phase]:
    """How ASTRA-SIM's system layer runs a collective of every NPU on several dimensions
    (`Sys::generate_collective`, one chunk): dimensions of size 1 are skipped;

    * all-reduce, `baseline`: a whole all-reduce of `size` on each dimension, innermost first;
    * all-reduce, `localBWAware`: reduce-scatter on every dimension but the last (the size
      shrinking by each dimension's NPUs), all-reduce on the last, all-gather back down;
    * reduce-scatter: innermost first, the size shrinking by each dimension's NPUs;
    * all-gather: outermost first, the contribution growing by each dimension's NPUs;
    * all-to-all: innermost first, the whole size on each.
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


@dataclass(frozen=True)
class CollectiveConfig:
    """What decides a collective's messages besides its kind, members and size: the network's
    dimensions (NPUs per dimension, innermost first) and system.json's collective settings."""

    dim_sizes: tuple[int, ...]
    #: collective kind -> the algorithm of each dimension (system.json's `<kind>-implementation`)
    implementations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    optimization: str = "baseline"
    splits: int = 1
    endpoint_delay_ns: int = 10

    @classmethod
    def from_system(cls, system: Mapping[str, Any], dim_sizes: Sequence[int]) -> CollectiveConfig:
        impl: dict[str, tuple[str, ...]] = {}
        for kind in KINDS:
            raw = system.get(f"{kind.replace('_', '-')}-implementation") or [FALLBACK.astra]
            impl[kind] = tuple(str(a) for a in raw) if isinstance(raw, list) else (str(raw),)
        return cls(tuple(int(n) for n in dim_sizes), impl, str(system.get("collective-optimization", "baseline")),
                   max(1, int(system.get("preferred-dataset-splits", 1))),
                   int(float(system.get("endpoint-delay", 10))))

    @property
    def npus(self) -> int:
        return int(np.prod(self.dim_sizes, dtype=np.int64))

    def algorithms(self, kind: str) -> tuple[str, ...]:
        """The configured algorithm of each network dimension."""
        return self.implementations.get(kind) or (FALLBACK.astra,)

    def algorithm(self, kind: str) -> str:
        """The algorithm of a collective that runs in one phase (the first dimension's)."""
        return self.algorithms(kind)[0]

    def by_dimension(self, kind: str, members: Sequence[int]) -> bool:
        """True when ASTRA-SIM runs this collective dimension by dimension: a collective of every
        NPU on a network with more than one dimension of several NPUs (an all-to-all too: each
        dimension's algorithm on its lines, the whole size each time)."""
        return len(members) == self.npus and sum(1 for n in self.dim_sizes if n > 1) > 1


@dataclass(frozen=True)
class PhaseSpec:
    """One phase of a chunk: collective `kind` with `algorithm`, on every line of dimension `dim`
    (-1: over the collective's members, in their order) with `size` bytes per rank; it runs in
    queue `queue`, a ring `backwards` (anticlockwise), after an endpoint delay of `delay_ns`."""

    kind: str
    dim: int
    size: int
    algorithm: str
    queue: int
    backwards: bool
    delay_ns: int


def collective_phases(cfg: CollectiveConfig, kind: str, members: Sequence[int], chunk_bytes: int,
                      group: bool) -> list[PhaseSpec]:
    """The phases of one chunk of a collective over `members` (`group`: a communicator group
    smaller than the job, which ASTRA-SIM runs as one ring in the group file's order, whatever
    the configured algorithm, with the group's 10 ns MemBus delay)."""
    if group:
        return [PhaseSpec(kind, -1, chunk_bytes, FALLBACK.name, 0, False, GROUP_DELAY_NS)]
    if not cfg.by_dimension(kind, members):
        return [PhaseSpec(kind, -1, chunk_bytes, _implementing(cfg.algorithm(kind), kind), 0, False,
                          cfg.endpoint_delay_ns)]
    algos = [_implementing(a, kind) for a in cfg.algorithms(kind)]
    lba = kind == "all_reduce" and cfg.optimization != "baseline"
    out: list[PhaseSpec] = []
    for ph in dimension_phases(kind, cfg.dim_sizes, chunk_bytes, cfg.optimization):
        algo = algos[ph.dim] if ph.dim < len(algos) else algos[-1]
        # localBWAware: a dimension's all-gather shares the queue of its reduce-scatter and, as
        # ASTRA-SIM allocates it (`get_next_queue_id_last`), runs its ring anticlockwise.
        backwards = lba and ph.kind == "all_gather"
        out.append(PhaseSpec(ph.kind, ph.dim, ph.size, algo, ph.dim, backwards, cfg.endpoint_delay_ns))
    return out


def _implementing(name: str, kind: str) -> str:
    """`name`, when that algorithm implements collective `kind` (as ASTRA-SIM c459ab6 runs it)."""
    algo = algorithm(name)
    if kind not in algo.kinds:
        raise BackendError(f"system.json: {kind.replace('_', '-')}-implementation: {algo.astra} implements "
                           f"{', '.join(sorted(algo.kinds))}, not {kind} (ASTRA-SIM cannot run it either)")
    return name


def dim_line(dim_sizes: Sequence[int], dim: int, base: int = 0) -> np.ndarray:
    """The ranks of dimension `dim`'s line through rank `base` (which must be its first)."""
    stride = int(np.prod(dim_sizes[:dim], dtype=np.int64))
    return base + np.arange(dim_sizes[dim], dtype=np.int64) * stride


def phase_messages(spec: PhaseSpec, members: Sequence[int] | np.ndarray, dim_sizes: Sequence[int], turn: int = 0, *,
                   first_only: bool = False, honour_backwards: bool = True) -> Pattern:
    """One phase's transfers: its collective over the members (dim -1) or on every line of its
    dimension, each rank's messages of a step in the order it sends them. `first_only`: only the
    messages of the first member (of rank 0 on its line), for a plan simulated for one rank.
    `turn`: which of the double binary tree's two trees the chunk uses."""
    algo = algorithm(spec.algorithm)
    backwards = spec.backwards and honour_backwards
    if spec.dim < 0:
        return algo.pattern(spec.kind, np.asarray(members, dtype=np.int64), spec.size,
                            only=0 if first_only else None, reverse=backwards, variant=turn)
    if first_only:
        return algo.pattern(spec.kind, dim_line(dim_sizes, spec.dim), spec.size, only=0, reverse=backwards,
                            variant=turn)
    stride = int(np.prod(dim_sizes[: spec.dim], dtype=np.int64))
    n = dim_sizes[spec.dim]
    total = int(np.prod(dim_sizes, dtype=np.int64))
    parts = [algo.pattern(spec.kind, dim_line(dim_sizes, spec.dim, s), spec.size, reverse=backwards, variant=turn)
             for s in range(total) if (s // stride) % n == 0]
    cols = [np.concatenate([getattr(p, f) for p in parts]) for f in ("step", "src", "dst", "nbytes")]
    return Pattern(*cols)


def chunk_messages(cfg: CollectiveConfig, kind: str, members: Sequence[int], chunk_bytes: int, group: bool,
                   turn: int = 0, *, honour_backwards: bool = True) -> Pattern:
    """Every transfer of one chunk of a collective, phase after phase (steps numbered on)."""
    parts: list[Pattern] = []
    offset = 0
    for spec in collective_phases(cfg, kind, members, chunk_bytes, group):
        p = phase_messages(spec, members, cfg.dim_sizes, turn, honour_backwards=honour_backwards)
        if not p.steps:
            continue
        parts.append(Pattern(p.step + offset, p.src, p.dst, p.nbytes))
        offset += p.steps
    if not parts:
        return empty_pattern()
    return Pattern(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("step", "src", "dst", "nbytes")))


def first_member_messages(cfg: CollectiveConfig, kind: str, members: Sequence[int], size: int,
                          group: bool) -> tuple[int, list[Pattern]]:
    """What the first member of a collective of `size` bytes sends: the number of chunks, and its
    messages of one chunk in each phase."""
    chunk_bytes, chunks = chunking(size, cfg.splits, kind, cfg.npus)
    parts = [phase_messages(ph, members, cfg.dim_sizes, first_only=True)
             for ph in collective_phases(cfg, kind, members, chunk_bytes, group)]
    return chunks, parts


def uses_trees(cfg: CollectiveConfig, kind: str, members: Sequence[int], group: bool) -> bool:
    """Whether a collective runs an algorithm whose chunks take two patterns in turn (`alternates`:
    ASTRA-SIM's double binary tree, whose two trees take turns)."""
    return any(algorithm(s.algorithm).alternates for s in collective_phases(cfg, kind, members, 1 << 20, group))


def broadcast_root(members: Sequence[int], comm_src: int | None) -> int:
    """A broadcast's root: the node's `comm_src` when it names a member, else the first member."""
    return comm_src if comm_src is not None and comm_src in members else int(members[0])


def broadcast_messages(members: Sequence[int], size: int, root: int) -> Pattern:
    """A broadcast of `size` bytes from `root`: a chain through the members in ring order from the
    root (as NCCL's ring broadcast), one message per step. ASTRA-SIM c459ab6 does not simulate
    broadcasts (it waits the node's duration), so both backends keep that timing and spread
    these messages evenly over it: their bytes are in the table, but they load no link in
    flowsim's network."""
    m = [int(r) for r in members]
    if len(m) < 2 or size <= 0:
        return empty_pattern()
    i = m.index(root)
    chain = np.asarray(m[i:] + m[:i], dtype=np.int64)
    steps = np.arange(len(chain) - 1, dtype=np.int64)
    return Pattern(steps, chain[:-1], chain[1:], np.full(len(steps), size, dtype=np.int64))


class TreeTurns:
    """Which of the double binary tree's two trees each chunk uses. ASTRA-SIM's
    `DoubleBinaryTreeTopology` hands out its RootMax and RootMin trees in turn, one per chunk,
    counting the chunks of every collective it serves: the turn of a collective's first chunk is
    the number of tree chunks of the same kind before it (on each rank, which runs the same
    collectives of every NPU in the same order)."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}

    def take(self, kind: str, chunks: int) -> int:
        """The turn of a tree collective's first chunk; counts its `chunks`."""
        turn = self.count.get(kind, 0)
        self.count[kind] = turn + chunks
        return turn
