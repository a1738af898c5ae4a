"""Endpoint roles found from the traffic itself: which hosts are workers, which are parameter
servers, and which endpoints carry only control traffic (a rendezvous store, one-off
connections, hosts that never exchange training data).

The rules, applied to a TrafficTable whose ranks number the hosts (a capture read without
metadata) or the simulated ranks:

1. **Connections.** Rows are grouped into connections: both directions of a 5-tuple (by `flow`
   and the ports when the table has `sport`/`dport`; by rank pair otherwise). A connection is a
   *training* connection when it carries at least `TRAINING_SHARE` of the bytes of the busiest
   one and lasts: it carries traffic in at least `LASTING_SHARE` as many of `SLICES` slices of
   the time in which the middle 80% of the big connections' bytes flow as the most lasting one.
   A big connection that does not last (the initial parameter broadcast) is *setup* traffic:
   kept, but no evidence of roles.
   The others are *control* connections (a store's few hundred bytes per connection, barriers
   of other process groups, keep-alives). Payload bytes are counted when the table has them.
2. **Hosts.** A host with a training connection is a training host; one without is a control
   host (rank -1, its traffic left out of the training metrics).
3. **Workers and servers.** The training hosts and their training connections form a graph. When
   it is a complete bipartite graph between fewer *servers* and at least two *workers* (every
   worker exchanges with every server, no worker with another worker, no server with another
   server), the servers are parameter servers. Otherwise every training host is a worker (a
   ring, a tree, all-to-all, or two hosts: two workers of an all-reduce and a parameter server
   with one worker look the same).
4. **Control endpoints.** Each control connection has a service side: the (host, port) that
   more control connections share (a store's port), or the lower port. These are reported as
   control endpoints; their traffic is marked `op == "control"`.
5. **Ranks.** Workers are numbered first, in host order, then servers (as simstudy's compiler
   numbers dedicated parameter servers after the workers); control hosts get -1.

`classify` returns the `Roles` with the evidence for every endpoint; `apply` renumbers a table's
ranks and marks its control traffic. A user's `--ranks map.yaml` (or a capture's meta.json)
replaces the classification (`Roles.source` says which).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import pandas as pd

__all__ = [
    "CONTROL",
    "SERVER",
    "TRAINING_SHARE",
    "WORKER",
    "ConnectionKinds",
    "EndpointRole",
    "Place",
    "Role",
    "Roles",
    "apply",
    "classify",
    "complete_bipartite",
    "connection_kinds",
    "given",
    "shifted",
    "with_iterations",
]

Role = Literal["worker", "server", "control"]
WORKER: Role = "worker"
SERVER: Role = "server"
CONTROL: Role = "control"
#: A connection carrying less than this share of the bytes of the busiest connection is control traffic.
TRAINING_SHARE = 0.01
#: ... and when it carries traffic in at least this share as many of `SLICES` slices of the bulk of
#: the capture as the connection that carries traffic in most.
LASTING_SHARE = 0.4
SLICES = 20


@dataclass(frozen=True)
class EndpointRole:
    """One endpoint (a host, or a host's port for control services) and why it has its role."""

    endpoint: str
    """"10.0.0.1" (a host), "10.0.0.1:29500" (a control service), or "rank 3" (a table without addresses)."""
    role: Role
    rank: int
    """Its rank in the traffic table (-1 for control endpoints)."""
    sent_bytes: int
    received_bytes: int
    peers: tuple[str, ...]
    """The endpoints it exchanges training traffic with (workers, servers) or connects with (control)."""
    connections: int
    first_s: float
    last_s: float
    """When it was first and last seen (table time): how long its connections live."""
    evidence: str
    """Why it has this role, in words."""
    bytes_per_iteration: float = math.nan
    """What it sends per whole steady iteration (NaN until the iterations are known)."""
    iterations_active: int = 0
    """In how many of the steady iterations it sent at least a tenth of its typical iteration:
    a worker or server sends in every one, a rendezvous store in none."""
    iterations_seen: int = 0
    endpoints: tuple[str, ...] = ()
    """When several ranks share an address: the address:port endpoints that are this one."""


@dataclass(frozen=True)
class Roles:
    """Who is who in a traffic table (see the module docstring)."""

    source: str
    """"traffic" (classified from the table), "meta.json", "rank map" (--ranks), or "table" (ranks as given)."""
    endpoints: tuple[EndpointRole, ...]
    reason: str
    """The structure found ("ring or all-reduce of 4 workers", "2 workers and 1 parameter server", ...)."""

    @property
    def workers(self) -> tuple[int, ...]:
        return tuple(sorted(e.rank for e in self.endpoints if e.role == WORKER))

    @property
    def servers(self) -> tuple[int, ...]:
        return tuple(sorted(e.rank for e in self.endpoints if e.role == SERVER))

    @property
    def training(self) -> tuple[int, ...]:
        """Ranks of workers and servers."""
        return tuple(sorted(self.workers + self.servers))

    @property
    def control(self) -> tuple[str, ...]:
        return tuple(e.endpoint for e in self.endpoints if e.role == CONTROL)

    def lines(self) -> list[str]:
        """One line per endpoint, for reports."""
        return [f"{e.endpoint}: {e.role}" + (f" (rank {e.rank})" if e.rank >= 0 else "") + f": {e.evidence}"
                for e in self.endpoints]


# ---------------------------------------------------------------------------------------------
# connections


@dataclass(frozen=True)
class _Connections:
    """Connections of a table: per connection its two ends (rank, port), bytes each way, rows, times."""

    a: np.ndarray  # rank of the lower end
    a_port: np.ndarray
    b: np.ndarray
    b_port: np.ndarray
    a_to_b: np.ndarray  # bytes
    b_to_a: np.ndarray
    first: np.ndarray
    last: np.ndarray
    of_row: np.ndarray  # connection of every row

    @property
    def size(self) -> np.ndarray:
        return np.asarray(self.a_to_b + self.b_to_a)


def _group_ids(a: np.ndarray, ap: np.ndarray, b: np.ndarray, bp: np.ndarray) -> np.ndarray:
    """Per row, the number of its (a, ap, b, bp) group in sorted order (as a sorted groupby's
    ngroup), from one int64 key per row when the values fit (ranks above -2^14, ports below
    2^16), else from a groupby."""
    lo = min(int(a.min()), int(b.min())) if len(a) else 0
    hi = max(int(a.max()), int(b.max())) if len(a) else 0
    if lo >= -(1 << 14) and hi < (1 << 14):
        left = ((a - lo) << 16) | ap
        right = ((b - lo) << 16) | bp
        codes, _ = pd.factorize((left << 31) | right, sort=True)
        return np.asarray(codes, dtype=np.int64)
    frame = pd.DataFrame({"a": a, "ap": ap, "b": b, "bp": bp})
    return np.asarray(frame.groupby(["a", "ap", "b", "bp"], sort=True).ngroup().to_numpy(), dtype=np.int64)


def _volume(table: pd.DataFrame) -> np.ndarray:
    col = "payload_bytes" if "payload_bytes" in table.columns else "bytes"
    return np.asarray(table[col].to_numpy(), dtype=np.float64)


def _connections(table: pd.DataFrame) -> _Connections:
    src = table["src"].to_numpy().astype(np.int64)
    dst = table["dst"].to_numpy().astype(np.int64)
    ports = "sport" in table.columns and "dport" in table.columns
    sp = table["sport"].to_numpy().astype(np.int64) if ports else np.zeros(len(table), dtype=np.int64)
    dp = table["dport"].to_numpy().astype(np.int64) if ports else np.zeros(len(table), dtype=np.int64)
    forward = (src < dst) | ((src == dst) & (sp <= dp))
    a, b = np.where(forward, src, dst), np.where(forward, dst, src)
    ap, bp = np.where(forward, sp, dp), np.where(forward, dp, sp)
    of_row = _group_ids(a, ap, b, bp)
    n = int(of_row.max()) + 1 if len(of_row) else 0
    vol = _volume(table)
    order = np.argsort(of_row, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(of_row[order]) != 0]) if len(order) else np.zeros(0, np.int64)
    first = np.minimum.reduceat(table["t_start_s"].to_numpy()[order], starts) if n else np.zeros(0)
    last = np.maximum.reduceat(table["t_end_s"].to_numpy()[order], starts) if n else np.zeros(0)
    idx = order[starts]  # each connection's first row
    return _Connections(
        a[idx], ap[idx], b[idx], bp[idx],
        np.bincount(of_row, weights=np.where(forward, vol, 0.0), minlength=n),
        np.bincount(of_row, weights=np.where(forward, 0.0, vol), minlength=n),
        first, last, of_row)


