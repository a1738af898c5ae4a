// The C++ half of the packet network: what runs per packet, compiled once per process by cppyy
// (`fabric.py`'s `load` includes fabric.cpp, which includes this header).
//
// `Fabric` holds the ns-3 nodes of a topology (hosts and switches), its point-to-point links (rate,
// delay, loss on the receiving end, a queue discipline per sending end), a routing protocol that
// forwards each packet along the route topology.json gives for its (source host, destination host),
// the TCP connections between hosts and, per direction of a connection, a FIFO of messages: a
// message is written into the socket as the send buffer frees and is done when the receiver has
// read its last byte. Completions stop the simulator so that Python, which runs only per message,
// can act on them. Optional pcaps (raw IP, one per host interface, the packets the host sends).
// With `roce` (roce.h) the hosts carry messages on RoCE queue pairs instead, and every link's sending
// end is a PFC queue.
//
// Every host's address comes from Python (`Build`): the rank-to-address rule is written there only.

#pragma once

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "roce.h"

namespace simstudy_ns3 {
using namespace ns3;

class Fabric;

/** Forwards a packet along the route of its (source host, destination host). */
class HostPairRouting : public Ipv4RoutingProtocol {
  public:
    Fabric* fab = nullptr;
    int node = -1;
    Ptr<Ipv4> ipv4;
    Ptr<Ipv4Route> RouteOutput(Ptr<Packet> p, const Ipv4Header& h, Ptr<NetDevice> oif,
                               Socket::SocketErrno& err) override;
    bool RouteInput(Ptr<const Packet> p, const Ipv4Header& h, Ptr<const NetDevice> idev,
                    const UnicastForwardCallback& ucb, const MulticastForwardCallback& mcb,
                    const LocalDeliverCallback& lcb, const ErrorCallback& ecb) override;
    void NotifyInterfaceUp(uint32_t) override {}
    void NotifyInterfaceDown(uint32_t) override {}
    void NotifyAddAddress(uint32_t, Ipv4InterfaceAddress) override {}
    void NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress) override {}
    void SetIpv4(Ptr<Ipv4> i) override { ipv4 = i; }
    void PrintRoutingTable(Ptr<OutputStreamWrapper>, Time::Unit) const override {}
};

/** Linux's loss recovery beyond RFC 6675 (which ns-3 implements), per sending socket: a tail loss
    probe (RFC 8985) resends the first unacknowledged segment when nothing was acknowledged for
    max(2 SRTT, 10 ms), or 2 SRTT plus the minimum RTO when one segment is out (Linux's
    tcp_schedule_loss_probe: "for delayed ack"; the retransmission timer comes first where that is
    sooner), once per hole; and, as
    RACK finds a lost retransmission by time, the first hole is resent again when ACKs keep coming
    1.25 SRTT after its retransmission without acknowledging it. */
struct Recovery {
    EventId pto;
    uint32_t probed = 0;         // hole (sequence + 1) probed already
    uint32_t head = 0;           // hole whose last (re)transmission is timed
    int64_t head_sent = -1;      // when it was last sent, ns
    int64_t last_data = -1;      // when the socket last sent data, ns (Linux's lsndtime)
};

/** One direction of a TCP connection: the messages written into it, in order. */
struct Stream {
    Ptr<Socket> tx;                                  // the socket that writes this direction
    uint64_t pending = 0;                            // queued by the application, not yet in the socket
    uint64_t received = 0;                           // read by the receiver so far
    std::deque<std::pair<uint64_t, int64_t>> ends;   // (cumulative end offset, message id)
    uint64_t queued_total = 0;
};

struct Sniffer {
    Fabric* fab;
    int host;
    Ptr<PcapFileWrapper> file;
};

/** One directed link's counter, as a switch port counts what it sends: every packet's bytes on the
    wire (IP, TCP and the link's frame), in the bin of `Fabric::count_bin_ns` its transmission
    starts in, from `Fabric::count_t0_ns` on. */
