// RoCE on the packet network: RDMA over lossless Ethernet, as GPU clusters run NCCL.
//
// Every host has one RoCEv2 endpoint (a UDP socket on port 4791) and a queue pair per peer it sends
// to. A queue pair sends each message as packets of at most `mtu` payload bytes (a packet never
// holds bytes of two messages), paced at the rate DCQCN gives it, and the receiver takes them in
// order: a packet beyond the next expected one is dropped and answered with one NACK, on which the
// sender goes back to the first byte not received (go-back-N); a sender that hears nothing for
// `timeout_ns` goes back too. The receiver ACKs every `ack_every` packets and each message's end.
//
// Switches and hosts put every link's sending end behind a `PfcQueue`: two classes by DSCP, the
// control class (CNPs, ACKs, NACKs: DSCP 48, served first, never paused) and the lossless data class
// (DSCP 26, ECN-capable). Priority flow control: a switch counts the data bytes that came in on
// each link and still wait in it; past `xoff` it pauses that link's sending end (the pause frame
// takes the link's delay to arrive), and resumes it once they fall to `xon`. Bytes beyond
// xoff + headroom, the port's share of the switch's buffer, are dropped (`headroom_drops`: with PFC,
// a headroom too small for the link; without PFC, what an incast overflows). ECN: a
// switch marks a data packet CE as it joins an egress queue holding q bytes with probability 0 below
// K_min, rising linearly to P_max at K_max, and 1 above (RED on the instantaneous queue, as DCQCN's
// switches mark). DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
// SIGCOMM 2015): the receiver (NP) sends at most one CNP per `cnp_interval` per queue pair while
// marked packets arrive; the sender (RP) cuts its rate on each CNP, Rt = Rc, Rc = Rc (1 - alpha/2),
// alpha = (1 - g) alpha + g, and alpha decays by (1 - g) every `alpha_period` without a CNP; the rate
// rises on a timer (`rate_timer`) and a byte counter (`byte_counter`): while both have fired fewer
// than F times since the last cut, fast recovery (Rc = (Rt + Rc) / 2), once both passed F hyper
// increase (Rt += i R_HAI), else additive increase (Rt += R_AI, then Rc = (Rt + Rc) / 2).
//
// Written for simstudy from the paper and the IEEE 802.1Qbb behaviour; no simulator's code.

#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

namespace simstudy_ns3 {
using namespace ns3;

class Fabric;
class Roce;

/** What a packet of the RoCE transport carries in front of its payload (in the 16 bytes of BTH and
    ICRC it stands for on the wire). */
struct RoceHeader {
    uint8_t type;       // DATA, ACK, NACK or CNP
    uint8_t pad[3];
    int32_t qp;         // the queue pair (the same id at both ends)
    uint64_t offset;    // DATA: its first byte's offset; ACK/NACK: the next byte expected
};

/** A link's sending end in the RoCE transport: the control and the data class, strict priority,
    each paused by the link's far end (PFC); at a switch, ECN marking and the ingress counts that
    trigger pauses upstream. */
class PfcQueue : public QueueDisc {
  public:
    static constexpr int CONTROL = 0, DATA = 1;
    Roce* roce = nullptr;
    int node = -1;
    bool at_switch = false;
    bool paused[2] = {false, false};
    PfcQueue() : QueueDisc(QueueDiscSizePolicy::NO_LIMITS) {}
    uint64_t DataBytes() { return GetNInternalQueues() > 1 ? GetInternalQueue(DATA)->GetNBytes() : 0; }
    uint32_t DataPackets() { return GetNInternalQueues() > 1 ? GetInternalQueue(DATA)->GetNPackets() : 0; }
    void Pause(int cls, bool on);

