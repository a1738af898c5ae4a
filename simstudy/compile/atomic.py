"""Directories written whole or not at all."""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_TMP = re.compile(r"^\.(?P<name>.+)\.tmp-(?:slurm(?P<job>\d+)|(?P<host>.+))-(?P<pid>\d+)$")


@dataclass(frozen=True)
class TempOwner:
    """Who is writing a temporary directory: a SLURM job, or a process of a host."""

    pid: int
    host: str | None = None
    slurm_job: str | None = None


def temp_name(name: str) -> str:
    """The name of the temporary sibling of directory `name` written by this process: tagged with
    the SLURM job when it runs as one (so that any host can tell whether the writer still runs),
    else with this host (a process id means nothing on another host)."""
    job = os.environ.get("SLURM_JOB_ID")
    tag = f"slurm{job}" if job and job.isdigit() else socket.gethostname()
    return f".{name}.tmp-{tag}-{os.getpid()}"


def temp_owner(name: str) -> TempOwner | None:
    """Who wrote a temporary directory (None when `name` is not one)."""
    m = _TMP.match(name)
    if m is None:
        return None
    return TempOwner(int(m["pid"]), m["host"], m["job"])


def replace_directory(tmp: Path, out: Path) -> None:
    """Move the finished directory `tmp` to `out`, replacing whatever `out` holds.

    Safe when several processes finish the same `out` at once (two sweep points that share a
    job's alone run): a directory cannot be renamed onto a non-empty one, so the one found there
    is moved aside and removed, and the rename is tried again; the last writer's directory stays,
    whole. A reader sees `out` whole or (for a moment) absent, never half written."""
    old = out.parent / f".{out.name}.old-{temp_name(out.name).rpartition('.tmp-')[2]}"
    for _ in range(100):
        try:
            tmp.rename(out)  # onto nothing (or an empty directory): atomic
            break
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        try:
            out.rename(old)
        except FileNotFoundError:  # another writer moved it aside first: try again
            continue
        shutil.rmtree(old, ignore_errors=True)
    else:
        raise OSError(errno.EBUSY, f"could not replace {out}: other writers kept replacing it")


@contextmanager
def atomic_directory(out: Path) -> Iterator[Path]:
    """Yield a temporary sibling of `out` to fill; on success it replaces `out`, on any error
    (or Ctrl-C) it is removed and `out` is left as it was. Several processes may write the same
    `out` at once: each fills its own sibling, and the last to finish stays (`replace_directory`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / temp_name(out.name)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        replace_directory(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