struct LinkTap {
    Fabric* fab;
    int link;
};

class Fabric {
  public:
    NodeContainer nodes;
    std::vector<int> host_of_node;                   // node -> host index or -1 (switch)
    std::vector<int> node_of_host;
    std::vector<Ipv4Address> host_ip;                // each host's address, as Python gave it
    std::vector<Ipv4Address> host_addr;              // each host's address once its first link has it
    std::unordered_map<uint32_t, int> addr_host;     // every host interface address -> host
    std::vector<Ptr<NetDevice>> link_dev;            // directed link -> sending device
    std::vector<Ptr<NetDevice>> link_rx_dev;         // directed link -> receiving device
    std::vector<Ipv4Address> link_rx_addr;
    std::vector<std::unordered_map<uint64_t, Ptr<Ipv4Route>>> routes;  // per node
    std::vector<Stream> streams;
    std::vector<int> conn_client, conn_server;
    std::vector<uint16_t> conn_port;
    std::map<std::pair<int, int>, int> conn_by_port; // (client host, port) -> connection
    std::vector<Ptr<Socket>> listeners;
    std::vector<uint16_t> next_port;
    std::unordered_map<Socket*, int> rx_stream, tx_stream;
    std::vector<int64_t> done_id, done_t;
    std::vector<Sniffer*> sniffers;
    int connected = 0;
    int64_t streams_open = 0;
    uint32_t next_subnet = 0;
    uint16_t listen_port = 5000;
    EventId stop_ev;
    uint64_t packets_sent = 0;

    /** The nodes: hosts 0..hosts-1 (host h at `addresses[h]`, dotted), then the switches. */
    void Build(int hosts, int switches, const std::vector<std::string>& addresses);

    /** The address of the next interface that is not a host's first: 11.0.0.1, 11.0.0.2, ... */
    Ipv4Address NextAddress();

    /** A qdisc on a device: kind fifo|red|fq_codel|none, size in packets; a token bucket when tbf_rate > 0. */
    void Qdisc(Ptr<NetDevice> dev, const std::string& kind, uint32_t packets, double tbf_rate_bps,
               uint32_t tbf_burst, uint32_t tbf_limit);

    uint64_t queue_drops = 0, timeouts = 0, fast_recoveries = 0;
    void OnQueueDrop(Ptr<const QueueDiscItem>) { ++queue_drops; }
    void OnCongState(TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t now);
    void Watch(Ptr<Socket> s);

    // -- Linux's tail loss probe and RACK-like resends (see Recovery) ----------------------------

    bool linux_recovery = false;
    /** Linux's tcp_slow_start_after_idle (tcp_cwnd_restart): a socket that sends after an idle
        retransmission timeout with nothing in flight halves its window once per RTO of the idle
        time beyond the first, down to the initial window, and keeps 3/4 of the old window as its
        slow start threshold. ns-3 keeps the window over idle time. */
    bool restart_after_idle = false;
    uint64_t restarts = 0;
    void RestartAfterIdle(Stream& st);
    int64_t min_rto_ns = 200000000;
    uint64_t probes = 0, rack_resends = 0;
    std::unordered_map<TcpSocketBase*, Recovery> recovery;

    static TcpSocketBase* Base(Ptr<const TcpSocketBase> s) { return const_cast<TcpSocketBase*>(PeekPointer(s)); }
    void OnTcpTx(Ptr<const Packet> p, const TcpHeader& h, Ptr<const TcpSocketBase> cs);
    void OnTcpRx(Ptr<const Packet>, const TcpHeader& h, Ptr<const TcpSocketBase> cs);
    void Arm(TcpSocketBase* s, Recovery& r);
    void Probe(TcpSocketBase* s);
    void Rearm(TcpSocketBase* s);

    // -- links and routes ----------------------------------------------------------------------

