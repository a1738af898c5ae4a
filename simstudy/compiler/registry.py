"""The check that a compiler table covers the spec's kinds, once each (aggregation kinds, framework presets)."""

from __future__ import annotations

from collections.abc import Iterable


def require_complete(table: Iterable[str], spec: Iterable[str], where: str) -> None:
    """Raise ImportError unless the compiler's table `where` names exactly the spec's kinds, in the spec's order."""
    have, want = list(table), list(spec)
    if have != want:
        raise ImportError(f"{where}: the compiler has {have}, the spec {want}; register every one, in the spec's "
                          "order, once")
