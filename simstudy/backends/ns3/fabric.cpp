// The packet network's per-packet work: what `fabric.h` declares (see there).

#include "fabric.h"

#include <algorithm>

namespace simstudy_ns3 {

/** Reaches the protected parts of a TcpSocketBase (pointers to members formed in a derived class). */
struct TcpPeek : public TcpSocketBase {
    static uint32_t Resend(TcpSocketBase* s, SequenceNumber32 seq, uint32_t size) {
        uint32_t (TcpSocketBase::*send)(SequenceNumber32, uint32_t, bool) = &TcpPeek::SendDataPacket;
        return (s->*send)(seq, size, true);
    }
    static TcpSocketState* Tcb(TcpSocketBase* s) {
        Ptr<TcpSocketState> TcpSocketBase::*m = &TcpPeek::m_tcb;
        return PeekPointer(s->*m);
    }
    static Time Srtt(TcpSocketBase* s) {
        Ptr<RttEstimator> TcpSocketBase::*m = &TcpPeek::m_rtt;
        return (s->*m)->GetEstimate();
    }
    static Time Rto(TcpSocketBase* s) {
        TracedValue<Time> TcpSocketBase::*m = &TcpPeek::m_rto;
        return (s->*m).Get();
    }
    static Time RtoLeft(TcpSocketBase* s) {
        EventId TcpSocketBase::*m = &TcpPeek::m_retxEvent;
        const EventId& e = s->*m;
        return e.IsPending() ? Simulator::GetDelayLeft(e) : Time::Max();
    }
};

void Fabric::Build(int hosts, int switches, const std::vector<std::string>& addresses) {
    nodes.Create(hosts + switches);
    InternetStackHelper stack;
    stack.Install(nodes);
    host_of_node.assign(hosts + switches, -1);
    node_of_host.resize(hosts);
    host_addr.resize(hosts);
    next_port.assign(hosts, 10000);
    listeners.resize(hosts);
    routes.resize(hosts + switches);
    for (int h = 0; h < hosts; ++h) {
        host_of_node[h] = h;
        node_of_host[h] = h;
        host_ip.push_back(Ipv4Address(addresses.at(h).c_str()));
    }
    for (uint32_t n = 0; n < nodes.GetN(); ++n) {
        Ptr<HostPairRouting> r = CreateObject<HostPairRouting>();
        r->fab = this;
        r->node = n;
        nodes.Get(n)->GetObject<Ipv4>()->SetRoutingProtocol(r);
    }
}

Ipv4Address Fabric::NextAddress() {
    uint32_t k = next_subnet++;
    return Ipv4Address((11u << 24) + k + 1);
}

void Fabric::Qdisc(Ptr<NetDevice> dev, const std::string& kind, uint32_t packets, double tbf_rate_bps,
                   uint32_t tbf_burst, uint32_t tbf_limit) {
    TrafficControlHelper tch;
    if (tbf_rate_bps > 0) {
        tch.SetRootQueueDisc("ns3::TbfQueueDisc", "Rate", DataRateValue(DataRate((uint64_t)tbf_rate_bps)),
                             "Burst", UintegerValue(tbf_burst), "Mtu", UintegerValue(1500),
                             "MaxSize", QueueSizeValue(QueueSize(QueueSizeUnit::BYTES, tbf_limit)));
    } else if (kind == "fifo") {
        tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize",
                             QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, packets)));
    } else if (kind == "red") {
        tch.SetRootQueueDisc("ns3::RedQueueDisc", "MaxSize",
                             QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, packets)));
    } else if (kind == "fq_codel") {
        tch.SetRootQueueDisc("ns3::FqCoDelQueueDisc", "MaxSize",
                             QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, packets)));
    } else {
        return;  // none: packets go straight to the device queue
    }
    QueueDiscContainer q = tch.Install(NetDeviceContainer(dev));
    q.Get(0)->TraceConnectWithoutContext("Drop", MakeCallback(&Fabric::OnQueueDrop, this));
}

void Fabric::OnCongState(TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t now) {
    if (now == TcpSocketState::CA_LOSS) ++timeouts;
    if (now == TcpSocketState::CA_RECOVERY) ++fast_recoveries;
}

