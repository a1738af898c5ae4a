# The compiled core's interface (simstudy/backends/flowsim/_core.pyx): `netmodels.FastFluidNet`'s.
from collections.abc import Sequence
from typing import Any

class CompiledFluidNet:
    name: str
    timed_alone: bool
    clock: None
    shares: None
    sched: Any
    capacity: list[float]
    latency: list[float]
    sent: int
    recomputes: int
    reused: int
    def __init__(self, sched: Any, capacity: Sequence[float], latency: Sequence[float]) -> None: ...
    def send(self, msg: Any) -> None: ...
