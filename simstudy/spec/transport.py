"""What a packet network needs beyond rates and latencies: the hosts' TCP stack, the queue of every
link's sending end, and token buckets.

The packet network (`--backend ns3`) runs them; flowsim reads `Transport` for its TCP models: under
loss always (MSS, minimum retransmission timeout), and without loss where `model: tcp` asks for it
(headers, the congestion window, ACKs behind the other direction's data: `flowsim.tcp`).

Defaults are Linux's (6.x): CUBIC, an MSS of 1448 bytes (1500-byte MTU, TCP timestamps), a 200 ms
minimum RTO, delayed ACKs every second segment or after 40 ms, an initial window of 10 segments
restarted after idle time, SACK with tail loss probes and RACK's time-based detection of lost
retransmissions, and socket buffers at the maxima autotuning reaches (tcp_wmem 4 MiB, tcp_rmem 6 MiB).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from simstudy.spec.base import FieldError, Spec

#: Congestion controls of the packet network, by the name Linux gives them.
CongestionControl = Literal["cubic", "newreno", "bbr", "dctcp", "vegas", "bic", "htcp", "illinois"]
#: Bytes the packet network's links add to every packet (ns-3's point-to-point header), which
#: flowsim's TCP model counts on the wire with the IP and TCP headers.
FRAME_BYTES = 2
#: Header bytes of a RoCEv2 packet: IP (20), UDP (8), BTH (12) and ICRC (4).
ROCE_HEADER_BYTES = 44
#: How a framework's ranks hold TCP connections: one per pair of ranks (gloo, NCCL's sockets, a
#: parameter server's star), or one per direction (TensorFlow's gRPC: each rank a client of the other).
Connections = Literal["per_pair", "per_direction"]


class Pfc(Spec):
    """Priority flow control (IEEE 802.1Qbb) on the lossless class, as switch settings: a switch pauses
    a link's sending end when the data bytes that came in on it and still wait in the switch pass
    `xoff_kib`, and resumes it at `xon_kib`; `headroom_kib` more absorb what is on the wire meanwhile."""

    enabled: bool = Field(default=True, description="pause links (off: the lossless class is an ordinary one)")
    xoff_kib: float = Field(default=256.0, gt=0, description="pause the upstream port past these waiting bytes, KiB")
    xon_kib: float = Field(default=224.0, ge=0, description="resume it at this many, KiB")
    headroom_kib: float | None = Field(
        default=None, ge=0,
        description="bytes a port may still take in beyond xoff, KiB; beyond them a packet is dropped; default: per "
        "link, twice what the link holds one way plus three packets (what arrives while the pause travels)",
    )


class Ecn(Spec):
    """ECN marking at switch egress queues for DCQCN: RED on the instantaneous queue, probability 0 up
    to K_min, rising to P_max at K_max, 1 beyond (Zhu et al., SIGCOMM 2015: 5 KB, 200 KB, 1%)."""

    kmin_kib: float = Field(default=5.0, ge=0, description="K_min, KiB")
    kmax_kib: float = Field(default=200.0, gt=0, description="K_max, KiB")
    pmax: float = Field(default=0.01, gt=0, le=1, description="marking probability at K_max")


class Dcqcn(Spec):
    """DCQCN's rate control at the senders (Zhu et al., "Congestion Control for Large-Scale RDMA
    Deployments", SIGCOMM 2015: g, the 50 us CNP interval, the 55 us alpha and rate timers, the 10 MB
    byte counter, F = 5 and R_AI = 40 Mbit/s are the paper's; R_HAI is 10 R_AI as in NVIDIA's
    ConnectX defaults, rpg_hai_rate 50 and rpg_ai_rate 5 Mbit/s)."""

    enabled: bool = Field(default=True, description="rate control from ECN marks (off: every sender at its line rate)")
    g: float = Field(default=1 / 256, gt=0, lt=1, description="alpha's gain")
    cnp_interval_us: float = Field(default=50.0, gt=0, description="CNPs of a queue pair at most this often")
    alpha_period_us: float = Field(default=55.0, gt=0, description="alpha decays by (1 - g) per period without a CNP")
    rate_timer_us: float = Field(default=55.0, gt=0, description="rate increase timer")
    byte_counter_kib: float = Field(default=10240.0, gt=0, description="rate increase byte counter, KiB")
    fast_recovery_steps: int = Field(default=5, ge=0, description="F: increase events of fast recovery")
    rai_mbps: float = Field(default=40.0, gt=0, description="additive increase, Mbit/s")
    rhai_mbps: float = Field(default=400.0, gt=0, description="hyper increase, Mbit/s")
    min_rate_mbps: float = Field(default=10.0, gt=0, description="no sender goes slower, Mbit/s")


class Roce(Spec):
    """RoCEv2 (RDMA over lossless Ethernet) on the packet network: reliable connected queue pairs
    with go-back-N, PFC, ECN and DCQCN (see `backends/ns3/roce.h`)."""

    mtu_bytes: int = Field(default=1024, ge=256, le=4096,
                           description="payload bytes per packet (RoCE's MTU: 1024 on 1500-byte Ethernet)")
    ack_every: int = Field(default=32, ge=1, description="ACK every this many packets and each message's end")
    timeout_ms: float = Field(
        default=4.096e-3 * 2**18, gt=0,
        description="a sender without ACKs for this long goes back to its first unacknowledged byte (NCCL_IB_TIMEOUT "
        "18: 4.096 us x 2^18)",
    )
    pfc: Pfc = Field(default_factory=Pfc, description="priority flow control at every switch")
    ecn: Ecn = Field(default_factory=Ecn, description="ECN marking at every switch egress")
    dcqcn: Dcqcn = Field(default_factory=Dcqcn, description="DCQCN at every host")

    @property
    def wire_bytes(self) -> int:
        """Bytes a full packet takes on a link: payload, IP (20), UDP (8), BTH and ICRC (16), the frame."""
        return self.mtu_bytes + ROCE_HEADER_BYTES + FRAME_BYTES

    @model_validator(mode="after")
    def _check(self) -> Roce:
        if self.pfc.xon_kib > self.pfc.xoff_kib:
            raise FieldError("pfc.xon_kib", f"{self.pfc.xon_kib} KiB is above xoff ({self.pfc.xoff_kib} KiB)")
        if self.ecn.kmin_kib >= self.ecn.kmax_kib:
            raise FieldError("ecn.kmin_kib", f"{self.ecn.kmin_kib} KiB is not below kmax ({self.ecn.kmax_kib} KiB)")
        return self


class Transport(Spec):
    """The transport of every host: its TCP stack (Linux's), or RoCE (`kind: roce`)."""

    kind: Literal["tcp", "roce"] = Field(
        default="tcp",
        description="tcp: the hosts' TCP stack; roce: RDMA over lossless Ethernet (PFC, ECN, DCQCN, go-back-N) on the "
        "packet network; flowsim carries RoCE on lossless links less its headers, and its fluid runs DCQCN "
        "(flowsim.roce)",
    )
    roce: Roce = Field(default_factory=Roce, description="RoCE's settings (kind: roce)")

    congestion_control: CongestionControl = Field(default="cubic", description="TCP congestion control")
    mss_bytes: int = Field(default=1448, ge=64, le=65495, description="TCP maximum segment size (payload), bytes")
    min_rto_ms: float = Field(default=200.0, gt=0, description="minimum retransmission timeout, ms")
    delayed_ack: bool = Field(default=True, description="ACK every second segment (else every segment)")
    delayed_ack_timeout_ms: float = Field(default=40.0, gt=0, description="longest an ACK is delayed, ms")
    initial_cwnd: int = Field(default=10, ge=1, description="initial congestion window, segments")
    slow_start_after_idle: bool = Field(
        default=True,
        description="Linux's tcp_slow_start_after_idle: a connection that sends after a retransmission timeout "
        "of idle time halves its window once per further timeout, down to the initial window, and slow-starts "
        "back to 3/4 of it (the packet network, and flowsim's TCP model)",
    )
    send_buffer_kib: int = Field(default=4096, ge=4, description="socket send buffer, KiB")
    receive_buffer_kib: int = Field(default=6144, ge=4, description="socket receive buffer, KiB")
    sack: bool = Field(default=True, description="selective acknowledgements")
    loss_recovery: Literal["rack_tlp", "rfc6675"] = Field(
        default="rack_tlp",
        description="rack_tlp (Linux's default): SACK recovery plus tail loss probes (the first unacknowledged "
        "segment resent after max(2 SRTT, 10 ms) without ACKs) and lost retransmissions found by time; rfc6675: "
        "SACK recovery alone, where a lost tail or a lost retransmission waits for the retransmission timeout",
    )
    timestamps: bool = Field(default=True, description="TCP timestamps (12 bytes of options per segment)")
    connections: Connections | None = Field(
        default=None,
        description="TCP connections between ranks: per_pair (gloo, NCCL, parameter servers) or per_direction "
        "(TensorFlow's gRPC); default: as the scenario's framework preset opens them",
    )
    seed: int = Field(default=1, ge=1, description="seed of the packet network's random losses")
    model: Literal["ideal", "tcp"] = Field(
        default="ideal",
        description="flowsim without loss: ideal moves a message at the link rate from its first byte; tcp as TCP "
        "sends it (headers on the wire, the congestion window from its initial segments and as it grows, a "
        "direction's ACKs waiting behind the other's data), calibrated against the packet network "
        "(benchmarks/tcp_lossless.py). Under loss flowsim's TCP loss model applies either way",
    )

    @model_validator(mode="after")
    def _check_kind(self) -> Transport:
        if self.kind == "roce" and self.model == "tcp":
            raise FieldError("model", "flowsim's TCP model is TCP's; with kind: roce leave model ideal")
        return self

    @property
    def dcqcn(self) -> bool:
        """Whether the hosts run DCQCN: RoCE with its rate control on."""
        return self.kind == "roce" and self.roce.dcqcn.enabled

    @property
    def goodput(self) -> float:
        """The share of a link's bytes that is payload, where flowsim counts headers without a TCP
        model: RoCE's full packets (IP, UDP, BTH and ICRC and the link's frame around `mtu_bytes`);
        1 for TCP's ideal transport (the link rate from the first byte)."""
        if self.kind != "roce":
            return 1.0
        return self.roce.mtu_bytes / self.roce.wire_bytes

    @property
    def header_bytes(self) -> int:
        """IP and TCP header bytes per segment (20 + 20, plus 12 of timestamp options)."""
        return 40 + (12 if self.timestamps else 0)

    @property
    def wire_bytes(self) -> int:
        """Bytes a full segment takes on a link: its payload, IP and TCP headers and the link's frame."""
        return self.mss_bytes + self.header_bytes + FRAME_BYTES


class Queue(Spec):
    """The queue discipline at the sending end of every link (Linux: pfifo with txqueuelen 1000)."""

    discipline: Literal["fifo", "red", "fq_codel"] = Field(default="fifo", description="queue discipline")
    packets: int = Field(default=1000, ge=1, description="queue limit, packets")


class TokenBucket(Spec):
    """A token bucket filter at the sending end of every host link, as `tc qdisc ... tbf`: packets
    leave at the link's rate while tokens last, tokens refill at `rate_gbps` up to `burst_kib`.
    After a pause a full bucket leaves at the link's rate: the link is busy burst / rate less than
    a link of the token rate would be (flowsim's fluid model: `flowsim.buckets`)."""

    rate_gbps: float = Field(gt=0, description="token rate, Gbit/s")
    burst_kib: float = Field(gt=0, description="bucket size, KiB")
    latency_ms: float = Field(
        default=100.0, gt=0, description="longest a packet may wait: the queue holds rate x latency + burst bytes"
    )

    @property
    def limit_bytes(self) -> int:
        return int(self.rate_gbps * 1e9 / 8 * self.latency_ms / 1e3 + self.burst_kib * 1024)
