"""Processes from `address:port` endpoints, for captures where several ranks share an address
(loopback, one host, ranks in one network namespace, pods behind one NAT address).

A rank is a process, and a process is the set of its sockets: the port it listens on (gloo's
device listener, a TensorFlow task's gRPC server port) and the ephemeral ports it connects
from. A packet names sockets, not processes, so which ephemeral port belongs to which process
is found from what the connections of a training job look like:

1. **Connections and listeners.** Rows are grouped into connections and classified as in
   `simstudy.traffic.roles` (training, setup, control). The listening side of a connection is
   the endpoint that received its SYN (or sent the SYN-ACK); without the handshake in the
   capture, an endpoint with several connections listens.
2. **Shared addresses.** An address is shared when a training connection has both ends on it,
   or when it has two listening ports with training connections, unless no training connection
   has both ends on one address and the hosts, each taken as one process, already make a
   training job's structure over three or more hosts (a ring of Horovod ranks, each listening
   once per gloo context). Every other address is one process (a host), as in a capture of
   several hosts.
3. **The relevant connections** of a shared address are its training and setup connections and
   every connection to one of its training listeners (the full mesh a framework opens: gloo
   connects every pair of ranks of a process group once, at start-up, whatever they later send).
   The rest (the rendezvous store, the meshes of other process groups, keep-alives) is control
   traffic; its endpoints form one "other ports" entry of the address.
4. **Assignment.** Each listening port with training connections is a process of its own; every
   other endpoint of a relevant connection is assigned to a process so that a process never
   connects to itself and connects to any one socket at most once (one connection per listener
   and client process). Among the assignments with the fewest processes, counting every pair of
   processes that shares two connections as half a process more (gloo opens one per pair;
   gRPC one each way), the chosen one makes the training connections a structure a training job
   has (a ring, parameter servers with every worker, every rank with every other), and among
   those the one whose processes carry the most even training bytes (the ring's ranks all send
   the same), then the one whose processes' sockets send at the same times (`_sent_together`: a
   parameter server answers its workers at once, where a worker's push and the server's reply
   to another worker alternate; on one host the ports of a 2-worker server and of a worker were
   swapped in 7 of 24 captures without it), and then the one whose processes opened their
   connections closest together in time (a rank connects to its peers one after the other at
   start-up). The search is
   exhaustive for small jobs and stops after `SEARCH_BUDGET` steps, keeping the best assignment
   found.

`find_processes` returns, for every endpoint rank of an endpoint-level table, its process, and
for every process its endpoints and the evidence; `regroup` renumbers the table by process.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import pandas as pd

from simstudy.traffic.roles import Place, complete_bipartite, connection_kinds

__all__ = ["SEARCH_BUDGET", "Processes", "find_processes", "regroup"]

#: Steps of the assignment search before it keeps the best assignment found.
SEARCH_BUDGET: Final = 200_000
#: Bins in which the sockets of one process are seen sending together (`_sent_together`), and the
#: most sending endpoints compared.
TOGETHER_BIN_S: Final = 1e-3
TOGETHER_MAX_ENDPOINTS: Final = 64
_DUP: Final = 0.5


@dataclass(frozen=True)
class Processes:
    """Endpoint rank -> process, and what is known about each process."""

    of_endpoint: dict[int, int]
    labels: dict[int, str]
    """Process -> its name: "10.0.0.1" (a host), "127.0.0.1:37141" (a process, by its listening or
    first port), "127.0.0.1" (the other ports of a shared address)."""
    places: dict[int, Place]
    """Processes on shared addresses (not hosts): their endpoints and evidence."""
    reason: str = ""
    """What was found on the shared addresses, in words (empty when there are none)."""
    exhaustive: bool = True
    """The search looked at every assignment (else it kept the best of `SEARCH_BUDGET` steps)."""
    shared: tuple[str, ...] = field(default=())


def _addr_key(text: str) -> tuple[int, int]:
    a = ipaddress.ip_address(text)
    return (a.version, int(a))


def find_processes(table: pd.DataFrame, addresses: Mapping[int, str], ports: Mapping[int, int], *,
                   listening: frozenset[int] = frozenset(), connecting: frozenset[int] = frozenset()) -> Processes:
    """Processes of an endpoint-level table (ranks number `address:port` endpoints).

    `addresses` and `ports`: every endpoint rank's address and port; `listening` / `connecting`:
    endpoints seen receiving / sending a SYN (from `tcp_flags`). When the assignment rules leave a
    choice, the ports a process connects from are the ones opened together (a rank opens its
    connections to its peers one after the other at start-up): the first packet times of each
    process's connecting ports spread least."""
    kinds = connection_kinds(table)
    con = kinds.con
    a, b = con.a.astype(np.int64), con.b.astype(np.int64)
    n_con = len(a)
    degree: dict[int, int] = {}
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        degree[x] = degree.get(x, 0) + 1
        degree[y] = degree.get(y, 0) + 1
    listens = {e for e in degree if e in listening or (e not in connecting and degree[e] >= 2)}
    training = kinds.training & ~kinds.unmapped
    big = (kinds.training | kinds.setup) & ~kinds.unmapped
    train_listeners = {int(e) for k in np.flatnonzero(training) for e in (a[k], b[k]) if int(e) in listens}
    # shared addresses
    shared: set[str] = set()
    for k in np.flatnonzero(training).tolist():
        if addresses[int(a[k])] == addresses[int(b[k])]:
            shared.add(addresses[int(a[k])])
    per_address: dict[str, int] = {}
    for e in train_listeners:
        per_address[addresses[e]] = per_address.get(addresses[e], 0) + 1
    listeners_only = {addr for addr, n in per_address.items() if n >= 2} - shared
    if listeners_only and not shared and _hosts_structured(a, b, np.flatnonzero(training), addresses):
        listeners_only = set()  # hosts that each run several process groups (Horovod's gloo contexts)
    shared |= listeners_only
    endpoints = sorted(set(addresses), key=lambda e: (_addr_key(addresses[e]), ports[e]))
    if not shared:  # one process per address: hosts
        return _hosts(endpoints, addresses)
    on_shared = {e for e in endpoints if addresses[e] in shared}
    relevant = big | np.array([(int(x) in train_listeners and addresses[int(x)] in shared)
                               or (int(y) in train_listeners and addresses[int(y)] in shared)
                               for x, y in zip(a, b, strict=True)], dtype=np.bool_)
    relevant &= ~kinds.unmapped
    opened: dict[int, float] = {}
    for k in range(n_con):
        for e in (int(a[k]), int(b[k])):
            opened[e] = min(opened.get(e, np.inf), float(con.first[k]))
    search = _Search(addresses, [(int(a[k]), int(b[k])) for k in np.flatnonzero(relevant)],
                     [(int(a[k]), int(b[k]), float(con.a_to_b[k]), float(con.b_to_a[k]))
                      for k in np.flatnonzero(training)], on_shared, train_listeners, opened,
                     _sent_together(table, con.of_row, np.flatnonzero(training), on_shared))
    slot_of = search.run()
    return _describe(endpoints, addresses, ports, shared, slot_of, search, listens, degree, n_con)


