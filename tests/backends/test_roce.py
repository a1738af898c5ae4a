"""RoCE on the packet network (`transport: {kind: roce}`, `backends/ns3/roce.h`): each mechanism shown
by what it does to packets and rates: PFC on an incast, DCQCN on two flows sharing a link, PFC's
head-of-line blocking of a victim flow, go-back-N on loss, and a whole job on RoCE."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simstudy.backends.network import Network
from simstudy.compiler.topology_file import NetworkTopology, topology_of
from simstudy.spec import LeafSpine, Star
from simstudy.spec.transport import Transport

pytestmark = pytest.mark.ns3

#: payload over wire bytes of a full RoCE packet (1024 bytes of payload; IP, UDP, BTH and ICRC, and the
#: point-to-point frame: 46 bytes)
GOODPUT = 1024 / 1070


def roce(**over: Any) -> Transport:
    return Transport.model_validate({"kind": "roce", "roce": over})


def run(topo: NetworkTopology, sends: list[tuple[int, int, int, int]], *, bin_ns: int = 0
        ) -> tuple[list[int], dict[str, Any], dict[str, tuple[int, int]], list[Any]]:
    from simstudy.backends.ns3.probe import arrivals

    return arrivals(topo, sends, bin_ns=bin_ns)


def test_roce_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="above xoff"):
        roce(pfc={"xoff_kib": 64, "xon_kib": 128})
    with pytest.raises(ValueError, match="not below kmax"):
        roce(ecn={"kmin_kib": 300})
    with pytest.raises(ValueError, match="TCP model is TCP's"):
        Transport(kind="roce", model="tcp")


def test_an_incast_pauses_its_senders_and_loses_nothing(ns3: None) -> None:
    """8 senders, 4 MiB each, into one receiver on a 100 Gbit/s switch: the switch's port to the
    receiver takes 1/8 of what arrives, the bytes waiting from every sender pass xoff, and PFC pauses
    every sender's link: no packet is lost, nothing is sent twice. The same incast without PFC
    overflows the ports' buffers (xoff and the headroom) and go-back-N sends again what they dropped."""
    size = 4 << 20
    star = {"npus": 9, "bandwidth_gbps": 100, "latency_ns": 1000}
    sends = [(s, 0, size, 0) for s in range(1, 9)]
    done, stats, pauses, _ = run(topology_of(Star(**star, transport=roce())), sends)
    assert stats["packets_lost"] == stats["headroom_drops"] == stats["queue_drops"] == 0
    assert stats["go_back_n"] == stats["roce_timeouts"] == 0
    assert stats["data_packets"] == 8 * size // 1024  # every packet sent once
    assert sorted(pauses) == [f"h{s}->s0" for s in range(1, 9)]
    assert all(frames >= 1 and paused_ns > 0 for frames, paused_ns in pauses.values())
    # the receiver's link is the bottleneck: nothing arrives faster than its line rate
    assert max(done) > 8 * size / GOODPUT * 8 / 100
    done, stats, pauses, _ = run(topology_of(Star(**star, transport=roce(pfc={"enabled": False}))), sends)
    assert not pauses and stats["headroom_drops"] > 0 and stats["go_back_n"] > 0
    assert stats["data_packets"] > 8 * size // 1024