void Fabric::Watch(Ptr<Socket> s) {
    s->TraceConnectWithoutContext("CongState", MakeCallback(&Fabric::OnCongState, this));
    if (linux_recovery || restart_after_idle) s->TraceConnectWithoutContext("Tx", MakeCallback(&Fabric::OnTcpTx, this));
    if (linux_recovery) s->TraceConnectWithoutContext("Rx", MakeCallback(&Fabric::OnTcpRx, this));
}

// -- Linux's tail loss probe and RACK-like resends (see Recovery) --------------------------------

void Fabric::OnTcpTx(Ptr<const Packet> p, const TcpHeader& h, Ptr<const TcpSocketBase> cs) {
    TcpSocketBase* s = Base(cs);
    Recovery& r = recovery[s];
    if (p->GetSize() > 0) r.last_data = Simulator::Now().GetNanoSeconds();
    if (!linux_recovery) return;
    if (p->GetSize() > 0 && h.GetSequenceNumber() == s->GetTxBuffer()->HeadSequence()) {
        r.head = h.GetSequenceNumber().GetValue() + 1;
        r.head_sent = Simulator::Now().GetNanoSeconds();
    }
    Arm(s, r);
}

void Fabric::OnTcpRx(Ptr<const Packet>, const TcpHeader& h, Ptr<const TcpSocketBase> cs) {
    if (!(h.GetFlags() & TcpHeader::ACK)) return;
    TcpSocketBase* s = Base(cs);
    Recovery& r = recovery[s];
    Ptr<TcpTxBuffer> tx = s->GetTxBuffer();
    SequenceNumber32 head = tx->HeadSequence();
    TcpSocketState* tcb = TcpPeek::Tcb(s);
    if (head < tcb->m_highTxMark.Get() && r.head == head.GetValue() + 1 && tx->IsHeadRetransmitted() &&
        tx->GetSacked() > 0) {
        int64_t srtt = TcpPeek::Srtt(s).GetNanoSeconds();
        if (Simulator::Now().GetNanoSeconds() - r.head_sent > srtt + srtt / 4 + 1000000) {
            ++rack_resends;  // its retransmission is lost: later segments keep arriving
            TcpPeek::Resend(s, head, std::min<uint32_t>(tcb->m_segmentSize, tcb->m_highTxMark.Get() - head));
        }
    }
    // armed once the socket has taken the ACK in (as Linux arms it from tcp_ack): what is out then
    Simulator::ScheduleNow(&Fabric::Rearm, this, s);
}

void Fabric::Rearm(TcpSocketBase* s) {
    auto it = recovery.find(s);
    if (it != recovery.end()) Arm(s, it->second);
}

void Fabric::Arm(TcpSocketBase* s, Recovery& r) {
    TcpSocketState* tcb = TcpPeek::Tcb(s);
    SequenceNumber32 head = s->GetTxBuffer()->HeadSequence();
    r.pto.Cancel();
    if (head >= tcb->m_highTxMark.Get() || r.probed == head.GetValue() + 1) return;
    int64_t srtt = TcpPeek::Srtt(s).GetNanoSeconds();
    int64_t t = std::max<int64_t>(2 * srtt, 10000000);
    // one segment out (Linux: packets_out == 1): 2 SRTT plus the minimum RTO, for a delayed ACK
    if (tcb->m_highTxMark.Get() - head <= tcb->m_segmentSize) t = 2 * srtt + min_rto_ns;
    if (NanoSeconds(t) >= TcpPeek::RtoLeft(s)) return;  // the retransmission timer comes first
    r.pto = Simulator::Schedule(NanoSeconds(t), &Fabric::Probe, this, s);
}

void Fabric::Probe(TcpSocketBase* s) {
    TcpSocketState* tcb = TcpPeek::Tcb(s);
    SequenceNumber32 head = s->GetTxBuffer()->HeadSequence();
    if (head >= tcb->m_highTxMark.Get()) return;
    recovery[s].probed = head.GetValue() + 1;
    ++probes;
    TcpPeek::Resend(s, head, std::min<uint32_t>(tcb->m_segmentSize, tcb->m_highTxMark.Get() - head));
}

