// The RoCE transport's per-packet work: what `roce.h` declares (see there). Included by fabric.cpp.

#include <cmath>
#include <cstring>

namespace simstudy_ns3 {

// -- the queue at a link's sending end ------------------------------------------------------------

bool PfcQueue::CheckConfig() {
    if (GetNInternalQueues() == 0) {
        for (int k = 0; k < 2; ++k) {
            Ptr<InternalQueue> q = CreateObject<DropTailQueue<QueueDiscItem>>();
            q->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, 1u << 30));  // the switch's buffer: see Roce::Ingress
            AddInternalQueue(q);
        }
    }
    return true;
}

static int ClassOf(Ptr<QueueDiscItem> item) {
    Ptr<Ipv4QueueDiscItem> ip = DynamicCast<Ipv4QueueDiscItem>(item);
    if (ip && (ip->GetHeader().GetTos() >> 2) == (Roce::TOS_CONTROL >> 2)) return PfcQueue::CONTROL;
    return ip ? PfcQueue::DATA : PfcQueue::CONTROL;
}

bool PfcQueue::DoEnqueue(Ptr<QueueDiscItem> item) {
    int cls = ClassOf(item);
    if (cls == DATA && at_switch && roce->Mark((double)GetInternalQueue(DATA)->GetNBytes())) {
        if (item->Mark()) ++roce->ecn_marks;
    }
    return GetInternalQueue(cls)->Enqueue(item);
}

Ptr<QueueDiscItem> PfcQueue::DoDequeue() {
    for (int cls : {CONTROL, DATA}) {
        if (paused[cls]) continue;
        Ptr<QueueDiscItem> item = GetInternalQueue(cls)->Dequeue();
        if (!item) continue;
        if (cls == DATA) {
            if (at_switch) roce->Released(node, item->GetPacket()->GetUid());
            else roce->Wake(roce->fab->host_of_node[node]);
        }
        return item;
    }
    return nullptr;
}

void PfcQueue::Pause(int cls, bool on) {
    paused[cls] = on;
    if (on) return;
    Run();
    if (!at_switch && cls == DATA) roce->Wake(roce->fab->host_of_node[node]);  // its senders may go on
}

// -- set-up ---------------------------------------------------------------------------------------

void Roce::Setup(int nodes) {
    waiting.resize(nodes);
    int hosts = (int)fab->node_of_host.size();
    sockets.resize(hosts);
    host_q.resize(hosts);
    host_qps.resize(hosts);
    host_rr.assign(hosts, 0);
    host_wake.resize(hosts);
}

Ptr<PfcQueue> Roce::Install(Ptr<NetDevice> dev, int node, bool at_switch) {
    Ptr<PfcQueue> q = CreateObject<PfcQueue>();
    q->roce = this;
    q->node = node;
    q->at_switch = at_switch;
    dev->GetNode()->GetObject<TrafficControlLayer>()->SetRootQueueDiscOnDevice(dev, q);
    return q;
}

void Roce::AddLink(int id, Ptr<NetDevice> a, Ptr<NetDevice> b, int node_a, int node_b, bool switch_a,
                   bool switch_b, int64_t delay_ns, double rate_ab, double rate_ba) {
    Ptr<PfcQueue> qa = Install(a, node_a, switch_a), qb = Install(b, node_b, switch_b);
    link_q.push_back(qa);
    link_q.push_back(qb);
    link_delay_ns.push_back(delay_ns);
    link_delay_ns.push_back(delay_ns);
    link_rate.push_back(rate_ab);
    link_rate.push_back(rate_ba);
    rx_link[PeekPointer(b)] = id;
    rx_link[PeekPointer(a)] = id + 1;
    ingress.resize(id + 2, 0);
    pause_sent.resize(id + 2, false);
    pause_frames.resize(id + 2, 0);
    paused_ns.resize(id + 2, 0);
    pause_start.resize(id + 2, 0);
    for (int k = 0; k < 2; ++k) {
        int n = k == 0 ? node_a : node_b;
        int h = fab->host_of_node[n];
        if (h >= 0 && !host_q[h]) {  // a host's first link is its NIC
            host_q[h] = k == 0 ? qa : qb;
        }
    }
}

