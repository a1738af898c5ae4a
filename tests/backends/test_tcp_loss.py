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


def paths(loss: float, *, seed: int = 1, latency: float = 25_000.0) -> TcpPaths:
    """Two links of 10 Gbit/s, the second losing packets."""
    return TcpPaths(Transport(seed=seed), [1.25, 1.25], [latency, latency], [0.0, loss])


@settings(max_examples=25, deadline=None)
@given(size=st.integers(1, 64 << 20), loss=st.floats(0.0005, 0.05), seed=st.integers(1, 10**6))
def test_drawn_timeouts_average_to_the_expected_delay(size: int, loss: float, seed: int) -> None:
    """`delay_ns` draws what `mean_delay_ns` expects: the mean of many draws is within five
    standard errors of it (the benchmark compares the expectation with the packet network)."""
    tcp = paths(loss, seed=seed)
    keys = (0, 1)
    p, rtt = tcp.path(keys)
    assert p == pytest.approx(loss)
    draws = np.array([tcp.delay_ns(size, keys) for _ in range(4000)], dtype=float)
    want = tcp.mean_delay_ns(size, p, rtt)
    sem = draws.std() / math.sqrt(len(draws))
    assert abs(draws.mean() - want) <= 5 * sem + 1e-9 * want + 1.0


def test_the_tail_is_a_timeout_and_short_messages_feel_it_most() -> None:
    """A message of at most TAIL_SEGMENTS segments times out whenever a segment is lost: at 1% loss
    a 4 KiB message waits 200 ms in about 3% of cases, so its mean is mostly timeouts, while a
    16 MiB message's, over a 10 ms round trip, is mostly its bytes at the loss-limited window's rate."""
    tcp = paths(0.01, latency=2_500_000.0)
    p, rtt = tcp.path((0, 1))
    small, big = 4096, 16 << 20
    tail_cost = tcp.costs(p, rtt)[1]
    assert tcp.mean_delay_ns(small, p, rtt) == pytest.approx((1 - (1 - p) ** TAIL_SEGMENTS) * tail_cost)
    assert tcp.mean_delay_ns(small, p, rtt) > small / tcp.rate_cap(p, rtt)
    assert tcp.mean_delay_ns(big, p, rtt) < big / tcp.rate_cap(p, rtt)
    assert tcp.rate_cap(0.0, rtt) == math.inf and tcp.mean_delay_ns(big, 0.0, rtt) == 0


def lossy(loss: float, mode: str = "fluid", **over: Any) -> Scenario:
    return Scenario.model_validate({
        "name": "lossy", "model": "small_cnn", "parallelism": {"dp": 4},
        "topology": {"kind": "star", "npus": 4, "bandwidth_gbps": 1, "latency_ns": 20_000, "loss": loss},
        "training": {"batch_size_per_worker": 8, "iterations": 20}, **over})


def durations_ms(result: Any) -> Any:
    t = result.traffic
    return ((t["t_end_s"] - t["t_start_s"]) * 1e3).to_numpy()


@pytest.mark.parametrize("mode", ["fluid", "unaware"])
def test_loss_costs_timeouts_not_capacity(mode: str, tmp_path: Path) -> None:
    """With 0.1% loss per link, a message that loses nothing takes what it takes without loss (the
    loss-limited window is above the link's rate here) and a few wait for a timeout (200 ms
    minimum RTO), which desynchronises the ranks (the others start the next collective); a run
    is reproducible from the transport's seed and another seed stalls other messages; without loss
    the run is what it always was (every collective timed alone)."""
    spec = BackendSpec(congestion=mode)  # type: ignore[arg-type]
    clean = simulate(lossy(0.0), tmp_path / "clean", spec)
    a = simulate(lossy(0.001), tmp_path / "a", spec)
    b = simulate(lossy(0.001), tmp_path / "b", spec)
    assert [r.finish_ns for r in a.ranks] == [r.finish_ns for r in b.ranks]
    assert clean.details["detailed"] == 0 and a.details["fast"] == 0
    base, d = durations_ms(clean), durations_ms(a)
    assert d.min() == pytest.approx(base.min(), rel=1e-6)
    assert 0 < np.count_nonzero(d > 200) < len(d) / 10
    assert a.finish_ns > clean.finish_ns + 200e6
    reseeded = lossy(0.001, topology={"kind": "star", "npus": 4, "bandwidth_gbps": 1, "latency_ns": 20_000,
                                      "loss": 0.001, "transport": {"seed": 7}})
    c = simulate(reseeded, tmp_path / "c", spec)
    assert not np.array_equal(durations_ms(c), d)
    assert a.output.total_bytes == clean.output.total_bytes