// -- links and routes ----------------------------------------------------------------------------

int Fabric::AddLink(int a, int b, double rate_ab, double rate_ba, double delay_ns, double loss_ab, double loss_ba,
                    const std::string& qkind, uint32_t qpackets, uint32_t dev_packets,
                    double tbf_ab, double tbf_ba, uint32_t burst, uint32_t limit) {
    PointToPointHelper p2p;
    p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds((int64_t)delay_ns)));
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize",
                 QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, dev_packets)));
    NetDeviceContainer d = p2p.Install(nodes.Get(a), nodes.Get(b));
    d.Get(0)->SetAttribute("DataRate", DataRateValue(DataRate((uint64_t)rate_ab)));
    d.Get(1)->SetAttribute("DataRate", DataRateValue(DataRate((uint64_t)rate_ba)));
    int id = (int)link_dev.size();
    double loss[2] = {loss_ab, loss_ba};
    for (int k = 0; k < 2; ++k) {
        double l = loss[k];
        if (l > 0) {  // lost on the way a -> b: dropped by b's receiver
            Ptr<RateErrorModel> em = CreateObject<RateErrorModel>();
            em->SetUnit(RateErrorModel::ERROR_UNIT_PACKET);
            em->SetRate(l);
            em->AssignStreams(1000 + 2 * id + k);
            d.Get(1 - k)->SetAttribute("ReceiveErrorModel", PointerValue(em));
        }
    }
    for (int k = 0; k < 2; ++k) {
        d.Get(k)->TraceConnectWithoutContext("PhyTxBegin", MakeCallback(&Fabric::OnTx, this));
        d.Get(k)->TraceConnectWithoutContext("PhyRxDrop", MakeCallback(&Fabric::OnDrop, this));
        if (count_bin_ns > 0) {
            taps.push_back(new LinkTap{this, id + k});
            link_bytes.resize(id + 2);
            d.Get(k)->TraceConnectWithoutContext("PhyTxBegin", MakeBoundCallback(&Fabric::Tap, taps.back()));
        }
    }
    if (roce) {
        roce->AddLink(id, d.Get(0), d.Get(1), a, b, host_of_node[a] < 0, host_of_node[b] < 0, (int64_t)delay_ns,
                      rate_ab, rate_ba);
    } else {
        Qdisc(d.Get(0), qkind, qpackets, tbf_ab, burst, limit);
        Qdisc(d.Get(1), qkind, qpackets, tbf_ba, burst, limit);
    }
    Ipv4Address addr[2];
    for (int k = 0; k < 2; ++k) {
        int n = k == 0 ? a : b;
        Ptr<Ipv4> ip = nodes.Get(n)->GetObject<Ipv4>();
        int h = host_of_node[n];
        bool first = h >= 0 && host_addr[h] == Ipv4Address();
        addr[k] = first ? host_ip[h] : NextAddress();
        if (first) host_addr[h] = addr[k];
        if (h >= 0) addr_host[addr[k].Get()] = h;
        int32_t i = ip->AddInterface(d.Get(k));
        ip->AddAddress(i, Ipv4InterfaceAddress(addr[k], Ipv4Mask("255.255.255.255")));
        ip->SetUp(i);
    }
    link_dev.push_back(d.Get(0));
    link_rx_dev.push_back(d.Get(1));
    link_rx_addr.push_back(addr[1]);
    link_dev.push_back(d.Get(1));
    link_rx_dev.push_back(d.Get(0));
    link_rx_addr.push_back(addr[0]);
    return id;
}

void Fabric::AddRoute(int src, int dst, const std::vector<int>& links) {
    for (int l : links) {
        Ptr<NetDevice> dev = link_dev[l];
        Ptr<Node> n = dev->GetNode();
        Ptr<Ipv4Route> r = Create<Ipv4Route>();
        r->SetDestination(host_addr[dst]);
        r->SetSource(host_addr[src]);
        r->SetGateway(link_rx_addr[l]);
        r->SetOutputDevice(dev);
        routes[n->GetId()][((uint64_t)src << 32) | (uint32_t)dst] = r;
    }
}

