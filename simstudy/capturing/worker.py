"""One rank of a captured training job: `python -m simstudy.capturing.worker CONFIG.json`.

Trains a real torch model (built from the zoo spec by `simstudy.capturing.models`) on synthetic
data with torch.distributed over gloo (TCP):

- `ddp`: DistributedDataParallel, all-reduce of gradient buckets (bucket_cap_mb from the spec);
- `ps`: workers push each gradient bucket's pieces to the parameter servers with send/recv as soon
  as the bucket's gradients are ready, and pull the updated parameters back (posting the pulls
  once backward is done, or with each push when the spec's `rendezvous` is false); servers apply
  SGD to their shard, after every worker's piece (sync) or after each one (async).

Phases: `calibration` iterations without communication time the compute (per layer forward via
module hooks, per layer backward from the time each layer's gradients are ready; the workers
start each one together, after a barrier, so they share the cores as in training), `warmup`
iterations, a barrier, then the recorded `iterations`, each marked with wall-clock start and
end times (the pcap clock). The result goes to the JSON file the config names.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from simstudy.capturing.models import TrainModel, build_torch_model
from simstudy.capturing.sockets import local_endpoints
from simstudy.compiler.parameter_server import PULL, PUSH, tag_number
from simstudy.files import write_json


def _wait(work: Any) -> None:
    """Wait for a send/recv (torch types them as `Work | None`; gloo always returns a Work)."""
    work.wait()


class LayerClock:
    """Per-layer forward times (module hooks) and gradient-ready times (parameter hooks)."""

    def __init__(self, tm: TrainModel) -> None:
        self.names = list(tm.layers)
        self.fwd_start: dict[str, float] = {}
        self.fwd: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.on = False
        self.handles: list[Any] = []
        for name, mod in tm.layers.items():
            self.handles.append(mod.register_forward_pre_hook(self._pre(name)))
            self.handles.append(mod.register_forward_hook(self._post(name)))
            for p in mod.parameters():
                if p.requires_grad:
                    self.handles.append(p.register_post_accumulate_grad_hook(self._grad(name)))

    def remove(self) -> None:
        """Take the hooks off, so that the recorded iterations do not run them."""
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _pre(self, name: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            if self.on:
                self.fwd_start[name] = time.perf_counter()
        return hook

    def _post(self, name: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            if self.on and name in self.fwd_start:
                self.fwd[name] = self.fwd.get(name, 0.0) + time.perf_counter() - self.fwd_start.pop(name)
        return hook

    def _grad(self, name: str) -> Callable[[torch.Tensor], None]:
        def hook(_: torch.Tensor) -> None:
            if self.on:
                self.ready[name] = time.perf_counter()
        return hook

    def reset(self) -> None:
        self.fwd_start.clear()
        self.fwd.clear()
        self.ready.clear()

    def backward_us(self, t_start: float) -> dict[str, float]:
        """Backward time of each layer: from the previous layer's gradients being ready (or the
        start of backward) to its own; layers without parameters get 0 (their time falls to the
        next layer with parameters, which is when gradients become ready)."""
        out: dict[str, float] = {}
        prev = t_start
        for name in reversed(self.names):
            t = self.ready.get(name)
            if t is None:
                out[name] = 0.0
            else:
                out[name] = max(0.0, t - prev) * 1e6
                prev = t
        return out


class StepClock:
    """The times of one training step, started when made: its wall-clock start and end (the pcap
    clock) and the forward, backward and last phase, each `mark`ed as it ends (shared by the
    torch.distributed and Horovod workers)."""

    def __init__(self) -> None:
        self.start = time.time()
        self.marks = [time.perf_counter()]
        self.end = self.start

    def mark(self) -> None:
        """The phase under way ends now (the third mark ends the step)."""
        self.marks.append(time.perf_counter())
        if len(self.marks) == 4:
            self.end = time.time()

    def record(self, result: dict[str, Any], loss: torch.Tensor, last: str) -> None:
        """Append the step to the result's `iterations` and `steps` (its last phase as `last`)."""
        p0, p1, p2, p3 = self.marks
        result["iterations"].append([self.start, self.end])
        result["steps"].append({"forward_us": (p1 - p0) * 1e6, "backward_us": (p2 - p1) * 1e6,
                                last: (p3 - p2) * 1e6, "loss": float(loss)})


