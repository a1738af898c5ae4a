"""The base of every spec type: frozen pydantic models that reject unknown fields."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """A pure, immutable value. Unknown fields are an error, not silently ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class FieldError(ValueError):
    """A validator's complaint about one field below the model that raises it (`parallelism.tp`),
    so that the error the user sees names that field instead of the model as a whole."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(message)


def listed(words: Sequence[str]) -> str:
    """Words as a sentence lists them: `a, b or c`."""
    return ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else "".join(words)
