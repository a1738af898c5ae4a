"""The `flowsim` backend: simstudy's built-in engine for the same bundles ASTRA-SIM runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

from simstudy import __version__
from simstudy.backends.base import BackendError, RankStats, RunResult
from simstudy.backends.flowsim.engine import Engine
from simstudy.backends.flowsim.network import Network, graph_network, native_network
from simstudy.backends.traffic_build import WorkloadInfo, union_ns
from simstudy.compile import Bundle
from simstudy.spec import Scenario, is_graph

__all__ = ["FlowsimBackend"]


def bundle_network(info: WorkloadInfo) -> tuple[Network, str]:
    """The network to simulate: the scenario's graph topology when the bundle has one, else network.yml."""
    path = info.bundle.scenario
    if path is not None:
        try:
            scenario = Scenario.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise BackendError(f"{path}: cannot read the scenario: {exc}") from None
        if is_graph(scenario.topology):
            return graph_network(scenario.topology), scenario.topology.kind  # type: ignore[arg-type]
    return native_network(info.dims), "+".join(d.topology for d in info.dims)


class FlowsimBackend:
    """Simulates ET files on the topology: ASTRA-SIM's workload and collective semantics,
    links with latency and bandwidth, and max-min fair sharing where transfers contend."""

    name = "flowsim"

    def __init__(self, *, contention: bool = True) -> None:
        self.contention = contention

    def run(self, bundle: Bundle, workdir: Path, *, timeout_s: float | None = None) -> RunResult:
        t0 = time.perf_counter()
        info = WorkloadInfo.from_bundle(bundle)
        net, net_name = bundle_network(info)
        if net.hosts != info.npus:
            raise BackendError(f"{bundle.network}: the network has {net.hosts} hosts but there are {info.npus} traces")
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
            details={"contention": self.contention, "network": net_name, "links": len(net.capacity)},
            spans=engine.spans(),
        )