# ---------------------------------------------------------------------------------------------
# classification


def _lasting(table: pd.DataFrame, con: _Connections, big: np.ndarray) -> np.ndarray:
    """Connections that carry traffic through the bulk of the capture: in at least `LASTING_SHARE`
    as many of `SLICES` equal slices of the time in which the middle 80% of the big connections'
    bytes flow as the connection active in most of them. An initial parameter broadcast or a
    one-off transfer is big but does not last."""
    out = np.ones(len(big), dtype=np.bool_)
    rows = big[con.of_row]
    if not rows.any():
        return out
    t = table["t_start_s"].to_numpy()[rows]
    w = _volume(table)[rows]
    order = np.argsort(t, kind="stable")
    cum = np.cumsum(w[order])
    if cum[-1] <= 0:
        return out
    lo, hi = t[order][np.searchsorted(cum, [0.1 * cum[-1], 0.9 * cum[-1]])]
    if not hi > lo:
        return out
    inside = (t >= lo) & (t <= hi)
    piece = np.minimum(((t[inside] - lo) / (hi - lo) * SLICES).astype(np.int64), SLICES - 1)
    which = con.of_row[rows][inside]
    active = np.zeros((len(big), SLICES), dtype=np.bool_)
    active[which, piece] = True
    share = active[big].mean(axis=1)
    out[big] = share >= LASTING_SHARE * share.max()
    return out