def _sent_together(table: pd.DataFrame, of_row: np.ndarray, training: np.ndarray, on_shared: set[int]
                   ) -> dict[tuple[int, int], float]:
    """For every two endpoints of a shared address that send payload on training connections: the
    correlation of their payload bytes per `TOGETHER_BIN_S` (a parameter server answers its
    workers at once; a worker pushes while the server waits)."""
    rows = np.isin(of_row, training)
    src = table["src"].to_numpy().astype(np.int64)[rows]
    payload = (table["payload_bytes"] if "payload_bytes" in table.columns else table["bytes"]).to_numpy()[rows]
    t = table["t_start_s"].to_numpy()[rows]
    keep = (payload > 0) & np.isin(src, list(on_shared))
    if keep.sum() == 0:
        return {}
    src, payload, t = src[keep], payload[keep].astype(np.float64), t[keep]
    bins = ((t - t.min()) / TOGETHER_BIN_S).astype(np.int64)
    n = int(bins.max()) + 1
    ends = np.unique(src).tolist()
    if len(ends) < 2 or len(ends) > TOGETHER_MAX_ENDPOINTS:
        return {}
    series = {e: np.bincount(bins[src == e], weights=payload[src == e], minlength=n) for e in ends}
    out: dict[tuple[int, int], float] = {}
    for i, x in enumerate(ends):
        for y in ends[i + 1:]:
            u, v = series[x], series[y]
            out[(x, y)] = float(np.corrcoef(u, v)[0, 1]) if u.std() > 0 and v.std() > 0 else 0.0
    return out


