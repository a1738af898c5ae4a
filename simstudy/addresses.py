"""The IPv4 address of every rank, in one place (layer 0: imports nothing of simstudy).

Rank r has the address 10.0.<r // 250>.<r % 250 + 1>: the capture testbed gives it to the
rank's network namespace (`simstudy.capturing.testbed`), the packet network to the rank's host
(`simstudy.backends.ns3`, whose C++ part is handed each host's address from there),
and a simulated table written as a pcap to the rank's packets (`simstudy.traffic.pcap_write`).
"""

from __future__ import annotations

import ipaddress

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["RANKS_PER_SUBNET", "rank_address", "rank_addresses"]

#: Ranks numbered in each 10.0.<k>.0/24 (hosts 1 to 250 of it).
RANKS_PER_SUBNET = 250


def rank_addresses(ranks: ArrayLike) -> NDArray[np.uint32]:
    """The addresses of `ranks` as 32-bit integers (as IPv4 headers hold them)."""
    r = np.asarray(ranks).astype(np.uint32)
    per = np.uint32(RANKS_PER_SUBNET)
    return np.asarray(np.uint32(10 << 24) + (r // per) * np.uint32(256) + (r % per) + np.uint32(1), dtype=np.uint32)


def rank_address(rank: int) -> str:
    """The address of `rank` as text ("10.0.0.1" for rank 0)."""
    return str(ipaddress.IPv4Address(int(rank_addresses(rank))))
