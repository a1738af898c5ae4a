"""What every analysis of a table shares: the rows it looks at (`training_rows`), what counts as
busy, and the value semantics of its results (`ValueEq`: equal field by field, arrays by content;
`Distribution`: a distribution summarised the same way in memory and in JSON).

See `simstudy.traffic.features` for the conventions of the analysis pipeline.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "CONTROL_OP",
    "MAX_VALUES",
    "ON_THRESHOLD",
    "QUANTILE_LEVELS",
    "Distribution",
    "ValueEq",
    "training_rows",
]

FloatArray = NDArray[np.float64]

#: The `op` of rows that are not training traffic (excluded from every metric).
CONTROL_OP = "control"
#: Quantile levels kept for every distribution: 0, 5, ..., 100 %.
QUANTILE_LEVELS: FloatArray = np.linspace(0.0, 1.0, 21)
#: Most values a distribution (or a timeline series in JSON) keeps.
MAX_VALUES = 2000
#: Default on/off threshold: a bin is "on" when its throughput exceeds this fraction of the
#: peak 1 ms bin. 1 % keeps stray ACKs and keep-alives of a packet capture out of the bursts;
#: 0 makes any bin with bytes "on".
ON_THRESHOLD = 0.01


def _same(a: object, b: object) -> bool:
    """Deep equality with numpy arrays compared by value and NaN equal to NaN."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape
                and a.dtype.kind == b.dtype.kind and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f")))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        return type(a) is type(b) and all(
            _same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b


class ValueEq:
    """Equality by field values (numpy arrays by content, NaN == NaN)."""

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and _same(self, other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class Distribution(ValueEq):
    """A distribution of observations, summarised (see `simstudy.traffic.features`' docstring)."""

    count: int
    """Number of observations."""
    mean: float
    """Mean of all observations (NaN when there are none)."""
    quantiles: FloatArray
    """Quantiles at `QUANTILE_LEVELS` of all observations (empty when there are none)."""
    values: FloatArray
    """Sorted values for distances: every observation, or `MAX_VALUES` evenly spaced quantiles."""

    @classmethod
    def of(cls, x: ArrayLike) -> Distribution:
        v = np.asarray(x, dtype=np.float64).ravel()
        if v.size == 0:
            return cls(0, math.nan, np.zeros(0), np.zeros(0))
        s = np.sort(v)
        values = s if s.size <= MAX_VALUES else np.quantile(s, np.linspace(0.0, 1.0, MAX_VALUES))
        return cls(int(s.size), float(s.mean()), np.quantile(s, QUANTILE_LEVELS), values)

    def quantile(self, q: float) -> float:
        """Quantile `q` (0..1): exact up to `MAX_VALUES` observations, interpolated beyond."""
        return float(np.quantile(self.values, q)) if self.count else math.nan

    @property
    def median(self) -> float:
        return float(self.quantiles[10]) if self.count else math.nan


def training_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows that are training traffic: all but `op == "control"` and rows to or from an
    endpoint without a rank (-1: a host a capture's roles or metadata do not count as a worker
    or server); the table itself when there are none to drop."""
    if len(table) == 0:
        return table
    drop = ((table["op"] == CONTROL_OP).to_numpy() | (table["src"].to_numpy() < 0)
            | (table["dst"].to_numpy() < 0))
    return table[~drop] if drop.any() else table
