"""flowsim's TCP under loss (`flowsim.tcp`): what a lost packet costs a message."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simstudy.backends import simulate
from simstudy.backends.flowsim.tcp import TAIL_SEGMENTS, TcpPaths
from simstudy.spec import BackendSpec, Scenario
from simstudy.spec.transport import Transport


def paths(loss: float, *, seed: int = 1, latency: float = 25_000.0, recovery: str = "rack_tlp") -> TcpPaths:
    """Two links of 10 Gbit/s, the second losing packets."""
    return TcpPaths(Transport(seed=seed, loss_recovery=recovery), [1.25, 1.25], [latency, latency],  # type: ignore[arg-type]
                    [0.0, loss])


@settings(max_examples=25, deadline=None)
@given(size=st.integers(1, 64 << 20), loss=st.floats(0.0005, 0.05), seed=st.integers(1, 10**6))
def test_drawn_timeouts_average_to_the_expected_delay(size: int, loss: float, seed: int) -> None:
    """`delay_ns` draws what `mean_delay_ns` expects: the mean of many draws is within five
    standard errors of it (the benchmark compares the expectation with the packet network). A
    standard error means something only over enough delays: rare ones (a one-segment message at
    0.05% loss is delayed once in 2,000 draws, and 4,000 draws had none 13% of the time) are drawn
    until at least 40 draws were delayed."""
    tcp = paths(loss, seed=seed)
    keys = (0, 1)
    p, rtt = tcp.path(keys)
    assert p == pytest.approx(loss)
    drawn: list[float] = []
    while len(drawn) < 400_000 and (len(drawn) < 4000 or np.count_nonzero(drawn) < 40):
        drawn.extend(tcp.delay_ns(size, keys) for _ in range(4000))
    draws = np.array(drawn, dtype=float)
    want = tcp.mean_delay_ns(size, p, rtt)
    sem = draws.std() / math.sqrt(len(draws))
    assert abs(draws.mean() - want) <= 5 * sem + 1e-9 * want + 1.0


@pytest.mark.parametrize("recovery", ["rfc6675", "rack_tlp"])
def test_the_tail_is_a_timeout_or_a_probe(recovery: str) -> None:
    """A message of at most TAIL_SEGMENTS segments loses its tail whenever a segment is lost: at 1%
    loss about 3% of 4 KiB messages wait for the 200 ms retransmission timeout under RFC 6675.
    Under Linux's RACK-TLP a tail loss probe (max(2 RTT, 10 ms)) repairs it, but where the last
    segment is lost alone (p) Linux arms the probe 2 SRTT plus the minimum RTO on: a one-segment
    message waits that long whenever it is lost, and a two-segment one never (the first segment's
    ACK is delayed, two are out). A 16 MiB message's mean, over a 10 ms round trip, is mostly its
    bytes at the loss-limited window's rate."""
    tcp = paths(0.01, latency=2_500_000.0, recovery=recovery)
    p, rtt = tcp.path((0, 1))
    small, big = 4096, 16 << 20
    _, tail_cost, alone_cost = tcp.costs(p, rtt)
    rto = tcp.rto_ns(rtt)
    if recovery == "rfc6675":
        assert tcp.mean_delay_ns(small, p, rtt) == pytest.approx((1 - (1 - p) ** TAIL_SEGMENTS) * tail_cost)
        assert tail_cost >= 200e6
    else:
        probe = max(2 * rtt, 10e6) + rtt / 2
        assert tail_cost == pytest.approx((1 - p) * probe + p * rto, rel=0.01) and tail_cost < 0.3 * rto
        assert alone_cost == pytest.approx(min(2 * rtt + 200e6, rto * (1 + p)) + rtt / 2, rel=0.01)
        assert alone_cost > 200e6
        assert tcp.mean_delay_ns(1000, p, rtt) == pytest.approx(p * alone_cost)
        assert tcp.mean_delay_ns(2 * 1448, p, rtt) == pytest.approx((1 - (1 - p) ** 2) * tail_cost)
        probed = (1 - p) * (1 - (1 - p) ** 2)
        assert tcp.mean_delay_ns(small, p, rtt) == pytest.approx(p * alone_cost + probed * tail_cost)
    assert tcp.mean_delay_ns(big, p, rtt) < big / tcp.rate_cap(p, rtt)
    assert tcp.rate_cap(0.0, rtt) == math.inf and tcp.mean_delay_ns(big, 0.0, rtt) == 0


def lossy(loss: float, recovery: str = "rfc6675", seed: int = 1) -> Scenario:
    return Scenario.model_validate({
        "name": "lossy", "model": "small_cnn", "parallelism": {"dp": 4},
        "topology": {"kind": "star", "npus": 4, "bandwidth_gbps": 1, "latency_ns": 20_000, "loss": loss,
                     "transport": {"loss_recovery": recovery, "seed": seed}},
        "training": {"batch_size_per_worker": 8, "iterations": 20}})


def durations_ms(result: Any) -> Any:
    t = result.traffic
    return ((t["t_end_s"] - t["t_start_s"]) * 1e3).to_numpy()


@pytest.mark.parametrize("mode", ["fluid", "unaware"])
def test_loss_costs_timeouts_not_capacity(mode: str, tmp_path: Path) -> None:
    """With 0.1% loss per link and RFC 6675 recovery, a message that loses nothing takes what it
    takes without loss (the loss-limited window is above the link's rate here) and a few wait for a
    timeout (200 ms minimum RTO), which desynchronises the ranks (the others start the next
    collective); with Linux's RACK-TLP the same losses cost tail loss probes of about 10 ms instead.
    A run is reproducible from the transport's seed, another seed stalls other messages, and
    without loss the run is what it always was (every collective alone on its links: each plan's first
    one message by message, the rest timed alone, none replayed)."""
    spec = BackendSpec(congestion=mode)  # type: ignore[arg-type]
    clean = simulate(lossy(0.0), tmp_path / "clean", spec)
    a = simulate(lossy(0.001), tmp_path / "a", spec)
    b = simulate(lossy(0.001), tmp_path / "b", spec)
    assert [r.finish_ns for r in a.ranks] == [r.finish_ns for r in b.ranks]
    assert clean.details["fast"] > 0 and clean.details["replayed"] == 0 and a.details["fast"] == 0
    base, d = durations_ms(clean), durations_ms(a)
    assert d.min() == pytest.approx(base.min(), rel=1e-6)
    assert 0 < np.count_nonzero(d > 200) < len(d) / 10
    assert a.finish_ns > clean.finish_ns + 200e6
    c = simulate(lossy(0.001, seed=7), tmp_path / "c", spec)
    assert not np.array_equal(durations_ms(c), d)
    assert a.output.total_bytes == clean.output.total_bytes
    rack = durations_ms(simulate(lossy(0.001, "rack_tlp"), tmp_path / "rack", spec))
    assert np.count_nonzero(rack > 200) < np.count_nonzero(d > 200)
    assert np.count_nonzero((rack > base.max() + 9) & (rack < base.max() + 30)) > 0  # probes, ~10 ms
