"""Vocabulary of the pcap reader: the reader's error, interfaces and the result of reading a file (link
types are `simstudy.traffic.pcap.links`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

I64 = NDArray[np.int64]
Mask = NDArray[np.bool_]
Rel = int | I64  # a byte offset relative to each packet's start: one for all, or one per packet
DType = np.dtype[Any] | type[np.generic]

DEFAULT_CHUNK_BYTES: Final = 64 << 20
BLOCK_PACKETS: Final = 16384  # packets decoded together (their bytes stay in cache)
ROW_BYTES: Final = 128  # bytes of each scattered record copied together (record header and packet headers)
MAX_CAPLEN: Final = 262144  # largest captured length libpcap accepts unless the snap length is larger

OK: Final = 0
NON_IP: Final = 1
MALFORMED: Final = 2


class PcapError(ValueError):
    """A capture file that cannot be read (wrong format, unsupported link type, unknown interface)."""


class PcapWarning(UserWarning):
    """Part of a capture was not read (a truncated or corrupt record, a cut header); the reader
    also lists these in `PcapResult.warnings`, which the CLI prints."""


@dataclass(frozen=True)
class Interface:
    """One capture interface: classic pcap has exactly one; pcapng one per Interface Description Block."""

    link_type: int
    snaplen: int
    ts_units_per_s: int = 1_000_000  # timestamp resolution (pcapng if_tsresol)
    ts_offset_s: int = 0  # pcapng if_tsoffset


@dataclass(frozen=True, eq=False)
class PcapResult:
    """One capture file read into a packet table (columns in the module docstring)."""

    path: Path
    format: str  # "pcap" or "pcapng"
    byte_order: str  # "little" or "big" (pcapng: of the first section)
    nanosecond: bool  # timestamps finer than a microsecond
    interfaces: tuple[Interface, ...]
    packets: pd.DataFrame
    records_read: int  # packet records read, including the dropped ones
    skipped_non_ip: int  # frames whose link header says neither IPv4 nor IPv6 (ARP, LLDP...)
    skipped_malformed: int  # IP frames whose IP header is not captured or is invalid
    l4_truncated: int  # TCP/UDP packets whose transport header was cut by the snap length (20/8 assumed)
    warnings: list[str] = field(default_factory=list)

    @property
    def link_type(self) -> int:
        """The link type of the (first) interface, or -1 when a pcapng file defines none."""
        return self.interfaces[0].link_type if self.interfaces else -1

    @property
    def snaplen(self) -> int:
        """The snap length of the (first) interface, or 0 when a pcapng file defines none."""
        return self.interfaces[0].snaplen if self.interfaces else 0
