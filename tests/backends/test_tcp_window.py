"""flowsim's TCP without loss (`transport: {model: tcp}`, `flowsim.tcp.Window`): headers, the
congestion window and ACKs behind the other direction's data, on cases computed by hand. The packet
network's side is in test_ns3.py (`test_flowsims_tcp_model_meets_the_packet_network_without_loss`)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from simstudy.backends import simulate
from simstudy.backends.flowsim.tcp import CUBIC_BETA, CUBIC_CNT, Window, message_times
from simstudy.backends.network import Network
from simstudy.compiler.topology_file import topology_of
from simstudy.spec import BackendSpec, Congestion, Scenario, Star
from simstudy.spec.transport import Transport

RTT = 2e6  # ns
SEG = 12_000.0  # ns a segment takes at its link's rate (1 Gbit/s)


def test_slow_start_doubles_the_window_each_round_until_hystart_ends_it() -> None:
    """A new connection: 10 segments, then 20, in slow start (one round each); HyStart ends slow
    start at twice the initial window, and CUBIC then grows one segment per CUBIC_CNT acknowledged."""
    w = Window(10)
    assert w.send_ns(10, 0.0, RTT, fill=1e9, queue=1000, seg_ns=SEG) == pytest.approx(RTT)
    assert (w.cwnd, w.ssthresh, w.lost) == (20, 20, False)
    w.send_ns(40 * CUBIC_CNT, 0.0, RTT, fill=1e9, queue=1000, seg_ns=SEG)
    assert w.cwnd == pytest.approx(60)


def test_cubic_before_a_loss_grows_five_percent_a_round() -> None:
    """From 100 segments, 100 x CUBIC_CNT more double the window: ln 2 / ln 1.05 rounds."""
    w = Window(10)
    w.cwnd = w.ssthresh = 100.0
    t = w.send_ns(100 * CUBIC_CNT, 0.0, RTT, fill=1e9, queue=1000, seg_ns=SEG)
    assert t == pytest.approx(RTT * math.log(2) / math.log(1 + 1 / CUBIC_CNT))
    assert w.cwnd == pytest.approx(200)


def test_a_full_path_sends_at_its_rate_and_a_window_past_the_queue_loses() -> None:
    """A window that fills the path sends every segment at the link's pace; it grows on, and past
    the path's segments in flight plus its queue it loses one: CUBIC cuts it to 0.7 of that, and
    grows one segment a round from then on."""
    w = Window(10)
    w.cwnd = w.ssthresh = 150.0
    fill = RTT / SEG  # 166.7 segments fill a 1 Gbit/s path of 2 ms
    assert w.send_ns(1000, 0.0, RTT, fill, queue=1000, seg_ns=SEG) == pytest.approx(1000 * SEG + (
        RTT * math.log(fill / 150) / math.log(1 + 1 / CUBIC_CNT)) - (fill - 150) * CUBIC_CNT * SEG)
    w.cwnd = 1160.0
    w.send_ns(1000, 0.0, RTT, fill, queue=1000, seg_ns=SEG)
    assert w.lost and w.cwnd == pytest.approx(CUBIC_BETA * (fill + 1000))
    before = w.cwnd
    w.send_ns(2 * before + 1, 0.0, RTT, fill, queue=1000, seg_ns=SEG)  # about one round's worth, twice
    assert w.cwnd == pytest.approx(math.sqrt(before**2 + 2 * (2 * before + 1)))


def test_a_burst_larger_than_the_queue_loses_what_does_not_fit() -> None:
    """A message's first burst is the window's room (the window less what the last message has
    unacknowledged); what does not fit the first queue is lost: the window is cut, the lost segments
    go again and the link idles for what of a round trip the queue does not cover."""
    w = Window(10)
    w.cwnd = w.ssthresh = 2000.0
    w.last_ns, w.pace = 0.0, 1 / (4 * SEG)  # the last message left at t=0, a segment every 4 SEG
    lost = w.start(RTT / 2, RTT, queue=1000, seg_ns=SEG)  # half a round trip later: 1e6/4/SEG unacknowledged
    in_flight = RTT / 2 / (4 * SEG)
    assert lost == pytest.approx(max(0.0, RTT - 1000 * SEG) + (2000 - in_flight - 1000) * SEG)
    assert w.lost and w.cwnd == pytest.approx(CUBIC_BETA * 2000)
    assert w.start(10 * RTT, RTT, queue=1500, seg_ns=SEG) == 0.0  # 1400 segments fit 1500: none lost
    assert w.cwnd == pytest.approx(CUBIC_BETA * 2000)  # and the window stays as it was


def star(gbps: float, rtt_ms: float, model: str = "tcp") -> Network:
    transport = Transport(model=model)  # type: ignore[arg-type]
    return Network.from_topology(topology_of(Star(npus=2, bandwidth_gbps=gbps, latency_ns=rtt_ms * 1e6 / 4,
                                                  transport=transport)))


@pytest.mark.parametrize("mode", [Congestion.FLUID, Congestion.UNAWARE])
def test_a_warm_message_on_a_short_path_takes_its_headers_at_the_link_rate(mode: Congestion) -> None:
    """1 Gbit/s, 0.2 ms round trip: 17 segments fill the path, the initial window covers it, and a
    message takes its latency plus its bytes with 54 bytes of headers a segment at the link rate
    (ns-3: 8.81 ms for 1 MiB); the ideal transport takes its bytes at the link rate alone."""
    size = 1 << 20
    rate = 1e9 / 8 / 1e9  # bytes a ns
    latency = 100_000
    got = message_times(star(1, 0.2), 0, 1, size, 3, mode=mode)
    assert got[-1] == pytest.approx(latency + size * (1448 + 52 + 2) / 1448 / rate, rel=1e-3)
    ideal = message_times(star(1, 0.2, "ideal"), 0, 1, size, 3, mode=mode)
    assert ideal == [int(latency + size / rate)] * 3


@pytest.mark.parametrize("mode", [Congestion.FLUID, Congestion.UNAWARE])
def test_a_message_each_way_waits_for_its_acks_behind_the_other_ways_data(mode: Congestion) -> None:
    """At 1 Gbit/s and 2 ms, a window of about the path (170 segments) goes out in 2 ms, past half
    the round trip: a message each way at once takes longer than one way; at 10 Gbit/s the same
    window goes out in 0.2 ms and both ways take what one does."""
    one = message_times(star(1, 2), 0, 1, 1 << 20, 5, mode=mode)
    both = message_times(star(1, 2), 0, 1, 1 << 20, 5, both_ways=True, mode=mode)
    assert both[-1] > 1.2 * one[-1]
    one = message_times(star(10, 2), 0, 1, 1 << 20, 5, mode=mode)
    both = message_times(star(10, 2), 0, 1, 1 << 20, 5, both_ways=True, mode=mode)
    assert both[-1] == pytest.approx(one[-1], rel=1e-6)


def lstm(model: str) -> Scenario:
    spec: dict[str, Any] = {
        "name": "lstm2", "model": "lstm_lm", "parallelism": {"dp": 2},
        "topology": {"kind": "star", "npus": 2, "bandwidth_gbps": 1, "latency_ns": 500_000,
                     "transport": {"model": model}},
        "training": {"iterations": 2},
    }
    return Scenario.model_validate(spec)


@pytest.mark.parametrize("mode", ["fluid", "unaware"])
def test_a_run_with_the_tcp_model_is_slower_than_the_ideal_transport(tmp_path: Any, mode: str) -> None:
    """The 2-rank LSTM of issue 38 on a 1 Gbit/s star with a 2 ms round trip: the TCP model's run
    (headers, windows) finishes later than the ideal transport's, on the Python engine (the compiled
    core has no TCP model: a run that asks for it on `auto` runs on Python); aware keeps the link rate."""
    backend = BackendSpec(congestion=mode, traffic="none")
    ideal = simulate(lstm("ideal"), tmp_path / "ideal", backend)
    tcp = simulate(lstm("tcp"), tmp_path / "tcp", backend)
    assert tcp.finish_ns > 1.05 * ideal.finish_ns
    assert tcp.details["engine"] == "python"
    aware = BackendSpec(congestion="aware", traffic="none")
    assert simulate(lstm("tcp"), tmp_path / "a1", aware).finish_ns == simulate(lstm("ideal"), tmp_path / "a2",
                                                                                  aware).finish_ns
