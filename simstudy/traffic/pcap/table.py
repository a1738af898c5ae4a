"""From a packet table to a TrafficTable: flows, ranks of endpoints, control traffic, retransmissions."""

from __future__ import annotations

import ipaddress
import warnings
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from simstudy.table import make_table
from simstudy.traffic.pcap.base import I64, Mask, PcapWarning
from simstudy.traffic.processes import Processes, find_processes

#: TCP's SYN flag.
SYN = 2


def _ip_key(text: str) -> tuple[int, int]:
    a = ipaddress.ip_address(text)
    return (a.version, int(a))


def sort_ips(ips: Iterable[str]) -> list[str]:
    return sorted(ips, key=_ip_key)




def _endpoint(text: str) -> tuple[str, int | None]:
    """'ip', 'ip:port' or '[ipv6]:port' -> (normalised ip, port or None)."""
    text = text.strip()
    try:
        return str(ipaddress.ip_address(text)), None
    except ValueError:
        pass
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not an endpoint (ip, ip:port or [ipv6]:port): {text!r}")
    return str(ipaddress.ip_address(host.strip("[]"))), int(port)




def sequence_advance(packets: pd.DataFrame) -> NDArray[np.int64]:
    """Per packet, the TCP payload bytes its flow sent for the first time there: how far the
    highest sequence number its connection carried in the same file moved. That is its payload,
    less what the connection already carried (a retransmission, whole or in part), plus what it
    skipped (bytes before it that no packet of the capture carried: a segment the capture did not
    see, or one that came later out of order, then counted as a retransmission). Other packets:
    their payload.

    Connections are (file, src ip, dst ip, sport, dport), in capture order, a new one from each SYN
    (a reused port starts a new sequence); sequence numbers are unwrapped through their 32-bit wrap.
    A capture that starts mid-connection counts from its first packet. Needs the `tcp_seq` and
    `tcp_flags` columns of `read_pcap`."""
    payload = np.asarray(packets["payload_bytes"].to_numpy(), dtype=np.int64)
    out: NDArray[np.int64] = payload.copy()
    tcp = packets["proto"].to_numpy() == 6
    syn = tcp & ((packets["tcp_flags"].to_numpy() & SYN) != 0)
    data = np.flatnonzero(tcp & ((payload > 0) | syn))
    if len(data) < 2:
        return out
    key = [c for c in ("file", "src_ip", "dst_ip", "sport", "dport") if c in packets]
    flow = packets.iloc[data].groupby(key, sort=False, observed=True).ngroup().to_numpy(dtype=np.int64)
    order = np.lexsort((data, flow))  # by flow, then capture order
    rows, f = data[order], flow[order]
    # a connection per SYN: its number within the flow, then one id per (flow, connection)
    opened = pd.Series(syn[rows].astype(np.int64)).groupby(f).cumsum().to_numpy()
    conn = np.r_[0, np.cumsum((f[1:] != f[:-1]) | (opened[1:] != opened[:-1]))]
    seq = packets["tcp_seq"].to_numpy().astype(np.int64)[rows]
    size = payload[rows] + syn[rows]  # a SYN takes one sequence number
    first = np.r_[True, conn[1:] != conn[:-1]]
    step = np.r_[0, ((seq[1:] - seq[:-1] + 2**31) % 2**32) - 2**31]  # signed 32-bit differences
    step[first] = 0
    rel = np.cumsum(step)  # sequence position within the connection (plus a constant per connection)
    end = rel + size
    # the highest sequence number each connection carried before this packet (its own start for the first)
    seen = pd.Series(end).groupby(conn).cummax().to_numpy()
    before = np.r_[rel[0], seen[:-1]]
    before[first] = rel[first]
    advance = np.maximum(end - before, 0) - syn[rows]
    out[rows] = np.maximum(advance, 0)
    return out