void Roce::Endpoint(int host) {
    if (sockets[host]) return;
    Ptr<Socket> s = Socket::CreateSocket(fab->nodes.Get(fab->node_of_host[host]), UdpSocketFactory::GetTypeId());
    s->Bind(InetSocketAddress(Ipv4Address::GetAny(), PORT));
    s->SetIpRecvTos(true);
    s->SetAttribute("RcvBufSize", UintegerValue(1u << 30));
    s->SetRecvCallback(MakeCallback(&Roce::OnRecv, this));
    sockets[host] = s;
}

int Roce::Qp(int src, int dst, double line) {
    Endpoint(src);
    Endpoint(dst);
    int id = (int)qps.size();
    qps.emplace_back();
    QueuePair& q = qps.back();
    q.src = src;
    q.dst = dst;
    q.line = line;
    q.rc = q.rt = line;
    host_qps[src].push_back(id);
    if (rx_bin_ns > 0) qp_rx.emplace_back();
    return id;
}

void Roce::Send(int qp_id, uint64_t bytes, int64_t id) {
    QueuePair& q = qps[qp_id];
    if (q.snd_nxt == q.queued) q.last_ack_ns = Simulator::Now().GetNanoSeconds();  // idle until now
    q.queued += bytes;
    q.send_ends.push_back(q.queued);
    q.ends.emplace_back(q.queued, id);
    Wake(q.src);
}

// -- the sender -----------------------------------------------------------------------------------

void Roce::Wake(int host) {
    if (host < 0) return;
    if (host_wake[host].IsPending() && Simulator::GetDelayLeft(host_wake[host]).IsZero()) return;
    host_wake[host].Cancel();
    host_wake[host] = Simulator::ScheduleNow(&Roce::TrySend, this, host);
}

void Roce::TrySend(int host) {
    Ptr<PfcQueue> nic = host_q[host];
    if (!nic || nic->paused[PfcQueue::DATA] || nic->DataPackets() > 0) return;  // its dequeue wakes us
    int64_t now = Simulator::Now().GetNanoSeconds();
    std::vector<int>& mine = host_qps[host];
    size_t n = mine.size();
    int64_t soonest = INT64_MAX;
    for (size_t k = 0; k < n; ++k) {
        size_t i = (host_rr[host] + k) % n;
        QueuePair& q = qps[mine[i]];
        if (q.snd_nxt >= q.queued) continue;
        if (q.next_tx_ns > now) {
            soonest = std::min(soonest, q.next_tx_ns);
            continue;
        }
        host_rr[host] = (i + 1) % n;
        SendPacket(q, mine[i]);
        return;
    }
    if (soonest != INT64_MAX) {
        host_wake[host].Cancel();
        host_wake[host] = Simulator::Schedule(NanoSeconds(soonest - now), &Roce::TrySend, this, host);
    }
}

void Roce::SendPacket(QueuePair& q, int qp_id) {
    uint64_t end = q.queued;
    for (uint64_t e : q.send_ends) {
        if (e > q.snd_nxt) { end = e; break; }
    }
    uint32_t len = (uint32_t)std::min<uint64_t>(mtu, end - q.snd_nxt);
    RoceHeader h{DATA, {0, 0, 0}, qp_id, q.snd_nxt};
    Ptr<Packet> p = Create<Packet>(reinterpret_cast<const uint8_t*>(&h), (uint32_t)sizeof(h));
    p->AddPaddingAtEnd(len);
    SocketIpTosTag tos;
    tos.SetTos(TOS_DATA);
    p->AddPacketTag(tos);
    sockets[q.src]->SendTo(p, 0, InetSocketAddress(fab->host_addr[q.dst], PORT));
    ++data_packets;
    q.snd_nxt += len;
    int64_t now = Simulator::Now().GetNanoSeconds();
    double wire = (double)(len + OVERHEAD + 2) * 8;
    double rate = dcqcn ? q.rc : q.line;
    q.next_tx_ns = std::max(q.next_tx_ns, now) + (int64_t)std::ceil(wire / rate * 1e9);
    if (!q.rto.IsPending()) q.rto = Simulator::Schedule(NanoSeconds(timeout_ns), &Roce::OnTimeout, this, qp_id);
    if (dcqcn && q.rc < q.line) {
        q.bytes_since += len;
        if (q.bytes_since >= byte_counter) {
            q.bytes_since -= byte_counter;
            ++q.b_count;
            Increase(q);
        }
    }
}

