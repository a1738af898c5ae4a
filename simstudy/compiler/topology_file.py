"""The bundle's network as a typed file, topology.json: hosts, switches, links and the routing rule.

The compiler writes it beside ASTRA-SIM's network.yml; both backends read it (flowsim simulates
it link by link, the astrasim backend puts its transfers on its links), so no backend needs the
scenario. A bundle without one (an ASTRA-SIM input set from elsewhere) gets the same topology
from its network.yml (`native_topology`).

```json
{"format": "simstudy.topology/1", "kind": "ring", "hosts": 4, "switches": [],
 "links": [{"src": "h0", "dst": "h1", "bytes_per_ns": 12.5, "latency_ns": 500.0, "loss": 0.0,
            "tier": "ring", "dim": 0}, ...],
 "routing": {"kind": "dimension_order", "dims": [{"topology": "Ring", "npus": 4, "stride": 1}]}}
```

* hosts are the NPU ranks, named `h<rank>`; switches are named by the builder (`s0`, `e<pod>.<i>`...);
* links are directed and numbered by their position; `bytes_per_ns` is the capacity (for
  ASTRA-SIM dimensions, exactly the one ASTRA-SIM derives from network.yml's GiB/s), `tier` and
  `dim` say where a link sits (`dim` is the ASTRA-SIM dimension, -1 for graph topologies);
* routing `dimension_order` goes dimension by dimension, innermost first, inside each as ASTRA-SIM
  does (Ring: the shorter way round, clockwise on a tie; Switch: up to the line's switch and down;
  FullyConnected: the direct link); `shortest_path` takes a shortest path in hops, and with
  `ecmp` one of all of them, chosen by a hash of (source, destination, flow) when `ecmp_hash` is
  `flow` (the default: each flow, i.e. each chunk of a collective or each send, the table's `flow`
  column, takes its own path, as a fabric hashing the 5-tuples of connections does) or of
  (source, destination) when it is `pair` (every byte between two hosts takes one path).
  Both backends route every transfer with that rule, and so does the link table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import TypeAdapter, ValidationError

from simstudy.compiler.astra_config import ASTRA_DIM, gbps_to_astra
from simstudy.compiler.bundle import BundleError
from simstudy.files import write_json
from simstudy.spec import (
    BinaryTreeStar,
    Clique,
    Clos3,
    ClosCsv,
    FatTree,
    LeafSpine,
    Scenario,
    Star,
    Topology,
    Tree,
    is_graph,
    topology_dims,
)
from simstudy.spec.topology import GraphTopology
from simstudy.spec.transport import Queue, TokenBucket, Transport

FORMAT = "simstudy.topology/1"
#: ASTRA-SIM's analytical network reads bandwidth in GB/s with GB = 2^30 bytes.
GIB = 2**30
DimTopology = Literal["Ring", "Switch", "FullyConnected"]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Link:
    """One directed link."""

    src: str
    dst: str
    bytes_per_ns: float
    latency_ns: float
    loss: float = 0.0
    tier: str = ""
    dim: int = -1
    #: a token bucket at the sending end (packet network only): token rate, bucket and queue limit
    tbf_bytes_per_ns: float = 0.0
    tbf_burst_bytes: int = 0
    tbf_limit_bytes: int = 0

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst}"

    @property
    def gbps(self) -> float:
        """Bandwidth in gigabits per second."""
        return self.bytes_per_ns * 8.0


@dataclass(frozen=True, slots=True)
class DimRoute:
    """One ASTRA-SIM dimension: hosts `base + j * stride` (j < npus) form one of its lines."""

    topology: DimTopology
    npus: int
    stride: int


@dataclass(frozen=True, slots=True)
class Routing:
    kind: Literal["dimension_order", "shortest_path"]
    dims: tuple[DimRoute, ...] = ()
    ecmp: bool = False
    #: what ECMP hashes: `flow` (source, destination, flow id) or `pair` (source, destination)
    ecmp_hash: Literal["flow", "pair"] = "flow"

    @property
    def per_flow(self) -> bool:
        """Whether a route depends on the flow (ECMP hashing flows), not only on the two ends."""
        return self.ecmp and self.ecmp_hash == "flow"


@dataclass(frozen=True)
class NetworkTopology:
    """Hosts (ranks 0..hosts-1, named `h<rank>`), switches, directed links and the routing rule."""

    kind: str
    hosts: int
    switches: tuple[str, ...]
    links: tuple[Link, ...]
    routing: Routing
    #: the hosts' TCP stack and the links' queues (what the packet network runs; flowsim's TCP model reads it)
    transport: Transport = field(default_factory=Transport)
    queue: Queue = field(default_factory=Queue)
    _index: dict[tuple[str, str], int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for i, link in enumerate(self.links):
            self._index.setdefault((link.src, link.dst), i)

    def link_id(self, src: str, dst: str) -> int:
        """The id of the directed link src -> dst (KeyError when there is none)."""
        return self._index[(src, dst)]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "kind": self.kind,
            "hosts": self.hosts,
            "switches": list(self.switches),
            "links": [_link_json(link) for link in self.links],
            "routing": {"kind": self.routing.kind, "ecmp": self.routing.ecmp, "ecmp_hash": self.routing.ecmp_hash,
                        "dims": [asdict(d) for d in self.routing.dims]},
            "transport": self.transport.model_dump(mode="json"),
            "queue": self.queue.model_dump(mode="json"),
        }

    @classmethod
    def from_json(cls, data: Any, *, source: str = "topology") -> NetworkTopology:
        """A topology from its JSON form; a bad field raises BundleError naming `source` and the field."""

        def bad(where: str, what: str) -> BundleError:
            return BundleError(f"{source}: {where}: {what}")

        if not isinstance(data, dict):
            raise bad("(top level)", "expected a JSON object")
        if data.get("format") != FORMAT:
            raise bad("format", f"expected {FORMAT!r}, got {data.get('format')!r}")
        hosts = data.get("hosts")
        if not isinstance(hosts, int) or hosts < 1:
            raise bad("hosts", f"expected a positive integer, got {hosts!r}")
        switches = data.get("switches", [])
        if not isinstance(switches, list) or not all(isinstance(s, str) for s in switches):
            raise bad("switches", "expected a list of switch names")
        nodes = {f"h{i}" for i in range(hosts)} | set(switches)
        links: list[Link] = []
        for i, link in enumerate(_typed(_LINKS, data.get("links") or [], "links", bad)):
            if link.src not in nodes or link.dst not in nodes:
                raise bad(f"links[{i}]", f"{link.name} joins a node that is neither a host nor a switch")
            if not link.bytes_per_ns > 0 or link.latency_ns < 0 or not 0 <= link.loss < 1:
                raise bad(f"links[{i}]", "expected bytes_per_ns > 0, latency_ns >= 0 and 0 <= loss < 1")
            links.append(link)
        raw_routing = data.get("routing")
        if not isinstance(raw_routing, dict) or raw_routing.get("kind") not in ("dimension_order", "shortest_path"):
            raise bad("routing.kind", "expected dimension_order or shortest_path")
        dims = tuple(_typed(_DIMS, raw_routing.get("dims") or [], "routing.dims", bad))
        if raw_routing["kind"] == "dimension_order":
            total = 1
            for d in dims:
                if d.topology not in ("Ring", "Switch", "FullyConnected") or d.stride != total:
                    raise bad("routing.dims", f"bad dimension {d}")
                total *= d.npus
            if total != hosts:
                raise bad("routing.dims", f"the dimensions hold {total} NPUs, not {hosts}")
        ecmp_hash = raw_routing.get("ecmp_hash", "flow")
        if ecmp_hash not in ("flow", "pair"):
            raise bad("routing.ecmp_hash", f"expected flow or pair, got {ecmp_hash!r}")
        routing = Routing(raw_routing["kind"], dims, bool(raw_routing.get("ecmp", False)), ecmp_hash)
        try:
            transport = Transport.model_validate(data.get("transport") or {})
            queue = Queue.model_validate(data.get("queue") or {})
        except ValueError as exc:
            raise bad("transport", f"expected simstudy's transport and queue settings ({exc})".replace("\n", " ")) \
                from None
        return cls(str(data.get("kind", "")), hosts, tuple(switches), tuple(links), routing, transport, queue)


#: A link's fields, in order; the token bucket's last (`asdict`'s keys, without its walk of the values:
#: a tenth of the time on a 16,384-GPU topology's links)
_LINK_FIELDS = tuple(f.name for f in fields(Link))
_PLAIN_LINK = _LINK_FIELDS[:-3]


def _link_json(link: Link) -> dict[str, Any]:
    """A link's JSON (`asdict`'s); the token bucket fields only when it has one."""
    return {k: getattr(link, k) for k in (_LINK_FIELDS if link.tbf_bytes_per_ns else _PLAIN_LINK)}


_LINKS: TypeAdapter[list[Link]] = TypeAdapter(list[Link])
_DIMS: TypeAdapter[list[DimRoute]] = TypeAdapter(list[DimRoute])


def _typed(adapter: TypeAdapter[list[T]], raw: Any, where: str, bad: Callable[[str, str], BundleError]) -> list[T]:
    """`raw` as a list of typed records; a bad one is a BundleError naming the record and its field."""
    try:
        return adapter.validate_python(raw)
    except ValidationError as exc:
        errors = exc.errors()
        shown = "; ".join(f"{'.'.join(map(str, (where, *e['loc'])))}: {e['msg']}" for e in errors[:10])
        more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
        field, _, what = shown.partition(": ")
        raise bad(field, what + more) from None


def write_topology(path: Path, topology: NetworkTopology) -> None:
    write_json(path, topology.to_json())


def read_topology(path: Path) -> NetworkTopology:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"{path}: cannot read the topology: {exc}") from None
    return NetworkTopology.from_json(data, source=str(path))


# -- builders ----------------------------------------------------------------------------------


def gibps_to_bytes_per_ns(bandwidth_gibps: float) -> float:
    """ASTRA-SIM's GiB/s (network.yml) to bytes per ns, as ASTRA-SIM converts it."""
    return bandwidth_gibps * GIB / 1e9


