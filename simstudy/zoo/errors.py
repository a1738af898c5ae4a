"""The one error type of the model zoo."""

from __future__ import annotations


class ZooError(ValueError):
    """An unknown model name, or an unknown or invalid builder option."""
