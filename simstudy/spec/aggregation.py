"""Aggregation kinds (`parallelism.aggregation`): how data-parallel replicas combine gradients.

One class per kind, a member of the `Aggregation` union at the end of this module; `AGGREGATIONS`
(kind -> class) is derived from that union. A kind's class says everything the spec, capture and
validation layers need to know of it (see `AggregationKind`); its compile step is its entry in
`simstudy.compiler.aggregation.COMPILE`, which is checked complete against `AGGREGATIONS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args

from pydantic import Field, ValidationError

from simstudy.spec.base import FieldError, Spec
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
    * `check(parallelism)` and `check_capture(workers, preset)`: what it needs of the rest of the
      spec, as a `FieldError` (or `ValueError`) when that is not met.
    """

    noun: ClassVar[str]
    implied_by: ClassVar[tuple[str, ...]] = ()
    astra_sim: ClassVar[bool] = True
    capture_strategy: ClassVar[str | None] = None
    ddp_buckets: ClassVar[bool] = False
    lockstep_backward: ClassVar[bool] = False

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


class AllReduce(AggregationKind):
    """Gradients are summed with an all-reduce collective among the data-parallel ranks."""

    noun: ClassVar[str] = "all-reduce"
    capture_strategy: ClassVar[str | None] = "ddp"
    lockstep_backward: ClassVar[bool] = True

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


#: Every aggregation kind; the first is the default (and what a dict without `kind` names unless
#: it holds a key of another kind's `implied_by`).
Aggregation = Annotated[AllReduce | ParameterServer, Field(discriminator="kind")]

#: kind -> its class, in the union's order: the one table of aggregation kinds in the spec.
AGGREGATIONS: dict[str, type[AggregationKind]] = {
    get_args(m.model_fields["kind"].annotation)[0]: m for m in get_args(get_args(Aggregation)[0])}


def tag_aggregation(value: Any) -> Any:
    """An aggregation dict without `kind` gets the kind its keys imply (`implied_by`), else the
    default kind; anything else is returned as it is."""
    if not isinstance(value, dict) or "kind" in value:
        return value
    kind = next((k for k, m in AGGREGATIONS.items() if any(key in value for key in m.implied_by)),
                next(iter(AGGREGATIONS)))
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
