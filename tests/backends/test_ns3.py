"""The packet network: flowsim's workload and system layer with every message on ns-3's TCP.

Tests that need ns-3's wheel take the `ns3` fixture (skipped with the reason without it, failed
under CI, which installs it). Scenarios are small (a few MB per iteration): the packet network
simulates every packet.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from simstudy import layout
from simstudy.backends import BackendError, simulate
from simstudy.backends.flowsim.tcp import message_times as tcp_message_times
from simstudy.backends.network import Network
from simstudy.backends.ns3 import probe
from simstudy.cli import main
from simstudy.compiler.topology_file import topology_of
from simstudy.spec import BackendSpec, Scenario, Star
from simstudy.spec.transport import Transport
from simstudy.traffic.features import analyze
from simstudy.traffic.sources import load_traffic
from simstudy.validation import payload_view

pytestmark = pytest.mark.ns3


def scenario(**over: Any) -> Scenario:
    base: dict[str, Any] = {
        "name": "tiny", "model": "small_cnn",
        "parallelism": {"dp": 4, "bucket_size_mib": 0.5},
        "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10, "latency_ns": 1000},
        "training": {"batch_size_per_worker": 8, "iterations": 2},
    }
    base.update(over)
    return Scenario.model_validate(base)


def test_without_the_wheel_ns3_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("simstudy.backends.ns3.available", lambda: False)
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(scenario().model_dump(mode="json")))
    assert main(["run", str(spec), "--backend", "ns3", "-o", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ns3" in err[0] and "pip install" in err[0]
    assert not (tmp_path / "r").exists()


def test_one_flow_per_link_agrees_with_fluid(ns3: None, tmp_path: Path) -> None:
    """A ring all-reduce on a ring: every link carries one message at a time. ns-3's TCP is slower
    than fluid's flows by its headers (52 bytes of IP and TCP per 1448 of payload: 3.6%), a 2-byte
    PPP header per packet and the first message's slow start; compute is the same."""
    sc = scenario()
    fluid = simulate(sc, tmp_path / "fluid", BackendSpec())
    packets = simulate(sc, tmp_path / "ns3", BackendSpec(name="ns3"))
    ratio = packets.finish_ns / fluid.finish_ns
    assert 1.0 <= ratio < 1.05, ratio
    assert packets.output.total_bytes == fluid.output.total_bytes
    assert packets.details["ns3"]["packets_lost"] == 0 and packets.details["ns3"]["timeouts"] == 0
    assert packets.details["congestion"] == "ns3"  # one name from the CLI to run.json
    assert 0 < packets.details["ns3"]["ns3_s"] < packets.wall_time_s  # time inside ns-3, within the run's


@pytest.mark.parametrize("framework", ["pytorch_ddp", "tensorflow_mwms"])
def test_pcaps_hold_the_traffic_table(ns3: None, framework: str, tmp_path: Path) -> None:
    """`--traffic pcap`: one pcap per rank interface that reads as a capture: the payload between
    every pair of ranks is the run's own table's (retransmissions, 1% loss per link, counted once),
    TensorFlow's gRPC connections one per direction, gloo's one per pair, and analyze finds the
    iterations from the traffic."""
    par: dict[str, Any] = {"dp": 4, "framework": framework}
    if framework == "pytorch_ddp":
        par["bucket_size_mib"] = 0.5
    sc = scenario(parallelism=par,
                  topology={"kind": "star", "npus": 4, "bandwidth_gbps": 1, "latency_ns": 5000, "loss": 0.01},
                  training={"batch_size_per_worker": 8, "iterations": 3})
    run = simulate(sc, tmp_path / "run", BackendSpec(name="ns3", traffic="pcap"))
    pcaps = sorted((tmp_path / "run" / layout.PCAP_DIR).glob("*.pcap"))
    assert [p.name for p in pcaps] == [f"rank{r}.pcap" for r in range(4)]
    assert run.details["ns3"]["packets_lost"] > 0
    src = load_traffic(tmp_path / "run" / layout.PCAP_DIR)
    assert src.kind == "capture" and src.boundaries is not None and len(src.boundaries) == 4
    packets = payload_view(src.table)
    table = run.traffic
    want = table.groupby(["src", "dst"])["bytes"].sum()
    got = packets.groupby(["src", "dst"])["bytes"].sum().reindex(want.index)
    assert np.allclose(got.to_numpy(), want.to_numpy(), rtol=1e-3), (got, want)
    assert abs(float(got.sum()) / int(table["bytes"].sum()) - 1) <= 1e-3
    assert (packets.groupby(["src", "dst"])["flow"].nunique() == 1).all()  # one connection, a flow each way
    # gRPC: every message's receiver sent its sender a request (the ring's reverse pairs carry only those)
    requests = packets[~packets.set_index(["src", "dst"]).index.isin(want.index)]
    assert len(requests) == (len(table) if framework == "tensorflow_mwms" else 0)
    # gRPC: a sender is the server of its receiver's connection, so it sends data from the port it
    # listens on; gloo: the lower rank of a pair is the client of their connection
    data = packets[packets.set_index(["src", "dst"]).index.isin(want.index)]
    assert (set(data["sport"].unique()) == {5000}) == (framework == "tensorflow_mwms")
    f = analyze(packets, boundaries=src.boundaries, roles=src.roles)
    assert f.bytes_per_iteration.total == pytest.approx(float(table["bytes"].sum()) / 3, rel=0.02)


