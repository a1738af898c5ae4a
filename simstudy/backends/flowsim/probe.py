"""Messages on flowsim's network models without a workload: what `backends.ns3.probe.arrivals`
measures on the packet network, through a model of flowsim (`benchmarks/roce_fluid.py` sets one
beside the other, cell by cell)."""

from __future__ import annotations

import math

from simstudy.backends.flowsim.buckets import links_model
from simstudy.backends.flowsim.netmodels import NETMODELS, Msg
from simstudy.backends.flowsim.roce import roce_links
from simstudy.backends.flowsim.routes import Routes
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.network import Network
from simstudy.spec import Congestion


def arrivals(net: Network, sends: list[tuple[int, int, int, int]], mode: Congestion = Congestion.FLUID) -> list[int]:
    """Messages (src, dst, bytes, start ns) on `mode`'s model of `net` (the links' capacities as the
    transport leaves them: `Routes.effective`; on RoCE with DCQCN, `fluid`'s DCQCN model): each
    one's arrival, ns."""
    sched = Scheduler()
    routes = Routes(net)
    model = links_model(mode, sched, routes.effective, net.latency, None, {}, roce_links(net, mode)) or NETMODELS[mode](
        sched, routes.effective, net.latency)
    out = [0] * len(sends)

    def send(i: int, src: int, dst: int, size: int) -> None:
        keys, mult, latency, alone = routes.route(src, dst, size)
        model.send(Msg(src, dst, size, keys, mult, latency, alone, lambda _m: out.__setitem__(i, sched.now)))

    for i, (src, dst, size, at) in enumerate(sends):
        sched.at(at, send, i, src, dst, size)
    sched.run_before(math.inf)
    return out
