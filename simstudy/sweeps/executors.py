"""Where runs execute: a local process pool (default) or any Dask distributed scheduler.

An executor takes the run tasks and yields each task's record as soon as it is done, in
completion order. Runs write their own directories, so the results directory must be on a
filesystem every worker sees (true for local pools and for SLURM clusters with a shared home).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Protocol

from simstudy.sweeps.errors import SweepError
from simstudy.sweeps.runner import RunRecord, RunTask, execute


class Executor(Protocol):
    """Runs tasks and yields their records as they complete."""

    name: str

    def run(self, tasks: Sequence[RunTask]) -> Iterator[RunRecord]: ...


def usable_cores() -> int:
    """The cores this process (and what it starts) may run on: its CPU affinity, else the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def default_workers() -> int:
    """One worker per core this process may use."""
    return usable_cores()


class LocalExecutor:
    """A process pool on this machine; at most `workers` runs at a time, one per process."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or default_workers()

    def run(self, tasks: Sequence[RunTask]) -> Iterator[RunRecord]:
        if not tasks:
            return
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
        pool = ProcessPoolExecutor(max_workers=min(self.workers, len(tasks)), mp_context=ctx)
        pending: set[Future[RunRecord]] = set()
        queue = list(reversed(tasks))
        try:
            # keep only a few tasks queued per worker so an interrupt leaves little to cancel
            while queue or pending:
                while queue and len(pending) < 2 * self.workers:
                    pending.add(pool.submit(execute, queue.pop()))
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield fut.result()
        finally:
            for fut in pending:
                fut.cancel()
            pool.shutdown(wait=True, cancel_futures=True)


class DaskExecutor:
    """Runs on a Dask distributed cluster: `address` of its scheduler (tcp://host:port)."""

    name = "dask"

    def __init__(self, address: str, *, connect_timeout_s: float = 30.0) -> None:
        self.address = address
        self.connect_timeout_s = connect_timeout_s

    def run(self, tasks: Sequence[RunTask]) -> Iterator[RunRecord]:
        if not tasks:
            return
        try:
            from distributed import Client, as_completed
        except ImportError as exc:
            raise SweepError("the dask executor needs dask.distributed: pip install -e '.[dask]'") from exc
        try:
            client = Client(self.address, timeout=self.connect_timeout_s, set_as_default=False)  # type: ignore[no-untyped-call]
        except OSError as exc:
            raise SweepError(f"cannot reach the Dask scheduler at {self.address}: {exc}") from exc
        try:
            futures: list[Any] = [client.submit(execute, t, pure=False) for t in tasks]
            try:
                for fut in as_completed(futures, loop=client.loop):  # type: ignore[no-untyped-call]
                    yield fut.result()
            finally:
                client.cancel([f for f in futures if not f.done()])  # type: ignore[no-untyped-call]
        finally:
            client.close()  # type: ignore[no-untyped-call]


EXECUTORS = ("local", "dask", "slurm")


def get_executor(
    name: str, *, workers: int | None = None, scheduler: str | None = None, connect_timeout_s: float = 30.0,
    workdir: str | Path | None = None, slurm: Any = None,
) -> Executor:
    """An executor by name: `local` (process pool), `dask` (needs a scheduler address) or `slurm`
    (an sbatch job array; `workdir` holds its scripts and logs, `slurm` its SlurmOptions)."""
    if name == "local":
        return LocalExecutor(workers)
    if name == "dask":
        if not scheduler:
            raise SweepError("the dask executor needs --scheduler ADDRESS (e.g. tcp://127.0.0.1:8786)")
        return DaskExecutor(scheduler, connect_timeout_s=connect_timeout_s)
    if name == "slurm":
        from simstudy.sweeps.slurm import SlurmExecutor

        if workdir is None:
            raise SweepError("the slurm executor needs a directory for its job scripts")
        return SlurmExecutor(workdir, slurm)
    raise SweepError(f"unknown executor {name!r}; expected one of {', '.join(EXECUTORS)}")
