"""The packet network: the same workload and system layer as flowsim (its engine), every message
carried by ns-3 (TCP connections between ranks, or RoCE's queue pairs with PFC, ECN and DCQCN
(`roce.h`); links with rates, delays, queues, token buckets and losses, switches forwarding along
topology.json's routes).

`--backend ns3` needs ns-3's Python wheel (`pip install 'simstudy[ns3]'`); `available()` says
whether it is installed without importing it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from simstudy import layout
from simstudy.backends.base import BackendError, Progress, RunResult
from simstudy.backends.flowsim import FlowsimBackend
from simstudy.backends.flowsim.netmodels import NetModel
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.backends.iterations import iteration_spans
from simstudy.backends.network import Network
from simstudy.backends.ns3.fabric import MISSING, Fabric, available, host_address
from simstudy.backends.ns3.netmodel import Ns3Net
from simstudy.backends.traffic_build import WorkloadInfo
from simstudy.backends.traffic_out import links_table
from simstudy.compiler.aggregation import astra_sim_refusal
from simstudy.spec import Congestion
from simstudy.spec.transport import ROCE_HEADER_BYTES
from simstudy.version import __version__

__all__ = ["MISSING", "Ns3Backend", "available", "iteration_spans"]


class Ns3Backend(FlowsimBackend):
    """flowsim's engine on ns-3's packet network. `traffic`: rows or none as flowsim; links: the
    bytes every link put on the wire per bin, as its switch port counts them (every packet's IP,
    TCP and frame bytes: data, ACKs and resends); or pcap: rows and ns-3's pcaps (one per rank
    interface, raw IP, in the run's `pcap/`).
    `record_sends`: keep the messages each run sends (`sends`), for `probe.replay`."""

    name = "ns3"

    def __init__(self, *, traffic: str = "rows", traffic_bin_s: float = 1e-3,
                 progress: Callable[[Progress], None] | None = None, record_sends: bool = False) -> None:
        if not available():
            raise BackendError(MISSING)
        # links: ns-3 counts them (`Fabric.link_bytes`); the engine keeps only the counts meanwhile
        super().__init__(traffic={"pcap": "rows", "links": "none"}.get(traffic, traffic), traffic_bin_s=traffic_bin_s,
                         progress=progress)
        self.count_links = traffic == "links"
        self.congestion = Congestion.NS3  # run.json's details.congestion: the network model is ns-3's own
        self.pcap = traffic == "pcap"
        self.fabric: Fabric | None = None
        self.pcap_dir: Path | None = None
        self.info: WorkloadInfo | None = None
        self.t0_ns = 0
        self.record_sends = record_sends
        #: the messages the last run sent, where they were kept (`record_sends`)
        self.sends: list[tuple[int, int, int, int]] | None = None
        #: RoCE: the last run's queue pairs as (src, dst), by number (`probe.replay` makes them again)
        self.queue_pairs: list[tuple[int, int]] = []
        #: with `traffic: links`, the last run's link table: what each link put on the wire per bin
        self.links: pd.DataFrame | None = None

    def run(self, bundle: Any, workdir: Path, *, timeout_s: float | None = None) -> RunResult:
        refusal = astra_sim_refusal(bundle)  # ns-3's switches forward packets; they do not add chunks either
        if refusal is not None:
            raise BackendError(f"ns3: {refusal}")
        result = super().run(bundle, workdir, timeout_s=timeout_s)
        if self.count_links:
            result.output.mode = "links"
            result.output.links = self.links
        if self.pcap_dir is not None:
            write_pcap_meta(self.pcap_dir, bundle, result, self.info)
            result.output.pcap_dir = self.pcap_dir
        return result

    def network_model(self, info: WorkloadInfo, net: Network, workdir: Path) -> Callable[[Scheduler], NetModel]:
        self.info = info
        self.pcap_dir = workdir / layout.PCAP_DIR if self.pcap else None
        count = round(self.traffic_bin_s * 1e9) if self.count_links else 0
        fabric = self.fabric = Fabric(net, pcap_dir=self.pcap_dir, record_sends=self.record_sends, count_bin_ns=count)
        return lambda sched: Ns3Net(sched, fabric)

    def network_done(self, model: NetModel) -> dict[str, Any]:
        fabric = self.fabric
        if fabric is None:
            return {}
        stats: dict[str, Any] = dict(fabric.stats())
        if fabric.roce:  # each paused link: [pause frames, ns paused]
            stats["pauses"] = {name: list(v) for name, v in fabric.pauses().items()}
        if self.count_links:
            self.links = links_table(fabric.net.topology, *fabric.link_bytes(), self.traffic_bin_s)
        self.t0_ns = fabric.t0_ns
        self.sends = fabric.sends
        self.queue_pairs = fabric.queue_pairs()
        fabric.close()
        self.fabric = None
        messages = model.messages if isinstance(model, Ns3Net) else 0
        return {"ns3": {**stats, "messages": messages, "transport": fabric.transport.model_dump(mode="json")}}


def write_pcap_meta(pcap_dir: Path, bundle: Any, result: RunResult, info: WorkloadInfo | None) -> None:
    """meta.json beside the pcaps, as `simstudy capture` writes one (its documented keys only):
    each rank's address, each rank's iterations on the pcap clock (from its first to its last ET
    node of the iteration), the scenario, the link and the wire; so that `simstudy analyze` and
    `validate` read the run's pcaps as they read a capture."""
    t0 = result.details.get("ns3", {}).get("setup_ns", 0)
    iterations = {str(r): [[(t0 + a) / 1e9, (t0 + b) / 1e9] for a, b in v]
                  for r, v in (iteration_spans(info, result.spans) if info is not None else {}).items()}
    topo = info.topology if info is not None else None
    scenario = None
    if getattr(bundle, "scenario", None) is not None and bundle.scenario.is_file():
        scenario = json.loads(bundle.scenario.read_text(encoding="utf-8"))
    meta: dict[str, Any] = {
        "simstudy": __version__,
        "ranks": {str(r): host_address(r) for r in range(len(result.ranks))},
        "iterations": iterations,
        "scenario": scenario,
    }
    if topo is not None:
        host_links = [link for link in topo.links if link.src.startswith("h")]
        link = host_links[0] if host_links else None
        meta["link"] = {"where": "ns3", "rate_mbit": link.gbps * 1e3 if link else None,
                        "loss": max((x.loss for x in topo.links), default=0.0)}
        tr = topo.transport
        meta["wire"] = ({"mss": tr.roce.mtu_bytes, "header_bytes": ROCE_HEADER_BYTES} if tr.kind == "roce"
                        else {"mss": tr.mss_bytes, "header_bytes": tr.header_bytes})
    (pcap_dir / layout.META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")

