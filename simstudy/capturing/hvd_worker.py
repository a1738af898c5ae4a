"""One rank of a captured Horovod job: `python -m simstudy.capturing.hvd_worker CONFIG.json`.

Trains the zoo's torch model (`simstudy.capturing.models`) with Horovod's PyTorch API over Gloo,
as `horovodrun --gloo` would start it (the capture runs Horovod's rendezvous server in rank 0's
namespace and gives every rank Horovod's environment: rank, size, one host per rank, the
rendezvous address, the Gloo interface, and HOROVOD_FUSION_THRESHOLD / HOROVOD_CYCLE_TIME from
the `horovod` preset). `hvd.DistributedOptimizer` all-reduces every gradient from a hook as soon
as it is accumulated; Horovod's background thread fuses what is ready each cycle.

Phases as in the torch worker: `calibration` passes of the plain model and optimizer (per layer
forward and backward times, the workers in lock-step after a one-element all-reduce), then the
parameters are broadcast from rank 0, `warmup` steps, a barrier, and the recorded `iterations`
marked with wall-clock start and end times (the pcap clock).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from simstudy.capturing.models import build_torch_model
from simstudy.capturing.sockets import local_endpoints
from simstudy.capturing.worker import StepClock, time_compute
from simstudy.files import write_json


def _environment(cfg: dict[str, Any]) -> dict[str, str]:
    """Horovod's environment for this rank, as `horovodrun --gloo` gives it (one host per rank)."""
    opts = cfg.get("horovod") or {}
    return {
        "HOROVOD_RANK": str(cfg["rank"]), "HOROVOD_SIZE": str(cfg["world"]),
        "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "1",
        "HOROVOD_CROSS_RANK": str(cfg["rank"]), "HOROVOD_CROSS_SIZE": str(cfg["world"]),
        "HOROVOD_HOSTNAME": f"host{cfg['rank']}",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": cfg["master_addr"], "HOROVOD_GLOO_RENDEZVOUS_PORT": str(opts["port"]),
        "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_IFACE": cfg["ifname"],
        "HOROVOD_FUSION_THRESHOLD": str(int(opts["fusion_threshold_bytes"])),
        "HOROVOD_CYCLE_TIME": str(opts["cycle_time_ms"]),
    }


class _Worker:
    """One Horovod rank: the model, its calibration, the training steps and the result."""

    def __init__(self, cfg: dict[str, Any], hvd: Any) -> None:
        hvd.init()
        torch.set_num_threads(cfg["threads"])
        self.cfg, self.hvd = cfg, hvd
        self.tm = build_torch_model(cfg["model"]["zoo"], cfg["model"].get("options") or {}, seed=cfg["seed"])
        self.params = [p for p in self.tm.module.parameters() if p.requires_grad]
        self.gen = torch.Generator().manual_seed(cfg["seed"] * 1000 + cfg["rank"])
        self.result: dict[str, Any] = {"rank": cfg["rank"], "role": "worker", "iterations": [], "steps": []}
        self.ticks = 0
        self.opt: Any = None

    def batch(self) -> Any:
        return self.tm.batch(self.cfg["batch"], self.gen)

    def barrier(self) -> None:
        self.ticks += 1
        self.hvd.allreduce(torch.zeros(1), name=f"barrier.{self.ticks}")

    def calibrate(self) -> None:
        """The plain model, no communication, the workers in lock-step."""
        self.result["calibration"] = time_compute(self.tm, self.params, self.cfg["calibration"], self.batch,
                                                  self.barrier, self.tm.module)

    def step(self, record: bool) -> None:
        x, y = self.batch()
        clock = StepClock()
        self.opt.zero_grad()
        loss = self.tm.loss(self.tm.module(x), y)
        clock.mark()
        loss.backward()
        clock.mark()
        self.opt.step()
        clock.mark()
        if record:
            clock.record(self.result, loss, "exchange_us")

    def train(self) -> None:
        """Rank 0's parameters broadcast, the warm-up steps, a barrier, the recorded iterations, a barrier."""
        hvd, tm = self.hvd, self.tm
        hvd.broadcast_parameters(tm.module.state_dict(), root_rank=0)
        self.opt = hvd.DistributedOptimizer(torch.optim.SGD(self.params, lr=0.01),
                                            named_parameters=tm.module.named_parameters())
        for _ in range(self.cfg["warmup"]):
            self.step(False)
        self.barrier()
        for _ in range(self.cfg["iterations"]):
            self.step(True)
        self.barrier()

    def finish(self) -> None:
        """Write the result (whole or not at all) and leave Horovod."""
        opts = self.cfg.get("horovod") or {}
        self.result["endpoints"] = local_endpoints()
        self.result["horovod"] = {"fusion_threshold_bytes": opts["fusion_threshold_bytes"],
                                  "cycle_time_ms": opts["cycle_time_ms"]}
        out = Path(self.cfg["out"])
        write_json(out, self.result, indent=None)
        self.hvd.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cfg: dict[str, Any] = json.loads(Path(args[0]).read_text())
    os.environ.update(_environment(cfg))
    import horovod.torch as hvd

    worker = _Worker(cfg, hvd)
    worker.calibrate()
    worker.train()
    worker.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