def complete_bipartite(hosts: list[int], edges: set[tuple[int, int]]) -> tuple[list[int], list[int]] | None:
    """(servers, workers) when the graph of `edges` (as (low, high), between `hosts`) is complete
    bipartite with fewer servers than workers and at least two workers; else None."""
    degree = {h: sum(h in e for e in edges) for h in hosts}
    if len(hosts) < 3:
        return None
    top = max(degree.values())
    servers = [h for h in hosts if degree[h] == top]
    workers = [h for h in hosts if degree[h] != top]
    if not workers or len(servers) >= len(workers) or len(workers) < 2:
        return None
    want = {(min(s, w), max(s, w)) for s in servers for w in workers}
    return (servers, workers) if edges == want else None


@dataclass(frozen=True)
class ConnectionKinds:
    """The connections of a table and what each one is (see the module docstring, rule 1)."""

    con: _Connections
    training: np.ndarray
    setup: np.ndarray
    """Big but only at the edges of the capture (an initial broadcast): not evidence of roles."""
    unmapped: np.ndarray
    """An end without a rank (-1)."""


def connection_kinds(table: pd.DataFrame) -> ConnectionKinds:
    """Group the rows of `table` into connections and tell training, setup and control ones apart."""
    con = _connections(table)
    size = con.size
    already = (table["op"] == "control").to_numpy() if "op" in table.columns else np.zeros(len(table), np.bool_)
    marked = np.zeros(len(size), dtype=np.bool_)
    marked[np.unique(con.of_row[already])] = True  # connections the table already marks as control stay control
    unmapped = (con.a < 0) | (con.b < 0)
    candidates = ~marked & ~unmapped
    busiest = float(size[candidates].max()) if candidates.any() else 0.0
    big = candidates & (size >= TRAINING_SHARE * busiest)
    lasting = _lasting(table, con, big)
    return ConnectionKinds(con, big & lasting, big & ~lasting, unmapped)