Ptr<Ipv4Route> Fabric::Lookup(int node, int src, int dst) {
    auto& t = routes[node];
    auto it = t.find(((uint64_t)src << 32) | (uint32_t)dst);
    return it == t.end() ? nullptr : it->second;
}

int Fabric::HostOf(Ipv4Address a) {
    auto it = addr_host.find(a.Get());
    return it == addr_host.end() ? -1 : it->second;
}

// -- connections ---------------------------------------------------------------------------------

void Fabric::Listen(int h) {
    if (listeners[h]) return;
    Ptr<Socket> s = Socket::CreateSocket(nodes.Get(node_of_host[h]), TcpSocketFactory::GetTypeId());
    s->Bind(InetSocketAddress(Ipv4Address::GetAny(), listen_port));
    s->Listen();
    s->SetAcceptCallback(MakeCallback(&Fabric::OnRequest, this), MakeCallback(&Fabric::OnAccept, this));
    listeners[h] = s;
}

void Fabric::OnAccept(Ptr<Socket> s, const Address& from) {
    // An accepted socket is a copy of the listener, and so is its congestion control; TcpCubic's
    // copy leaves some of its counters uninitialised (a run then depends on what memory held),
    // so the accepted socket gets a fresh one.
    ObjectFactory cc;
    cc.SetTypeId(congestion_type);
    DynamicCast<TcpSocketBase>(s)->SetCongestionControlAlgorithm(cc.Create<TcpCongestionOps>());
    Watch(s);
    InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
    auto it = conn_by_port.find({HostOf(a.GetIpv4()), a.GetPort()});
    if (it == conn_by_port.end()) return;
    int c = it->second;
    Attach(s, 2 * c + 1, 2 * c);  // the server writes stream 2c+1 and reads 2c
}

void Fabric::Attach(Ptr<Socket> s, int tx, int rx) {
    streams[tx].tx = s;
    tx_stream[PeekPointer(s)] = tx;
    rx_stream[PeekPointer(s)] = rx;
    s->SetRecvCallback(MakeCallback(&Fabric::OnRecv, this));
    s->SetSendCallback(MakeCallback(&Fabric::OnSendSpace, this));
    ++connected;
    Fill(tx);
}

void Fabric::OnConnected(Ptr<Socket> s) {
    auto it = tx_stream.find(PeekPointer(s));
    if (it == tx_stream.end()) return;
    int tx = it->second;
    Attach(s, tx, tx + 1);
    // A byte of hello, as a framework's connection handshake sends (gloo's pair ids): the server
    // side is up only once a segment after the SYN arrives, and the handshake's last ACK may be lost.
    DoSend(tx, 1, HELLO_ID);
}

void Fabric::OnConnectFailed(Ptr<Socket>) { NS_FATAL_ERROR("simstudy: a TCP connection failed"); }

int Fabric::Connect(int client, int server) {
    int c = (int)conn_client.size();
    conn_client.push_back(client);
    conn_server.push_back(server);
    streams.emplace_back();
    streams.emplace_back();
    Listen(server);
    uint16_t port = next_port[client]++;
    conn_port.push_back(port);
    conn_by_port[{client, port}] = c;
    Simulator::ScheduleNow(&Fabric::DoConnect, this, c);
    return c;
}

void Fabric::DoConnect(int c) {
    int client = conn_client[c];
    Ptr<Socket> s = Socket::CreateSocket(nodes.Get(node_of_host[client]), TcpSocketFactory::GetTypeId());
    s->Bind(InetSocketAddress(host_addr[client], conn_port[c]));
    tx_stream[PeekPointer(s)] = 2 * c;
    Watch(s);
    s->SetConnectCallback(MakeCallback(&Fabric::OnConnected, this), MakeCallback(&Fabric::OnConnectFailed, this));
    s->Connect(InetSocketAddress(host_addr[conn_server[c]], listen_port));
}

// -- messages ------------------------------------------------------------------------------------

void Fabric::Send(int stream, uint64_t bytes, int64_t id, int64_t t_ns) {
    int64_t now = Simulator::Now().GetNanoSeconds();
    if (t_ns < now) ++late_sends;  // cannot happen while the engine keeps ns-3 behind it
    Simulator::Schedule(NanoSeconds(std::max<int64_t>(t_ns - now, 0)), &Fabric::DoSend, this, stream, bytes, id);
}

