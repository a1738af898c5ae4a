"""Directories written whole: several processes finishing the same directory at once (two points
of a sweep that share a job's alone run) all succeed, and what stays is one writer's whole
directory. CI once failed a sweep point with 'Directory not empty' from exactly this race."""

from __future__ import annotations

import multiprocessing as mp
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from simstudy.compiler.atomic import atomic_directory

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


# --- killed at every step ---------------------------------------------------------------------

OLD = {"run.json": "old", "stale": "old"}
NEW = {"run.json": "new", "traffic.parquet": "new", "spans.parquet": "new"}
#: Audit events of the filesystem operations a writer makes (what fault injection counts).
FS_EVENTS = ("os.mkdir", "os.rename", "os.remove", "os.rmdir", "open")


def _contents(d: Path) -> dict[str, str] | None:
    if not d.is_dir():
        return None
    return {f.name: f.read_text() for f in d.iterdir()}


def _writes(args: tuple[object, ...]) -> bool:
    """Whether the arguments of an `open` audit event (path, mode, flags) open for writing."""
    import os

    mode, flags = args[1], args[2]
    return (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
        isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR)))


def _killed_writer(out: str, kill_at: int) -> None:
    """Write NEW into `out` (atomic_directory) and SIGKILL this process just before its
    `kill_at`-th filesystem operation (an audit hook counts them)."""
    import os
    import signal
    import sys

    root = str(Path(out).parent)
    count = 0

    def hook(event: str, args: tuple[object, ...]) -> None:
        nonlocal count
        if event not in FS_EVENTS:
            return
        path = args[0]
        if isinstance(path, str | Path) and os.path.isabs(path) and not str(path).startswith(root):
            return  # not ours (a cache file of some import)
        if event == "open" and not _writes(args):
            return  # read only
        count += 1
        if count == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)
    with atomic_directory(Path(out)) as tmp:
        for name, text in NEW.items():
            (tmp / name).write_text(text)


def _next_run(out: Path) -> None:
    with atomic_directory(out) as tmp:
        (tmp / "run.json").write_text("next")


def _next_sweep(out: Path) -> None:
    from simstudy.sweeps import _remove_stale

    _remove_stale(out.parent)


@pytest.mark.parametrize("recovery", [_next_run, _next_sweep], ids=["next run", "next sweep"])
@pytest.mark.parametrize("existing", [False, True], ids=["new", "replacing"])
def test_a_writer_killed_at_any_step_loses_no_whole_result_and_the_next_one_recovers(
    tmp_path: Path, existing: bool, recovery: Callable[[Path], None]
) -> None:
    ctx = mp.get_context("fork")
    steps = 0
    for kill_at in range(1, 100):
        parent = tmp_path / str(kill_at)
        out = parent / "run"
        parent.mkdir()
        if existing:
            out.mkdir()
            for name, text in OLD.items():
                (out / name).write_text(text)
        p = ctx.Process(target=_killed_writer, args=(str(out), kill_at))
        p.start()
        p.join(60)
        if p.exitcode == 0:  # no step left to kill it at
            assert _contents(out) == NEW and [d.name for d in parent.iterdir()] == ["run"]
            break
        assert p.exitcode == -signal.SIGKILL
        steps += 1
        # at the moment of the kill, the old directory or the new one is there whole
        whole = [c for d in parent.iterdir() if (c := _contents(d)) in (OLD, NEW)]
        if existing:
            assert whole, f"killed before step {kill_at}: neither the old nor the new directory is whole"
        left = {d.name for d in parent.iterdir()}
        # what the next writer or sweep finds: `run` whole (old or new), nothing beside it
        recovery(out)
        now = _contents(out)
        if recovery is _next_run:
            assert now == {"run.json": "next"}
        elif existing:
            assert now in (OLD, NEW), f"killed before step {kill_at} (left {sorted(left)}): run is {now}"
        else:
            assert now in (None, NEW)
        assert [d.name for d in parent.iterdir()] == (["run"] if now is not None else []), \
            f"killed before step {kill_at}: leftovers"
    else:
        pytest.fail("the writer never finished")
    assert steps >= (10 if existing else 4)  # mkdir, 3 files, renames, deletes: every one was a kill point