def test_two_flows_on_one_link_converge_to_equal_rates(ns3: None) -> None:
    """A flow alone on a 100 Gbit/s link takes its line rate; a second flow to the same receiver 2 ms
    later starts at its line rate too, the switch's queue to the receiver grows past K_min, its marks
    come back as CNPs and DCQCN cuts both senders. From 1 ms after the second flow's start on, in
    every millisecond each has its half of the link within 15%, the two together use at least 90%
    of it, and over the 35 ms both send their rates differ by less than 8% of a half on average
    (5.2% as measured: DCQCN's cuts, proportional to each rate, shrink the difference its equal
    increases keep, and each cut comes with the next CNP)."""
    size = 250_000_000
    ms = 1_000_000
    topo = topology_of(Star(npus=3, bandwidth_gbps=100, latency_ns=1000, transport=roce()))
    done, stats, _, (a, b) = run(topo, [(1, 0, size, 0), (2, 0, size, 2 * ms)], bin_ns=ms)
    link = 100e9 / 8 * GOODPUT / 1e3  # bytes per ms of goodput
    assert a[1] == pytest.approx(link, rel=0.02)  # alone: the line rate
    assert stats["ecn_marks"] > 0 and stats["cnps"] > 0
    both = np.arange(3, done[0] // ms)  # whole milliseconds, from 1 ms after the second flow's start
    assert len(both) >= 30
    half = link / 2
    for k in both:
        assert abs(a[k] - half) <= 0.15 * half and abs(b[k] - half) <= 0.15 * half, f"ms {k}: {a[k]:.0f}, {b[k]:.0f}"
        assert a[k] + b[k] >= 0.9 * link
    assert np.abs(a[both] - b[both]).mean() <= 0.08 * half


def test_a_victim_flow_waits_behind_a_paused_link(ns3: None) -> None:
    """Head-of-line blocking: on a non-blocking leaf-spine at 100 Gbit/s, two hosts of leaf 0 send to
    one host of leaf 1, whose port takes half of what arrives; leaf 1 pauses the spine's link into
    it, which also carries a third flow from leaf 0 to an idle host of leaf 1. That victim gets no
    more than 60% of what it gets alone, though no link of its own is congested. (DCQCN off: PFC
    alone, as a switch without ECN or a NIC without congestion control runs it.)"""
    size = 20_000_000
    spec = {"leaves": 2, "spines": 1, "hosts_per_leaf": 3, "bandwidth_gbps": 100, "latency_ns": 1000,
            "transport": roce(dcqcn={"enabled": False})}
    topo = topology_of(LeafSpine(**spec))
    alone, _, pauses, _ = run(topo, [(2, 4, size, 0)])
    assert not pauses and size * 8 / alone[0] == pytest.approx(100 * GOODPUT, rel=0.02)
    done, stats, pauses, _ = run(topo, [(2, 4, size, 0), (0, 3, 3 * size, 0), (1, 3, 3 * size, 0)])
    assert done[0] > alone[0] / 0.6
    assert pauses["spine0->leaf1"][0] > 0 and pauses["leaf0->spine0"][0] > 0
    assert "leaf1->h4" not in pauses and stats["packets_lost"] == stats["headroom_drops"] == 0


def test_go_back_n_repairs_a_lossy_link(ns3: None) -> None:
    """0.1% of packets lost on every link: a lost data packet leaves a gap, the receiver drops what
    comes after it and sends one NACK, and the sender goes back to it; every message arrives, each
    within a few round trips of its time without loss."""
    size = 1 << 20
    topo = topology_of(Star(npus=2, bandwidth_gbps=100, latency_ns=1000, loss=0.001, transport=roce()))
    sends = [(1, 0, size, k * 200_000) for k in range(20)]
    done, stats, _, _ = run(topo, sends)
    assert stats["packets_lost"] > 0 and stats["nacks"] > 0 and stats["go_back_n"] > 0
    assert stats["roce_timeouts"] == 0
    clean = size / GOODPUT * 8 / 100 + 2000
    took = np.array([done[k] - k * 200_000 for k in range(20)])
    assert (took >= clean * 0.99).all() and (took < 1.5 * clean).all()


def test_a_job_runs_on_roce(ns3: None, tmp_path: Path) -> None:
    """A data-parallel job on RoCE end to end: its ring all-reduce on a queue pair per neighbour, and
    flowsim's fluid with RoCE's headers (`kind: roce`) within 2% of it where no flows meet in a
    queue (0.4% as measured; without the headers 4.4% short)."""
    from simstudy.backends import simulate
    from simstudy.spec import BackendSpec, Scenario

    sc = Scenario.model_validate({
        "name": "roce4", "model": "small_cnn", "parallelism": {"dp": 4, "bucket_size_mib": 0.5},
        "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 100, "latency_ns": 1000,
                     "transport": {"kind": "roce"}},
        "training": {"batch_size_per_worker": 8, "iterations": 2}})
    packets = simulate(sc, tmp_path / "ns3", BackendSpec(name="ns3", traffic="none"))
    fluid = simulate(sc, tmp_path / "fluid", BackendSpec(name="flowsim", congestion="fluid", traffic="none"))
    stats = packets.details["ns3"]
    assert stats["data_packets"] > 0 and stats["connections"] == 4 and stats["packets_lost"] == 0
    assert packets.finish_ns == pytest.approx(fluid.finish_ns, rel=0.02)


@pytest.mark.parametrize(("hosts", "gbps"), [(3, 25), (9, 100)])
def test_flowsims_dcqcn_fluid_meets_the_packet_network(ns3: None, hosts: int, gbps: float) -> None:
    """Two cells of `benchmarks/roce_fluid.py`'s grid, where flows meet in a switch's queue: 1 MiB
    from each of 2 senders at 25 Gbit/s, and from each of 8 at 100 Gbit/s (PFC pauses too). The
    packet network's marks are random, and where they fall decides how far DCQCN cuts (at 25 Gbit/s,
    1.0 to 2.7 ms over 5 seeds): flowsim's DCQCN fluid within 20% of the mean of 5 seeds (+15.8%
    and +5.3% as measured), where fair shares are 66% and 72% short."""
    from simstudy.backends.flowsim.probe import arrivals as fluid_arrivals
    from simstudy.backends.ns3.probe import arrivals

    size = 1 << 20
    sends = [(s, 0, size, 0) for s in range(1, hosts)]
    lasts = []
    for seed in (1, 2, 3, 4, 5):
        topo = topology_of(Star(npus=hosts, bandwidth_gbps=gbps, latency_ns=1000,
                                transport=Transport(kind="roce", seed=seed)))
        lasts.append(max(arrivals(topo, sends)[0]))
    packets = float(np.mean(lasts))
    fluid = max(fluid_arrivals(Network.from_topology(topo), sends))
    fair = max(fluid_arrivals(Network.from_topology(topology_of(Star(
        npus=hosts, bandwidth_gbps=gbps, latency_ns=1000, transport=roce(dcqcn={"enabled": False})))), sends))
    assert fluid == pytest.approx(packets, rel=0.2)
    assert fair < 0.5 * packets
