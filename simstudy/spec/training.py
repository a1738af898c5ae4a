"""Training loop specs: batch, iterations, precision."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from simstudy.spec.base import Spec

PRECISION_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2}


class Training(Spec):
    """What one training run does."""

    batch_size_per_worker: int = Field(default=32, ge=1, description="samples per worker per iteration")
    iterations: int = Field(default=1, ge=1, description="training iterations to simulate")
    precision: Literal["fp32", "fp16", "bf16"] = Field(
        default="fp32", description="gradient/activation precision: fp32, fp16 or bf16"
    )

    @property
    def dtype_bytes(self) -> int:
        """Bytes per gradient element and per activation element."""
        return PRECISION_BYTES[self.precision]
