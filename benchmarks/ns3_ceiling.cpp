// ns-3's own speed on this machine, without simstudy: how many packets a second the installed ns-3
// moves when nothing but ns-3 touches them (see benchmarks/ns3_ceiling.py).
//
// A ring of `hosts` nodes joined by point-to-point links; each host sends `packets` packets of
// `payload` bytes to the next one, paced at the link's rate in bursts of `burst` packets (one
// simulator event per burst, so the pacing's own events are few). Two ways down the stack:
//   Raw: NetDevice::Send on the link's device and a protocol handler at the receiver (ns-3's
//        point-to-point device, its queue and the simulator; no IP);
//   Udp: a UDP socket per host and one per receiver, IPv4 with global routing (ns-3's internet
//        stack, the path simstudy's RoCE rides on).
// Both return the wall seconds Simulator::Run took and count what arrived.

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

#include <chrono>

namespace simstudy_ceiling {

using namespace ns3;

struct Result {
    double wall_s = 0;
    uint64_t received = 0;
    double sim_s = 0;
};

struct Ring {
    NodeContainer nodes;
    std::vector<Ptr<NetDevice>> out;  // host h's device towards h + 1
    std::vector<Ipv4Address> in_addr;  // host h's address on the link from h - 1
    uint64_t received = 0;

    Ring(int hosts, double gbps, double delay_ns, bool ip) {
        nodes.Create(hosts);
        if (ip) {
            InternetStackHelper stack;
            stack.Install(nodes);
        }
        PointToPointHelper p2p;
        p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(gbps * 1e9))));
        p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(int64_t(delay_ns))));
        out.resize(hosts);
        in_addr.resize(hosts);
        Ipv4AddressHelper addr("10.0.0.0", "255.255.255.252");
        for (int h = 0; h < hosts; ++h) {
            NetDeviceContainer d = p2p.Install(nodes.Get(h), nodes.Get((h + 1) % hosts));
            out[h] = d.Get(0);
            if (ip) {
                Ipv4InterfaceContainer i = addr.Assign(d);
                addr.NewNetwork();
                in_addr[(h + 1) % hosts] = i.GetAddress(1);
            }
        }
    }
};

struct RawSender {
    Ring* ring;
    int host;
    uint64_t left;
    uint32_t payload, burst;
    Time gap;

    void Go() {
        for (uint32_t i = 0; i < burst && left > 0; ++i, --left) {
            ring->out[host]->Send(Create<Packet>(payload), ring->out[host]->GetBroadcast(), 0x0800);
        }
        if (left > 0) Simulator::Schedule(gap, &RawSender::Go, this);
    }
};

struct UdpSender {
    Ptr<Socket> socket;
    InetSocketAddress to;
    uint64_t left;
    uint32_t payload, burst;
    Time gap;

    void Go() {
        for (uint32_t i = 0; i < burst && left > 0; ++i, --left) socket->SendTo(Create<Packet>(payload), 0, to);
        if (left > 0) Simulator::Schedule(gap, &UdpSender::Go, this);
    }
};

inline Time BurstGap(uint32_t wire_bytes, uint32_t burst, double gbps) {
    return PicoSeconds(int64_t(wire_bytes * 8.0 * burst / gbps * 1e3));
}

inline double Clock() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/** Runs the simulator to its end: the wall seconds it took, the packets received, the simulated end. */
inline Result RunTimed(const Ring& ring) {
    double t0 = Clock();
    Simulator::Run();
    Result r{Clock() - t0, ring.received, Simulator::Now().GetSeconds()};
    Simulator::Destroy();
    return r;
}

inline Result Raw(int hosts, uint64_t packets, uint32_t payload, uint32_t burst, double gbps, double delay_ns) {
    Ring ring(hosts, gbps, delay_ns, false);
    for (int h = 0; h < hosts; ++h) {
        Ptr<NetDevice> in = ring.out[(h + hosts - 1) % hosts]->GetChannel()->GetDevice(1);
        ring.nodes.Get(h)->RegisterProtocolHandler(
            MakeCallback(+[](Ring* r, Ptr<NetDevice>, Ptr<const Packet>, uint16_t, const Address&, const Address&,
                             NetDevice::PacketType) { ++r->received; }).Bind(&ring),
            0x0800, in);
    }
    std::vector<RawSender> senders;
    for (int h = 0; h < hosts; ++h)
        senders.push_back(RawSender{&ring, h, packets, payload, burst, BurstGap(payload + 2, burst, gbps)});
    for (auto& s : senders) Simulator::ScheduleNow(&RawSender::Go, &s);
    return RunTimed(ring);
}

inline Result Udp(int hosts, uint64_t packets, uint32_t payload, uint32_t burst, double gbps, double delay_ns) {
    Ring ring(hosts, gbps, delay_ns, true);
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();
    const uint16_t port = 4791;
    std::vector<UdpSender> senders;
    for (int h = 0; h < hosts; ++h) {
        Ptr<Socket> sink = Socket::CreateSocket(ring.nodes.Get(h), UdpSocketFactory::GetTypeId());
        sink->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
        sink->SetRecvCallback(MakeCallback(+[](Ring* r, Ptr<Socket> s) {
                                               while (s->Recv()) ++r->received;
                                           }).Bind(&ring));
        Ptr<Socket> src = Socket::CreateSocket(ring.nodes.Get(h), UdpSocketFactory::GetTypeId());
        src->Bind();
        // IP 20 + UDP 8 + point-to-point 2 bytes on the wire
        senders.push_back(UdpSender{src, InetSocketAddress(ring.in_addr[(h + 1) % hosts], port), packets, payload,
                                    burst, BurstGap(payload + 30, burst, gbps)});
    }
    for (auto& s : senders) Simulator::ScheduleNow(&UdpSender::Go, &s);
    return RunTimed(ring);
}

}  // namespace simstudy_ceiling
