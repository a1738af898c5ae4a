"""Traffic tables, pcap ingest and the analysis pipeline (knows nothing of specs or backends)."""

from simstudy.table import (
    OPTIONAL,
    REQUIRED,
    TrafficTableError,
    check_table,
    empty_table,
    make_table,
    read_table,
    write_table,
)

__all__ = [
    "OPTIONAL",
    "REQUIRED",
    "TrafficTableError",
    "check_table",
    "empty_table",
    "make_table",
    "read_table",
    "write_table",
]
