"""Token buckets on flowsim's fluid network (`topology.token_bucket`: tc tbf at both ends of every
host link).

A link behind a bucket of B bytes refilled at r bytes/ns carries its flows at its own capacity c
while the bucket holds tokens and at r once they are spent: tc tbf passes packets at the link's
speed while tokens last. Between the instants at which a link's flows change, the bytes per ns
they carry (its load x) are constant, so the bucket's level b moves in a straight line:
b' = min(B, b + (r - x) dt). The model brings each bucket's level up to date at every
instant its link's flows change (with the load the link had until then), shares the link at c
while the bucket holds at least `EMPTY_BYTES` and at r otherwise and, when the new load exceeds r,
wakes at the instant the bucket runs out (ceil(b / (x - r)) ns later) to share the link at r. A
bucket that refills while its link carries less than r gives its tokens at the next change of
the link's flows. So a link idle for B / r or longer sends its next B bytes at c, and is busy
B / r less than a link of rate r would be; a link that never pauses carries r.

Time is in whole ns, so a bucket runs out up to a ns before the model wakes: the bytes sent in
that ns beyond the bucket (at most c) are owed, the level goes below 0 and is refilled from
there. A link carries at most B + r t + c bytes in any t ns, and a flow's finish moves by at most
c / r ns per time its bucket ran out.

Buckets start full. A bucket's level depends on all the link carried before, so no collective is
timed alone (`timed_alone`) and no rank stands for the others (the backend runs every rank). The
compiled core has no buckets: the Python engine runs, and run.json says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from simstudy.backends.flowsim.netmodels import Flow, FluidNet, NetModel
from simstudy.backends.flowsim.roce import RoceFluidNet, RoceLinks
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.flowsim.tcp import TCP_NETMODELS, TcpFluidNet, TcpPaths
from simstudy.spec import Congestion

#: A bucket holding less than this many bytes is empty (its link shares the token rate).
EMPTY_BYTES = 1.0


def _seq(f: Flow) -> int:
    return f.seq


class BucketFluidNet(FluidNet):
    """`FluidNet` (the reference solver: a component's rates depend on the buckets' levels, so
    none is looked up) on links of which some are behind token buckets (`shape`)."""

    timed_alone = False

    def shape(self, buckets: dict[int, tuple[float, float]]) -> None:
        """Put link `k` behind a bucket for each `k: (token rate in bytes/ns, bucket in bytes)`;
        its capacity in the model is its line rate while the bucket holds tokens."""
        self.line = {k: self.capacity[k] for k in buckets}
        self.token_rate = {k: r for k, (r, _) in buckets.items()}
        self.bucket = {k: b for k, (_, b) in buckets.items()}
        self.level = dict(self.bucket)
        self.since = dict.fromkeys(buckets, 0)
        self.load = dict.fromkeys(buckets, 0.0)
        self.wake = dict.fromkeys(buckets, 0)
        #: how often a bucket ran out while its link carried more than its token rate
        self.emptied = 0
        self._touched: set[int] = set()

    def _recompute(self, keys: set[int]) -> None:
        now = self.sched.now
        touched = self._touched = {k for k in keys if k in self.bucket}
        for k in touched:
            self._settle(k, now)
        super()._recompute(keys)  # `_rates` settles the other buckets of the component's flows
        for k in sorted(touched):
            self._loaded(k, now)

    def _rates(self, flows: list[Flow]) -> list[float]:
        now = self.sched.now
        for f in flows:
            for k in f.keys:
                if k in self.bucket and k not in self._touched:
                    self._touched.add(k)
                    self._settle(k, now)
        return super()._rates(flows)

    def _settle(self, k: int, now: int) -> None:
        """Bring bucket `k` to `now` at the load it had since, and set its link's capacity."""
        dt = now - self.since[k]
        if dt:
            # no floor at 0: what the ns after the bucket ran out took is owed (at most a ns at the line rate)
            self.level[k] = min(self.bucket[k], self.level[k] + (self.token_rate[k] - self.load[k]) * dt)
            self.since[k] = now
        self.capacity[k] = self.line[k] if self.level[k] >= EMPTY_BYTES else self.token_rate[k]

    def _loaded(self, k: int, now: int) -> None:
        """Link `k`'s new load; when it spends tokens, wake when they run out."""
        load = 0.0
        for f in sorted(self.on_link.get(k, ()), key=_seq):
            load += f.mult[f.keys.index(k)] * f.rate
        self.load[k] = load
        self.wake[k] += 1
        over = load - self.token_rate[k]
        if over > 0 and self.level[k] >= EMPTY_BYTES:
            self.sched.at(now + max(1, math.ceil(self.level[k] / over)), self._spent, k, self.wake[k])

    def _spent(self, k: int, version: int) -> None:
        if version == self.wake[k]:
            self.emptied += 1
            self._mark((k,))


class BucketTcpFluidNet(BucketFluidNet, TcpFluidNet):
    """`fluid` with TCP under loss (`TcpFluidNet`) on links behind token buckets."""


def links_model(mode: Congestion, sched: Scheduler, capacity: Sequence[float], latency: Sequence[float],
                tcp: TcpPaths | None, buckets: dict[int, tuple[float, float]],
                roce: RoceLinks | None = None) -> NetModel | None:
    """The model that links behind token buckets (`buckets`: the fluid mode's), losing packets
    (`tcp`: TCP under loss) or carrying RoCE with DCQCN (`roce`: the fluid mode's) need instead of
    `mode`'s own; None where they need none."""
    if roce is not None:
        if buckets:
            raise ValueError("token buckets on RoCE's links: flowsim's DCQCN fluid models none")
        return RoceFluidNet(sched, capacity, latency, roce=roce)
    if buckets:
        model = BucketFluidNet(sched, capacity, latency) if tcp is None else BucketTcpFluidNet(
            sched, capacity, latency, tcp=tcp)
        model.shape(buckets)
        return model
    return None if tcp is None else TCP_NETMODELS[mode](sched, capacity, latency, tcp=tcp)
