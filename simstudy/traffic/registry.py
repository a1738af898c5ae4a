"""One table of analyses: each declares, once, how it is computed, how its result goes to and from
JSON, the scalars it contributes, the distributions it offers for comparison, and the metrics
a validation compares (with their tolerance and whether they judge the job or only the transport).

`simstudy.traffic.features` fills the table (`ANALYSES`) and builds `Features` from it;
`simstudy.traffic.compare` takes its tolerances and levels from it. Adding an analysis is one
entry there plus its typed field on `Features` (a test checks that both agree).

Results are frozen dataclasses (or plain numbers); `encode` and `decode` turn them into JSON
and back from their field types, so a new result type needs no JSON code: floats become numbers
(NaN and infinities null), arrays lists, tuples lists, nested dataclasses objects. A class with
its own `to_json`/`from_json` is written with those.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import numpy as np

__all__ = [
    "JOB",
    "TRANSPORT",
    "Analysis",
    "Context",
    "Level",
    "Metric",
    "decode",
    "encode",
]

R = TypeVar("R")

Level = Literal["job", "transport"]
#: Metrics the verdict is given on: what the training job does (bytes, period, who talks to whom).
JOB: Level = "job"
#: Metrics reported beside the verdict: the shape a transport (TCP, a token bucket, CPU-bound
#: endpoints) gives the traffic within an iteration, which a simulator of the job need not match.
TRANSPORT: Level = "transport"


@dataclass(frozen=True)
class Metric:
    """One compared metric. Its name says how it is measured (see `simstudy.traffic.compare`): a
    scalar name (relative error), '<distribution>:wasserstein' or ':ks', or
    'traffic_matrix:jensen_shannon[_undirected]'."""

    name: str
    tolerance: float
    level: Level
    why: str = ""
    """What the metric says about the job (job level), or why real and simulated traffic may
    differ in it without the simulation being wrong (transport level)."""


class Context:
    """What the analyses of one table share: inputs, and results computed on demand (once each).

    `get(name)` returns the result of analysis `name`, computing it (and what it needs) the
    first time; intermediate series that several analyses use are cached properties of the
    subclass built by `simstudy.traffic.features`."""

    def __init__(self, analyses: Mapping[str, Analysis[Any]]) -> None:
        self._analyses = analyses
        self._results: dict[str, Any] = {}
        self._busy: set[str] = set()

    def get(self, name: str) -> Any:
        if name in self._results:
            return self._results[name]
        if name in self._busy:
            raise RuntimeError(f"analysis {name!r} depends on itself")
        self._busy.add(name)
        try:
            value = self._analyses[name].compute(self)
        finally:
            self._busy.discard(name)
        self._results[name] = value
        return value


@dataclass(frozen=True)
class Analysis(Generic[R]):
    """One analysis of a traffic table, declared once."""

    name: str
    """Its key in `Features` and in features.json."""
    compute: Callable[[Any], R]
    """The result, from the shared `Context` (ask `ctx.get(other)` for what it builds on)."""
    kind: Any
    """The result's type (for reading it back from JSON)."""
    scalars: Callable[[R], Mapping[str, float]] = lambda _: {}
    """Named scalars it contributes to `Features.scalars()` (sweep columns, clustering, relative metrics)."""
    distributions: Mapping[str, Callable[[R], Any]] = field(default_factory=dict)
    """Named `Distribution`s it offers for '<name>:wasserstein' and '<name>:ks' metrics, and how to
    get each from its result."""
    metrics: tuple[Metric, ...] = ()
    """What a validation compares by default, with tolerance and level."""
    encode: Callable[[R], Any] | None = None
    """JSON form (default: `encode` by value)."""
    decode: Callable[[Any], R] | None = None
    """From the JSON form (default: `decode` by `kind`)."""
    doc: str = field(default="", compare=False)

    def to_json(self, value: R) -> Any:
        return self.encode(value) if self.encode is not None else encode(value)

    def from_json(self, data: Any) -> R:
        return self.decode(data) if self.decode is not None else typing.cast(R, decode(data, self.kind))


# ---------------------------------------------------------------------------------------------
# JSON by value and by type


def encode(value: Any) -> Any:
    """A JSON-ready form of a result: NaN and infinities as None, arrays and tuples as lists,
    dataclasses as objects (their own `to_json` when they have one), mapping keys as text."""
    to_json = getattr(value, "to_json", None)
    if callable(to_json) and not isinstance(value, type):
        return to_json()
    if isinstance(value, bool | str | None):
        return value
    if isinstance(value, float | np.floating):
        x = float(value)
        return x if math.isfinite(x) else None
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, np.ndarray):
        return [encode(v) for v in value.tolist()] if value.dtype.kind == "f" else value.tolist()
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def decode(data: Any, kind: Any) -> Any:
    """The inverse of `encode`, guided by the type `kind` (a class or a typing form)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return decode(data, inner[0])
    if origin is Literal:
        return data
    if kind is float:
        return math.nan if data is None else float(data)
    if kind in (int, str, bool):
        return kind(data)
    if kind is Any:
        return data
    if origin is np.ndarray:
        dtype = typing.get_args(args[1])[0] if len(args) == 2 else np.float64
        return np.asarray([math.nan if v is None else v for v in data] if dtype is np.float64 else data,
                          dtype=dtype)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(v, args[0]) for v in data)
        return tuple(decode(v, a) for v, a in zip(data, args, strict=True))
    if origin is list:
        return [decode(v, args[0]) for v in data]
    if origin in (dict, Mapping):
        key, val = args
        return {decode(k, key): decode(v, val) for k, v in data.items()}
    if isinstance(kind, type):
        from_json = getattr(kind, "from_json", None)
        if callable(from_json):
            return from_json(data)
        if dataclasses.is_dataclass(kind):
            hints = _hints(kind)
            missing = dataclasses.MISSING
            return kind(**{f.name: decode(data[f.name], hints[f.name]) for f in dataclasses.fields(kind)
                           if f.init and (f.name in data or (f.default is missing and f.default_factory is missing))})
    raise TypeError(f"cannot read {kind!r} from JSON")


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    got = _HINTS.get(cls)
    if got is None:
        import sys

        module = sys.modules[cls.__module__]
        got = _HINTS[cls] = typing.get_type_hints(cls, vars(module))
    return got

