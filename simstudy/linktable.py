"""The per-link table (links.parquet): how many bytes each link of the network carried, bin by bin.

A run with `traffic: links` writes it instead of one row per transfer: its size depends on the
links and the run's length, not on the number of transfers, so it stays small at any scale.
Every transfer's bytes are spread evenly over its [start, end] interval on every link of its
route (the same route the simulator used). One row per (link, bin) with traffic; idle bins are
left out. Like the TrafficTable (`simstudy.table`) it is ground-level vocabulary: backends write
it, analyses and the dashboard read it, and both import this module.

Columns (name: dtype, meaning):

* `link`: int32, the link id, its index in the bundle's topology.json `links`;
* `name`: category, `<src node>-><dst node>` (hosts `h<rank>`, switches named by the topology);
* `tier`: category, where the link sits: its ASTRA-SIM dimension (`ring`, `dim1.switch`...) or
  its graph tier (`host`, `edge`, `aggregation`, `core`, `level<k>`);
* `dim`: int16, the ASTRA-SIM dimension of the link, -1 on graph topologies;
* `capacity_gbps`: float64, the link's bandwidth in gigabits per second;
* `t_start_s`: float64, the start of the bin, seconds from the start of the run;
* `bin_s`: float64, the width of the bin, seconds;
* `bytes`: float64, the bytes the link carried in the bin;
* `utilization`: float64, bytes / (capacity x bin width): 1.0 is a link busy the whole bin.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from simstudy.files import replacing

COLUMNS: dict[str, str] = {
    "link": "int32",
    "name": "category",
    "tier": "category",
    "dim": "int16",
    "capacity_gbps": "float64",
    "t_start_s": "float64",
    "bin_s": "float64",
    "bytes": "float64",
    "utilization": "float64",
}

#: What each column means (the documentation's table reference is built from it).
MEANINGS: dict[str, str] = {
    "link": "link id: its index in the bundle's topology.json `links`",
    "name": "`<src node>-><dst node>` (hosts `h<rank>`, switches named by the topology)",
    "tier": "where the link sits: its ASTRA-SIM dimension (`ring`, `dim1.switch`...) or its graph tier "
            "(`intra_host`, `nic`, `spine`, `aggregation`, `core`...)",
    "dim": "ASTRA-SIM dimension of the link, -1 on graph topologies",
    "capacity_gbps": "bandwidth of the link, gigabits per second",
    "t_start_s": "start of the bin, seconds from the start of the run",
    "bin_s": "width of the bin, seconds",
    "bytes": "bytes the link carried in the bin",
    "utilization": "bytes / (capacity x bin width): 1.0 is a link busy the whole bin",
}


class LinkTableError(ValueError):
    """A table that does not follow the link-table schema."""


def make_links(columns: Mapping[str, object]) -> pd.DataFrame:
    """A checked link table from column arrays."""
    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        raise LinkTableError(f"missing columns: {missing}")
    table = pd.DataFrame({c: pd.Series(columns[c]).astype(dtype) for c, dtype in COLUMNS.items()})
    check_links(table)
    return table


def empty_links() -> pd.DataFrame:
    return make_links({c: np.empty(0, dtype=object if d == "category" else d) for c, d in COLUMNS.items()})


def check_links(table: pd.DataFrame, *, source: str = "link table") -> None:
    """Raise LinkTableError unless `table` follows the schema."""
    if list(table.columns) != list(COLUMNS):
        raise LinkTableError(f"{source}: columns {list(table.columns)}, expected {list(COLUMNS)}")
    for c, dtype in COLUMNS.items():
        if str(table[c].dtype) != dtype:
            raise LinkTableError(f"{source}: column {c!r} has dtype {table[c].dtype}, expected {dtype}")
    if len(table) and ((table["bytes"].to_numpy() < 0).any() or (table["bin_s"].to_numpy() <= 0).any()):
        raise LinkTableError(f"{source}: negative bytes or a bin of no width")


def write_links(table: pd.DataFrame, path: str | Path) -> None:
    check_links(table)
    with replacing(path) as tmp:
        table.to_parquet(tmp, index=False)


def read_links(path: str | Path) -> pd.DataFrame:
    table = pd.read_parquet(path)
    check_links(table, source=str(path))
    return table


#: What a bin's utilisation means under each of flowsim's congestion models (run.json's
#: `details.congestion`): the table spreads a transfer's bytes evenly over [start, end].
UTILIZATION_NOTES: dict[str, str] = {
    "fluid": ("Links are shared max-min fairly and each transfer's bytes are spread evenly over its time "
              "in the network, but its rate changes when others start or end: one bin can read above 1 "
              "(up to about 1.3 seen) or below what the link carried; a link's mean utilisation and "
              "bytes are right."),
    "unaware": ("The congestion-unaware model (ASTRA-SIM's) does not share links: every transfer gets its "
                "link's full bandwidth however many others use it, so a bin's utilisation can exceed 1. "
                "Read it as the demand on the link; run with --congestion fluid or aware to see it shared."),
    "aware": ("In the congestion-aware model a message waits in each link's queue, and its bytes are spread "
              "over its whole time in the network, the waits included: a queued link's peak in one bin is "
              "understated, its mean utilisation and its bytes are right."),
}


def utilization_note(congestion: str | None) -> str:
    """How to read the link table's utilisation for a run of this congestion model ('' if unknown)."""
    return UTILIZATION_NOTES.get(congestion or "", "")
