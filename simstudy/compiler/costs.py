"""Compute costs per layer: FLOPs-based estimates or measured times, and gradient buckets."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from simstudy.spec import LayerTime, Model, Scenario

#: PyTorch DDP puts the first gradients of backward in a small bucket of this size
#: (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES) so communication starts early.
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
#: DDP's default bucket_cap_mb (25 MiB). Only with the default cap does DDP keep the small first
#: bucket; a job that passes bucket_cap_mb gets that cap for its first bucket too (torch >= 2.0).
DDP_DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class LayerCost:
    """Per-iteration cost of one layer on one worker (whole local batch)."""

    index: int
    name: str
    fwd_us: float
    bwd_us: float
    fwd_flops: int
    grad_bytes: int
    activation_bytes: int


def whole_us(us: float) -> int:
    """Round to whole microseconds, ASTRA-SIM's compute granularity (half up)."""
    return int(us + 0.5)


def _estimate_us(flops: float, scenario: Scenario) -> float:
    rate = scenario.system.peak_tflops * 1e12 * scenario.system.efficiency
    return flops / rate * 1e6


def layer_costs(scenario: Scenario, model: Model, *, flops_scale: float = 1.0) -> list[LayerCost]:
    """Forward/backward time and gradient bytes of every layer for one iteration.

    Compute time comes from FLOPs x batch / (peak x efficiency), with backward =
    `backward_factor` x forward, unless the system gives measured times: per layer by name,
    or per-iteration totals spread over layers in proportion to their FLOPs.
    """
    batch = scenario.training.batch_size_per_worker
    dtype = scenario.training.dtype_bytes
    bwd_factor = scenario.system.backward_factor
    flops = [layer.fwd_flops_per_sample * batch * flops_scale for layer in model.layers]
    fwd = [_estimate_us(f, scenario) for f in flops]
    bwd = [f * bwd_factor for f in fwd]
    measured = scenario.system.measured
    if measured is not None:
        fwd, bwd = _apply_measured(model, flops, fwd, bwd, measured.layers, measured.forward_us, measured.backward_us)
    return [
        LayerCost(
            index=i,
            name=layer.name,
            fwd_us=fwd[i],
            bwd_us=bwd[i],
            fwd_flops=int(flops[i]),
            grad_bytes=layer.params * dtype,
            activation_bytes=layer.activation_bytes_per_sample * batch * dtype // 4,
        )
        for i, layer in enumerate(model.layers)
    ]


def _spread(total: float, weights: list[float]) -> list[float]:
    s = sum(weights)
    if s <= 0:
        return [total / len(weights)] * len(weights) if weights else []
    return [total * w / s for w in weights]


def _apply_measured(
    model: Model,
    flops: list[float],
    fwd: list[float],
    bwd: list[float],
    per_layer: Mapping[str, LayerTime],
    fwd_total: float | None,
    bwd_total: float | None,
) -> tuple[list[float], list[float]]:
    names = [layer.name for layer in model.layers]
    unknown = sorted(set(per_layer) - set(names))
    if unknown:
        raise ValueError(f"system.measured.layers names layers the model does not have: {unknown[:5]}")
    fwd, bwd = list(fwd), list(bwd)
    rest = [i for i, n in enumerate(names) if n not in per_layer]
    for i, n in enumerate(names):
        t = per_layer.get(n)
        if t is not None:
            fwd[i] = t.forward_us
            bwd[i] = t.backward_us
    weights = [flops[i] for i in rest]
    for total, times in ((fwd_total, fwd), (bwd_total, bwd)):
        if total is None or not rest:
            continue
        remaining = max(0.0, total - sum(times[i] for i in range(len(names)) if names[i] in per_layer))
        for i, v in zip(rest, _spread(remaining, weights), strict=True):
            times[i] = v
    return fwd, bwd


def optimizer_us(scenario: Scenario, model: Model, params: int | None = None) -> float:
    """Optimizer step time: measured, or memory-bound (read param, grad, state; write param, state)."""
    measured = scenario.system.measured
    if measured is not None and measured.optimizer_us is not None:
        return measured.optimizer_us
    n = model.params if params is None else params
    bytes_touched = 5 * 4 * n
    return bytes_touched / (scenario.system.local_mem_bw_gbps * 1e9) * 1e6


@dataclass(frozen=True, slots=True)
class Bucket:
    """A gradient bucket: layer indices (in backward order) and its bytes."""

    index: int
    layers: tuple[int, ...]
    size_bytes: int

    @property
    def ready_after(self) -> int:
        """The layer whose backward completes the bucket (the last one added)."""
        return self.layers[-1]


def ddp_buckets(costs: list[LayerCost], cap_bytes: int, first_cap_bytes: int | None = None) -> list[Bucket]:
    """Group layers into gradient buckets in reverse layer order, as PyTorch DDP does after its
    first iteration (when it rebuilds the buckets in the order gradients became ready).

    A bucket closes once it holds at least its cap; the first closes at `first_cap_bytes`
    (at most `cap_bytes`). By default that is DDP's rule: 1 MiB when `cap_bytes` is the default
    25 MiB (DDP built without bucket_cap_mb), else `cap_bytes`. Layers without parameters join
    no bucket.
    """
    if first_cap_bytes is None:
        first_cap_bytes = DDP_FIRST_BUCKET_BYTES if cap_bytes == DDP_DEFAULT_BUCKET_BYTES else cap_bytes
    first = min(first_cap_bytes, cap_bytes)
    return _fill_buckets(costs, full=lambda size, closed: size >= (first if closed == 0 else cap_bytes))


def zero_buckets(costs: list[LayerCost], cap_bytes: int) -> list[Bucket]:
    """Gradient buckets as DeepSpeed's ZeRO fills its ipg bucket: layers in backward order, a bucket
    reduced before the layer that would take it over `cap_bytes` joins (a layer larger than the cap
    is a bucket of its own). Layers without gradients join none."""
    return _fill_buckets(costs, over=lambda size: size > cap_bytes)


def _fill_buckets(costs: list[LayerCost], *, full: Callable[[int, int], bool] | None = None,
                  over: Callable[[int], bool] | None = None) -> list[Bucket]:
    """The layers with gradients in backward order, filled into buckets one after the other: a
    bucket closes once it is `full(size, buckets closed before it)`, or before a layer that would
    take it `over(size)` joins; the last closes with whatever it holds."""
    buckets: list[Bucket] = []
    current: list[int] = []
    size = 0
    for cost in reversed(costs):
        if cost.grad_bytes == 0:
            continue
        if over is not None and current and over(size + cost.grad_bytes):
            buckets.append(Bucket(len(buckets), tuple(current), size))
            current, size = [], 0
        current.append(cost.index)
        size += cost.grad_bytes
        if full is not None and full(size, len(buckets)):
            buckets.append(Bucket(len(buckets), tuple(current), size))
            current, size = [], 0
    if current:
        buckets.append(Bucket(len(buckets), tuple(current), size))
    return buckets
