"""Directories written whole: several processes finishing the same directory at once (two points
of a sweep that share a job's alone run) all succeed, and what stays is one writer's whole
directory. CI once failed a sweep point with 'Directory not empty' from exactly this race."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest

from simstudy.compile.atomic import atomic_directory

WRITERS = 4
ROUNDS = 15


def _write(out: str, barrier: mp.synchronize.Barrier, tag: int) -> None:
    with atomic_directory(Path(out)) as tmp:
        for name in ("run.json", "traffic.parquet", "spans.parquet"):
            (tmp / name).write_text(str(tag))
        barrier.wait(timeout=30)  # every writer commits at the same moment


@pytest.mark.parametrize("existing", [False, True], ids=["new", "replacing"])
def test_writers_finishing_the_same_directory_at_once_all_succeed(tmp_path: Path, existing: bool) -> None:
    ctx = mp.get_context("fork")
    for r in range(ROUNDS):
        out = tmp_path / f"run{r}"
        if existing:
            out.mkdir()
            (out / "run.json").write_text("old")
            (out / "stale").write_text("old")
        barrier = ctx.Barrier(WRITERS)
        procs = [ctx.Process(target=_write, args=(str(out), barrier, w)) for w in range(WRITERS)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * WRITERS, f"round {r}: a writer failed"
        files = sorted(f.name for f in out.iterdir())
        assert files == ["run.json", "spans.parquet", "traffic.parquet"]  # nothing of the old one
        tags = {(out / f).read_text() for f in files}
        assert len(tags) == 1 and tags <= {str(w) for w in range(WRITERS)}  # one writer's, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"run{r}" for r in range(ROUNDS))  # no leftovers
