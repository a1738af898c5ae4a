"""System specs: how fast ranks compute and how the collective layer chunks and schedules."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from simstudy.spec.base import Spec


class LayerTime(Spec):
    """Measured compute time of one layer for one iteration (the whole local batch)."""

    forward_us: float = Field(ge=0, description="forward time, microseconds")
    backward_us: float = Field(ge=0, description="backward time (input + weight grads), microseconds")


class MeasuredCompute(Spec):
    """Measured compute times that replace the FLOPs-based estimate.

    Either per layer (by layer name; layers not listed fall back to FLOPs shares of the totals,
    or to the FLOPs estimate) or as per-iteration totals spread over layers by FLOPs share.
    """

    forward_us: float | None = Field(default=None, ge=0, description="forward time per iteration, us")
    backward_us: float | None = Field(default=None, ge=0, description="backward time per iteration, us")
    layers: dict[str, LayerTime] = Field(default_factory=dict, description="per-layer times by name")
    optimizer_us: float | None = Field(default=None, ge=0, description="optimizer step time, us")

    @model_validator(mode="after")
    def _check(self) -> MeasuredCompute:
        if not self.layers and self.forward_us is None and self.backward_us is None and self.optimizer_us is None:
            raise ValueError("give per-layer times (layers), totals (forward_us, backward_us) or optimizer_us")
        return self


class System(Spec):
    """Compute rate and collective-layer settings (ASTRA-SIM system.json)."""

    peak_tflops: float = Field(default=100.0, gt=0, description="peak compute, TFLOPS")
    efficiency: float = Field(
        default=0.4, gt=0, le=1, description="achieved fraction of peak for model layers"
    )
    backward_factor: float = Field(
        default=2.0, gt=0, description="backward FLOPs as a multiple of forward FLOPs"
    )
    measured: MeasuredCompute | None = Field(
        default=None, description="measured compute times; overrides peak_tflops x efficiency"
    )
    collective_chunks: int = Field(
        default=1, ge=1, description="chunks each collective is split into (preferred-dataset-splits)"
    )
    active_chunks_per_dimension: int = Field(
        default=1, ge=1, description="chunks in flight per network dimension"
    )
    scheduling_policy: Literal["LIFO", "FIFO"] = Field(
        default="LIFO", description="order in which ready collectives are scheduled"
    )
    endpoint_delay_ns: int = Field(
        default=10, ge=1, description="per-message endpoint delay, ns (ASTRA-SIM aborts on 0)"
    )
    collective_optimization: Literal["baseline", "localBWAware"] = Field(
        default="baseline", description="ASTRA-SIM collective optimization"
    )
    local_mem_bw_gbps: float = Field(
        default=1600.0, gt=0, description="local memory bandwidth, GB/s (ASTRA-SIM local-mem-bw)"
    )
