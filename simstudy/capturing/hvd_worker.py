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
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cfg: dict[str, Any] = json.loads(Path(args[0]).read_text())
    opts = cfg.get("horovod") or {}
    os.environ.update({
        "HOROVOD_RANK": str(cfg["rank"]), "HOROVOD_SIZE": str(cfg["world"]),
        "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "1",
        "HOROVOD_CROSS_RANK": str(cfg["rank"]), "HOROVOD_CROSS_SIZE": str(cfg["world"]),
        "HOROVOD_HOSTNAME": f"host{cfg['rank']}",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": cfg["master_addr"], "HOROVOD_GLOO_RENDEZVOUS_PORT": str(opts["port"]),
        "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_IFACE": cfg["ifname"],
        "HOROVOD_FUSION_THRESHOLD": str(int(opts["fusion_threshold_bytes"])),
        "HOROVOD_CYCLE_TIME": str(opts["cycle_time_ms"]),
    })
    import horovod.torch as hvd
    import torch

    from simstudy.capturing.models import build_torch_model
    from simstudy.capturing.sockets import local_endpoints
    from simstudy.capturing.worker import LayerClock

    hvd.init()
    torch.set_num_threads(cfg["threads"])
    tm = build_torch_model(cfg["model"]["zoo"], cfg["model"].get("options") or {}, seed=cfg["seed"])
    params = [p for p in tm.module.parameters() if p.requires_grad]
    gen = torch.Generator().manual_seed(cfg["seed"] * 1000 + cfg["rank"])
    result: dict[str, Any] = {"rank": cfg["rank"], "role": "worker", "iterations": [], "steps": []}
    ticks = [0]

    def barrier() -> None:
        ticks[0] += 1
        hvd.allreduce(torch.zeros(1), name=f"barrier.{ticks[0]}")

    # --- calibration: the plain model, no communication, the workers in lock-step ------------
    clock = LayerClock(tm)
    passes: list[dict[str, Any]] = []
    for i in range(cfg["calibration"] + 1):  # the first pass is untimed
        x, y = tm.batch(cfg["batch"], gen)
        barrier()
        clock.reset()
        clock.on = i > 0
        t0 = time.perf_counter()
        loss = tm.loss(tm.module(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        clock.on = False
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.add_(p.grad, alpha=0.0)
        t3 = time.perf_counter()
        for p in params:
            p.grad = None
        if i > 0:
            bwd = clock.backward_us(t1)
            passes.append({"forward_us": (t1 - t0) * 1e6, "backward_us": (t2 - t1) * 1e6,
                           "optimizer_us": (t3 - t2) * 1e6,
                           "layers": {k: {"forward_us": clock.fwd.get(k, 0.0) * 1e6, "backward_us": bwd.get(k, 0.0)}
                                      for k in tm.layers}})
    clock.remove()

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    result["calibration"] = {
        **{key: mean([p[key] for p in passes]) for key in ("forward_us", "backward_us", "optimizer_us")},
        "iterations": len(passes),
        "layers": {k: {d: mean([p["layers"][k][d] for p in passes]) for d in ("forward_us", "backward_us")}
                   for k in tm.layers},
        "passes": passes,
    }

    # --- training ------------------------------------------------------------------------------
    hvd.broadcast_parameters(tm.module.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.01), named_parameters=tm.module.named_parameters())

    def step(record: bool) -> None:
        x, y = tm.batch(cfg["batch"], gen)
        t0 = time.time()
        p0 = time.perf_counter()
        opt.zero_grad()
        loss = tm.loss(tm.module(x), y)
        p1 = time.perf_counter()
        loss.backward()
        p2 = time.perf_counter()
        opt.step()
        p3 = time.perf_counter()
        t1 = time.time()
        if record:
            result["iterations"].append([t0, t1])
            result["steps"].append({"forward_us": (p1 - p0) * 1e6, "backward_us": (p2 - p1) * 1e6,
                                    "exchange_us": (p3 - p2) * 1e6, "loss": float(loss)})

    for _ in range(cfg["warmup"]):
        step(False)
    barrier()
    for _ in range(cfg["iterations"]):
        step(True)
    barrier()
    result["endpoints"] = local_endpoints()
    result["horovod"] = {"fusion_threshold_bytes": opts["fusion_threshold_bytes"],
                         "cycle_time_ms": opts["cycle_time_ms"]}
    out = Path(cfg["out"])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