void Roce::SendControl(int from, int to, uint8_t type, int qp, uint64_t offset) {
    RoceHeader h{type, {0, 0, 0}, qp, offset};
    Ptr<Packet> p = Create<Packet>(reinterpret_cast<const uint8_t*>(&h), (uint32_t)sizeof(h));
    p->AddPaddingAtEnd(16);  // a CNP's 16 reserved bytes; an ACK's AETH and padding
    SocketIpTosTag tos;
    tos.SetTos(TOS_CONTROL);
    p->AddPacketTag(tos);
    sockets[from]->SendTo(p, 0, InetSocketAddress(fab->host_addr[to], PORT));
}

void Roce::OnTimeout(int qp_id) {
    QueuePair& q = qps[qp_id];
    if (q.snd_una >= q.snd_nxt) return;  // everything sent is acknowledged
    int64_t now = Simulator::Now().GetNanoSeconds();
    int64_t left = q.last_ack_ns + timeout_ns - now;
    if (left > 0) {
        q.rto = Simulator::Schedule(NanoSeconds(left), &Roce::OnTimeout, this, qp_id);
        return;
    }
    ++rtos;
    ++go_back;
    q.snd_nxt = q.snd_una;
    q.last_ack_ns = now;
    q.rto = Simulator::Schedule(NanoSeconds(timeout_ns), &Roce::OnTimeout, this, qp_id);
    Wake(q.src);
}

void Roce::OnCnp(QueuePair& q) {
    int64_t now = Simulator::Now().GetNanoSeconds();
    if (q.last_cnp_ns >= 0) {  // alpha decayed once per alpha period without a CNP
        int64_t periods = (now - q.last_cnp_ns) / alpha_period_ns;
        if (periods > 0) q.alpha *= std::pow(1 - g, (double)periods);
    }
    q.last_cnp_ns = now;
    q.rt = q.rc;
    q.rc = std::max(min_rate, q.rc * (1 - q.alpha / 2));
    q.alpha = (1 - g) * q.alpha + g;
    q.t_count = q.b_count = 0;
    q.bytes_since = 0;
    q.rate_timer.Cancel();
    int qp_id = (int)(&q - qps.data());
    q.rate_timer = Simulator::Schedule(NanoSeconds(rate_timer_ns), &Roce::OnRateTimer, this, qp_id);
}

void Roce::Increase(QueuePair& q) {
    double line = q.line;
    int lo = std::min(q.t_count, q.b_count), hi = std::max(q.t_count, q.b_count);
    if (hi < fast_recovery) {
        // fast recovery: toward the rate before the cut
    } else if (lo > fast_recovery) {
        q.rt += (lo - fast_recovery) * rhai;  // hyper increase
    } else {
        q.rt += rai;  // additive increase
    }
    q.rt = std::min(q.rt, line);
    q.rc = std::min(line, (q.rt + q.rc) / 2);
    if (line - q.rc < 1e3) q.rc = q.rt = line;
}

void Roce::OnRateTimer(int qp_id) {
    QueuePair& q = qps[qp_id];
    ++q.t_count;
    Increase(q);
    if (q.rc < q.line)
        q.rate_timer = Simulator::Schedule(NanoSeconds(rate_timer_ns), &Roce::OnRateTimer, this, qp_id);
}

// -- the receiver ---------------------------------------------------------------------------------

void Roce::OnRecv(Ptr<Socket> s) {
    Ptr<Packet> p;
    while ((p = s->Recv())) {
        RoceHeader h;
        p->CopyData(reinterpret_cast<uint8_t*>(&h), sizeof(h));
        if (h.qp < 0 || h.qp >= (int)qps.size()) continue;
        QueuePair& q = qps[h.qp];
        if (h.type == DATA) {
            SocketIpTosTag tos;
            bool ce = p->PeekPacketTag(tos) && (tos.GetTos() & 3) == 3;
            OnData(q, h.qp, h.offset, p->GetSize() - (uint32_t)sizeof(h), ce);
        } else if (h.type == CNP) {
            ++cnps;
            if (dcqcn) OnCnp(q);
        } else {  // ACK or NACK: every byte before h.offset arrived
            if (h.offset > q.snd_una) {
                q.snd_una = h.offset;
                q.last_ack_ns = Simulator::Now().GetNanoSeconds();
                while (!q.send_ends.empty() && q.send_ends.front() <= q.snd_una) q.send_ends.pop_front();
            }
            if (h.type == NACK && h.offset < q.snd_nxt) {
                ++go_back;
                q.snd_nxt = std::max(h.offset, q.snd_una);
                Wake(q.src);
            }
        }
    }
}