@dataclass(frozen=True)
class Place:
    """Where a rank of a table lives when it is not a whole host: a process among others on one
    address (`simstudy.traffic.processes`), its endpoints and why they are one process."""

    address: str
    endpoints: tuple[str, ...]
    evidence: str
    process: bool = True
    """False for the ports of the address that no training process holds (one control entry)."""


def _cycle(hosts: list[int], edges: set[tuple[int, int]]) -> list[int] | None:
    """The hosts in ring order when the training graph is one cycle through all of them (from the
    first host, towards its lower neighbour), else None."""
    if len(hosts) < 3 or len(edges) != len(hosts):
        return None
    near: dict[int, list[int]] = {h: [] for h in hosts}
    for a, b in edges:
        near[a].append(b)
        near[b].append(a)
    if any(len(v) != 2 for v in near.values()):
        return None
    order = [hosts[0], min(near[hosts[0]])]
    while len(order) < len(hosts):
        a, b = near[order[-1]]
        nxt = a if a != order[-2] else b
        if nxt == order[0]:
            return None
        order.append(nxt)
    return order


def classify(table: pd.DataFrame, labels: Mapping[int, str] | None = None, *,
             renumber_ranks: bool = True,
             places: Mapping[int, Place] | None = None) -> tuple[Roles, dict[int, int], np.ndarray]:
    """Roles of the endpoints of `table` (see the module docstring).

    `labels` names the table's ranks (a capture's host addresses); default "rank N". `places`:
    the ranks that are processes sharing an address (their endpoints and evidence). Returns the
    roles, the renumbering {table rank: new rank} (workers first, then servers, control hosts
    -1), and per row whether it is control traffic. With `renumber_ranks` the roles carry the
    new ranks (as `apply` will number the table), else the table's own. Workers are numbered in
    host order, or around the ring when their training connections form one."""
    labels = dict(labels or {})
    places = dict(places or {})

    def name(rank: int) -> str:
        return labels.get(rank, f"rank {rank}")

    if len(table) == 0:
        return Roles("traffic", (), "no traffic"), {}, np.zeros(0, dtype=np.bool_)
    kinds = connection_kinds(table)
    con, training, setup, unmapped = kinds.con, kinds.training, kinds.setup, kinds.unmapped
    edges = {(int(a), int(b)) for a, b, ok in zip(con.a, con.b, training, strict=True) if ok and a != b}
    hosts = sorted({h for e in edges for h in e} | {int(a) for a, b, ok in zip(con.a, con.b, training, strict=True)
                                                     if ok and a == b})
    split = complete_bipartite(hosts, edges)
    if split is not None:
        servers, workers = split
        reason = (f"{len(workers)} workers and {len(servers)} parameter server{'s' if len(servers) > 1 else ''}: "
                  "every worker exchanges training traffic with every server and with no other worker")
    else:
        ring = _cycle(hosts, edges)
        servers, workers = [], ring or hosts
        reason = (f"{len(workers)} workers exchanging training traffic with each other "
                  f"({len(edges)} pair{'s' if len(edges) != 1 else ''}: "
                  + ("a ring, numbered around it)" if ring else "all-reduce, ring or tree)"))
    renumber = {h: i for i, h in enumerate(workers)}
    renumber.update({h: len(workers) + i for i, h in enumerate(servers)})
    every = sorted(set(con.a.tolist()) | set(con.b.tolist()))
    for h in every:
        renumber.setdefault(h, -1)
    control_row = ~(training | setup)[con.of_row]
    ps = bool(servers)

    def rank(h: int) -> int:
        return renumber[h] if renumber_ranks else h

    entries = [_host_entry(h, rank(h), WORKER if h in workers else SERVER, con, training, name, edges, ps,
                           places.get(h)) for h in workers + servers]
    entries += [_host_entry(h, rank(h) if renumber_ranks else -1, CONTROL, con, training, name, edges, ps,
                            places.get(h)) for h in every if renumber[h] < 0]
    if "sport" in table.columns and "dport" in table.columns:  # services are ports: only captures have them
        entries += _services(con, ~training & ~unmapped, name, places)
    return Roles("traffic", tuple(entries), reason), renumber, control_row


