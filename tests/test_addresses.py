"""Every rank's IPv4 address, one rule: as text and as the integer a packet's header holds."""

from __future__ import annotations

import ipaddress

import numpy as np

from simstudy.addresses import RANKS_PER_SUBNET, rank_address, rank_addresses


def test_the_first_ranks_of_each_subnet() -> None:
    assert rank_address(0) == "10.0.0.1"
    assert rank_address(RANKS_PER_SUBNET - 1) == "10.0.0.250"
    assert rank_address(RANKS_PER_SUBNET) == "10.0.1.1"


def test_text_and_integer_forms_agree_and_are_distinct() -> None:
    ranks = np.arange(3 * RANKS_PER_SUBNET + 7)
    numbers = rank_addresses(ranks)
    assert numbers.dtype == np.uint32
    assert [str(ipaddress.IPv4Address(int(n))) for n in numbers] == [rank_address(int(r)) for r in ranks]
    assert len(set(numbers.tolist())) == len(ranks)