def test_runs_are_reproducible(ns3: None, tmp_path: Path) -> None:
    """The same scenario twice (in one process, the simulator rebuilt): the same times, to the ns."""
    sc = scenario(topology={"kind": "star", "npus": 4, "bandwidth_gbps": 1, "latency_ns": 5000, "loss": 0.005})
    a = simulate(sc, tmp_path / "a", BackendSpec(name="ns3"))
    b = simulate(sc, tmp_path / "b", BackendSpec(name="ns3"))
    assert [r.finish_ns for r in a.ranks] == [r.finish_ns for r in b.ranks]
    assert a.traffic[["t_start_s", "t_end_s"]].equals(b.traffic[["t_start_s", "t_end_s"]])


@pytest.mark.parametrize("kind", ["tcp", "roce"])
def test_a_replay_of_a_runs_messages_puts_the_same_packets_on_the_links(ns3: None, tmp_path: Path, kind: str) -> None:
    """The messages a run sent (`record_sends`), queued at once in a fresh fabric with no
    engine between them (the C++-only reference of benchmarks/ns3_profile.py): the same packets,
    over TCP and over RoCE (whose queue pairs the replay makes first, numbered as the run's)."""
    from simstudy.backends.ns3 import Ns3Backend
    from simstudy.compiler import compile_any

    sc = scenario(topology={"kind": "star", "npus": 4, "bandwidth_gbps": 1, "latency_ns": 5000,
                            "transport": {"kind": kind}})
    backend = Ns3Backend(traffic="none", record_sends=True)
    run = backend.run(compile_any(sc, tmp_path / "b").bundle, tmp_path / "r")
    assert backend.info is not None and backend.sends is not None
    assert len(backend.sends) == run.details["ns3"]["messages"]
    pairs = backend.queue_pairs
    assert bool(pairs) == (kind == "roce") and len(set(pairs)) == len(pairs)
    if kind == "roce":
        with pytest.raises(BackendError, match="queue pairs"):
            probe.replay(backend.info.topology, backend.sends)
    wall, stats = probe.replay(backend.info.topology, backend.sends, pairs or None)
    assert wall > 0 and stats["packets_on_links"] == run.details["ns3"]["packets_on_links"] > 0
    backend = Ns3Backend(traffic="none")
    backend.run(compile_any(sc, tmp_path / "b2").bundle, tmp_path / "r2")
    assert backend.sends is None  # nothing kept unless asked


def test_token_bucket_sends_its_burst_then_its_rate(ns3: None) -> None:
    """A 4 MiB message through a token bucket of 0.2 Gbit/s and 256 KiB on 10 Gbit/s links (as the
    capture testbed's tbf): the bucket leaves at once, the rest at the token rate, every segment
    with its 52 bytes of headers counted against the tokens."""
    size, burst = 4 << 20, 256 << 10
    topo = topology_of(Star(npus=2, bandwidth_gbps=10, latency_ns=1000,
                            token_bucket={"rate_gbps": 0.2, "burst_kib": 256}))  # type: ignore[arg-type]
    times, stats = probe.message_times(topo, 0, 1, size, 3)
    wire = size * 1500 / 1448
    expected_s = (wire - burst) / (0.2e9 / 8)
    # the first message finds a full bucket; later ones find it refilled only by what the gap gave
    assert times[0] / 1e9 == pytest.approx(expected_s, rel=0.03)
    assert all(t > times[0] for t in times[1:])
    assert stats["queue_drops"] == 0


