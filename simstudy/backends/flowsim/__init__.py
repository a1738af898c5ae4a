"""The `flowsim` backend: simstudy's built-in engine for the same bundles ASTRA-SIM runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from simstudy import __version__
from simstudy.backends.base import RankStats, RunResult, empty_spans, make_spans
from simstudy.backends.flowsim.engine import Engine
from simstudy.backends.flowsim.netmodels import NETMODELS
from simstudy.backends.network import Network
from simstudy.backends.traffic_build import TrafficBuilder, WorkloadInfo, span_kind, union_ns
from simstudy.compile import Bundle
from simstudy.compile.attributes import NodeMeta

__all__ = ["CONGESTION_MODES", "FlowsimBackend"]

#: flowsim's network models (see `netmodels`): fluid max-min sharing, ASTRA-SIM's unaware and aware.
CONGESTION_MODES = ("fluid", "unaware", "aware")


class _Rows:
    """Transfer rows, buffered: scalars in lists, arrays as they come."""

    def __init__(self) -> None:
        self.builder = TrafficBuilder()
        self.buf: list[tuple[Any, ...]] = []

    def __call__(self, meta: NodeMeta, t_send: Any, t_arrive: Any, src: Any, dst: Any, nbytes: Any, flow: Any,
                 chunk: Any, step: Any) -> None:
        if np.ndim(src):
            self.builder.add(t_start_s=np.asarray(t_send) * 1e-9, t_end_s=np.asarray(t_arrive) * 1e-9, src=src,
                             dst=dst, bytes=nbytes, flow=flow, op=meta.op, iteration=meta.iteration, chunk=chunk,
                             step=step)
        else:
            self.buf.append((t_send, t_arrive, src, dst, nbytes, flow, meta.op, meta.iteration, chunk, step))
            if len(self.buf) >= 65536:
                self.flush()

    def flush(self) -> None:
        if not self.buf:
            return
        by_op: dict[str, list[tuple[Any, ...]]] = {}
        for row in self.buf:
            by_op.setdefault(row[6], []).append(row)
        for op, rows in by_op.items():
            c = list(zip(*rows, strict=True))
            self.builder.add(t_start_s=np.asarray(c[0], dtype=np.float64) * 1e-9,
                             t_end_s=np.asarray(c[1], dtype=np.float64) * 1e-9, src=np.asarray(c[2]),
                             dst=np.asarray(c[3]), bytes=np.asarray(c[4]), flow=np.asarray(c[5]), op=op,
                             iteration=np.asarray(c[7]), chunk=np.asarray(c[8]), step=np.asarray(c[9]))
        self.buf = []

    def table(self) -> Any:
        self.flush()
        return self.builder.table()


class FlowsimBackend:
    """Simulates ET files on the topology: ASTRA-SIM's workload and system layers on one shared
    network, in one of three congestion modes (`fluid`: max-min fair flows; `unaware` and
    `aware`: ASTRA-SIM's two analytical network models)."""

    name = "flowsim"

    def __init__(self, *, congestion: str = "fluid", progress: Callable[[float], None] | None = None) -> None:
        if congestion not in NETMODELS:
            raise ValueError(f"unknown congestion mode {congestion!r}; expected one of {', '.join(CONGESTION_MODES)}")
        self.congestion = congestion
        self.progress = progress

    def run(self, bundle: Bundle, workdir: Path, *, timeout_s: float | None = None) -> RunResult:
        t0 = time.perf_counter()
        info = WorkloadInfo.from_bundle(bundle)
        net = Network.from_topology(info.topology)
        rows = _Rows()
        engine = Engine(info, net, mode=self.congestion, timeout_s=timeout_s, emit=rows, progress=self.progress)
        engine.run()
        traffic = rows.table()
        ranks = [
            RankStats(
                rank=r,
                finish_ns=int(s.finish),
                compute_ns=s.compute_ns,
                comm_ns=union_ns(s.comm_spans),
                exposed_comm_ns=int(s.finish) - s.compute_ns,
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
            details={"congestion": self.congestion, "network": net.kind, "links": len(net.capacity),
                     **engine.comms.stats},
            spans=_spans(engine),
        )


def _spans(engine: Engine) -> Any:
    rank, node, start, end = engine.span_columns()
    if not len(rank):
        return empty_spans()
    names = [engine.ranks[r].nodes[n].name for r, n in zip(rank.tolist(), node.tolist(), strict=True)]
    kinds = [span_kind(engine.ranks[r].nodes[n].type) for r, n in zip(rank.tolist(), node.tolist(), strict=True)]
    return make_spans(rank, node, names, kinds, start, end)
