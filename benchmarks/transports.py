"""The benchmarks' one way to run a spec over another transport."""

from __future__ import annotations

from typing import Any, TypeVar

S = TypeVar("S")


def with_transport(spec: S, **update: Any) -> S:
    """The scenario (or cluster) with these fields of its `topology.transport` changed (for example
    `kind="roce"`, `model="tcp"`, `send_buffer_kib=128`)."""
    topo = spec.topology  # type: ignore[attr-defined]
    transport = topo.transport.model_copy(update=update)
    return spec.model_copy(update={"topology": topo.model_copy(update={"transport": transport})})  # type: ignore[attr-defined,no-any-return]