void Fabric::RoceSend(int qp, uint64_t bytes, int64_t id, int64_t t_ns) {
    int64_t now = Simulator::Now().GetNanoSeconds();
    if (t_ns < now) ++late_sends;
    Simulator::Schedule(NanoSeconds(std::max<int64_t>(t_ns - now, 0)), &Roce::Send, roce, qp, bytes, id);
}

void Fabric::RestartAfterIdle(Stream& st) {
    TcpSocketBase* s = dynamic_cast<TcpSocketBase*>(PeekPointer(st.tx));
    if (!s || st.pending > 0 || s->GetTxBuffer()->Size() > 0) return;  // data waiting: not idle
    auto it = recovery.find(s);
    if (it == recovery.end() || it->second.last_data < 0) return;  // never sent: the initial window
    TcpSocketState* t = TcpPeek::Tcb(s);
    if (t->m_bytesInFlight.Get() > 0) return;
    int64_t delta = Simulator::Now().GetNanoSeconds() - it->second.last_data;
    int64_t rto = TcpPeek::Rto(s).GetNanoSeconds();
    if (delta <= rto) return;
    // in whole segments, as Linux counts snd_cwnd: a window of bytes halved to a part of a segment
    // left ns-3 sending partial segments, and a parameter server's pull stalled for 26 s
    uint32_t mss = t->m_segmentSize;
    uint32_t segs = t->m_cWnd.Get() / mss;
    uint32_t restart = std::min(t->m_initialCWnd, segs);
    if (t->m_congState.Get() == TcpSocketState::CA_OPEN || t->m_congState.Get() == TcpSocketState::CA_DISORDER)
        t->m_ssThresh = std::max(t->m_ssThresh.Get(), ((segs >> 1) + (segs >> 2)) * mss);
    while ((delta -= rto) > 0 && segs > restart) segs >>= 1;
    t->m_cWnd = std::max(segs, restart) * mss;
    t->m_cWndInfl = t->m_cWnd.Get();
    ++restarts;
}

void Fabric::DoSend(int stream, uint64_t bytes, int64_t id) {
    Stream& st = streams[stream];
    if (restart_after_idle && st.tx) RestartAfterIdle(st);
    st.queued_total += bytes;
    st.pending += bytes;
    st.ends.emplace_back(st.queued_total, id);
    ++streams_open;
    Fill(stream);
}

void Fabric::Fill(int stream) {
    Stream& st = streams[stream];
    if (!st.tx) return;
    while (st.pending > 0) {
        uint32_t room = st.tx->GetTxAvailable();
        if (room == 0) break;
        uint32_t n = (uint32_t)std::min<uint64_t>(st.pending, room);
        int sent = st.tx->Send(Create<Packet>(n), 0);
        if (sent <= 0) break;
        st.pending -= (uint64_t)sent;
    }
}

void Fabric::OnSendSpace(Ptr<Socket> s, uint32_t) {
    auto it = tx_stream.find(PeekPointer(s));
    if (it != tx_stream.end()) Fill(it->second);
}

void Fabric::OnRecv(Ptr<Socket> s) {
    int k = rx_stream[PeekPointer(s)];
    Stream& st = streams[k];
    Ptr<Packet> p;
    while ((p = s->Recv())) {
        st.received += p->GetSize();
    }
    while (!st.ends.empty() && st.received >= st.ends.front().first) {
        Complete(st.ends.front().second);
        st.ends.pop_front();
        --streams_open;
    }
}

void Fabric::Complete(int64_t id) {
    done_id.push_back(id);
    done_t.push_back(Simulator::Now().GetNanoSeconds());
    if (!completion_stop.IsPending()) completion_stop = Simulator::ScheduleNow(&Fabric::StopNow);
}

// -- the clock -----------------------------------------------------------------------------------

