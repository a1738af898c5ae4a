"""The TrafficTable: the one table simulation, capture and analysis share.

One row per transfer (simulation) or per packet (capture; start == end). Declared once here;
every producer calls `check_table` before handing a table on.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from simstudy.files import replacing

#: Required columns and their dtypes, in order.
REQUIRED: dict[str, str] = {
    "t_start_s": "float64",
    "t_end_s": "float64",
    "src": "int32",
    "dst": "int32",
    "bytes": "int64",
    "flow": "int64",
    "op": "category",
}

#: Optional columns and their dtypes.
OPTIONAL: dict[str, str] = {
    "iteration": "int32",
    "link": "category",
    "sport": "int32",
    "dport": "int32",
    "payload_bytes": "int64",
    "chunk": "int32",
    "step": "int32",
    "job": "int32",
}

#: The `op` values producers use.
OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "push", "pull", "p2p", "tcp", "udp", "ip", "control",
       "broadcast")

#: What each column means (the documentation's table reference is built from it).
MEANINGS: dict[str, str] = {
    "t_start_s": "start of the transfer, seconds from the start of the trace",
    "t_end_s": "end of the transfer (equal to the start for a captured packet)",
    "src": "sending endpoint: a rank (captures map address or address:port to ranks); with in-network aggregation "
           "a switch, numbered from the ranks' count up (run.json's details.switch_endpoints names them)",
    "dst": "receiving endpoint",
    "bytes": "bytes of the transfer; for a packet its IP total length, whatever the snap length",
    "flow": "flow id: a hash of the 5-tuple for captures; collective, step and chunk for simulation",
    "op": "what caused it: " + ", ".join(OPS),
    "iteration": "training iteration of the transfer (simulation; marked iterations of a capture)",
    "link": "the link a packet was seen on (captures of several interfaces)",
    "sport": "TCP/UDP source port (captures)",
    "dport": "TCP/UDP destination port (captures)",
    "payload_bytes": "TCP/UDP payload bytes a packet's connection sent for the first time with it (captures: a "
                     "retransmitted byte counts once, bytes the capture lacks count at the packet after them; what "
                     "`--count payload` counts)",
    "chunk": "chunk of a collective (simulation)",
    "step": "step of a collective algorithm (simulation)",
    "job": "job index of a cluster run (several jobs on one network); a switch's transfer has its destination "
           "rank's job, -1 between two switches",
}


class TrafficTableError(ValueError):
    """A table that does not follow the TrafficTable schema."""


def empty_table() -> pd.DataFrame:
    """A table with the required columns and no rows."""
    cols: dict[str, object] = {c: np.empty(0, dtype="float64" if c.startswith("t_") else "int64") for c in REQUIRED}
    cols["op"] = np.empty(0, dtype=object)
    return make_table(cols)


def make_table(columns: Mapping[str, object]) -> pd.DataFrame:
    """Build a checked TrafficTable from column arrays (required first, optional after)."""
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise TrafficTableError(f"missing required columns: {missing}")
    unknown = [c for c in columns if c not in REQUIRED and c not in OPTIONAL]
    if unknown:
        raise TrafficTableError(f"unknown columns: {unknown}; optional columns are {list(OPTIONAL)}")
    order = [*REQUIRED, *(c for c in OPTIONAL if c in columns)]
    data = {}
    for c in order:
        dtype = REQUIRED.get(c) or OPTIONAL[c]
        data[c] = pd.Series(columns[c]).astype(dtype)
    table = pd.DataFrame(data)
    check_table(table)
    return table


def check_table(table: pd.DataFrame, *, source: str = "traffic table") -> None:
    """Raise TrafficTableError unless `table` follows the schema."""
    cols = list(table.columns)
    for c, dtype in REQUIRED.items():
        if c not in table.columns:
            raise TrafficTableError(f"{source}: missing required column {c!r}")
        if str(table[c].dtype) != dtype:
            raise TrafficTableError(f"{source}: column {c!r} has dtype {table[c].dtype}, expected {dtype}")
    for c in cols:
        if c in REQUIRED:
            continue
        if c not in OPTIONAL:
            raise TrafficTableError(f"{source}: unknown column {c!r}")
        if str(table[c].dtype) != OPTIONAL[c]:
            raise TrafficTableError(f"{source}: column {c!r} has dtype {table[c].dtype}, expected {OPTIONAL[c]}")
    if len(table):
        start = table["t_start_s"].to_numpy()
        end = table["t_end_s"].to_numpy()
        if not (np.isfinite(start).all() and np.isfinite(end).all()):
            raise TrafficTableError(f"{source}: non-finite times")
        if (end < start).any():
            raise TrafficTableError(f"{source}: a row ends before it starts")
        if (table["bytes"].to_numpy() < 0).any():
            raise TrafficTableError(f"{source}: negative bytes")


def write_table(table: pd.DataFrame, path: str | Path) -> None:
    """Write a checked table to Parquet atomically."""
    check_table(table)
    with replacing(path) as tmp:
        table.to_parquet(tmp, index=False)


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a TrafficTable from Parquet and check it."""
    table = pd.read_parquet(path)
    check_table(table, source=str(path))
    return table