@dataclass(frozen=True)
class NativeDim:
    """One ASTRA-SIM dimension as network.yml gives it (bandwidth in GiB/s)."""

    topology: DimTopology
    npus: int
    bandwidth_gibps: float
    latency_ns: float


class _Builder:
    def __init__(self) -> None:
        self.links: list[Link] = []
        self.switches: list[str] = []
        self.seen: set[tuple[str, str]] = set()

    def switch(self, name: str) -> str:
        if name not in self.switches:
            self.switches.append(name)
        return name

    def both(self, a: str, b: str, bpns: float, latency: float, *, loss: float = 0.0, tier: str = "",
             dim: int = -1) -> None:
        """A bidirectional link: two directed links of the same capacity."""
        for u, v in ((a, b), (b, a)):
            if (u, v) not in self.seen:
                self.seen.add((u, v))
                self.links.append(Link(u, v, bpns, latency, loss, tier, dim))


def native_topology(dims: Sequence[NativeDim]) -> NetworkTopology:
    """The network of ASTRA-SIM dimensions (innermost first), line by line."""
    b = _Builder()
    total = 1
    for d in dims:
        total *= d.npus
    stride = 1
    routes: list[DimRoute] = []
    for k, d in enumerate(dims):
        bpns = gibps_to_bytes_per_ns(d.bandwidth_gibps)
        tier = {"Ring": "ring", "Switch": "switch", "FullyConnected": "fully_connected"}[d.topology]
        if len(dims) > 1:
            tier = f"dim{k}.{tier}"
        lines = [r for r in range(total) if (r // stride) % d.npus == 0]
        for line, base in enumerate(lines):
            hosts = [f"h{base + j * stride}" for j in range(d.npus)]
            if d.topology == "Ring":
                for i in range(d.npus):
                    if d.npus == 2 and i == 1:
                        break
                    b.both(hosts[i], hosts[(i + 1) % d.npus], bpns, d.latency_ns, tier=tier, dim=k)
            elif d.topology == "Switch":
                sw = b.switch(f"s{k}.{line}" if len(dims) > 1 else "s0")
                for h in hosts:
                    b.both(h, sw, bpns, d.latency_ns, tier=tier, dim=k)
            else:
                for i in range(d.npus):
                    for j in range(i + 1, d.npus):
                        b.both(hosts[i], hosts[j], bpns, d.latency_ns, tier=tier, dim=k)
        routes.append(DimRoute(d.topology, d.npus, stride))
        stride *= d.npus
    kind = "+".join(d.topology for d in dims)
    return NetworkTopology(kind, total, tuple(b.switches), tuple(b.links),
                           Routing("dimension_order", tuple(routes)))


def graph_topology(topo: GraphTopology) -> NetworkTopology:
    """The link-by-link network of a graph topology spec."""
    bpns = topo.bandwidth_gbps / 8.0
    lat, loss = topo.latency_ns, topo.loss
    n = topo.total_npus
    b = _Builder()
    ecmp = False
    ecmp_hash: Literal["flow", "pair"] = "flow"
    if isinstance(topo, Star):
        sw = b.switch("s0")
        for i in range(n):
            b.both(f"h{i}", sw, bpns, lat, loss=loss, tier="host")
    elif isinstance(topo, Clique):
        for i in range(n):
            for j in range(i + 1, n):
                b.both(f"h{i}", f"h{j}", bpns, lat, loss=loss, tier="host")
    elif isinstance(topo, Tree | BinaryTreeStar):
        per_leaf = topo.fanout if isinstance(topo, Tree) else topo.hosts_per_leaf
        fanout = topo.fanout if isinstance(topo, Tree) else 2
        level: list[str] = []
        for i in range(n):
            leaf = b.switch(f"s0.{i // per_leaf}")
            b.both(f"h{i}", leaf, bpns, lat, loss=loss, tier="host")
            if leaf not in level:
                level.append(leaf)
        depth = 1
        while len(level) > 1:
            parents: list[str] = []
            for j, child in enumerate(level):
                parent = b.switch(f"s{depth}.{j // fanout}")
                b.both(child, parent, bpns, lat, loss=loss, tier=f"level{depth}")
                if parent not in parents:
                    parents.append(parent)
            level = parents
            depth += 1
    elif isinstance(topo, FatTree):
        k = topo.k
        half = k // 2
        ecmp, ecmp_hash = True, topo.ecmp
        for i in range(n):
            pod, rest = divmod(i, half * half)
            b.both(f"h{i}", b.switch(f"e{pod}.{rest // half}"), bpns, lat, loss=loss, tier="edge")
        for pod in range(k):
            for e in range(half):
                for a in range(half):
                    b.both(b.switch(f"e{pod}.{e}"), b.switch(f"a{pod}.{a}"), bpns, lat, loss=loss, tier="aggregation")
            for a in range(half):
                for c in range(half):
                    b.both(f"a{pod}.{a}", b.switch(f"c{a}.{c}"), bpns, lat, loss=loss, tier="core")
    elif isinstance(topo, LeafSpine | Clos3 | ClosCsv):
        _tiered(b, topo)
        ecmp, ecmp_hash = True, topo.ecmp
    else:  # pragma: no cover - exhaustive
        raise ValueError(f"unsupported graph topology {topo!r}")
    links = [_host_shaping(link, topo) for link in b.links]
    return NetworkTopology(topo.kind, n, tuple(b.switches), tuple(links), Routing("shortest_path", ecmp=ecmp,
                                                                                     ecmp_hash=ecmp_hash))


def _host_shaping(link: Link, topo: GraphTopology) -> Link:
    """`loss_at: hosts` (losses only on links into hosts) and the token bucket of host links."""
    if topo.loss_at == "hosts":
        link = replace(link, loss=topo.loss if link.dst.startswith("h") else 0.0)
    return _bucket(link, topo.token_bucket)


def _bucket(link: Link, tb: TokenBucket | None) -> Link:
    """`link` behind the token bucket `tb` when it starts or ends at a host."""
    if tb is not None and (link.src.startswith("h") or link.dst.startswith("h")):
        link = replace(link, tbf_bytes_per_ns=tb.rate_gbps / 8.0, tbf_burst_bytes=int(tb.burst_kib * 1024),
                       tbf_limit_bytes=tb.limit_bytes)
    return link


def _tiered(b: _Builder, topo: LeafSpine | Clos3 | ClosCsv) -> None:
    """Hosts of several GPUs under tiers of switches (see `spec.topology.Tiered`).

    GPU (NPU) r of host H is host `h<r>`, linked to its host's own switch `n<H>` at the intra-host
    bandwidth (tier `intra_host`); the host switch reaches its ToR through `nics_per_host` NICs
    `n<H>.nic<k>` (tier `nic`: host switch - NIC - ToR, each at the NIC speed), so traffic between
    two GPUs of one host stays inside it and traffic that leaves it picks a NIC by ECMP. Above the
    ToRs: leaf-spine (tier `spine`), pod aggregation and core (tiers `aggregation`, `core`).
    """
    lat, loss = topo.latency_ns, topo.loss
    nic = topo.bandwidth_gbps / 8.0
    intra = topo.intra_host_bandwidth_gbps / 8.0
    hosts_used = (topo.total_npus + topo.gpus_per_host - 1) // topo.gpus_per_host
    tor_names = _tor_names(topo)
    tors = topo.host_tors
    for r in range(topo.total_npus):
        b.both(f"h{r}", b.switch(f"n{r // topo.gpus_per_host}"), intra, lat, tier="intra_host")
    for h in range(hosts_used):
        for k in range(topo.nics_per_host):
            card = b.switch(f"n{h}.nic{k}")
            b.both(f"n{h}", card, nic, lat, loss=loss, tier="nic")
            b.both(card, b.switch(tor_names[tors[h]]), nic, lat, loss=loss, tier="nic")
    used_tors = sorted({tors[h] for h in range(hosts_used)})
    if isinstance(topo, LeafSpine):
        up = topo.uplink_gbps / 8.0
        for t in used_tors:
            for s in range(topo.spines):
                b.both(tor_names[t], b.switch(f"spine{s}"), up, lat, loss=loss, tier="spine")
    elif isinstance(topo, Clos3):
        tor_up, agg_up = topo.tor_up_gbps / 8.0, topo.agg_up_gbps / 8.0
        pods = sorted({t // topo.tors_per_pod for t in used_tors})
        for t in used_tors:
            for a in range(topo.aggs_per_pod):
                b.both(tor_names[t], b.switch(f"a{t // topo.tors_per_pod}.{a}"), tor_up, lat, loss=loss,
                       tier="aggregation")
        for pod in pods:
            for a in range(topo.aggs_per_pod):
                for c in range(topo.cores):
                    b.both(f"a{pod}.{a}", b.switch(f"c{c}"), agg_up, lat, loss=loss, tier="core")
    else:
        hosts_of: dict[int, int] = {}
        for h in range(topo.hosts):
            hosts_of[tors[h]] = hosts_of.get(tors[h], 0) + 1
        agg_of = {i: agg for i, (agg, _) in enumerate(topo.tor_names)}
        core_of = {row.agg: row.core for row in topo.hosts_table}
        agg_down: dict[str, float] = {}
        for t in used_tors:
            up = hosts_of[t] * topo.nics_per_host * topo.bandwidth_gbps / topo.tor_oversubscription
            agg_down[agg_of[t]] = agg_down.get(agg_of[t], 0.0) + up
            b.both(tor_names[t], b.switch(f"a:{agg_of[t]}"), up / 8.0, lat, loss=loss, tier="aggregation")
        for agg, down in agg_down.items():
            b.both(f"a:{agg}", b.switch(f"c:{core_of[agg]}"), down / topo.agg_oversubscription / 8.0, lat, loss=loss,
                   tier="core")


def _tor_names(topo: LeafSpine | Clos3 | ClosCsv) -> list[str]:
    if isinstance(topo, ClosCsv):
        return [f"t:{agg}/{tor}" for agg, tor in topo.tor_names]
    count = max(topo.host_tors) + 1
    if isinstance(topo, Clos3):
        return [f"t{i // topo.tors_per_pod}.{i % topo.tors_per_pod}" for i in range(count)]
    return [f"leaf{i}" for i in range(count)]


#: Framework presets whose ranks hold one TCP connection per direction (TensorFlow's gRPC: every
#: rank is a client of every peer it receives from); the others hold one per pair of ranks.
PER_DIRECTION_FRAMEWORKS = ("tensorflow_mwms",)


def scenario_topology(scenario: Scenario) -> NetworkTopology:
    """The network of a scenario: its graph, or its ASTRA-SIM dimensions exactly as network.yml gives
    them; TCP connections as the scenario's framework opens them unless the topology says."""
    net = topology_of(scenario.topology)
    if scenario.topology.transport.connections is None:
        per = scenario.parallelism.framework.name in PER_DIRECTION_FRAMEWORKS
        net = replace(net, transport=net.transport.model_copy(
            update={"connections": "per_direction" if per else "per_pair"}))
    return net


def topology_of(topo: Topology) -> NetworkTopology:
    """The network of a topology spec: its graph, or its ASTRA-SIM dimensions as network.yml gives them."""
    if is_graph(topo):
        net = graph_topology(topo)  # type: ignore[arg-type]
    else:
        dims = [NativeDim(ASTRA_DIM[d.type], d.npus, gbps_to_astra(d.bandwidth_gbps), d.latency_ns)  # type: ignore[arg-type]
                for d in topology_dims(topo)]
        net = native_topology(dims)
        bucket = getattr(topo, "token_bucket", None)  # one dimension's host links (`multi_dim` has none)
        if bucket is not None:
            net = replace(net, links=tuple(_bucket(link, bucket) for link in net.links))
    transport = topo.transport
    if transport.connections is None:
        transport = transport.model_copy(update={"connections": "per_pair"})
    return replace(net, transport=transport, queue=topo.queue)
