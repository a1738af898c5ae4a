"""Directories written whole or not at all."""

from __future__ import annotations

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


@contextmanager
def atomic_directory(out: Path) -> Iterator[Path]:
    """Yield a temporary sibling of `out` to fill; on success it replaces `out`, on any error
    (or Ctrl-C) it is removed and `out` is left as it was."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / temp_name(out.name)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