def test_a_message_each_way_shares_its_links_with_the_other_ways_acks(ns3: None) -> None:
    """Without loss, one way, a warm connection's message takes its bytes with every segment's 54
    bytes of headers (IP, TCP with timestamps, point-to-point) at the link rate, plus the path's
    latency; a message each way at once (a two-rank ring step) takes longer: each direction's data
    shares its links with the other direction's ACKs (benchmarks/tcp_lossless.py, the cells a TCP
    model without loss must meet)."""
    size = 1 << 20
    topo = topology_of(Star(npus=2, bandwidth_gbps=1, latency_ns=50_000))
    one, _ = probe.message_times(topo, 0, 1, size, 3)
    both, stats = probe.message_times(topo, 0, 1, size, 3, both_ways=True)
    headers_ns = 100_000 + size * (1448 + 52 + 2) / 1448 / (1e9 / 8 / 1e9)
    assert one[-1] == pytest.approx(headers_ns, rel=0.01)
    assert both[-1] > 1.01 * one[-1]
    assert stats["packets_lost"] == 0


def test_a_last_segment_lost_alone_waits_the_minimum_rto(ns3: None) -> None:
    """Linux arms its tail loss probe 2 SRTT plus the minimum RTO on when one segment is out
    (`tcp_schedule_loss_probe`), so that a message whose last segment is lost once the others'
    ACKs are back waits about 200 ms, and the retransmission timer, which comes first, resends it
    (measured on a real kernel: about p of the messages of 3-100 segments, `flowsim.tcp`). Three
    segments a message, 100 ms apart, 3% of the packets lost as hosts receive them: about p of
    the messages wait 200 ms or more. The probe armed as the last ACK arrived, before the socket
    took it in (two segments out), repaired most of them within 10 ms."""
    topo = topology_of(Star(npus=2, bandwidth_gbps=10, latency_ns=25_000, loss=0.03, loss_at="hosts"))
    n = 300
    times, stats = probe.message_times(topo, 0, 1, 3 * 1448, n, gap_ns=100_000_000)
    long = int(np.count_nonzero(np.asarray(times) >= 199e6))
    assert stats["packets_lost"] > 0
    assert 0.5 * 0.03 * n <= long <= 2 * 0.03 * n


def test_pcap_meta_names_ranks_and_iterations(ns3: None, tmp_path: Path) -> None:
    sc = scenario(topology={"kind": "star", "npus": 4, "bandwidth_gbps": 1, "latency_ns": 5000})
    simulate(sc, tmp_path / "run", BackendSpec(name="ns3", traffic="pcap"))
    meta = json.loads((tmp_path / "run" / layout.PCAP_DIR / layout.META).read_text())
    assert meta["ranks"] == {str(r): f"10.0.0.{r + 1}" for r in range(4)}
    assert all(len(v) == 2 for v in meta["iterations"].values())
    assert Scenario.model_validate(meta["scenario"]).npus == 4


@pytest.mark.parametrize(("both_ways", "gap_ms"), [(False, 0), (True, 0), (True, 300)])
def test_flowsims_tcp_model_meets_the_packet_network_without_loss(ns3: None, both_ways: bool, gap_ms: int) -> None:
    """flowsim's TCP model without loss (`transport: {model: tcp}`, `flowsim.tcp`) against ns-3 on a
    path whose window matters (1 Gbit/s, 2 ms round trip, 1 MiB messages one after the other on
    a new connection: slow start, then CUBIC's growth before a loss, 46 ms down to 10): one way,
    every message within 5% of ns-3's; a message each way at once, where the ACKs wait behind the
    other direction's data, the last within 5% (ideal fluid is 29% short there), and every one
    when 300 ms of idle time restart the windows (Linux's slow start after idle, on both)."""
    size = 1 << 20
    star = {"npus": 2, "bandwidth_gbps": 1, "latency_ns": 500_000}
    gap = gap_ms * 1_000_000
    real, stats = probe.message_times(topology_of(Star(**star)), 0, 1, size, 5, both_ways=both_ways, gap_ns=gap)
    net = Network.from_topology(topology_of(Star(**star, transport=Transport(model="tcp"))))
    model = tcp_message_times(net, 0, 1, size, 5, both_ways=both_ways, gap_ns=gap)
    assert stats["packets_lost"] == 0 and stats["idle_restarts"] == (8 if gap else 0)
    assert real[0] > 2 * real[-1]  # the window, not the link, sets the first message's time
    checked = model[-1:] if both_ways and not gap else model
    for got, want in zip(checked, real[-len(checked):], strict=True):
        assert got == pytest.approx(want, rel=0.05)