def _hosts_structured(a: np.ndarray, b: np.ndarray, training: np.ndarray, addresses: Mapping[int, str]) -> bool:
    """Whether the training connections, with every address one process, already make a training
    job's structure (`_structured`) over three or more hosts."""
    hosts = sorted({addresses[int(x)] for k in training.tolist() for x in (a[k], b[k])}, key=_addr_key)
    if len(hosts) < 3:
        return False
    number = {h: i for i, h in enumerate(hosts)}
    edges = {(min(p, q), max(p, q)) for k in training.tolist()
             if (p := number[addresses[int(a[k])]]) != (q := number[addresses[int(b[k])]])}
    return _structured(list(range(len(hosts))), edges)


def _hosts(endpoints: list[int], addresses: Mapping[int, str]) -> Processes:
    hosts = sorted({addresses[e] for e in endpoints}, key=_addr_key)
    number = {h: i for i, h in enumerate(hosts)}
    return Processes({e: number[addresses[e]] for e in endpoints}, {i: h for h, i in number.items()}, {})


class _Search:
    """The assignment of free endpoints to processes (see the module docstring, rule 4)."""

    def __init__(self, addresses: Mapping[int, str], relevant: list[tuple[int, int]],
                 training: list[tuple[int, int, float, float]], on_shared: set[int], listeners: set[int],
                 opened: Mapping[int, float], together: Mapping[tuple[int, int], float] | None = None) -> None:
        self.addresses = addresses
        self.opened = opened
        self.together = together or {}
        self.senders = sorted({e for pair in self.together for e in pair})  # the sockets `together` compares
        self.training = training
        self.neighbours: dict[int, list[int]] = {}
        for x, y in relevant:
            self.neighbours.setdefault(x, []).append(y)
            self.neighbours.setdefault(y, []).append(x)
        nodes = set(self.neighbours)
        # fixed processes: a listening port with training connections on a shared address, and every
        # endpoint of another address (its host)
        self.fixed: dict[int, int] = {}
        self.home: dict[int, str] = {}  # slot -> the address its free endpoints may have ("" for hosts)
        slots: dict[object, int] = {}
        for e in sorted(nodes):
            key: object = ("listener", e) if e in on_shared and e in listeners else (
                None if e in on_shared else ("host", addresses[e]))
            if key is not None:
                self.fixed[e] = slots.setdefault(key, len(slots))
                self.home[self.fixed[e]] = addresses[e] if e in on_shared else ""
        self.n_fixed = len(slots)
        self.fixed_shared = sum(1 for k in slots if isinstance(k, tuple) and k[0] == "listener")
        big = {x for x, y, _, _ in training} | {y for x, y, _, _ in training}
        free = [e for e in nodes if e not in self.fixed]
        # the endpoints of training connections first, then those with most connections
        self.free = sorted(free, key=lambda e: (e not in big, -len(self.neighbours[e]), e))
        self.steps = 0
        self.exhaustive = True
        self.best: tuple[float, int, float, float, float] | None = None
        self.best_slots: dict[int, int] = {}

    def run(self) -> dict[int, int]:
        slot_of = dict(self.fixed)
        members: dict[int, set[int]] = {}
        for e, s in slot_of.items():
            members.setdefault(s, set()).add(e)
        conn_to: dict[int, dict[int, int]] = {s: {} for s in members}
        pairs: dict[tuple[int, int], int] = {}
        for s, ms in members.items():
            for e in ms:
                for z in self.neighbours[e]:
                    conn_to[s][z] = conn_to[s].get(z, 0) + 1
                    t = slot_of.get(z)
                    if t is not None and t != s and e < z:
                        key = (min(s, t), max(s, t))
                        pairs[key] = pairs.get(key, 0) + 1
        self._dfs(0, slot_of, conn_to, pairs, self.n_fixed)
        return self.best_slots if self.best is not None else slot_of

    def _primary(self, used: int, pairs: Mapping[tuple[int, int], int]) -> float:
        dups = sum(c - 1 for c in pairs.values() if c > 1)
        return (used - self.n_fixed + self.fixed_shared) + _DUP * dups

    def _dfs(self, i: int, slot_of: dict[int, int], conn_to: dict[int, dict[int, int]],
             pairs: dict[tuple[int, int], int], used: int) -> None:
        self.steps += 1
        if self.steps > SEARCH_BUDGET:
            self.exhaustive = False
            return
        primary = self._primary(used, pairs)
        if self.best is not None and primary > self.best[0] + 1e-9:
            return
        if i == len(self.free):
            key = (primary, *self._shape(slot_of), -self._together(slot_of), self._spread(slot_of))
            if self.best is None or key < self.best:
                self.best, self.best_slots = key, dict(slot_of)
            return
        e = self.free[i]
        home = self.addresses[e]
        candidates = [s for s in range(used) if self._allowed(e, s, home, slot_of, conn_to)] + [used]
        for s in candidates:
            if s == used:
                self.home[s] = home
            added = self._place(e, s, slot_of, conn_to, pairs)
            self._dfs(i + 1, slot_of, conn_to, pairs, max(used, s + 1))
            self._unplace(e, s, added, slot_of, conn_to, pairs)
            if self.steps > SEARCH_BUDGET:
                return

    def _allowed(self, e: int, s: int, home: str, slot_of: Mapping[int, int],
                 conn_to: Mapping[int, Mapping[int, int]]) -> bool:
        if self.home.get(s) != home:
            return False
        links = conn_to.get(s, {})
        return all(slot_of.get(z) != s and not links.get(z) for z in self.neighbours[e])

    def _place(self, e: int, s: int, slot_of: dict[int, int], conn_to: dict[int, dict[int, int]],
               pairs: dict[tuple[int, int], int]) -> list[tuple[int, int]]:
        slot_of[e] = s
        links = conn_to.setdefault(s, {})
        added = []
        for z in self.neighbours[e]:
            links[z] = links.get(z, 0) + 1
            t = slot_of.get(z)
            if t is not None and t != s:
                key = (min(s, t), max(s, t))
                pairs[key] = pairs.get(key, 0) + 1
                added.append(key)
        return added

    def _unplace(self, e: int, s: int, added: list[tuple[int, int]], slot_of: dict[int, int],
                 conn_to: dict[int, dict[int, int]], pairs: dict[tuple[int, int], int]) -> None:
        del slot_of[e]
        links = conn_to[s]
        for z in self.neighbours[e]:
            links[z] -= 1
            if not links[z]:
                del links[z]
        for key in added:
            pairs[key] -= 1
            if not pairs[key]:
                del pairs[key]

    def _together(self, slot_of: Mapping[int, int]) -> float:
        """How much each process's sending sockets send at the same times: the mean correlation of
        every two of them (`_sent_together`), summed over the processes (to 2 decimals: a tie)."""
        by_slot: dict[int, list[int]] = {}
        for e in self.senders:
            if e in slot_of:
                by_slot.setdefault(slot_of[e], []).append(e)
        total = 0.0
        for ends in by_slot.values():
            pairs = [self.together[(x, y)] for i, x in enumerate(ends) for y in ends[i + 1:]]
            if pairs:
                total += float(np.mean(pairs))
        return round(total, 2)

    def _spread(self, slot_of: Mapping[int, int]) -> float:
        """Seconds between the first and the last connection each process opened, summed."""
        first: dict[int, float] = {}
        last: dict[int, float] = {}
        for e in self.free:
            s, t = slot_of[e], self.opened.get(e, 0.0)
            first[s] = min(first.get(s, t), t)
            last[s] = max(last.get(s, t), t)
        return sum(last[s] - first[s] for s in first)

    def _shape(self, slot_of: Mapping[int, int]) -> tuple[int, float]:
        """(0 when the training connections between processes form a structure of training jobs, else
        1; how uneven the training bytes the processes send and receive are)."""
        sent: dict[int, float] = {}
        got: dict[int, float] = {}
        edges: set[tuple[int, int]] = set()
        for x, y, xy, yx in self.training:
            p, q = slot_of.get(x, -1 - x), slot_of.get(y, -1 - y)
            sent[p] = sent.get(p, 0.0) + xy
            sent[q] = sent.get(q, 0.0) + yx
            got[p] = got.get(p, 0.0) + yx
            got[q] = got.get(q, 0.0) + xy
            if p != q:
                edges.add((min(p, q), max(p, q)))
        nodes = sorted(sent)
        uneven = sum(float(np.std(v) / np.mean(v)) if np.mean(v) > 0 else 0.0
                     for v in (np.array([sent[n] for n in nodes]), np.array([got[n] for n in nodes])))
        return (0 if _structured(nodes, edges) else 1), round(uneven, 3)  # equal up to rounding: a tie