def to_traffic_table(
    packets: pd.DataFrame,
    *,
    rank_of: Mapping[str, int] | None = None,
    control: Iterable[str] | None = None,
    t0_s: float | None = None,
) -> pd.DataFrame:
    """Build a checked TrafficTable (one row per packet, start == end) from a packet table.

    - times: `time - t0_s`, t0_s defaulting to the earliest packet; rows without a time (pcapng
      simple packet blocks) are dropped with a warning; rows keep their input order.
    - bytes: `ip_bytes`; optional columns `sport`, `dport`, `payload_bytes` are kept.
    - src/dst ranks: with `rank_of` ("ip:port" or "ip" -> rank), an endpoint is looked up as
      ip:port first, then ip; endpoints that are not mapped get rank -1. Without it, ranks are
      processes (`simstudy.traffic.processes`): a host per address, in numeric order, or, where
      ranks share an address (loopback, one host), the processes its `ip:port` endpoints form
      (`attrs["places"]` describes them, `attrs["processes"]` says what was found).
    - flow: one id per directional 5-tuple (src ip, dst ip, sport, dport, proto), numbered in order
      of first appearance.
    - op: "control" for packets to or from an endpoint in `control` ("ip:port", or "ip" for any port
      of that host), else "tcp", "udp", or "ip" for other protocols.
    - `attrs["rank_labels"]`: rank -> its address(es), or its "ip:port" when it is a process among
      others on its address.
    """
    time = packets["time"].to_numpy(dtype=np.float64)
    timed = np.isfinite(time)
    if not timed.all():
        warnings.warn(f"{int((~timed).sum())} packets have no timestamp and are left out of the traffic table",
                      PcapWarning,
                      stacklevel=2)
        packets = packets[timed]
        time = time[timed]
    cats = sort_ips(set(_categories(packets["src_ip"])) | set(_categories(packets["dst_ip"])))
    sport = packets["sport"].to_numpy(dtype=np.int64)
    dport = packets["dport"].to_numpy(dtype=np.int64)
    flows = _Flows(_codes(packets["src_ip"], cats), _codes(packets["dst_ip"], cats), sport, dport,
                   packets["proto"].to_numpy(dtype=np.int64), len(cats))
    processes = None
    if rank_of is None:
        processes = _processes(cats, flows, packets)
        ranks = np.array([processes.of_endpoint[e] for e in range(len(flows.end_ip))], dtype=np.int32)
    else:
        ranks = _rank_lookup(cats, flows, rank_of)  # per endpoint
    op = np.where(flows.proto == 6, 0, np.where(flows.proto == 17, 1, 3)).astype(np.int8)  # per flow
    if control is not None:
        op[flows.touches(cats, _control_keys(control))] = 2
    t0 = float(np.min(time)) if t0_s is None and len(time) else (t0_s or 0.0)
    rel = time - t0
    table = make_table({
        "t_start_s": rel,
        "t_end_s": rel,
        "src": ranks[flows.src_end][flows.codes],
        "dst": ranks[flows.dst_end][flows.codes],
        "bytes": packets["ip_bytes"].to_numpy(dtype=np.int64),
        "flow": flows.codes,
        "op": pd.Categorical.from_codes(op[flows.codes], categories=["tcp", "udp", "control", "ip"]),
        "sport": sport.astype(np.int32),
        "dport": dport.astype(np.int32),
        "payload_bytes": packets["payload_bytes"].to_numpy(dtype=np.int64),
    })
    if processes is None:
        table.attrs["rank_labels"] = _labels(cats, flows, ranks)
    else:
        table.attrs["rank_labels"] = dict(processes.labels)
        table.attrs["places"] = dict(processes.places)
        table.attrs["processes"] = processes.reason
    return table


def _processes(cats: list[str], flows: _Flows, packets: pd.DataFrame) -> Processes:
    """The processes of the endpoints: an endpoint-level table (one rank per distinct ip:port), the
    listening and connecting sides seen in SYNs, then `find_processes`."""
    time = packets["time"].to_numpy(dtype=np.float64)
    table = pd.DataFrame({  # the columns the connections are read from (not a checked TrafficTable)
        "t_start_s": time, "t_end_s": time,
        "src": flows.src_end[flows.codes], "dst": flows.dst_end[flows.codes],
        "bytes": packets["ip_bytes"].to_numpy(dtype=np.int64),
        "op": pd.Categorical.from_codes(np.zeros(len(packets), dtype=np.int8), categories=["tcp"]),
        "sport": packets["sport"].to_numpy(dtype=np.int64), "dport": packets["dport"].to_numpy(dtype=np.int64),
        "payload_bytes": packets["payload_bytes"].to_numpy(dtype=np.int64),
    }, copy=False)
    listening: set[int] = set()
    connecting: set[int] = set()
    if "tcp_flags" in packets.columns:
        flags = packets["tcp_flags"].to_numpy()
        syn = (flags & 0x02) != 0
        ack = (flags & 0x10) != 0
        for rows, client_side in ((syn & ~ack, True), (syn & ack, False)):
            if rows.any():
                f = np.unique(flows.codes[rows])
                src, dst = flows.src_end[f].tolist(), flows.dst_end[f].tolist()
                (connecting if client_side else listening).update(src)
                (listening if client_side else connecting).update(dst)
    addresses = {e: cats[int(i)] for e, i in enumerate(flows.end_ip.tolist())}
    ports = dict(enumerate(int(p) for p in flows.end_port.tolist()))
    return find_processes(table, addresses, ports, listening=frozenset(listening),
                          connecting=frozenset(connecting))


def _categories(col: pd.Series) -> list[str]:
    if isinstance(col.dtype, pd.CategoricalDtype):
        return [str(c) for c in col.cat.categories]
    return [str(c) for c in pd.unique(col.astype(str))]


