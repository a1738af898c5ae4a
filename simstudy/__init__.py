"""simstudy: a study harness for the network traffic of distributed deep-learning training.

The public API (`simstudy.api`) is exported here::

    import simstudy as s

    result = s.sweep(s.load_study("specs/cnn_vs_rnn.yaml"))
    result.summary.shape

It is imported on first use, so ``import simstudy`` stays cheap. Three of its functions share their
names with subpackages (``simstudy.compile``, ``simstudy.sweep``, ``simstudy.validate``): on the
package the name is the function; the subpackage is imported by its full name
(``from simstudy.sweep import run_study``), which works as before.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

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


def _api_name(name: str) -> property:
    """A package attribute that is always the API's `name`.

    It stays so after the import system binds the subpackage of the same name on the package (which
    it does when the subpackage is first imported).
    """

    def get(_module: types.ModuleType) -> Any:
        from simstudy import api

        return getattr(api, name)

    def put(_module: types.ModuleType, value: Any) -> None:
        if not isinstance(value, types.ModuleType):
            raise AttributeError(f"simstudy.{name} is the API's {name}; it cannot be replaced")

    return property(get, put)


class _Package(types.ModuleType):
    """The simstudy package, whose API names are read from `simstudy.api` when first used."""

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *__all__})


for _name in _API:
    setattr(_Package, _name, _api_name(_name))
sys.modules[__name__].__class__ = _Package
del _name