def time_compute(tm: TrainModel, params: list[torch.nn.Parameter], n: int,
                 batch: Callable[[], tuple[torch.Tensor, torch.Tensor]], barrier: Callable[[], None],
                 module: torch.nn.Module, no_sync: Callable[[], Any] | None = None) -> dict[str, Any]:
    """The calibration of a worker: `n` passes of forward, backward and an optimizer step without
    communication, timed per layer, after one untimed pass; `barrier` starts every pass on every
    worker together (shared by the torch.distributed and Horovod workers)."""
    clock = LayerClock(tm)
    passes: list[dict[str, Any]] = []
    for i in range(n + 1):  # the first pass is untimed: it pays one-off allocation and setup costs
        x, y = batch()
        barrier()
        clock.reset()
        clock.on = i > 0
        t0 = time.perf_counter()
        if no_sync is not None:
            with no_sync():
                loss = tm.loss(module(x), y)
                t1 = time.perf_counter()
                loss.backward()
        else:
            loss = tm.loss(module(x), y)
            t1 = time.perf_counter()
            loss.backward()
        t2 = time.perf_counter()
        clock.on = False
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.add_(p.grad, alpha=0.0)  # the step's memory traffic, parameters unchanged
        t3 = time.perf_counter()
        for p in params:
            p.grad = None
        if i == 0:
            continue
        bwd = clock.backward_us(t1)
        passes.append({"forward_us": (t1 - t0) * 1e6, "backward_us": (t2 - t1) * 1e6,
                       "optimizer_us": (t3 - t2) * 1e6,
                       "layers": {k: {"forward_us": clock.fwd.get(k, 0.0) * 1e6, "backward_us": bwd.get(k, 0.0)}
                                  for k in tm.layers}})
    clock.remove()

    def mean(values: Iterable[float]) -> float:
        return float(sum(values)) / len(passes)

    return {
        **{key: mean(p[key] for p in passes) for key in ("forward_us", "backward_us", "optimizer_us")},
        "iterations": n,
        "layers": {k: {d: mean(p["layers"][k][d] for p in passes) for d in ("forward_us", "backward_us")}
                   for k in tm.layers},
        "passes": passes,
    }