  private:
    bool DoEnqueue(Ptr<QueueDiscItem> item) override;
    Ptr<QueueDiscItem> DoDequeue() override;
    bool CheckConfig() override;
    void InitializeParams() override {}
};

/** One queue pair: its sender's state at the source host and its receiver's at the destination. */
struct QueuePair {
    int src = -1, dst = -1;
    double line = 0;                     // its NIC's rate: the slowest link of its route, bit/s
    // sender
    uint64_t queued = 0;                 // bytes of every message given to it so far
    uint64_t snd_nxt = 0;                // next byte to send
    uint64_t snd_una = 0;                // first byte not acknowledged
    std::deque<uint64_t> send_ends;      // ends of messages not yet acknowledged whole
    int64_t next_tx_ns = 0;              // earliest time its pacing lets it send again
    int64_t last_ack_ns = 0;             // last time an ACK or NACK moved snd_una (or a send started from idle)
    EventId rto;
    // DCQCN's reaction point
    double rc = 0, rt = 0, alpha = 1.0;  // current and target rate (bit/s), alpha
    int t_count = 0, b_count = 0;        // rate-increase timer and byte-counter events since the last cut
    uint64_t bytes_since = 0;            // bytes sent since the byte counter last fired
    int64_t last_cnp_ns = -1;            // when the last CNP arrived (alpha decays for the periods since)
    EventId rate_timer;
    // receiver (DCQCN's notification point)
    uint64_t expected = 0;               // next byte expected in order
    std::deque<std::pair<uint64_t, int64_t>> ends;  // (end offset, message id) not yet received whole
    uint64_t nacked = UINT64_MAX;        // the offset a NACK was sent for (one per gap)
    int64_t last_cnp_sent_ns = -1;
    uint32_t since_ack = 0;
};

/** The RoCE transport of a fabric (see the top of this file). */
class Roce {
  public:
    Fabric* fab = nullptr;
    // settings (Python sets them from spec.transport.Roce before any link is added)
    uint32_t mtu = 1024;                  // payload bytes per packet
    uint32_t ack_every = 32;
    int64_t timeout_ns = 1073741824;      // go back to the first unacknowledged byte after this without ACKs
    bool pfc = true;
    uint64_t xoff = 256 * 1024, xon = 224 * 1024;
    int64_t headroom = -1;                // bytes beyond xoff; < 0: per link (2 x its bytes in flight + 3 packets)
    double kmin = 5 * 1024, kmax = 200 * 1024, pmax = 0.01;
    bool dcqcn = true;
    double g = 1.0 / 256;
    int64_t alpha_period_ns = 55000, cnp_interval_ns = 50000, rate_timer_ns = 55000;
    uint64_t byte_counter = 10 * 1024 * 1024;
    int fast_recovery = 5;
    double rai = 40e6, rhai = 400e6, min_rate = 10e6;
    uint64_t seed = 1;

    static constexpr uint16_t PORT = 4791;
    static constexpr uint8_t DATA = 1, ACK = 2, NACK = 3, CNP = 4;
    static constexpr uint8_t TOS_DATA = (26 << 2) | 2;  // DSCP 26, ECT(0)
    static constexpr uint8_t TOS_CONTROL = 48 << 2;     // DSCP 48, not ECN-capable
    static constexpr uint32_t OVERHEAD = 20 + 8 + 16;  // IP, UDP, BTH + ICRC

    std::vector<QueuePair> qps;
    std::vector<Ptr<Socket>> sockets;                 // per host
    std::vector<Ptr<PfcQueue>> host_q;                // per host: its (first) NIC's queue
    std::vector<std::vector<int>> host_qps;           // per host: the queue pairs it sends on
    std::vector<size_t> host_rr;                      // per host: where round robin goes on
    std::vector<EventId> host_wake;
    // per directed link
    std::vector<Ptr<PfcQueue>> link_q;                // its sending end
    std::vector<int64_t> link_delay_ns;
    std::vector<double> link_rate;
    std::vector<uint64_t> ingress;                    // data bytes that came in on it and wait in its far switch
    std::vector<bool> pause_sent;
    std::vector<uint64_t> pause_frames;               // pauses its sending end got
    std::vector<int64_t> paused_ns, pause_start;      // time its sending end spent paused
    std::unordered_map<const NetDevice*, int> rx_link;  // receiving device -> directed link
    std::vector<std::unordered_map<uint64_t, std::pair<int, uint32_t>>> waiting;  // per node: packet uid -> (link, bytes)
    uint64_t rng = 0x9e3779b97f4a7c15ULL;

    // counters
    uint64_t ecn_marks = 0, cnps = 0, nacks = 0, go_back = 0, rtos = 0, headroom_drops = 0, data_packets = 0;
    uint64_t out_of_order = 0;
    // received bytes per queue pair per bin of `rx_bin_ns` (0: not kept), from time 0
    int64_t rx_bin_ns = 0;
    std::vector<std::vector<double>> qp_rx;

    void Setup(int nodes);
    /** The marking coins' state from `seed` (after the settings are set). */
    void Reseed() { rng = 0x9e3779b97f4a7c15ULL ^ (seed * 0xbf58476d1ce4e5b9ULL); }
    Ptr<PfcQueue> Install(Ptr<NetDevice> dev, int node, bool at_switch);
    void AddLink(int id, Ptr<NetDevice> a, Ptr<NetDevice> b, int node_a, int node_b, bool switch_a, bool switch_b,
                 int64_t delay_ns, double rate_ab, double rate_ba);
    void Endpoint(int host);
    int Qp(int src, int dst, double line_bps);
    void Send(int qp, uint64_t bytes, int64_t id);

    // the sender
    void Wake(int host);
    void TrySend(int host);
    void SendPacket(QueuePair& q, int qp_id);
    void SendControl(int from, int to, uint8_t type, int qp, uint64_t offset);
    void Rearm(int qp_id);
    void OnTimeout(int qp_id);
    void OnCnp(QueuePair& q);
    void Increase(QueuePair& q);
    void OnRateTimer(int qp_id);

    // the receiver
    void OnRecv(Ptr<Socket> s);
    void OnData(QueuePair& q, int qp_id, uint64_t offset, uint32_t len, bool ce);

    // switches
    bool Ingress(int node, Ptr<const NetDevice> idev, Ptr<const Packet> p, const Ipv4Header& h);
    void Released(int node, uint64_t uid);
    void SetPause(int link, bool on);
    bool Mark(double queued);
    double Uniform();
};

}  // namespace simstudy_ns3
