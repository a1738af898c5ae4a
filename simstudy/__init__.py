"""simstudy: a study harness for the network traffic of distributed deep-learning training.

The public API (`simstudy.api`) is exported here::

    import simstudy as s

    result = s.sweep(s.load_study("specs/cnn_vs_rnn.yaml"))
    result.summary.shape

It is imported on first use, so ``import simstudy`` stays cheap. No subpackage shares a name with
an API function: the scenario compiler is ``simstudy.compiler``, sweeps are ``simstudy.sweeps``,
validation is ``simstudy.validation``, real captures are ``simstudy.capturing`` and the dashboard is
``simstudy.report.dashboard``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simstudy.version import __version__

if TYPE_CHECKING:
    from simstudy.api import (
        InputError,
        Run,
        StudyResult,
        Verdict,
        analyze,
        analyze_counters,
        capture,
        cluster,
        compile,
        dashboard,
        estimate,
        export_counters,
        fit,
        load_counters,
        load_spec,
        load_study,
        load_traffic,
        models,
        open_run,
        open_study,
        run,
        sweep,
        trace,
        validate,
        validate_counters,
    )

__all__ = [
    "InputError",
    "Run",
    "StudyResult",
    "Verdict",
    "__version__",
    "analyze",
    "analyze_counters",
    "capture",
    "cluster",
    "compile",
    "dashboard",
    "estimate",
    "export_counters",
    "fit",
    "load_counters",
    "load_spec",
    "load_study",
    "load_traffic",
    "models",
    "open_run",
    "open_study",
    "run",
    "sweep",
    "trace",
    "validate",
    "validate_counters",
]

_API = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    """The API's `name`, imported from `simstudy.api` when first used (PEP 562)."""
    if name in _API:
        from simstudy import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'simstudy' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