def test_a_window_restarts_after_idle_time_as_linuxs_does(ns3: None) -> None:
    """Linux's slow start after idle (`transport.slow_start_after_idle`, on by default as in Linux):
    a connection that sends after more than a retransmission timeout (200 ms) of idle time starts
    from a smaller window, and its message takes longer than after 100 ms of idle time; with the
    setting off the packet network keeps the window over idle time, as ns-3 itself does."""
    size = 1 << 20
    star = {"npus": 2, "bandwidth_gbps": 10, "latency_ns": 500_000}
    short, stats = probe.message_times(topology_of(Star(**star)), 0, 1, size, 3, gap_ns=100_000_000)
    assert stats["idle_restarts"] == 0
    long, stats = probe.message_times(topology_of(Star(**star)), 0, 1, size, 3, gap_ns=300_000_000)
    assert stats["idle_restarts"] == 2 and long[0] == short[0]
    assert long[1] > 1.2 * short[1] and long[2] > 1.2 * short[2]
    kept, stats = probe.message_times(topology_of(Star(**star, transport=Transport(slow_start_after_idle=False))),
                                      0, 1, size, 3, gap_ns=300_000_000)
    assert stats["idle_restarts"] == 0 and kept[1] < long[1]


@pytest.mark.parametrize(("transport", "wire"), [({}, (1448 + 54 + 27) / 1448),
                                                 ({"kind": "roce"}, (1024 + 46 + 62 / 32) / 1024)])
def test_a_packet_runs_links_count_its_packets_as_switch_ports_do(ns3: None, tmp_path: Path,
                                                                    transport: dict[str, Any], wire: float) -> None:
    """`traffic: links` on the packet network counts every packet's bytes on the wire per link: over
    TCP a link carries its payload with 54 bytes a 1448-byte segment (IP, TCP, frame), plus the ACKs
    of the other direction's data (54 bytes every second segment), 5.6% more than flowsim's link
    table of the same run; over RoCE 46 bytes a 1024-byte packet (IP, UDP, BTH and ICRC, frame) plus
    the other direction's ACKs (62 bytes every 32 packets). `simstudy counters` exports them as
    switch port counters, and `validate --real` with those counters and the scenario on the packet
    network passes (a cluster's RoCE counters against a RoCE packet simulation, too)."""
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "pair", "model": "small_cnn", "parallelism": {"dp": 2},
        "topology": {"kind": "star", "npus": 2, "bandwidth_gbps": 10, "latency_ns": 5000, "transport": transport},
        "training": {"batch_size_per_worker": 8, "iterations": 3}}))
    scen = Scenario.model_validate(yaml.safe_load(spec.read_text()))
    packets = simulate(scen, tmp_path / "ns3", BackendSpec(name="ns3", traffic="links", traffic_bin_s=1e-3))
    fluid = simulate(scen, tmp_path / "fluid", BackendSpec(traffic="links", traffic_bin_s=1e-3))
    on_wire = packets.links.groupby("name", observed=True)["bytes"].sum()
    payload = fluid.links.groupby("name", observed=True)["bytes"].sum()
    assert set(on_wire.index) == set(payload.index) == {"h0->s0", "s0->h0", "h1->s0", "s0->h1"}
    ratio = on_wire / payload
    assert ratio.to_numpy() == pytest.approx(wire, rel=0.005), ratio
    assert main(["counters", str(tmp_path / "ns3"), "--sample", "0.005"]) == 0
    csv = tmp_path / "ns3" / layout.COUNTERS_CSV
    assert main(["validate", "--real", str(csv), "--spec", str(spec), "--backend", "ns3", "-o",
                 str(tmp_path / "v"), "--quiet"]) == 0
    assert (tmp_path / "v" / layout.SIM_DIR / layout.COUNTERS_CSV).is_file()


def test_ns3_alone_delivers_every_packet_at_the_links_rate(ns3: None, repo: Path) -> None:
    """`benchmarks/ns3_ceiling.cpp`, ns-3's own speed without simstudy (the ceiling the results page
    sets issue 38's goal against): a ring of 4 nodes at 10 Gbit/s, each sending 1,000 packets to the
    next, down the internet stack (UDP over IPv4) and on the bare devices. Every packet arrives, and
    the last one when 1,000 frames of 1,478 bytes take at 10 Gbit/s (1.182 ms), plus a hop."""
    from simstudy.backends.ns3.fabric import compile_cpp, load

    ns = load()
    if not hasattr(ns.cppyy.gbl, "simstudy_ceiling"):
        compile_cpp(ns, repo / "benchmarks" / "ns3_ceiling.cpp")
    for way, payload in (("Udp", 1448), ("Raw", 1476)):  # IP and UDP's 28 bytes, or as many of payload
        r = getattr(ns.cppyy.gbl.simstudy_ceiling, way)(4, 1000, payload, 16, 10.0, 500.0)
        assert r.received == 4000, way
        assert r.sim_s == pytest.approx(1000 * 1478 * 8 / 10e9, rel=0.02), way
        assert r.wall_s > 0