def _host_entry(h: int, rank: int, role: Role, con: _Connections, training: np.ndarray,
                name: object, edges: set[tuple[int, int]], ps: bool, place: Place | None) -> EndpointRole:
    label = name(h)  # type: ignore[operator]
    mine = (con.a == h) | (con.b == h)
    sent = float(np.where(con.a == h, con.a_to_b, 0.0)[mine].sum() + np.where(con.b == h, con.b_to_a, 0.0)[mine].sum())
    recv = float(np.where(con.a == h, con.b_to_a, 0.0)[mine].sum() + np.where(con.b == h, con.a_to_b, 0.0)[mine].sum())
    peers = sorted({b if a == h else a for a, b in edges if h in (a, b)})
    first = float(con.first[mine].min()) if mine.any() else math.nan
    last = float(con.last[mine].max()) if mine.any() else math.nan
    n_train = int((mine & training).sum())
    if role == CONTROL:
        evidence = (f"no training connection: {int(mine.sum())} connection(s), {sent + recv:,.0f} bytes in all, "
                    f"each under {TRAINING_SHARE:.0%} of the busiest connection")
    elif role == SERVER:
        evidence = (f"exchanges training traffic with every worker ({len(peers)}) and no other server; "
                    f"{n_train} training connection(s)")
    else:
        evidence = (f"{n_train} training connection(s) with {len(peers)} "
                    f"{'server(s) and no other worker' if ps else 'other worker(s)'}")
    if place is not None:
        evidence = f"{place.evidence}; {evidence}"
    return EndpointRole(label, role, rank, int(sent), int(recv), tuple(name(p) for p in peers),  # type: ignore[operator]
                        int(mine.sum()), first, last, evidence, endpoints=place.endpoints if place else ())


def _services(con: _Connections, control: np.ndarray, name: object,
              places: Mapping[int, Place]) -> list[EndpointRole]:
    """The service side of every control connection (shared by more control connections, or the lower port)."""
    idx = np.flatnonzero(control)
    if len(idx) == 0:
        return []
    ends = [((int(con.a[i]), int(con.a_port[i])), (int(con.b[i]), int(con.b_port[i]))) for i in idx]
    shared: dict[tuple[int, int], int] = {}
    for x, y in ends:
        shared[x] = shared.get(x, 0) + 1
        shared[y] = shared.get(y, 0) + 1
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (x, y) in zip(idx, ends, strict=True):
        service = max((x, y), key=lambda e: (shared[e], -e[1]))
        groups.setdefault(service, []).append(int(i))
    out = []
    for (host, port), members in sorted(groups.items()):
        m = np.array(members)
        into = np.where(con.a[m] == host, con.b_to_a[m], con.a_to_b[m]).sum()
        out_b = np.where(con.a[m] == host, con.a_to_b[m], con.b_to_a[m]).sum()
        clients = sorted({int(con.b[i]) if int(con.a[i]) == host else int(con.a[i]) for i in members})
        where = places[host].address if host in places else name(host)  # type: ignore[operator]
        label = (f"[{where}]:{port}" if ":" in where else f"{where}:{port}") if port else where
        life = float(con.last[m].max() - con.first[m].min())
        out.append(EndpointRole(
            label, CONTROL, -1, int(out_b), int(into), tuple(name(c) for c in clients), len(members),  # type: ignore[operator]
            float(con.first[m].min()), float(con.last[m].max()),
            f"{len(members)} connection(s) from {len(clients)} host(s), {into + out_b:,.0f} bytes over {life:.2f} s, "
            f"each under {TRAINING_SHARE:.0%} of the busiest connection"))
    return out