def _structured(nodes: list[int], edges: set[tuple[int, int]]) -> bool:
    """A ring through every process, every process with every other, or a complete bipartite graph
    of fewer servers against at least two workers (or a single pair)."""
    n = len(nodes)
    if n <= 2:
        return True
    degree = {v: 0 for v in nodes}
    for p, q in edges:
        degree[p] += 1
        degree[q] += 1
    if len(edges) == n * (n - 1) // 2:
        return True
    if len(edges) == n and all(d == 2 for d in degree.values()) and _connected(nodes, edges):
        return True
    return complete_bipartite(nodes, edges) is not None


def _connected(nodes: list[int], edges: set[tuple[int, int]]) -> bool:
    near: dict[int, set[int]] = {v: set() for v in nodes}
    for p, q in edges:
        near[p].add(q)
        near[q].add(p)
    seen, todo = {nodes[0]}, [nodes[0]]
    while todo:
        for w in near[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return len(seen) == len(nodes)


def _describe(endpoints: list[int], addresses: Mapping[int, str], ports: Mapping[int, int], shared: set[str],
              slot_of: Mapping[int, int], search: _Search, listens: set[int], degree: Mapping[int, int],
              n_con: int) -> Processes:
    """Number the processes (hosts and processes in address order, each address's other ports last)
    and describe each with its endpoints and the evidence."""
    groups: dict[object, list[int]] = {}
    for e in endpoints:
        if addresses[e] not in shared:
            groups.setdefault(("host", addresses[e]), []).append(e)
        elif e in slot_of:
            groups.setdefault(("process", slot_of[e]), []).append(e)
        else:
            groups.setdefault(("other", addresses[e]), []).append(e)

    def order(item: tuple[object, list[int]]) -> tuple[tuple[int, int], int, int]:
        key, members = item
        kind = key[0]  # type: ignore[index]
        first = min(members, key=lambda e: (e not in listens, ports[e]))
        return (_addr_key(addresses[first]), 1 if kind == "other" else 0,
                0 if kind == "host" else (0 if first in listens else 1) * 65536 + ports[first])

    of_endpoint: dict[int, int] = {}
    labels: dict[int, str] = {}
    places: dict[int, Place] = {}
    counts: dict[str, int] = {}
    for number, (key, members) in enumerate(sorted(groups.items(), key=order)):
        kind = key[0]  # type: ignore[index]
        for e in members:
            of_endpoint[e] = number
        addr = addresses[members[0]]
        if kind == "host":
            labels[number] = addr
            continue
        texts = tuple(_text(addr, ports[e]) for e in sorted(members, key=lambda e: ports[e]))
        if kind == "other":
            labels[number] = addr
            places[number] = Place(addr, texts, f"the other ports of {addr} ({len(members)}: the rendezvous "
                                                f"store, other process groups, one-off connections)", process=False)
            continue
        counts[addr] = counts.get(addr, 0) + 1
        own = sorted((e for e in members if e in listens), key=lambda e: ports[e])
        clients = sorted((e for e in members if e not in listens), key=lambda e: ports[e])
        head = own[0] if own else clients[0]
        labels[number] = _text(addr, ports[head])
        said = []
        if own:
            said.append("listens on " + ", ".join(f"{ports[e]} ({degree.get(e, 0)} connection"
                                                  f"{'s' if degree.get(e, 0) != 1 else ''})" for e in own))
        if clients:
            said.append("connects from " + ", ".join(str(ports[e]) for e in clients))
        places[number] = Place(addr, texts, f"one process of {addr}: {'; '.join(said)}")
    found = "; ".join(f"{addr}: {n} processes" for addr, n in sorted(counts.items()))
    reason = (f"ranks share an address ({found}, told apart by their ports: each listening port with training "
              f"connections is one process, and every other port of those connections was given to a process "
              f"that never connects twice to one socket, with the fewest processes, the training connections in "
              f"the shape of a training job, the most even bytes and sockets that send together; {n_con} connections"
              + ("" if search.exhaustive else f"; the search stopped after {SEARCH_BUDGET:,} steps") + ")")
    return Processes(of_endpoint, labels, places, reason, search.exhaustive, tuple(sorted(shared)))


def _text(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def regroup(table: pd.DataFrame, processes: Processes) -> pd.DataFrame:
    """An endpoint-level table with ranks renumbered by process (rank -1 stays -1)."""
    out = table.copy()
    keys = np.array(sorted(processes.of_endpoint), dtype=np.int64)
    vals = np.array([processes.of_endpoint[k] for k in keys.tolist()], dtype=np.int64)
    for col in ("src", "dst"):
        v = out[col].to_numpy().astype(np.int64)
        pos = np.clip(np.searchsorted(keys, v), 0, max(len(keys) - 1, 0))
        hit = (keys[pos] == v) if len(keys) else np.zeros(len(v), dtype=np.bool_)
        out[col] = np.where(hit, vals[pos] if len(vals) else v, -1).astype(np.int32)
    out.attrs = {**table.attrs, "rank_labels": dict(processes.labels)}
    return out