def _codes(col: pd.Series, cats: list[str]) -> I64:
    """Codes of `col` in `cats` (int64)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        own = [str(c) for c in col.cat.categories]
        index = {c: i for i, c in enumerate(cats)}
        lut = np.array([index[c] for c in own], dtype=np.int64)
        codes = col.cat.codes.to_numpy(dtype=np.int64)
        out: I64 = lut[codes] if len(lut) else codes
        return out
    return np.asarray(pd.Categorical(col.astype(str), categories=cats).codes, dtype=np.int64)


class _Flows:
    """Directional 5-tuples: `codes` numbers each packet's flow in order of first appearance; per flow,
    the source and destination IP codes, ports and protocol, and the source/destination endpoint
    (index into `end_ip`/`end_port`, the distinct (ip, port) endpoints)."""

    def __init__(self, src_ip: I64, dst_ip: I64, sport: I64, dport: I64, proto: I64, n_ips: int) -> None:
        ports = (sport << 24) | (dport << 8) | proto  # < 2**40
        if n_ips <= 2048:  # the (src, dst) pair < 2**22 fits beside 40 bits: one key per packet
            codes, keys = pd.factorize((src_ip * n_ips + dst_ip) << 40 | ports)
            keys = np.asarray(keys, dtype=np.int64)
            pair, ports_f = keys >> 40, keys & ((1 << 40) - 1)
            self.src, self.dst = pair // max(n_ips, 1), pair % max(n_ips, 1)
        else:
            frame = pd.DataFrame({"a": src_ip, "b": dst_ip, "p": ports})
            codes = frame.groupby(["a", "b", "p"], sort=False).ngroup().to_numpy(dtype=np.int64)
            _, first = np.unique(codes, return_index=True)
            self.src, self.dst, ports_f = src_ip[first], dst_ip[first], ports[first]
        self.codes: I64 = np.asarray(codes, dtype=np.int64)
        self.sport, self.dport, self.proto = ports_f >> 24, (ports_f >> 8) & 0xFFFF, ports_f & 0xFF
        ends, uniq = pd.factorize(np.concatenate([self.src * 65536 + self.sport, self.dst * 65536 + self.dport]))
        self.src_end, self.dst_end = ends[: len(self.src)], ends[len(self.src) :]
        self.end_ip = np.asarray(uniq, dtype=np.int64) // 65536
        self.end_port = np.asarray(uniq, dtype=np.int64) % 65536

    def touches(self, cats: list[str], endpoints: tuple[set[tuple[str, int]], set[str]]) -> Mask:
        """Flows with an endpoint among `endpoints` ((ip, port) pairs, and hosts meaning any port)."""
        pairs, hosts = endpoints
        hit = np.array([(cats[i], p) in pairs or cats[i] in hosts
                        for i, p in zip(self.end_ip.tolist(), self.end_port.tolist(), strict=True)], dtype=np.bool_)
        if not len(hit):
            return np.zeros(len(self.src), dtype=np.bool_)
        found: Mask = hit[self.src_end] | hit[self.dst_end]
        return found


def _rank_lookup(cats: list[str], flows: _Flows, rank_of: Mapping[str, int]) -> NDArray[np.int32]:
    """Rank of each distinct endpoint (-1 when unmapped)."""
    ips, ports = flows.end_ip.tolist(), flows.end_port.tolist()
    by_port: dict[tuple[str, int], int] = {}
    by_ip: dict[str, int] = {}
    for key, rank in rank_of.items():
        ip, port = _endpoint(str(key))
        if port is None:
            by_ip[ip] = int(rank)
        else:
            by_port[(ip, port)] = int(rank)
    ranks = [by_port.get((cats[i], p), by_ip.get(cats[i], -1)) for i, p in zip(ips, ports, strict=True)]
    return np.array(ranks, dtype=np.int32)


def _labels(cats: list[str], flows: _Flows, ranks: NDArray[np.int32]) -> dict[int, str]:
    """What each rank is: its address, or "ip:port" when ranks number the endpoints of one address."""
    ips, ports = flows.end_ip.tolist(), flows.end_port.tolist()
    by_host = len(set(ips)) != 1
    out: dict[int, set[str]] = {}
    for r, i, p in zip(ranks.tolist(), ips, ports, strict=True):
        if r >= 0:
            out.setdefault(r, set()).add(cats[i] if by_host else f"{cats[i]}:{p}")
    return {r: ", ".join(sorted(v)) for r, v in sorted(out.items())}


def _control_keys(control: Iterable[str]) -> tuple[set[tuple[str, int]], set[str]]:
    """Control endpoints as (ip, port) pairs, and control hosts given without a port."""
    pairs, hosts = set(), set()
    for text in control:
        ip, port = _endpoint(text)
        if port is None:
            hosts.add(ip)
        else:
            pairs.add((ip, port))
    return pairs, hosts
