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

from pydantic import Field

from simstudy.spec.base import Spec

#: Congestion controls of the packet network, by the name Linux gives them.
CongestionControl = Literal["cubic", "newreno", "bbr", "dctcp", "vegas", "bic", "htcp", "illinois"]
#: Bytes the packet network's links add to every packet (ns-3's point-to-point header), which
#: flowsim's TCP model counts on the wire with the IP and TCP headers.
FRAME_BYTES = 2
#: How a framework's ranks hold TCP connections: one per pair of ranks (gloo, NCCL's sockets, a
#: parameter server's star), or one per direction (TensorFlow's gRPC: each rank a client of the other).
Connections = Literal["per_pair", "per_direction"]


class Transport(Spec):
    """The TCP stack of every host."""

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
