"""The sweep layer's error (its own module, so that every executor can raise it without importing another)."""


class SweepError(ValueError):
    """A sweep that cannot start: an unknown executor, an unreachable scheduler, a bad baseline."""
