"""ns-3 from Python: loading the wheel, configuring TCP, and building a topology's packet network.

ns-3 is one simulator per process (its clock and node list are global), so a `Fabric` is built,
run and destroyed before the next one. The C++ part (`fabric.h` and `fabric.cpp` beside this
module, shipped as package data) is compiled by cppyy, ns-3's wheel's C++ interpreter, once per
process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simstudy.addresses import rank_address
from simstudy.backends.base import BackendError
from simstudy.backends.network import Network
from simstudy.spec.transport import Transport

#: The ns-3 congestion control of each Linux name.
CONGESTION_CONTROL = {"cubic": "ns3::TcpCubic", "newreno": "ns3::TcpNewReno", "bbr": "ns3::TcpBbr",
                      "dctcp": "ns3::TcpDctcp", "vegas": "ns3::TcpVegas", "bic": "ns3::TcpBic",
                      "htcp": "ns3::THtcp", "illinois": "ns3::TcpIllinois"}
#: Packets a device's own transmit queue holds (below the queue discipline, as a NIC ring).
DEVICE_QUEUE_PACKETS = 8
#: Snap length of the pcaps (as `simstudy capture`'s tcpdump).
PCAP_SNAPLEN = 128
#: A rank connects to every other one at the start when there are at most this many ranks (as
#: gloo connects its full mesh); above it, connections open when first used.
FULL_MESH_RANKS = 32
#: Where ns-3 time starts the job: after the connections are up, on a whole millisecond.
SETUP_STEP_NS = 1_000_000
#: The C++ part: `Fabric` and its routing (fabric.h), what runs per packet (fabric.cpp, which includes fabric.h).
CPP_SOURCE = Path(__file__).with_name("fabric.cpp")

_loaded: Any = None


def available() -> bool:
    """Whether the ns3 wheel is installed (without importing it: its import takes seconds, and a
    failed one exits the interpreter)."""
    return importlib.util.find_spec("ns3") is not None


def host_address(rank: int) -> str:
    """A rank's address in the packet network: 10.0.<rank // 250>.<rank % 250 + 1>, as the capture
    testbed numbers its namespaces (the C++ part gets every host's address from here)."""
    return rank_address(rank)


MISSING = "the packet network needs ns-3's Python wheel: pip install 'simstudy[ns3]' (the ns3 package)"


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[list[str]]:
    """Hold back C-level stderr (the wheel's JIT prints warnings about static initialisers it
    skips); what was written is in the yielded list afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    said: list[str] = []
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield said
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            said.append(sink.read().decode(errors="replace"))


def load() -> Any:
    """The `ns` module with simstudy's C++ part compiled (once per process)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    if not available():
        raise BackendError(MISSING)
    try:
        with _quiet_stderr() as said:
            from ns import ns
    except (SystemExit, ImportError) as exc:  # the wheel's `ns` exits when its bindings do not import
        text = " ".join(line for line in "".join(said).splitlines() if "materialize" not in line)
        raise BackendError(f"ns-3's wheel did not load ({text.strip() or exc!r}); is a file named ns3.py "
                           "shadowing the ns3 package?") from None
    compile_cpp(ns, CPP_SOURCE)
    _loaded = ns
    return ns


def compile_cpp(ns: Any, source: Path) -> None:
    """Compile a C++ file (and what it includes) into the process's ns-3 with the wheel's cppyy;
    BackendError with the compiler's errors when it does not compile."""
    try:
        with _quiet_stderr():
            ns.cppyy.include(str(source))
    except ImportError as exc:  # cppyy's word for a file that does not compile, with the compiler's errors
        raise BackendError(f"the packet network's C++ did not compile: {exc}") from None


def configure_tcp(ns: Any, transport: Transport) -> None:
    """Every TCP socket created from now on gets these settings."""
    setd = ns.Config.SetDefault
    setd("ns3::TcpL4Protocol::SocketType", ns.StringValue(CONGESTION_CONTROL[transport.congestion_control]))
    setd("ns3::TcpSocket::SegmentSize", ns.UintegerValue(transport.mss_bytes))
    setd("ns3::TcpSocket::SndBufSize", ns.UintegerValue(transport.send_buffer_kib * 1024))
    setd("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(transport.receive_buffer_kib * 1024))
    setd("ns3::TcpSocket::InitialCwnd", ns.UintegerValue(transport.initial_cwnd))
    setd("ns3::TcpSocket::DelAckCount", ns.UintegerValue(2 if transport.delayed_ack else 1))
    setd("ns3::TcpSocket::DelAckTimeout", ns.TimeValue(ns.MicroSeconds(round(transport.delayed_ack_timeout_ms * 1e3))))
    setd("ns3::TcpSocket::TcpNoDelay", ns.BooleanValue(True))
    setd("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.MicroSeconds(round(transport.min_rto_ms * 1e3))))
    setd("ns3::TcpSocketBase::ClockGranularity", ns.TimeValue(ns.MilliSeconds(1)))
    setd("ns3::TcpSocketBase::Sack", ns.BooleanValue(transport.sack))
    setd("ns3::TcpSocketBase::Timestamp", ns.BooleanValue(transport.timestamps))
    setd("ns3::TcpSocketBase::WindowScaling", ns.BooleanValue(True))
    ns.RngSeedManager.SetSeed(transport.seed)
    ns.RngSeedManager.SetRun(1)


def configure_roce(roce: Any, transport: Transport, qp_bin_ns: int) -> None:
    """The RoCE transport's settings, from the spec's (`spec.transport.Roce`)."""
    spec = transport.roce
    roce.mtu = spec.mtu_bytes
    roce.ack_every = spec.ack_every
    roce.timeout_ns = round(spec.timeout_ms * 1e6)
    roce.pfc = spec.pfc.enabled
    roce.xoff = round(spec.pfc.xoff_kib * 1024)
    roce.xon = round(spec.pfc.xon_kib * 1024)
    roce.headroom = -1 if spec.pfc.headroom_kib is None else round(spec.pfc.headroom_kib * 1024)
    roce.kmin, roce.kmax, roce.pmax = spec.ecn.kmin_kib * 1024, spec.ecn.kmax_kib * 1024, spec.ecn.pmax
    d = spec.dcqcn
    roce.dcqcn = d.enabled
    roce.g = d.g
    roce.cnp_interval_ns = round(d.cnp_interval_us * 1e3)
    roce.alpha_period_ns = round(d.alpha_period_us * 1e3)
    roce.rate_timer_ns = round(d.rate_timer_us * 1e3)
    roce.byte_counter = round(d.byte_counter_kib * 1024)
    roce.fast_recovery = d.fast_recovery_steps
    roce.rai, roce.rhai, roce.min_rate = d.rai_mbps * 1e6, d.rhai_mbps * 1e6, d.min_rate_mbps * 1e6
    roce.seed = transport.seed
    roce.Reseed()
    roce.rx_bin_ns = qp_bin_ns


class Fabric:
    """A topology's packet network in ns-3: nodes, links, routes, connections and pcaps.

    `stream(src, dst)` is the direction of the connection that carries a message from rank src to
    rank dst (opened when first needed); `send` queues a message on it now; `run_until` advances
    ns-3 to a time or to the next completed message. Times are ns-3's (ns); `t0_ns` is when the
    job starts (after the connections at the start are up)."""

    def __init__(self, net: Network, *, pcap_dir: Path | None = None, record_sends: bool = False,
                 count_bin_ns: int = 0, qp_bin_ns: int = 0) -> None:
        self.ns = ns = load()
        #: `record_sends`: every message sent, as (stream, bytes, id, ns-3 time ns) (the C++-only
        #: reference of `benchmarks/ns3_profile.py` sends them again, all at once, no engine between)
        self.sends: list[tuple[int, int, int, int]] | None = [] if record_sends else None
        self.net = net
        topo = net.topology
        self.transport = topo.transport
        #: RoCE (`transport.kind: roce`): queue pairs in place of TCP connections (`roce.h`)
        self.roce = topo.transport.kind == "roce"
        self.per_direction = topo.transport.connections == "per_direction" and not self.roce
        ns.Simulator.Destroy()  # a clean simulator: nothing of an earlier run in this process
        configure_tcp(ns, topo.transport)
        self.cpp = cpp = ns.cppyy.gbl.simstudy_ns3.Fabric()
        cpp.congestion_type = CONGESTION_CONTROL[topo.transport.congestion_control]
        cpp.linux_recovery = topo.transport.loss_recovery == "rack_tlp"
        cpp.restart_after_idle = topo.transport.slow_start_after_idle
        cpp.min_rto_ns = round(topo.transport.min_rto_ms * 1e6)
        #: `count_bin_ns`: count every link's bytes on the wire in bins of this width from the job's start
        #: (`link_bytes`), as a switch port counts what it sends
        cpp.count_bin_ns = count_bin_ns
        hosts = topo.hosts
        node = {f"h{i}": i for i in range(hosts)}
        for k, name in enumerate(topo.switches):
            node[name] = hosts + k
        cpp.Build(hosts, len(topo.switches), [host_address(h) for h in range(hosts)])
        if self.roce:
            configure_roce(cpp.EnableRoce(), topo.transport, qp_bin_ns)
        self.link_of: dict[int, int] = {}  # topology link id -> ns-3 directed link id
        done: set[int] = set()
        queue = topo.queue
        for i, link in enumerate(topo.links):
            if i in done:
                continue
            j = topo.link_id(link.dst, link.src)
            back = topo.links[j]
            if link.tbf_bytes_per_ns != back.tbf_bytes_per_ns and 0 in (link.tbf_bytes_per_ns, back.tbf_bytes_per_ns):
                raise BackendError(f"{link.name}: a token bucket on one direction only is not supported")
            ab = cpp.AddLink(node[link.src], node[link.dst], link.bytes_per_ns * 8e9, back.bytes_per_ns * 8e9,
                             link.latency_ns, link.loss, back.loss, queue.discipline, queue.packets,
                             1 if self.roce else DEVICE_QUEUE_PACKETS,  # RoCE: PFC holds packets in its queue
                             link.tbf_bytes_per_ns * 8e9, back.tbf_bytes_per_ns * 8e9,
                             max(link.tbf_burst_bytes, back.tbf_burst_bytes),
                             max(link.tbf_limit_bytes, back.tbf_limit_bytes))
            self.link_of[i] = ab
            self.link_of[j] = ab + 1
            done.update((i, j))
        #: wall seconds spent inside ns-3 running the simulation (`run_until`), the rest of a packet
        #: run's wall time being the engine's and the backend's
        self.ns3_s = 0.0
        self.routed: set[tuple[int, int]] = set()
        self.conns: dict[tuple[int, int], int] = {}
        self.pcaps: list[Path] = []
        if pcap_dir is not None:
            pcap_dir.mkdir(parents=True, exist_ok=True)
            for h in range(hosts):
                cpp.EnablePcap(h, str(pcap_dir / f"rank{h}"), PCAP_SNAPLEN)
        if hosts <= FULL_MESH_RANKS and not self.roce:
            for a in range(hosts):
                for b in range(hosts):
                    if a != b and (self.per_direction or a < b):
                        self._connect(a, b)
        self.t0_ns = self._settle()
        cpp.count_t0_ns = self.t0_ns
        if pcap_dir is not None:
            self.pcaps = sorted(pcap_dir.glob("*.pcap"))

    def _route(self, a: int, b: int) -> None:
        for s, d in ((a, b), (b, a)):
            if (s, d) not in self.routed:
                self.routed.add((s, d))
                self.cpp.AddRoute(s, d, [self.link_of[i] for i in self.net.route(s, d)])

    def _connect(self, client: int, server: int) -> int:
        """A connection from client to server, opened now."""
        self._route(client, server)
        c = int(self.cpp.Connect(client, server))
        self.conns[(client, server)] = c
        return c

    def _settle(self) -> int:
        """Run until every connection opened at the start is up; the job starts at the next whole
        millisecond after that."""
        cpp = self.cpp
        want = 2 * len(self.conns)
        t = 0
        while cpp.connected < want:
            t += SETUP_STEP_NS
            cpp.RunUntil(t)
            if t > 60 * 10**9:
                raise BackendError("ns-3: the TCP connections at the start did not open in 60 s of simulated time")
        t += SETUP_STEP_NS
        cpp.RunUntil(t)
        cpp.ClearDone()  # the hellos
        return t

    def stream(self, src: int, dst: int) -> int:
        """The direction of a connection that carries messages from rank src to rank dst: per pair,
        the one connection of the two ranks (its lower rank the client); per direction, the
        connection the receiver opened to the sender (a TensorFlow worker pulls what it receives).
        With RoCE: the queue pair from src to dst (created when first needed)."""
        if self.roce:
            qp = self.conns.get((src, dst))
            if qp is None:
                self._route(src, dst)
                links = self.net.topology.links
                line = min(links[i].bytes_per_ns for i in self.net.route(src, dst)) * 8e9  # the NIC paces at it
                qp = self.conns[(src, dst)] = int(self.cpp.roce.Qp(src, dst, line))
            return qp
        if self.per_direction:
            c = self.conns.get((dst, src))
            if c is None:
                c = self._connect(dst, src)
            return 2 * c + 1
        a, b = min(src, dst), max(src, dst)
        c = self.conns.get((a, b))
        if c is None:
            c = self._connect(a, b)
        return 2 * c if src == a else 2 * c + 1

    def queue_pairs(self) -> list[tuple[int, int]]:
        """RoCE: each queue pair's (src, dst) ranks, by its number (the order they were created in)."""
        return sorted(self.conns, key=self.conns.__getitem__) if self.roce else []

    def send(self, stream: int, nbytes: int, msg_id: int, t_ns: int) -> None:
        """Queue a message on `stream` at ns-3 time t_ns (not before ns-3's now)."""
        if self.sends is not None:
            self.sends.append((stream, nbytes, msg_id, t_ns))
        if self.roce:
            self.cpp.RoceSend(stream, nbytes, msg_id, t_ns)
        else:
            self.cpp.Send(stream, nbytes, msg_id, t_ns)

    def run_until(self, t_ns: int) -> list[tuple[int, int]]:
        """Run until ns-3 time t_ns (-1: until a message completes); returns the completed
        messages as (id, time ns) by time, then id (the order of events of one instant is not
        ns-3's to keep: it depends on where its objects sit in memory)."""
        cpp = self.cpp
        t0 = time.perf_counter()
        n = int(cpp.RunUntil(t_ns))
        self.ns3_s += time.perf_counter() - t0
        if not n:
            return []
        ids, ts = cpp.done_id, cpp.done_t
        out = sorted((int(ts[i]), int(ids[i])) for i in range(n))
        cpp.ClearDone()
        return [(i, t) for t, i in out]

    @property
    def now_ns(self) -> int:
        return int(self.cpp.Now())

    def stats(self) -> dict[str, int | float]:
        """Packets put on links (each hop counts), lost on links (loss), dropped by full queues,
        retransmission timeouts and fast recoveries (every connection, both ends), windows restarted
        after idle time (`idle_restarts`); `ns3_s`: the wall seconds spent inside ns-3 after the
        connections were up."""
        cpp = self.cpp
        roce = {}
        if self.roce:
            r = cpp.roce
            roce = {"pfc_pauses": int(sum(r.pause_frames)), "ecn_marks": int(r.ecn_marks), "cnps": int(r.cnps),
                    "nacks": int(r.nacks), "go_back_n": int(r.go_back), "roce_timeouts": int(r.rtos),
                    "headroom_drops": int(r.headroom_drops), "data_packets": int(r.data_packets)}
        return {**roce, "connections": len(self.conns), "packets_on_links": int(cpp.packets_sent),
                "packets_lost": int(cpp.drops), "queue_drops": int(cpp.queue_drops), "timeouts": int(cpp.timeouts),
                "fast_recoveries": int(cpp.fast_recoveries), "loss_probes": int(cpp.probes),
                "rack_resends": int(cpp.rack_resends), "idle_restarts": int(cpp.restarts), "setup_ns": self.t0_ns,
                "late_sends": int(cpp.late_sends), "ns3_s": round(self.ns3_s, 3)}

    def link_bytes(self) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
        """With `count_bin_ns`: what the topology's links put on the wire, as (link id, bin, bytes)
        arrays (bins from the job's start; IP, TCP and frame bytes of every packet, data, ACKs and
        resends, in the bin its transmission started in), `traffic_out.links_table`'s input."""
        bins = self.cpp.link_bytes
        rows = [(i, np.fromiter(bins[k], dtype=np.float64, count=len(bins[k])))
                for i, k in self.link_of.items() if k < len(bins)]
        return (np.concatenate([np.full(len(b), i, dtype=np.int64) for i, b in rows] or [np.empty(0, np.int64)]),
                np.concatenate([np.arange(len(b), dtype=np.int64) for _, b in rows] or [np.empty(0, np.int64)]),
                np.concatenate([b for _, b in rows] or [np.empty(0)]))

    def pauses(self) -> dict[str, tuple[int, int]]:
        """With RoCE: each topology link whose sending end PFC paused, by name: (pause frames it got,
        ns it spent paused)."""
        if not self.roce:
            return {}
        r, links = self.cpp.roce, self.net.topology.links
        return {links[i].name: (int(r.pause_frames[k]), int(r.paused_ns[k]))
                for i, k in self.link_of.items() if r.pause_frames[k] > 0}

    def qp_received(self, qp: int) -> NDArray[np.float64]:
        """With `qp_bin_ns`: the bytes queue pair `qp` delivered in order, per bin from ns-3's time 0."""
        bins = self.cpp.roce.qp_rx[qp]
        return np.fromiter(bins, dtype=np.float64, count=len(bins))

    def close(self) -> None:
        """Flush the pcaps and destroy the simulator."""
        self.cpp.Close()
        self.ns.Simulator.Destroy()

