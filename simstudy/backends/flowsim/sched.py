"""flowsim's event queue: events run in (time, priority, insertion) order, so runs are deterministic.

Priority 0 is every ordinary event; priority 1 runs after every ordinary event of the same time
(the fluid network recomputes rates once per instant, after all of its starts and ends).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

Event = tuple[int, int, int, Callable[..., None], tuple[Any, ...]]
#: events between two ticks of a run (its deadline checked, its progress shown)
TICK = 8192


class Scheduler:
    """A heap of events and the current time (ns)."""

    __slots__ = ("heap", "now", "seq")

    def __init__(self, now: int = 0) -> None:
        self.heap: list[Event] = []
        self.now = now
        self.seq = 0

    def at(self, t: int, fn: Callable[..., None], *args: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, 0, self.seq, fn, args))

    def after_all(self, t: int, fn: Callable[..., None], *args: Any) -> None:
        """Run `fn` at `t`, after every ordinary event of that time."""
        self.seq += 1
        heapq.heappush(self.heap, (t, 1, self.seq, fn, args))

    def pop(self) -> Event:
        ev = heapq.heappop(self.heap)
        self.now = ev[0]
        return ev

    def run_before(self, t_stop: float, tick: Callable[[], None] | None = None) -> None:
        """Run every event earlier than `t_stop` (`math.inf`: every event); `tick()`
        every `TICK` events (a long private run still checks its deadline and shows progress)."""
        heap = self.heap
        n = 0
        while heap and heap[0][0] < t_stop:
            _, _, _, fn, args = self.pop()
            fn(*args)
            n += 1
            if tick is not None and n % TICK == 0:
                tick()

    def drain_into(self, other: Scheduler) -> None:
        """Move every pending event to `other`, in this queue's order."""
        for t, prio, _, fn, args in sorted(self.heap, key=lambda e: (e[0], e[1], e[2])):
            other.seq += 1
            heapq.heappush(other.heap, (t, prio, other.seq, fn, args))
        self.heap = []
