"""How ASTRA-SIM's system layer cuts a collective: chunks, and phases over network dimensions.

Which transfers an algorithm makes is the collective registry's (`simstudy.compile.collectives`);
this module turns a collective node into chunks (`chunking`) and, on a multi-dimensional network,
into one phase per dimension (`dimension_phases`), with the transfers of each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simstudy.compile.collectives import Pattern, collective_pattern, empty_pattern

__all__ = ["Pattern", "Phase", "chunking", "collective_pattern", "dimension_phases", "dimensions_pattern",
           "phase_pattern"]


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
        return empty_pattern()
    return Pattern(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("step", "src", "dst", "nbytes")))
