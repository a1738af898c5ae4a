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

from simstudy.spec.base import Spec

DimType = Literal["ring", "fully_connected", "switch"]


class _Link(Spec):
    bandwidth_gbps: float = Field(
        default=100.0, gt=0, description="link bandwidth per direction, gigabits per second"
    )
    latency_ns: float = Field(default=500.0, ge=0, description="per-hop latency, nanoseconds")


class Dim(_Link):
    """One ASTRA-SIM network dimension."""

    type: DimType = Field(description="ring, fully_connected or switch")
    npus: int = Field(ge=2, description="NPUs along this dimension")


class _OneDim(_Link):
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


class MultiDim(Spec):
    """Several ASTRA-SIM dimensions, innermost first (e.g. [ring of 8 GPUs, switch of 4 nodes])."""

    kind: Literal["multi_dim"] = "multi_dim"
    dims: tuple[Dim, ...] = Field(min_length=1, description="dimensions, innermost first")

    @property
    def total_npus(self) -> int:
        n = 1
        for d in self.dims:
            n *= d.npus
        return n


class _Graph(_Link):
    loss: float = Field(default=0.0, ge=0, lt=1, description="packet loss probability per link")

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


class FatTree(_Graph):
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


NativeTopology = Ring | FullyConnected | Switch | MultiDim
GraphTopology = Star | Clique | Tree | BinaryTreeStar | FatTree
Topology = Annotated[
    Ring | FullyConnected | Switch | MultiDim | Star | Clique | Tree | BinaryTreeStar | FatTree,
    Field(discriminator="kind"),
]


def topology_dims(topology: NativeTopology | GraphTopology) -> tuple[Dim, ...]:
    """The ASTRA-SIM dimensions of a topology (exact for native, approximate for graphs)."""
    return topology.dims


def is_graph(topology: NativeTopology | GraphTopology) -> bool:
    """True for graph topologies that flowsim routes link by link."""
    return isinstance(topology, _Graph)