void Roce::OnData(QueuePair& q, int qp_id, uint64_t offset, uint32_t len, bool ce) {
    int64_t now = Simulator::Now().GetNanoSeconds();
    if (ce && dcqcn && (q.last_cnp_sent_ns < 0 || now - q.last_cnp_sent_ns >= cnp_interval_ns)) {
        q.last_cnp_sent_ns = now;
        SendControl(q.dst, q.src, CNP, qp_id, 0);
    }
    if (offset < q.expected) {  // sent again after a lost ACK: what arrived already
        SendControl(q.dst, q.src, ACK, qp_id, q.expected);
        return;
    }
    if (offset > q.expected) {  // a packet before it was lost: one NACK a gap, the rest dropped
        ++out_of_order;
        if (q.nacked != q.expected) {
            q.nacked = q.expected;
            ++nacks;
            SendControl(q.dst, q.src, NACK, qp_id, q.expected);
        }
        return;
    }
    q.expected += len;
    if (rx_bin_ns > 0) {
        std::vector<double>& bins = qp_rx[qp_id];
        size_t b = (size_t)(now / rx_bin_ns);
        if (b >= bins.size()) bins.resize(b + 1, 0.0);
        bins[b] += len;
    }
    bool ended = false;
    while (!q.ends.empty() && q.expected >= q.ends.front().first) {
        fab->Complete(q.ends.front().second);
        q.ends.pop_front();
        ended = true;
    }
    if (ended || ++q.since_ack >= ack_every) {
        q.since_ack = 0;
        SendControl(q.dst, q.src, ACK, qp_id, q.expected);
    }
}

// -- switches -------------------------------------------------------------------------------------

double Roce::Uniform() {  // splitmix64: a switch's marking coin, reproducible for a seed
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

bool Roce::Mark(double queued) {
    if (queued <= kmin) return false;
    if (queued > kmax) return true;
    return Uniform() < pmax * (queued - kmin) / (kmax - kmin);
}

bool Roce::Ingress(int node, Ptr<const NetDevice> idev, Ptr<const Packet> p, const Ipv4Header& h) {
    if ((h.GetTos() >> 2) == (TOS_CONTROL >> 2)) return true;
    auto it = rx_link.find(PeekPointer(idev));
    if (it == rx_link.end()) return true;
    int l = it->second;
    uint32_t bytes = p->GetSize() + h.GetSerializedSize();
    // the port's share of the switch's buffer: xoff and the headroom (without PFC, all it may hold)
    uint64_t room = headroom >= 0 ? (uint64_t)headroom
                                  : (uint64_t)(2 * link_delay_ns[l] * link_rate[l] / 8e9) + 3 * (mtu + OVERHEAD + 2);
    if (ingress[l] + bytes > xoff + room) {
        ++headroom_drops;
        return false;
    }
    ingress[l] += bytes;
    waiting[node][p->GetUid()] = {l, bytes};
    if (pfc && !pause_sent[l] && ingress[l] > xoff) {
        pause_sent[l] = true;
        Simulator::Schedule(NanoSeconds(link_delay_ns[l]), &Roce::SetPause, this, l, true);
    }
    return true;
}

void Roce::Released(int node, uint64_t uid) {
    auto& w = waiting[node];
    auto it = w.find(uid);
    if (it == w.end()) return;
    int l = it->second.first;
    ingress[l] -= it->second.second;
    w.erase(it);
    if (pause_sent[l] && ingress[l] <= xon) {
        pause_sent[l] = false;
        Simulator::Schedule(NanoSeconds(link_delay_ns[l]), &Roce::SetPause, this, l, false);
    }
}

void Roce::SetPause(int l, bool on) {
    int64_t now = Simulator::Now().GetNanoSeconds();
    if (on) {
        ++pause_frames[l];
        pause_start[l] = now;
    } else {
        paused_ns[l] += now - pause_start[l];
    }
    link_q[l]->Pause(PfcQueue::DATA, on);
}

}  // namespace simstudy_ns3
