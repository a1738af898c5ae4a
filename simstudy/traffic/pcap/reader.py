"""`read_pcap`: one capture file of either format into a packet table."""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

from simstudy.traffic.pcap.base import DEFAULT_CHUNK_BYTES, PcapError, PcapResult
from simstudy.traffic.pcap.buffer import Mapped
from simstudy.traffic.pcap.classic import read_classic
from simstudy.traffic.pcap.pcapng import SHB, read_pcapng


def read_pcap(path: str | Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> PcapResult:
    """Read a pcap or pcapng file into one row per IP packet (see the module docstring).

    Raises PcapError (a ValueError) for a file that is neither pcap nor pcapng, an unsupported link
    type, or a packet on an undefined interface. A truncated last record or a corrupt record header
    ends the read with a warning (in `warnings`, and through `warnings.warn`) that says how many
    records were read.
    """
    path = Path(path)
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    mapped = Mapped(path)
    try:
        head = bytes(mapped.buf.u8[:4])
        if len(head) < 4:
            raise PcapError(f"{path}: not a pcap or pcapng file: it is only {mapped.buf.n} bytes long")
        if struct.unpack("<I", head)[0] == SHB:
            result = read_pcapng(path, mapped.buf, chunk_bytes)
        else:
            result = read_classic(path, mapped.buf, chunk_bytes)
    finally:
        mapped.close()
    for message in result.warnings:
        warnings.warn(message, stacklevel=2)
    return result
