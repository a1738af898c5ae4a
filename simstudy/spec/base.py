"""The base of every spec type: frozen pydantic models that reject unknown fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """A pure, immutable value. Unknown fields are an error, not silently ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")
