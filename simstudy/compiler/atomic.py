"""Directories written whole or not at all, and the leftovers of killed writers recovered.

A writer fills a temporary sibling `.NAME.tmp-OWNER` of `NAME` and then `replace_directory` puts
it in place. Replacing a directory takes two renames (a directory cannot be renamed onto a
non-empty one), so the old one is first moved aside whole to `.NAME.old-OWNER`, and only thrown
away (renamed to `.NAME.del-OWNER`, then deleted) once the new one is in place. At every moment
`NAME` or `.NAME.old-OWNER` holds a whole result; a writer killed between the two renames leaves
the old one aside, and `recover_directory` (called by the next writer of `NAME`, and by a sweep
for every run it finds) puts it back. OWNER is the SLURM job or the host and process id, so that
only leftovers of writers that no longer run are touched.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: What a sibling of a directory holds: `tmp` being written, `old` the replaced directory
#: (whole), `del` being deleted.
_SIBLING = re.compile(
    r"^\.(?P<name>.+)\.(?P<what>tmp|old|del)-(?:slurm(?P<job>\d+)|(?P<host>.+))-(?P<pid>\d+)$"
)


@dataclass(frozen=True)
class TempOwner:
    """Who is writing a temporary directory: a SLURM job, or a process of a host."""

    pid: int
    host: str | None = None
    slurm_job: str | None = None


@dataclass(frozen=True)
class Sibling:
    """A temporary sibling of directory `name`: what it holds (`tmp`, `old`, `del`) and its owner."""

    name: str
    what: str
    owner: TempOwner


def _owner_tag() -> str:
    job = os.environ.get("SLURM_JOB_ID")
    return f"slurm{job}" if job and job.isdigit() else f"{socket.gethostname()}"


def _sibling_name(name: str, what: str) -> str:
    return f".{name}.{what}-{_owner_tag()}-{os.getpid()}"


def temp_name(name: str) -> str:
    """The name of the temporary sibling of directory `name` written by this process: tagged with
    the SLURM job when it runs as one (so that any host can tell whether the writer still runs),
    else with this host (a process id means nothing on another host)."""
    return _sibling_name(name, "tmp")


def parse_sibling(name: str) -> Sibling | None:
    """What a temporary sibling holds and who wrote it (None when `name` is not one)."""
    m = _SIBLING.match(name)
    if m is None:
        return None
    return Sibling(m["name"], m["what"], TempOwner(int(m["pid"]), m["host"], m["job"]))


def pid_running(pid: int) -> bool:
    """Whether process `pid` of this machine still runs (a killed one may linger as a zombie
    until it is reaped: it runs no more)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] not in (["Z"], ["X"])


def gone_on_this_host(owner: TempOwner) -> bool:
    """Whether `owner` certainly no longer runs, judged from this host alone: a process of this
    host that ended. Other hosts' processes and SLURM jobs are not known here (False)."""
    return owner.slurm_job is None and owner.host == socket.gethostname() and not pid_running(owner.pid)


def _discard(path: Path) -> None:
    """Delete a directory that is no longer wanted: renamed first (one atomic step) to a `del`
    sibling of this process, so that no half-deleted directory ever carries a `tmp` or `old` name."""
    m = _SIBLING.match(path.name)
    name = m["name"] if m is not None else path.name.lstrip(".")
    trash = path.parent / _sibling_name(name, "del")
    try:
        path.rename(trash)
    except FileNotFoundError:  # someone else took it
        return
    shutil.rmtree(trash, ignore_errors=True)


def _put_back(old: Path, out: Path) -> None:
    """Make the whole directory `old` (moved aside from `out`) `out` again, unless `out` holds a
    newer whole directory by now; then `old` is thrown away."""
    try:
        old.rename(out)
    except FileNotFoundError:  # someone else recovered it
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        _discard(old)


def recover_directory(out: Path, gone: Callable[[TempOwner], bool] = gone_on_this_host) -> None:
    """Clean up after writers of `out` that were killed: put back an old directory one of them
    had moved aside (when `out` is missing), delete their temporary and half-deleted siblings.
    Siblings of writers that may still run (`gone` says no) are left alone."""
    prefix = f".{out.name}."
    try:
        with os.scandir(out.parent) as entries:
            names = [e.name for e in entries if e.name.startswith(prefix)]
    except FileNotFoundError:
        return
    found = [(out.parent / n, s) for n in names
             if (s := parse_sibling(n)) is not None and s.name == out.name and gone(s.owner)]
    for path, sibling in sorted(found, key=lambda f: f[1].what != "old"):  # put back first
        if sibling.what == "old":
            _put_back(path, out)
        else:
            _discard(path)


def recover_all(parent: Path, gone: Callable[[TempOwner], bool] = gone_on_this_host) -> None:
    """`recover_directory` for every directory of `parent` that killed writers left siblings of."""
    names = {s.name for p in parent.glob(".*-*") if (s := parse_sibling(p.name)) is not None}
    for name in sorted(names):
        recover_directory(parent / name, gone)


def replace_directory(tmp: Path, out: Path) -> None:
    """Move the finished directory `tmp` to `out`, replacing whatever `out` holds.

    Whole at every moment: the old `out` is moved aside (`.NAME.old-OWNER`), the new one renamed
    into place, and only then the old one deleted; killed in between, `recover_directory` puts
    the old one back. Safe when several processes finish the same `out` at once (two sweep points
    that share a job's alone run): the last writer's directory stays, whole. A reader sees `out`
    whole or (for a moment) absent, never half written. Nothing is left beside `out`."""
    old = out.parent / _sibling_name(out.name, "old")
    for _ in range(100):
        try:
            tmp.rename(out)  # onto nothing (or an empty directory): atomic
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        try:
            out.rename(old)  # whole, aside
        except FileNotFoundError:  # another writer moved it aside first: try again
            continue
        try:
            tmp.rename(out)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                _put_back(old, out)
                raise
            # another writer's directory took the place meanwhile: it is whole, ours replaces it
            _discard(old)
            continue
        _discard(old)
        return
    raise OSError(errno.EBUSY, f"could not replace {out}: other writers kept replacing it")


@contextmanager
def atomic_directory(out: Path) -> Iterator[Path]:
    """Yield a temporary sibling of `out` to fill; on success it replaces `out`, on any error
    (or Ctrl-C) it is removed and `out` is left as it was. Several processes may write the same
    `out` at once: each fills its own sibling, and the last to finish stays (`replace_directory`).
    Leftovers of killed writers of `out` are recovered first (`recover_directory`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    recover_directory(out)
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
