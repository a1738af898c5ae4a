"""Trace file names: ASTRA-SIM opens `<prefix>.<rank>.et` for every rank 0..N-1."""

from __future__ import annotations

import os
import re
from pathlib import Path

from simstudy import layout

_RANK_SUFFIX = re.compile(r"\.(0|[1-9][0-9]*)\.et")


def trace_path(prefix: str | os.PathLike[str], rank: int) -> Path:
    """The trace file of `rank`: `<prefix>.<rank>.et` (the prefix is a path, not a directory)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be a non-negative int, got {rank!r}")
    return Path(f"{os.fspath(prefix)}.{rank}{layout.ET_SUFFIX}")


def find_trace_files(prefix: str | os.PathLike[str]) -> list[Path]:
    """Every `<prefix>.<rank>.et`, in rank order.

    Raises FileNotFoundError when there is none, or when the ranks found are not exactly
    0..N-1 (naming the first missing file), since ASTRA-SIM needs every rank's file.
    """
    base = Path(prefix)
    directory = base.parent
    stem = base.name
    ranks: dict[int, Path] = {}
    if directory.is_dir():
        for entry in directory.iterdir():
            name = entry.name
            if name.startswith(stem):
                match = _RANK_SUFFIX.fullmatch(name, len(stem))
                if match and entry.is_file():
                    ranks[int(match.group(1))] = entry
    if not ranks:
        raise FileNotFoundError(f"no trace files {base}.<rank>.et")
    for rank in range(len(ranks)):
        if rank not in ranks:
            raise FileNotFoundError(
                f"trace files of {base} are not contiguous from rank 0: {trace_path(base, rank)} is "
                f"missing but rank {max(ranks)} exists"
            )
    return [ranks[rank] for rank in range(len(ranks))]