def apply(table: pd.DataFrame, renumber: Mapping[int, int], control_row: np.ndarray) -> pd.DataFrame:
    """`table` with ranks renumbered and the rows of control connections (and of endpoints without
    a rank) marked `op == "control"`."""
    out = table.copy()
    lut_keys = np.array(sorted(renumber), dtype=np.int64)
    lut_vals = np.array([renumber[k] for k in lut_keys], dtype=np.int64)
    for col in ("src", "dst"):
        v = out[col].to_numpy().astype(np.int64)
        pos = np.searchsorted(lut_keys, v)
        pos = np.clip(pos, 0, max(len(lut_keys) - 1, 0))
        found = (lut_keys[pos] == v) if len(lut_keys) else np.zeros(len(v), dtype=np.bool_)
        out[col] = np.where(found, lut_vals[pos] if len(lut_vals) else v, v).astype(np.int32)
    control = control_row | (out["src"].to_numpy() < 0) | (out["dst"].to_numpy() < 0)
    if control.any():
        op = out["op"].astype("category")
        if "control" not in op.cat.categories:
            op = op.cat.add_categories(["control"])
        op[control] = "control"
        out["op"] = op
    return out


def given(source: str, ranks: Mapping[int, Sequence[str]], servers: Sequence[int], control: Sequence[str],
          table: pd.DataFrame) -> Roles:
    """Roles as a user or a capture's metadata states them (no classification): the given ranks,
    servers among them, the rest workers, and the given control endpoints."""
    vol = _volume(table) if len(table) else np.zeros(0)
    src = table["src"].to_numpy() if len(table) else np.zeros(0, dtype=np.int64)
    dst = table["dst"].to_numpy() if len(table) else np.zeros(0, dtype=np.int64)
    t = table["t_start_s"].to_numpy() if len(table) else np.zeros(0)
    entries = []
    for rank in sorted(ranks):
        mine = (src == rank) | (dst == rank)
        role: Role = SERVER if rank in servers else WORKER
        entries.append(EndpointRole(
            ", ".join(ranks[rank]) or f"rank {rank}", role, rank, int(vol[src == rank].sum()),
            int(vol[dst == rank].sum()), (), 0, float(t[mine].min()) if mine.any() else math.nan,
            float(t[mine].max()) if mine.any() else math.nan, f"given by {source}"))
    entries += [EndpointRole(c, CONTROL, -1, 0, 0, (), 0, math.nan, math.nan, f"given by {source}")
                for c in control]
    n_s = sum(1 for r in ranks if r in servers)
    reason = f"{len(ranks) - n_s} workers and {n_s} servers, as {source} states"
    return Roles(source, tuple(entries), reason)


def shifted(roles: Roles, dt_s: float) -> Roles:
    """`roles` with its times moved by `dt_s` (to a table's new time origin)."""
    return replace(roles, endpoints=tuple(replace(e, first_s=e.first_s + dt_s, last_s=e.last_s + dt_s)
                                          for e in roles.endpoints))


def with_iterations(roles: Roles, senders: Sequence[int], per_cycle: np.ndarray) -> Roles:
    """`roles` with each ranked endpoint's bytes per steady iteration and in how many of them it
    sent (`per_cycle`: cycles x `senders`), the periodicity evidence of its role."""
    if per_cycle.size == 0:
        return roles
    col = {int(s): k for k, s in enumerate(senders)}
    out = []
    for e in roles.endpoints:
        k = col.get(e.rank) if e.rank >= 0 else None
        if k is None:
            out.append(replace(e, iterations_seen=len(per_cycle)))
            continue
        v = per_cycle[:, k]
        typical = float(np.median(v))
        active = int(np.count_nonzero(v >= 0.1 * typical)) if typical > 0 else 0
        out.append(replace(e, bytes_per_iteration=float(v.mean()), iterations_active=active,
                           iterations_seen=len(v),
                           evidence=f"{e.evidence}; sends {v.mean():,.0f} bytes per iteration, in {active} of "
                                    f"{len(v)} whole iterations"))
    return replace(roles, endpoints=tuple(out))
