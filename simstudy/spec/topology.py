"""Network topology specs.

Two families:

* ASTRA-SIM native dimensions (`ring`, `fully_connected`, `switch`, or several of them in
  `multi_dim`), written to ASTRA-SIM's network.yml as they are;
* graph topologies (`star`, `tree`, `binary_tree_star`, `clique`, `fat_tree`), simulated link by
  link by flowsim and approximated by one ASTRA-SIM dimension for the analytical backend.

Bandwidths are gigabits per second (10^9 bit/s) per link and direction; latencies are ns.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from simstudy.spec.base import FieldError, Spec
from simstudy.spec.transport import Queue, TokenBucket, Transport

DimType = Literal["ring", "fully_connected", "switch"]
#: What ECMP hashes to choose among equal-cost paths (see `_Ecmp.ecmp`).
EcmpHash = Literal["flow", "pair"]


class _Link(Spec):
    bandwidth_gbps: float = Field(
        default=100.0, gt=0, description="link bandwidth per direction, gigabits per second"
    )
    latency_ns: float = Field(default=500.0, ge=0, description="per-hop latency, nanoseconds")


class _Packets(Spec):
    """What the packet network (`--backend ns3`) runs on every host and link (see `spec.transport`)."""

    transport: Transport = Field(default_factory=Transport, description="the hosts' TCP stack (Linux's defaults)")
    queue: Queue = Field(default_factory=Queue, description="queue discipline at the sending end of every link")


class _Shaped(Spec):
    token_bucket: TokenBucket | None = Field(
        default=None,
        description="a token bucket filter at both ends of every host link (tc tbf): the link's bandwidth while "
        "tokens last, then the token rate; the packet network and flowsim's fluid mode",
    )


class Dim(_Link):
    """One ASTRA-SIM network dimension."""

    type: DimType = Field(description="ring, fully_connected or switch")
    npus: int = Field(ge=2, description="NPUs along this dimension")


class _OneDim(_Link, _Packets, _Shaped):
    npus: int = Field(ge=2, description="number of NPUs")

    @property
    def total_npus(self) -> int:
        return self.npus

    @property
    def dims(self) -> tuple[Dim, ...]:
        return (
            Dim(
                type=self.kind,  # type: ignore[attr-defined]
                npus=self.npus,
                bandwidth_gbps=self.bandwidth_gbps,
                latency_ns=self.latency_ns,
            ),
        )


class Ring(_OneDim):
    """A bidirectional ring of NPUs (ASTRA-SIM `Ring`)."""

    kind: Literal["ring"] = "ring"


class FullyConnected(_OneDim):
    """Every NPU linked directly to every other (ASTRA-SIM `FullyConnected`)."""

    kind: Literal["fully_connected"] = "fully_connected"


class Switch(_OneDim):
    """NPUs joined by one switch (ASTRA-SIM `Switch`)."""

    kind: Literal["switch"] = "switch"


class MultiDim(_Packets):
    """Several ASTRA-SIM dimensions, innermost first (e.g. [ring of 8 GPUs, switch of 4 nodes])."""

    kind: Literal["multi_dim"] = "multi_dim"
    dims: tuple[Dim, ...] = Field(min_length=1, description="dimensions, innermost first")

    @property
    def total_npus(self) -> int:
        n = 1
        for d in self.dims:
            n *= d.npus
        return n


class _Graph(_Link, _Packets, _Shaped):
    loss: float = Field(default=0.0, ge=0, lt=1, description="packet loss probability per link")
    loss_at: Literal["links", "hosts"] = Field(
        default="links",
        description="where packets are lost: links (on every link, i.i.d. per packet and link) or hosts (only as "
        "a host receives them, as a capture testbed's receiver-side drop does)",
    )

    @property
    def dims(self) -> tuple[Dim, ...]:
        """The single ASTRA-SIM dimension that approximates this graph (see `approximation`)."""
        typ, latency = self.approximation
        return (
            Dim(
                type=typ,
                npus=self.total_npus,  # type: ignore[attr-defined]
                bandwidth_gbps=self.bandwidth_gbps,
                latency_ns=latency,
            ),
        )

    @property
    def approximation(self) -> tuple[DimType, float]:
        return "switch", self.latency_ns


class _Ecmp(Spec):
    """A graph with several equal-cost paths between hosts, one picked per flow or per host pair."""

    ecmp: EcmpHash = Field(
        default="flow",
        description="what ECMP hashes to pick one of the equal-cost paths: flow (source, destination and "
        "flow id: each chunk of a collective and each send is a flow, as a fabric hashing connections "
        "sees them) or pair (source and destination: every byte between two hosts takes one path)",
    )


class Star(_Graph):
    """Hosts on one central switch, one link each."""

    kind: Literal["star"] = "star"
    npus: int = Field(ge=2, description="number of hosts")

    @property
    def total_npus(self) -> int:
        return self.npus


class Clique(_Graph):
    """A direct link between every pair of hosts."""

    kind: Literal["clique"] = "clique"
    npus: int = Field(ge=2, description="number of hosts")

    @property
    def total_npus(self) -> int:
        return self.npus

    @property
    def approximation(self) -> tuple[DimType, float]:
        return "fully_connected", self.latency_ns


class Tree(_Graph):
    """Hosts at the leaves of a tree of switches with the given fan-out."""

    kind: Literal["tree"] = "tree"
    npus: int = Field(ge=2, description="number of hosts")
    fanout: int = Field(default=4, ge=2, description="children per switch")


    @property
    def total_npus(self) -> int:
        return self.npus


class BinaryTreeStar(_Graph):
    """Leaf switches with `hosts_per_leaf` hosts each, joined by a binary tree of switches."""

    kind: Literal["binary_tree_star"] = "binary_tree_star"
    npus: int = Field(ge=2, description="number of hosts")
    hosts_per_leaf: int = Field(default=4, ge=1, description="hosts on each leaf switch")

    @property
    def total_npus(self) -> int:
        return self.npus


class FatTree(_Graph, _Ecmp):
    """A k-ary fat-tree (k pods, k^3/4 hosts at most); ECMP over equal-cost paths."""

    kind: Literal["fat_tree"] = "fat_tree"
    k: int = Field(default=4, ge=2, description="switch radix (even)")
    npus: int | None = Field(
        default=None, ge=2, description="hosts used (default: all k^3/4), filled pod by pod"
    )

    @property
    def total_npus(self) -> int:
        return self.npus if self.npus is not None else self.k**3 // 4

    @model_validator(mode="after")
    def _check(self) -> FatTree:
        if self.k % 2:
            raise ValueError(f"fat_tree k must be even, got {self.k}")
        if self.npus is not None and self.npus > self.k**3 // 4:
            raise ValueError(f"a k={self.k} fat-tree has {self.k**3 // 4} hosts, not {self.npus}")
        return self


class Tiered(_Graph, _Ecmp):
    """A cluster of hosts with several GPUs each, joined by tiers of switches.

    Every GPU is an NPU (numbered host by host: host h holds NPUs h*gpus_per_host ...). The GPUs of
    one host talk over the host's own fabric (`intra_host_bandwidth_gbps`, NVLink-class); traffic
    that leaves the host goes through one of its `nics_per_host` NICs (GPU g uses NIC
    g * nics_per_host // gpus_per_host) at `bandwidth_gbps` to its ToR switch.
    """

    gpus_per_host: int = Field(default=1, ge=1, description="GPUs (NPUs) per host")
    nics_per_host: int = Field(default=1, ge=1, description="NICs per host, each linked to the host's ToR")
    intra_host_bandwidth_gbps: float = Field(
        default=2400.0, gt=0, description="bandwidth between GPUs of one host, Gbit/s per direction (NVLink-class)"
    )
    npus: int | None = Field(default=None, ge=2, description="NPUs used (default: every GPU of every host)")

    @property
    def hosts(self) -> int:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    @property
    def host_tors(self) -> tuple[int, ...]:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    @property
    def total_npus(self) -> int:
        return self.npus if self.npus is not None else self.hosts * self.gpus_per_host

    @property
    def npu_hosts(self) -> tuple[int, ...]:
        return tuple(i // self.gpus_per_host for i in range(self.total_npus))

    def _check_tiered(self) -> None:
        if self.nics_per_host > self.gpus_per_host:
            raise FieldError("nics_per_host", f"{self.nics_per_host} NICs for {self.gpus_per_host} GPUs per host; "
                                              "a NIC serves at least one GPU")
        if self.npus is not None and self.npus > self.hosts * self.gpus_per_host:
            raise FieldError("npus", f"the cluster has {self.hosts} hosts x {self.gpus_per_host} GPUs = "
                                     f"{self.hosts * self.gpus_per_host} NPUs, not {self.npus}")


def _uplink(down_gbps: float, uplinks: int, explicit: float | None, oversubscription: float | None,
            field: str) -> float:
    """The speed of each uplink: given, or the downlink capacity over the oversubscription ratio
    shared by the uplinks (1:1 when neither is given)."""
    if explicit is not None and oversubscription is not None:
        raise FieldError(field, "give the uplink speed or the oversubscription ratio, not both")
    if explicit is not None:
        return explicit
    return down_gbps / (oversubscription or 1.0) / uplinks


class LeafSpine(Tiered):
    """Two-tier Clos: `leaves` ToR (leaf) switches with `hosts_per_leaf` hosts each, every leaf linked
    to every one of `spines` spine switches; ECMP over the spines."""

    kind: Literal["leaf_spine"] = "leaf_spine"
    leaves: int = Field(ge=1, description="leaf (ToR) switches")
    spines: int = Field(default=1, ge=1, description="spine switches; every leaf links to every spine")
    hosts_per_leaf: int = Field(ge=1, description="hosts below each leaf")
    uplink_bandwidth_gbps: float | None = Field(
        default=None, gt=0, description="each leaf-spine link, Gbit/s per direction (default: from oversubscription)"
    )
    oversubscription: float | None = Field(
        default=None, gt=0, description="leaf downlink capacity / uplink capacity (default 1: non-blocking)"
    )

    @property
    def hosts(self) -> int:
        return self.leaves * self.hosts_per_leaf

    @property
    def host_tors(self) -> tuple[int, ...]:
        return tuple(h // self.hosts_per_leaf for h in range(self.hosts))

    @property
    def uplink_gbps(self) -> float:
        """The speed of one leaf-spine link."""
        down = self.hosts_per_leaf * self.nics_per_host * self.bandwidth_gbps
        return _uplink(down, self.spines, self.uplink_bandwidth_gbps, self.oversubscription, "oversubscription")

    @model_validator(mode="after")
    def _check(self) -> LeafSpine:
        self._check_tiered()
        _ = self.uplink_gbps
        return self


class Clos3(Tiered):
    """Three-tier Clos: `pods` pods of `tors_per_pod` ToRs (`hosts_per_tor` hosts each) and
    `aggs_per_pod` aggregation switches (every ToR of a pod to every aggregation switch of the pod),
    every aggregation switch linked to each of `cores` core switches; ECMP at every tier."""

    kind: Literal["clos3"] = "clos3"
    pods: int = Field(ge=1, description="pods")
    tors_per_pod: int = Field(ge=1, description="ToR switches per pod")
    hosts_per_tor: int = Field(ge=1, description="hosts below each ToR")
    aggs_per_pod: int = Field(default=2, ge=1, description="aggregation switches per pod")
    cores: int = Field(default=2, ge=1, description="core switches")
    tor_uplink_gbps: float | None = Field(default=None, gt=0, description="each ToR-aggregation link, Gbit/s")
    tor_oversubscription: float | None = Field(default=None, gt=0, description="ToR down/up capacity ratio")
    agg_uplink_gbps: float | None = Field(default=None, gt=0, description="each aggregation-core link, Gbit/s")
    agg_oversubscription: float | None = Field(default=None, gt=0, description="aggregation down/up capacity ratio")

    @property
    def hosts(self) -> int:
        return self.pods * self.tors_per_pod * self.hosts_per_tor

    @property
    def host_tors(self) -> tuple[int, ...]:
        return tuple(h // self.hosts_per_tor for h in range(self.hosts))

    @property
    def tor_up_gbps(self) -> float:
        down = self.hosts_per_tor * self.nics_per_host * self.bandwidth_gbps
        return _uplink(down, self.aggs_per_pod, self.tor_uplink_gbps, self.tor_oversubscription,
                       "tor_oversubscription")

    @property
    def agg_up_gbps(self) -> float:
        down = self.tors_per_pod * self.tor_up_gbps
        return _uplink(down, self.cores, self.agg_uplink_gbps, self.agg_oversubscription, "agg_oversubscription")

    @model_validator(mode="after")
    def _check(self) -> Clos3:
        self._check_tiered()
        _ = self.agg_up_gbps
        return self


class ClosHost(Spec):
    """One host of an imported cluster: its ToR, aggregation and core switch (names as in the file)."""

    tor: str = Field(min_length=1, description="ToR (access) switch")
    agg: str = Field(min_length=1, description="aggregation (pod) switch")
    core: str = Field(min_length=1, description="core switch")


class ClosCsv(Tiered):
    """A real cluster's three-tier Clos from its host-to-switch table (a CSV with the columns
    `ip,DSW,PSW,ASW`: host, core, aggregation and ToR switch, as in the Alibaba Lingjun 2023 dataset;
    ToR names are local to their aggregation switch). The loader reads `file` (relative to the spec
    that names it) into `hosts`, so the scenario holds the table itself. Each ToR links to its
    aggregation switch and each aggregation switch to its core switch with one link whose capacity
    is what the tier below it can send, divided by the tier's oversubscription."""

    kind: Literal["clos_csv"] = "clos_csv"
    file: str = Field(min_length=1, description="CSV file of hosts (columns ip, DSW, PSW, ASW)")
    hosts_table: tuple[ClosHost, ...] = Field(
        default=(), description="the hosts read from `file`, in file order (filled by the loader)"
    )
    tor_oversubscription: float = Field(default=1.0, gt=0, description="ToR down/up capacity ratio")
    agg_oversubscription: float = Field(default=1.0, gt=0, description="aggregation down/up capacity ratio")

    @property
    def hosts(self) -> int:
        return len(self.hosts_table)

    @property
    def tor_names(self) -> tuple[tuple[str, str], ...]:
        """Every ToR, as (aggregation, ToR) names, in order of first appearance."""
        return tuple(dict.fromkeys((h.agg, h.tor) for h in self.hosts_table))

    @property
    def host_tors(self) -> tuple[int, ...]:
        index = {t: i for i, t in enumerate(self.tor_names)}
        return tuple(index[(h.agg, h.tor)] for h in self.hosts_table)

    @model_validator(mode="after")
    def _check(self) -> ClosCsv:
        if not self.hosts_table:
            raise FieldError("file", f"{self.file!r} was not read: load the spec with simstudy.spec.load_spec "
                                     "(it reads the CSV into the scenario)")
        self._check_tiered()
        return self


NativeTopology = Ring | FullyConnected | Switch | MultiDim
GraphTopology = Star | Clique | Tree | BinaryTreeStar | FatTree | LeafSpine | Clos3 | ClosCsv
Topology = Annotated[
    Ring | FullyConnected | Switch | MultiDim | Star | Clique | Tree | BinaryTreeStar | FatTree | LeafSpine | Clos3
    | ClosCsv,
    Field(discriminator="kind"),
]


def topology_dims(topology: NativeTopology | GraphTopology) -> tuple[Dim, ...]:
    """The ASTRA-SIM dimensions of a topology (exact for native, approximate for graphs)."""
    return topology.dims


def is_graph(topology: NativeTopology | GraphTopology) -> bool:
    """True for graph topologies that flowsim routes link by link."""
    return isinstance(topology, _Graph)
