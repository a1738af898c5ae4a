"""Shared hosts: the ranks of one host share its cores by processor sharing (`system.host_cores`).

While k ranks of a host compute at once on its C cores, each runs at min(1, C/k) of its speed: a
compute node's work is its time alone (`duration_micros` x 1000 ns), and it ends once that much
work is done. Whenever the set of computing ranks of a host changes, every compute node running
there has its remaining work advanced at the old rate and its end rescheduled at the new one;
the old end event stays on the queue and is dropped when it comes (each node's events carry a
version, as the fluid network's drains do). Remaining work is kept exactly (a fraction of a
nanosecond); an end falls on the next whole nanosecond at or after the exact one (rounded up).
A host whose rate does not change (k stays at most C) reschedules nothing, so runs whose hosts
never hold more computing ranks than cores are event for event the runs without shared hosts.

Only compute nodes take cores: CPU ops (`is_cpu_op`, the framework's waits) and communication do
not. A simulated rank may stand for several ranks of its host (`weight`: with identical ranks,
rank 0 stands for every rank of its host, all computing in lock-step).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from simstudy.backends.flowsim.sched import Scheduler

__all__ = ["SharedHosts", "uniform"]


@dataclass(slots=True)
class _Running:
    """A compute node on a shared host: its remaining work (ns alone) as of `since`."""

    rank: int
    node: int
    start: int
    remaining: Fraction
    since: int
    version: int = 0


class SharedHosts:
    """The hosts of a run: `host_of[rank]` for every simulated rank, `cores` per host; `done(rank,
    node, elapsed_ns)` is called when a node's work is done (at the end's whole nanosecond)."""

    def __init__(self, sched: Scheduler, host_of: Sequence[int], cores: int,
                 done: Callable[[int, int, int], None], weight: Sequence[int] | None = None) -> None:
        self.sched = sched
        self.host_of = list(host_of)
        self.cores = cores
        self.done = done
        self.weight = list(weight) if weight is not None else [1] * len(self.host_of)
        self.running: dict[int, dict[tuple[int, int], _Running]] = {}
        self.load: dict[int, int] = {}  # host -> weight of its running compute nodes

    def rate(self, load: int) -> Fraction:
        """The speed of each of `load` ranks computing at once on one host."""
        return _rate(load, self.cores)

    def start(self, rank: int, node: int, work_ns: int) -> None:
        """Rank `rank` starts compute node `node` of `work_ns` ns of work alone."""
        host = self.host_of[rank]
        now = self.sched.now
        jobs = self.running.setdefault(host, {})
        old = self.load.get(host, 0)
        new = old + self.weight[rank]
        self._rerate(host, old, new)
        job = jobs[(rank, node)] = _Running(rank, node, now, Fraction(work_ns), now)
        self._schedule(host, job, self.rate(new))

    def _end(self, host: int, key: tuple[int, int], version: int) -> None:
        job = self.running[host].get(key)
        if job is None or job.version != version:
            return  # rescheduled since
        old = self.load[host]
        new = old - self.weight[job.rank]
        del self.running[host][key]
        self._rerate(host, old, new)
        self.done(job.rank, job.node, self.sched.now - job.start)

    def _rerate(self, host: int, old: int, new: int) -> None:
        """The host's load goes from `old` to `new`: when that changes the rate, every running
        node's work is advanced to now at the old rate and its end rescheduled at the new one."""
        self.load[host] = new
        before, after = self.rate(old), self.rate(new)
        if before == after:
            return
        now = self.sched.now
        for job in self.running[host].values():
            job.remaining = max(Fraction(0), job.remaining - (now - job.since) * before)
            job.since = now
            job.version += 1
            self._schedule(host, job, after)

    def _schedule(self, host: int, job: _Running, rate: Fraction) -> None:
        self.sched.at(job.since + math.ceil(job.remaining / rate), self._end, host, (job.rank, job.node), job.version)


def uniform(host_of: Sequence[int], cores: int) -> bool:
    """Whether every host runs its ranks at the same rate when all of them compute at once (so
    that ranks that run alike stay alike: the identical-ranks shortcut holds)."""
    counts: dict[int, int] = {}
    for h in host_of:
        counts[h] = counts.get(h, 0) + 1
    return len({_rate(n, cores) for n in counts.values()}) <= 1


def _rate(load: int, cores: int) -> Fraction:
    """min(1, cores / load): the speed of each of `load` ranks computing at once on `cores` cores."""
    return Fraction(1) if load <= cores else Fraction(cores, load)