class Job:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.rank: int = cfg["rank"]
        self.world: int = cfg["world"]
        torch.set_num_threads(cfg["threads"])
        torch.manual_seed(cfg["seed"])
        self.tm = build_torch_model(cfg["model"]["zoo"], cfg["model"].get("options") or {}, seed=cfg["seed"])
        self.params = [p for p in self.tm.module.parameters() if p.requires_grad]
        self.gen = torch.Generator().manual_seed(cfg["seed"] * 1000 + self.rank)
        self.lr = 0.01
        self.result: dict[str, Any] = {"rank": self.rank, "role": "worker", "iterations": [], "steps": []}
        # The workers calibrate in lock-step, so that they share the cores as they do in the
        # recorded iterations (every rank must create the group, servers too).
        workers = cfg["ps"]["workers"] if cfg["strategy"] == "ps" else list(range(self.world))
        self.workers_group = dist.new_group(workers) if len(workers) < self.world else None

    # --- compute helpers ---------------------------------------------------------------------

    def _batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tm.batch(self.cfg["batch"], self.gen)

    def calibrate(self, module: torch.nn.Module, no_sync: Callable[[], Any] | None) -> None:
        """Time forward/backward per layer and the optimizer step without communication."""
        self.result["calibration"] = time_compute(self.tm, self.params, self.cfg["calibration"], self._batch,
                                                  lambda: dist.barrier(group=self.workers_group), module, no_sync)

    def _sgd(self) -> None:
        with torch.no_grad():
            for p in self.params:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-self.lr)
                p.grad = None

    # --- strategies ----------------------------------------------------------------------------

    def run_ddp(self) -> None:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(self.tm.module, bucket_cap_mb=self.cfg["bucket_cap_mb"])
        self.calibrate(ddp, ddp.no_sync)
        for _ in range(self.cfg["warmup"]):
            self._ddp_step(ddp)
        dist.barrier()
        for _ in range(self.cfg["iterations"]):
            self._ddp_step(ddp, record=True)
        dist.barrier()
        # DDP rebuilds its buckets after the first iteration, in the order gradients became ready:
        # these are the buckets the recorded iterations all-reduced.
        sizes = str(ddp._get_ddp_logging_data().get("rebuilt_bucket_sizes", ""))
        self.result["ddp_buckets"] = [int(v) for v in sizes.split(",") if v.strip()]

    def _ddp_step(self, ddp: torch.nn.Module, record: bool = False) -> None:
        x, y = self._batch()
        clock = StepClock()
        loss = self.tm.loss(ddp(x), y)
        clock.mark()
        loss.backward()
        clock.mark()
        self._sgd()
        clock.mark()
        if record:
            clock.record(self.result, loss, "optimizer_us")

    def run_ps_worker(self) -> None:
        ps = self.cfg["ps"]
        self.calibrate(self.tm.module, None)
        total = self.cfg["warmup"] + self.cfg["iterations"]
        for it in range(total):
            if it == self.cfg["warmup"]:
                dist.barrier()
            self._ps_step(it, ps, record=it >= self.cfg["warmup"])
        dist.barrier()

    def _flat_range(self, lo: int, hi: int, grads: bool) -> torch.Tensor:
        """Elements [lo, hi) of the flat parameter (or gradient) vector in layer order."""
        parts = []
        at = 0
        for p in self.params:
            n = p.numel()
            a, b = max(lo, at), min(hi, at + n)
            if a < b:
                src = p.grad if grads else p
                assert src is not None
                parts.append(src.detach().reshape(-1)[a - at:b - at])
            at += n
        return torch.cat(parts) if len(parts) != 1 else parts[0].clone()

    def _write_range(self, lo: int, values: torch.Tensor) -> None:
        at, hi = 0, lo + values.numel()
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                a, b = max(lo, at), min(hi, at + n)
                if a < b:
                    p.view(-1)[a - at:b - at].copy_(values[a - lo:b - lo])
                at += n

    def _ps_step(self, it: int, ps: dict[str, Any], record: bool) -> None:
        buckets: list[dict[str, Any]] = ps["buckets"]
        pieces: list[dict[str, Any]] = ps["pieces"]
        n_b, n_s = len(buckets), ps["servers"]
        index = {id(p): i for i, p in enumerate(self.params)}
        param_bucket = {index[id(p)]: b["index"] for b in buckets for name in b["layers"]
                        for p in self.tm.layers[name].parameters() if id(p) in index}
        pending = {b["index"]: sum(1 for v in param_bucket.values() if v == b["index"]) for b in buckets}
        sends: list[Any] = []
        recvs: list[Any] = []

        def pull(pc: dict[str, Any]) -> None:
            buf = torch.empty(pc["hi"] - pc["lo"])
            tag = tag_number(it, pc["bucket"], pc["server"], n_b, n_s, PULL)
            recvs.append((dist.irecv(buf, src=pc["host"], tag=tag), pc, buf))

        def ready(b_index: int) -> None:
            for pc in pieces:
                if pc["bucket"] == b_index:
                    buf = self._flat_range(pc["lo"], pc["hi"], grads=True)
                    tag = tag_number(it, b_index, pc["server"], n_b, n_s, PUSH)
                    sends.append((dist.isend(buf, dst=pc["host"], tag=tag), buf))
                    if ps.get("pull_with_push"):  # the reply may come while backward runs: into a buffer
                        pull(pc)

        handles = []
        for i, p in enumerate(self.params):
            if i in param_bucket and ps["overlap"]:
                def hook(_: torch.Tensor, b: int = param_bucket[i]) -> None:
                    pending[b] -= 1
                    if pending[b] == 0:
                        ready(b)
                handles.append(p.register_post_accumulate_grad_hook(hook))
        x, y = self._batch()
        clock = StepClock()
        loss = self.tm.loss(self.tm.module(x), y)
        clock.mark()
        loss.backward()
        clock.mark()
        for h in handles:
            h.remove()
        if not ps["overlap"]:
            for b in buckets:
                ready(b["index"])
        if not ps.get("pull_with_push"):  # gloo's rendezvous: the replies move once these are posted
            for pc in pieces:
                pull(pc)
        for work, _ in sends:
            _wait(work)
        for work, pc, buf in recvs:
            _wait(work)
            self._write_range(pc["lo"], buf)
        for p in self.params:
            p.grad = None
        clock.mark()
        if record:
            clock.record(self.result, loss, "exchange_us")

    def run_ps_server(self) -> None:
        ps = self.cfg["ps"]
        self.result["role"] = "server"
        server = ps["server_of"][str(self.rank)]
        mine = [pc for pc in ps["pieces"] if pc["server"] == server]
        workers: list[int] = ps["workers"]
        n_b, n_s = len(ps["buckets"]), ps["servers"]
        total = self.cfg["warmup"] + self.cfg["iterations"]
        shard = {pc["lo"]: self._flat_range(pc["lo"], pc["hi"], grads=False) for pc in mine}
        updates = 0
        t_update = 0.0
        if ps["mode"] == "async":
            updates, t_update = self._async_server(mine, workers, server, n_b, n_s, total, shard)
        else:
            for it in range(total):
                if it == self.cfg["warmup"]:
                    dist.barrier()
                sends = []
                for pc in mine:
                    bufs = [torch.empty(pc["hi"] - pc["lo"]) for _ in workers]
                    works = [dist.irecv(b, src=w, tag=tag_number(it, pc["bucket"], server, n_b, n_s, PUSH))
                             for b, w in zip(bufs, workers, strict=True)]
                    for work in works:
                        _wait(work)
                    u0 = time.perf_counter()
                    grad = torch.stack(bufs).mean(0)
                    shard[pc["lo"]].add_(grad, alpha=-self.lr)
                    t_update += time.perf_counter() - u0
                    updates += 1
                    out = shard[pc["lo"]].clone()
                    sends += [(dist.isend(out, dst=w, tag=tag_number(it, pc["bucket"], server, n_b, n_s, PULL)), out)
                              for w in workers]
                for work, _ in sends:
                    _wait(work)
        self.result["server"] = {"updates": updates, "update_us_mean": t_update / max(updates, 1) * 1e6}
        dist.barrier()

    def _async_server(self, mine: list[dict[str, Any]], workers: list[int], server: int, n_b: int, n_s: int,
                      total: int, shard: dict[int, torch.Tensor]) -> tuple[int, float]:
        """Each worker's pieces are applied and answered on their own, in one thread per worker (the
        shard is updated under a lock); the warmup iterations end with the job's barrier."""
        lock = threading.Lock()
        count = {"updates": 0, "t": 0.0}
        errors: list[BaseException] = []

        def serve(w: int, first: int, last: int) -> None:
            try:
                sends = []
                for it in range(first, last):
                    for pc in mine:
                        buf = torch.empty(pc["hi"] - pc["lo"])
                        _wait(dist.irecv(buf, src=w, tag=tag_number(it, pc["bucket"], server, n_b, n_s, PUSH)))
                        with lock:
                            u0 = time.perf_counter()
                            shard[pc["lo"]].add_(buf, alpha=-self.lr)
                            count["t"] += time.perf_counter() - u0
                            count["updates"] += 1
                            out = shard[pc["lo"]].clone()
                        sends.append((dist.isend(out, dst=w, tag=tag_number(it, pc["bucket"], server, n_b, n_s, PULL)),
                                      out))
                for work, _ in sends:
                    _wait(work)
            except BaseException as exc:  # re-raised in the main thread
                errors.append(exc)

        warm = self.cfg["warmup"]
        for first, last in ((0, warm), (warm, total)):
            if first == warm:
                dist.barrier()
            threads = [threading.Thread(target=serve, args=(w, first, last)) for w in workers]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        return int(count["updates"]), float(count["t"])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cfg = json.loads(Path(args[0]).read_text())
    os.environ["GLOO_SOCKET_IFNAME"] = cfg["ifname"]
    dist.init_process_group("gloo", init_method=f"tcp://{cfg['master_addr']}:{cfg['master_port']}",
                            rank=cfg["rank"], world_size=cfg["world"])
    job = Job(cfg)
    if cfg["strategy"] == "ddp":
        job.run_ddp()
    elif cfg["rank"] in cfg["ps"]["workers"]:
        job.run_ps_worker()
    else:
        job.run_ps_server()
    job.result["endpoints"] = local_endpoints()
    job.result["torch"] = torch.__version__
    out = Path(cfg["out"])
    write_json(out, job.result, indent=None)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
