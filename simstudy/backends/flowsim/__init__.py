"""The `flowsim` backend: simstudy's built-in engine for the same bundles ASTRA-SIM runs."""

from __future__ import annotations

import time
from pathlib import Path

from simstudy import __version__
from simstudy.backends.base import RankStats, RunResult
from simstudy.backends.flowsim.engine import Engine
from simstudy.backends.network import Network
from simstudy.backends.traffic_build import WorkloadInfo, union_ns
from simstudy.compile import Bundle

__all__ = ["FlowsimBackend"]


class FlowsimBackend:
    """Simulates ET files on the topology: ASTRA-SIM's workload and collective semantics,
    links with latency and bandwidth, and max-min fair sharing where transfers contend."""

    name = "flowsim"

    def __init__(self, *, contention: bool = True) -> None:
        self.contention = contention

    def run(self, bundle: Bundle, workdir: Path, *, timeout_s: float | None = None) -> RunResult:
        t0 = time.perf_counter()
        info = WorkloadInfo.from_bundle(bundle)
        net = Network.from_topology(info.topology)
        engine = Engine(info, net, contention=self.contention, timeout_s=timeout_s)
        engine.run()
        traffic = engine.traffic.table()
        ranks = [
            RankStats(
                rank=r,
                finish_ns=s.finish,
                compute_ns=s.compute_ns,
                comm_ns=union_ns(s.comm_spans),
                exposed_comm_ns=s.finish - s.compute_ns,
            )
            for r, s in enumerate(engine.ranks)
        ]
        workdir.mkdir(parents=True, exist_ok=True)
        return RunResult(
            backend=self.name,
            backend_version=__version__,
            ranks=ranks,
            traffic=traffic,
            wall_time_s=time.perf_counter() - t0,
            details={"contention": self.contention, "network": net.kind, "links": len(net.capacity)},
            spans=engine.spans(),
        )