int64_t Fabric::RunUntil(int64_t t_ns) {
    if (t_ns >= 0) {
        int64_t now = Simulator::Now().GetNanoSeconds();
        if (now >= t_ns) return (int64_t)done_id.size();
        stop_ev = Simulator::Schedule(NanoSeconds(t_ns - now), &Fabric::StopNow);
    }
    Simulator::Run();
    Simulator::Cancel(completion_stop);
    if (t_ns >= 0) Simulator::Cancel(stop_ev);
    return (int64_t)done_id.size();
}

// -- pcaps ---------------------------------------------------------------------------------------

void Fabric::EnablePcap(int h, const std::string& prefix, uint32_t snaplen) {
    Ptr<Node> n = nodes.Get(node_of_host[h]);
    PcapHelper helper;
    int k = 0;
    for (uint32_t i = 0; i < n->GetNDevices(); ++i) {
        Ptr<PointToPointNetDevice> dev = DynamicCast<PointToPointNetDevice>(n->GetDevice(i));
        if (!dev) continue;
        std::string name = k == 0 ? prefix + ".pcap" : prefix + "." + std::to_string(k) + ".pcap";
        ++k;
        Sniffer* sn = new Sniffer{this, h, helper.CreateFile(name, std::ios::out, PcapHelper::DLT_RAW, snaplen)};
        sniffers.push_back(sn);
        dev->TraceConnectWithoutContext("PromiscSniffer", MakeBoundCallback(&Fabric::Sniff, sn));
    }
}

void Fabric::Tap(LinkTap* tap, Ptr<const Packet> p) {
    Fabric* f = tap->fab;
    int64_t t = Simulator::Now().GetNanoSeconds() - f->count_t0_ns;
    if (t < 0 || f->count_bin_ns <= 0) return;
    std::vector<double>& bins = f->link_bytes[tap->link];
    size_t b = (size_t)(t / f->count_bin_ns);
    if (b >= bins.size()) bins.resize(std::max(b + 1, 2 * bins.size()), 0.0);
    bins[b] += p->GetSize();
}

void Fabric::Sniff(Sniffer* sn, Ptr<const Packet> packet) {
    Ptr<Packet> p = packet->Copy();
    PppHeader ppp;
    p->RemoveHeader(ppp);
    Ipv4Header ip;
    p->PeekHeader(ip);
    if (sn->fab->HostOf(ip.GetSource()) != sn->host) return;  // what it sends (tcpdump -Q out)
    sn->file->Write(Simulator::Now(), p);
}

void Fabric::Close() {
    for (Sniffer* s : sniffers) { s->file = nullptr; delete s; }
    sniffers.clear();
    count_bin_ns = 0;  // counting ends (the taps are freed with the fabric)
}

// -- routing -------------------------------------------------------------------------------------

Ptr<Ipv4Route> HostPairRouting::RouteOutput(Ptr<Packet>, const Ipv4Header& h, Ptr<NetDevice>,
                                            Socket::SocketErrno& err) {
    int src = fab->host_of_node[node];
    int dst = fab->HostOf(h.GetDestination());
    Ptr<Ipv4Route> r = dst < 0 || src < 0 ? nullptr : fab->Lookup(node, src, dst);
    err = r ? Socket::ERROR_NOTERROR : Socket::ERROR_NOROUTETOHOST;
    return r;
}

bool HostPairRouting::RouteInput(Ptr<const Packet> p, const Ipv4Header& h, Ptr<const NetDevice> idev,
                                 const UnicastForwardCallback& ucb, const MulticastForwardCallback&,
                                 const LocalDeliverCallback& lcb, const ErrorCallback&) {
    uint32_t iif = ipv4->GetInterfaceForDevice(idev);
    if (ipv4->IsDestinationAddress(h.GetDestination(), iif)) {
        if (lcb.IsNull()) return false;
        lcb(p, h, iif);
        return true;
    }
    int src = fab->HostOf(h.GetSource());
    int dst = fab->HostOf(h.GetDestination());
    if (src < 0 || dst < 0) return false;
    Ptr<Ipv4Route> r = fab->Lookup(node, src, dst);
    if (!r) return false;
    if (fab->roce && !fab->roce->Ingress(node, idev, p, h)) return false;  // beyond PFC's headroom
    ucb(r, p, h);
    return true;
}

}  // namespace simstudy_ns3

#include "roce.cpp"
