"""Aggregation kinds (`parallelism.aggregation`): how data-parallel replicas combine gradients.

One class per kind, a member of the `Aggregation` union at the end of this module; `AGGREGATIONS`
(kind -> class) is derived from that union. A kind's class says everything the spec, capture and
validation layers need to know of it (see `AggregationKind`); its compile step is its entry in
`simstudy.compiler.aggregation.COMPILE`, which is checked complete against `AGGREGATIONS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args

from pydantic import Field, ValidationError

from simstudy.spec.base import FieldError, Spec, listed
from simstudy.spec.collectives import FALLBACK, NAMES, names_text

if TYPE_CHECKING:
    from simstudy.spec.framework import Preset
    from simstudy.spec.parallelism import Parallelism

if TYPE_CHECKING:
    AllReduceAlgorithm = str
else:  # the registry's names (simstudy.spec.collectives), in its order
    AllReduceAlgorithm = Literal[NAMES]


class AggregationKind(Spec):
    """What every aggregation kind says about itself beyond its fields:

    * `noun`: what it is called in messages ("parameter server");
    * `implied_by`: keys that, given without `kind`, name this kind (`{servers: 2}` is a parameter
      server; a dict naming none of any kind's keys is the first kind of the union);
    * `astra_sim`: the astrasim backend runs its compiled graph (False: it refuses such a bundle);
    * `capture_strategy`: what the workers of a captured job run for it (their config's `strategy`;
      None: it cannot be captured); which capture frameworks run it is the presets' say
      (`Preset.captured_aggregations`);
    * `ddp_buckets`: its messages are DDP's buckets of `parallelism.bucket_size_mib` under every
      framework preset (not only pytorch_ddp);
    * `lockstep_backward`: its workers' backward passes end together (their collectives run inside
      them), so a captured job's compute is the workers' mean, not its slowest worker's;
    * the roles of its ranks: `extra_ranks` (ranks after the compute ranks) and `server_hosts`;
    * `all_reduce_algorithm`: the collective algorithm of its all-reduces over every rank
      (ASTRA-SIM's system.json), None when it runs none;
    * `bounded_staleness`: its compile step honours `parallelism.staleness` (with plain data
      parallelism); a kind that does not is refused with staleness > 0;
    * `topologies`: the topology kinds it runs on (None: every kind), checked by `check_topology`;
    * `network_settings`: what every job of the kind on one network must give alike (the switches'
      pool of in-network aggregation), checked by the cluster;
    * `check(parallelism)` and `check_capture(workers, preset)`: what it needs of the rest of the
      spec, as a `FieldError` (or `ValueError`) when that is not met.
    """

    noun: ClassVar[str]
    implied_by: ClassVar[tuple[str, ...]] = ()
    astra_sim: ClassVar[bool] = True
    capture_strategy: ClassVar[str | None] = None
    ddp_buckets: ClassVar[bool] = False
    lockstep_backward: ClassVar[bool] = False
    bounded_staleness: ClassVar[bool] = False
    topologies: ClassVar[tuple[str, ...] | None] = None

    kind: str

    @property
    def all_reduce_algorithm(self) -> str | None:
        """The algorithm of its all-reduces over every rank (None: it runs none)."""
        return None

    @property
    def synchronous(self) -> bool:
        """Every worker waits for every other once per iteration."""
        return True

    @property
    def extra_ranks(self) -> int:
        """Ranks the job has beyond its compute ranks (dedicated servers)."""
        return 0

    def server_hosts(self, workers: int) -> tuple[int, ...]:
        """The rank that hosts each server, with workers on ranks 0..workers-1 (none: ())."""
        return ()

    def check(self, parallelism: Parallelism) -> None:
        """What this kind needs of the rest of the parallelism."""

    def check_capture(self, workers: int, preset: Preset) -> None:
        """What a captured job of this kind needs (`preset`: the framework preset it runs)."""

    @property
    def network_settings(self) -> dict[str, Any]:
        """Fields every job of this kind on one network must give alike (its devices' settings)."""
        return {}

    def check_topology(self, kind: str) -> None:
        """What this kind needs of the network (`kind`: the topology's kind), as a FieldError on `aggregation`."""
        if self.topologies is not None and kind not in self.topologies:
            raise FieldError("aggregation", f"{self.noun} needs topology kind {listed(self.topologies)}; the "
                                            f"topology is {kind}")


class AllReduce(AggregationKind):
    """Gradients are summed with an all-reduce collective among the data-parallel ranks."""

    noun: ClassVar[str] = "all-reduce"
    capture_strategy: ClassVar[str | None] = "ddp"
    lockstep_backward: ClassVar[bool] = True
    bounded_staleness: ClassVar[bool] = True

    kind: Literal["allreduce"] = "allreduce"
    algorithm: AllReduceAlgorithm = Field(
        default=FALLBACK.name,
        description=f"collective algorithm: {names_text()}, for "
        "collectives of every rank; a smaller group's collectives (with tp or pp > 1) always run as a "
        "ring over the group, as ASTRA-SIM runs communicator groups",
    )

    @property
    def all_reduce_algorithm(self) -> str | None:
        return self.algorithm

    def check_capture(self, workers: int, preset: Preset) -> None:
        if workers < 2:
            raise ValueError("an all-reduce capture needs dp >= 2 workers")
        if self.algorithm != "ring":
            raise FieldError("parallelism.aggregation.algorithm",
                             f"{preset.captured_all_reduce} is a ring: set parallelism.aggregation.algorithm to "
                             f"ring, not {self.algorithm}")


class ParameterServer(AggregationKind):
    """Workers push gradients to parameter servers and pull updated parameters back.

    Parameters are sharded evenly over the servers. `colocated` servers run on the first
    `servers` worker ranks; `dedicated` servers are extra ranks after the workers.
    """

    noun: ClassVar[str] = "parameter server"
    implied_by: ClassVar[tuple[str, ...]] = ("servers", "placement", "mode")
    capture_strategy: ClassVar[str | None] = "ps"
    ddp_buckets: ClassVar[bool] = True

    kind: Literal["parameter_server"] = "parameter_server"
    servers: int = Field(default=1, ge=1, description="number of parameter-server shards")
    placement: Literal["colocated", "dedicated"] = Field(
        default="dedicated",
        description="colocated: servers share the first worker ranks; dedicated: extra ranks",
    )
    mode: Literal["sync", "async"] = Field(
        default="sync",
        description="sync: servers wait for every worker each iteration; async: they do not",
    )
    rendezvous: bool = Field(
        default=True,
        description="true: a send moves its bytes only once the receiver has posted the matching receive (gloo's "
        "send and recv, which a captured PyTorch job uses), and a worker posts its pulls once its whole "
        "backward is done, so every reply waits for the end of the workers' backward; false: each reply leaves "
        "as soon as the server has updated (an eager transport, as BytePS and ps-lite use)",
    )

    @property
    def synchronous(self) -> bool:
        return self.mode == "sync"

    @property
    def extra_ranks(self) -> int:
        return self.servers if self.placement == "dedicated" else 0

    def server_hosts(self, workers: int) -> tuple[int, ...]:
        """Colocated servers on worker ranks 0..servers-1, dedicated ones on ranks workers.."""
        first = 0 if self.placement == "colocated" else workers
        return tuple(range(first, first + self.servers))

    def check(self, parallelism: Parallelism) -> None:
        p = parallelism
        if p.tp != 1 or p.pp != 1:
            field = "tp" if p.tp != 1 else "pp"
            raise FieldError(field, f"a parameter server needs tp = 1 and pp = 1 (pure data parallel), "
                                    f"got {field} = {getattr(p, field)}")
        if self.placement == "colocated" and self.servers > p.dp:
            raise ValueError(
                f"{self.servers} colocated servers do not fit on dp = {p.dp} workers; "
                "use placement: dedicated or fewer servers"
            )
        if p.sharding != "none":
            raise FieldError("sharding", f"sharding ({p.sharding!r}) applies to all-reduce data "
                                         "parallelism, not a parameter server; use sharding: none")
        if p.microbatches != 1:
            raise FieldError("microbatches", "a parameter server trains one batch per iteration; "
                                             f"microbatches must be 1, got {p.microbatches}")

    def check_capture(self, workers: int, preset: Preset) -> None:
        if self.placement != "dedicated":
            raise ValueError("a capture runs parameter servers as ranks of their own: use placement: dedicated")


GossipGraph = Literal["ring", "exponential", "random"]


class Gossip(AggregationKind):
    """Decentralized parallel SGD (D-PSGD, Lian et al., NeurIPS'17; the exponential graph of SGP,
    Assran et al., ICML'19): no all-reduce and no server. After its backward pass each worker
    sends its parameters (their full size in the job's precision) to `peers` neighbours of the
    graph, receives the parameters of the `peers` workers that send to it, and averages them with
    its own in its update step: `peers` x the parameter bytes leave every worker per iteration.

    Graphs (each iteration's receivers of a rank are known when the job is compiled, so every send
    has its receive): `ring`, the `peers` nearest ranks around the ring (r+1, r-1, r+2, r-2, ...:
    `peers: 2` is D-PSGD's ring, r +- 1); `exponential`, the ranks 2^0, 2^1, 2^2, ... hops ahead
    (SGP): `peers` of them per iteration in turn (`peers: 1`: one per iteration, 1 hop, then 2, then
    4, ...; as many as there are powers of two below dp: all of them every iteration), received
    from as many hops behind; `random`, the ring's neighbours on the ranks in a random order drawn
    anew every iteration from `seed` (every rank still sends and receives `peers` messages).
    """

    noun: ClassVar[str] = "gossip"
    implied_by: ClassVar[tuple[str, ...]] = ("graph", "peers", "seed")
    bounded_staleness: ClassVar[bool] = True

    kind: Literal["gossip"] = "gossip"
    graph: GossipGraph = Field(
        default="ring",
        description="ring (the peers nearest ranks: r+1, r-1, r+2, ...), exponential (ranks 2^0, 2^1, ... hops "
        "ahead, peers of them per iteration in turn) or random (the ring's neighbours on a random order of "
        "the ranks, drawn per iteration from seed)",
    )
    peers: int = Field(default=1, ge=1, description="neighbours each worker sends its parameters to per iteration "
                                                    "(and receives from)")
    mode: Literal["sync", "async"] = Field(
        default="sync",
        description="sync: the next forward waits for this iteration's parameters from every neighbour; async: "
        "it does not (AD-PSGD: a worker averages with what has arrived)",
    )
    seed: int = Field(default=0, ge=0, description="the seed of the random graph's orders")

    @property
    def synchronous(self) -> bool:
        return self.mode == "sync"

    def check(self, parallelism: Parallelism) -> None:
        p = parallelism
        if not p.is_plain_data_parallel:
            raise FieldError("aggregation", "gossip averages whole replicas: it needs plain data parallelism (tp = "
                                            "pp = cp = ep = 1, sharding none, one microbatch, no accumulation)")
        if p.dp < 2:
            raise FieldError("dp", f"gossip needs dp >= 2 workers to have neighbours, got dp = {p.dp}")
        most = gossip_peers_max(self.graph, p.dp)
        if self.peers > most:
            what = (f"{most} powers of two below dp = {p.dp}" if self.graph == "exponential"
                    else f"{most} other workers (dp = {p.dp})")
            raise FieldError("aggregation.peers", f"the {self.graph} graph has at most {most} distinct peers per "
                                                  f"worker ({what}); got peers = {self.peers}")
        if p.staleness and self.mode == "async":
            raise FieldError("staleness", "async gossip already starts the next forward without its neighbours' "
                                          "parameters; staleness bounds a sync job's wait: use mode: sync or "
                                          "staleness: 0")


def gossip_peers_max(graph: str, workers: int) -> int:
    """The most distinct peers a worker of `graph` has among `workers` (exponential: the powers of
    two below `workers`; ring and random: every other worker)."""
    if graph == "exponential":
        return max(0, (workers - 1).bit_length())
    return workers - 1


class InNetwork(AggregationKind):
    """In-network aggregation (SwitchML, Sapio et al., NSDI'21; ATP, Lao et al., NSDI'21): the
    switches add the gradients. Each worker streams every gradient bucket (DDP's buckets of
    `parallelism.bucket_size_mib`) in chunks of `chunk_kib` to its first switch (its ToR; a star's
    or a switch's only switch); a switch adds the chunks of its workers and sends one partial sum
    up the job's tree (to one spine, or one aggregation switch and one core, chosen by the job's
    ECMP hash), the top switch sends the sum down and every switch multicasts it to its workers:
    each worker's link carries the gradient once up and once down. A switch holds at most `slots`
    chunks at once (SwitchML's pool), shared by every job that uses it: a chunk takes one slot in
    every switch of its job's tree before its workers send it and frees them once its sum has
    reached every worker; a chunk that finds no free slot waits. flowsim only (ASTRA-SIM has no
    switches that compute).
    """

    noun: ClassVar[str] = "in-network aggregation"
    implied_by: ClassVar[tuple[str, ...]] = ("slots", "chunk_kib")
    astra_sim: ClassVar[bool] = False
    ddp_buckets: ClassVar[bool] = True
    bounded_staleness: ClassVar[bool] = True
    topologies: ClassVar[tuple[str, ...] | None] = ("switch", "star", "leaf_spine", "clos3", "clos_csv")

    kind: Literal["in_network"] = "in_network"
    slots: int = Field(default=64, ge=1, description="chunks a switch holds at once (its aggregation pool), shared "
                                                     "by the jobs that use the switch")
    chunk_kib: float = Field(default=256.0, gt=0, description="the chunk a worker streams to its switch, KiB (the "
                                                              "last chunk of a bucket may be smaller)")

    @property
    def network_settings(self) -> dict[str, Any]:
        return {"slots": self.slots}

    @property
    def chunk_bytes(self) -> int:
        """The chunk size in bytes (at least 1)."""
        return max(1, int(self.chunk_kib * 1024))

    def check(self, parallelism: Parallelism) -> None:
        p = parallelism
        if not p.is_plain_data_parallel:
            raise FieldError("aggregation", "in-network aggregation sums whole gradients: it needs plain data "
                                            "parallelism (tp = pp = cp = ep = 1, sharding none, one microbatch, no "
                                            "accumulation)")
        if p.dp < 2:
            raise FieldError("dp", f"in-network aggregation needs dp >= 2 workers, got dp = {p.dp}")


#: Every aggregation kind; the first is the default (and what a dict without `kind` names unless
#: it holds a key of another kind's `implied_by`).
Aggregation = Annotated[AllReduce | ParameterServer | Gossip | InNetwork, Field(discriminator="kind")]

#: kind -> its class, in the union's order: the one table of aggregation kinds in the spec.
AGGREGATIONS: dict[str, type[AggregationKind]] = {
    get_args(m.model_fields["kind"].annotation)[0]: m for m in get_args(get_args(Aggregation)[0])}


def tag_aggregation(value: Any) -> Any:
    """An aggregation dict without `kind` gets the kind its keys imply (`implied_by`; of two, the
    first that has every key given: `{mode: async}` is a parameter server, `{peers: 2, mode: async}`
    gossip), else the default kind; anything else is returned as it is."""
    if not isinstance(value, dict) or "kind" in value:
        return value
    implied = [k for k, m in AGGREGATIONS.items() if any(key in value for key in m.implied_by)]
    kind = next((k for k in implied if set(value) <= set(AGGREGATIONS[k].model_fields)),
                next(iter(implied), next(iter(AGGREGATIONS))))
    return {"kind": kind, **value}


def extra_ranks_of(value: Any) -> int:
    """The extra ranks of an aggregation not validated yet (a dict, short forms allowed, or a
    kind): 0 when it is not valid (its own error is reported when the spec is validated)."""
    if isinstance(value, AggregationKind):
        return value.extra_ranks
    value = tag_aggregation({} if value is None else value)
    model = AGGREGATIONS.get(str(value.get("kind"))) if isinstance(value, dict) else None
    if model is None:
        return 0
    try:
        return model.model_validate(value).extra_ranks
    except ValidationError:
        return 0