    /** A full-duplex link a <-> b; returns the directed link id of a -> b (b -> a is the next one). */
    int AddLink(int a, int b, double rate_ab, double rate_ba, double delay_ns, double loss_ab, double loss_ba,
                const std::string& qkind, uint32_t qpackets, uint32_t dev_packets,
                double tbf_ab, double tbf_ba, uint32_t burst, uint32_t limit);

    /** The route of packets from host src to host dst: directed link ids, first hop first. */
    void AddRoute(int src, int dst, const std::vector<int>& links);
    Ptr<Ipv4Route> Lookup(int node, int src, int dst);
    int HostOf(Ipv4Address a);

    // -- connections ---------------------------------------------------------------------------

    void Listen(int h);
    bool OnRequest(Ptr<Socket>, const Address&) { return true; }

    std::string congestion_type = "ns3::TcpCubic";

    void OnAccept(Ptr<Socket> s, const Address& from);
    void Attach(Ptr<Socket> s, int tx, int rx);
    void OnConnected(Ptr<Socket> s);
    static constexpr int64_t HELLO_ID = -(int64_t(1) << 40);
    void OnConnectFailed(Ptr<Socket>);

    /** A TCP connection from client host to server host, opened now; returns its id. Stream 2c goes
        client -> server, 2c + 1 server -> client. */
    int Connect(int client, int server);
    void DoConnect(int c);

    // -- messages ------------------------------------------------------------------------------

    /** Queue a message of `bytes` on `stream` now (message id `id`). */
    void Send(int stream, uint64_t bytes, int64_t id, int64_t t_ns);
    /** Queue a message of `bytes` on RoCE queue pair `qp` at time t_ns (message id `id`). */
    void RoceSend(int qp, uint64_t bytes, int64_t id, int64_t t_ns);
    uint64_t late_sends = 0;
    void DoSend(int stream, uint64_t bytes, int64_t id);
    void Fill(int stream);
    void OnSendSpace(Ptr<Socket> s, uint32_t);
    void OnRecv(Ptr<Socket> s);

    // -- the clock -----------------------------------------------------------------------------

    static void StopNow() { Simulator::Stop(); }
    EventId completion_stop;

    /** Run until absolute time t_ns, or (t_ns < 0: only) until a message completes, or until
        nothing is left to happen: returns how many completions wait in done_id/done_t. */
    int64_t RunUntil(int64_t t_ns);
    int64_t Now() { return Simulator::Now().GetNanoSeconds(); }
    void ClearDone() { done_id.clear(); done_t.clear(); }

    // -- pcaps ---------------------------------------------------------------------------------

    /** A raw-IP pcap of every device of host h: the packets it sends, as they leave the device
        (after its queue discipline), one file per device, as `simstudy capture`'s tcpdump -Q out. */
    void EnablePcap(int h, const std::string& prefix, uint32_t snaplen);
    static void Sniff(Sniffer* sn, Ptr<const Packet> packet);
    void Close();

    // -- link counters (the packet network's switch port counters) ------------------------------

    int64_t count_bin_ns = 0;                        // 0: not counted; set before the links are added
    int64_t count_t0_ns = 0;                         // counting starts here (the job's start)
    std::vector<std::vector<double>> link_bytes;     // directed link -> bytes per bin
    std::vector<LinkTap*> taps;
    static void Tap(LinkTap* tap, Ptr<const Packet> p);
    ~Fabric() { for (LinkTap* t : taps) delete t; delete roce; }

    // -- RoCE (roce.h): set `roce` before the links are added -----------------------------------

    Roce* roce = nullptr;
    Roce* EnableRoce() { roce = new Roce(); roce->fab = this; roce->Setup((int)nodes.GetN()); return roce; }
    /** Message `id` arrived whole now: back to Python after this instant's events scheduled so far. */
    void Complete(int64_t id);

    uint64_t drops = 0;
    void OnTx(Ptr<const Packet>) { ++packets_sent; }
    void OnDrop(Ptr<const Packet>) { ++drops; }
};

}  // namespace simstudy_ns3
