"""System specs: how fast ranks compute and how the collective layer chunks and schedules."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from simstudy.spec.base import FieldError, Spec


class LayerTime(Spec):
    """Measured compute time of one layer for one iteration (the whole local batch)."""

    forward_us: float = Field(ge=0, description="forward time, microseconds")
    backward_us: float = Field(ge=0, description="backward time (input + weight grads), microseconds")


class MeasuredCompute(Spec):
    """Measured compute times that replace the FLOPs-based estimate.

    Either per layer (by layer name; layers not listed fall back to FLOPs shares of the totals,
    or to the FLOPs estimate) or as per-iteration totals spread over layers by FLOPs share.
    """

    forward_us: float | None = Field(default=None, ge=0, description="forward time per iteration, us")
    backward_us: float | None = Field(default=None, ge=0, description="backward time per iteration, us")
    layers: dict[str, LayerTime] = Field(default_factory=dict, description="per-layer times by name")
    optimizer_us: float | None = Field(default=None, ge=0, description="optimizer step time, us")

    @model_validator(mode="after")
    def _check(self) -> MeasuredCompute:
        if not self.layers and self.forward_us is None and self.backward_us is None and self.optimizer_us is None:
            raise ValueError("give per-layer times (layers), totals (forward_us, backward_us) or optimizer_us")
        return self


#: A normal draw is clipped to at least this factor, so that no compute node's time goes to 0 or below.
MIN_FACTOR = 0.01


class Jitter(Spec):
    """Random compute time: every compute node of a rank in one iteration takes its time times one
    draw, the same draw for all of that rank's compute nodes in that iteration. A draw's mean is 1.

    Draws are numpy's `Generator` (PCG64) seeded from `(seed, rank, iteration)` (`correlated`:
    `(seed, iteration)`), so they do not depend on compile order or parallelism: the same seed gives
    the same draws on every machine and backend."""

    distribution: Literal["normal", "lognormal", "empirical"] = Field(
        default="normal",
        description=f"normal: 1 + cv x N(0, 1), clipped to at least {MIN_FACTOR} so that no time goes to 0 or "
        "below; lognormal: mean 1 and coefficient of variation cv; empirical: one of `samples` (uniformly, "
        "with replacement) over their mean",
    )
    cv: float | None = Field(
        default=None, ge=0,
        description="coefficient of variation (standard deviation / mean) of a draw (normal, lognormal); 0: no "
        "jitter; empirical draws take theirs from the samples",
    )
    samples: tuple[float, ...] = Field(
        default=(), description="empirical: measured compute times (any unit, e.g. per-step ms), each > 0"
    )
    seed: int = Field(default=0, ge=0, description="seed of the draws")
    correlated: bool = Field(
        default=False,
        description="false: an independent draw per rank and iteration; true: one draw per iteration shared by "
        "every rank (the whole job slows and speeds up together)",
    )

    @model_validator(mode="after")
    def _check(self) -> Jitter:
        if self.distribution == "empirical":
            if not self.samples:
                raise FieldError("samples", "an empirical distribution needs samples: measured compute times, e.g. "
                                            "[10.2, 9.8, 11.5]")
            if self.cv is not None:
                raise FieldError("cv", "an empirical distribution takes its spread from samples; leave cv out")
        else:
            if self.samples:
                raise FieldError("samples", f"samples are for distribution: empirical, not {self.distribution}")
            if self.cv is None:
                raise FieldError("cv", f"a {self.distribution} distribution needs cv (coefficient of variation "
                                       ">= 0, e.g. 0.1)")
        if any(not 0 < s < float("inf") for s in self.samples):
            raise FieldError("samples", f"expected finite times > 0, got {list(self.samples)}")
        return self


class Straggler(Spec):
    """Ranks whose compute is `slowdown` times slower in some iterations."""

    ranks: tuple[int, ...] = Field(min_length=1, description="the job's ranks that straggle (0-based)")
    slowdown: float = Field(gt=0, description="factor on their compute nodes' times (2: twice as long)")
    iterations: tuple[int, int] | None = Field(
        default=None,
        description="[first, last] iteration (0-based, inclusive, as the traffic table's `iteration`) in which "
        "they straggle; default every iteration",
    )

    @model_validator(mode="after")
    def _check(self) -> Straggler:
        if any(r < 0 for r in self.ranks):
            raise FieldError("ranks", f"expected ranks >= 0, got {list(self.ranks)}")
        if len(set(self.ranks)) != len(self.ranks):
            raise FieldError("ranks", f"a rank is listed twice: {list(self.ranks)}")
        if self.iterations is not None and not 0 <= self.iterations[0] <= self.iterations[1]:
            raise FieldError("iterations", f"expected [first, last] with 0 <= first <= last, got "
                                           f"{list(self.iterations)}")
        return self


class Variability(Spec):
    """How compute time varies between ranks and iterations: random jitter and stragglers.

    A compute node's time is its time times the rank's jitter draw for the iteration (times its
    `rank_jitter` draw, when given) times the slowdown of every straggler entry that names the rank
    and iteration, rounded half up to whole microseconds (the Chakra ET's unit) and at least 1 us
    for a node that had any time. It is written into the ET files, so every backend runs the same
    times."""

    jitter: Jitter | None = Field(default=None, description="random compute time per rank and iteration")
    rank_jitter: Jitter | None = Field(
        default=None,
        description="each rank's own variation on top of `jitter`: an independent draw per rank and iteration "
        "(correlated: false), multiplied with jitter's (e.g. a correlated jitter for what the whole job shares "
        "and this for how the ranks of one iteration differ)",
    )
    stragglers: tuple[Straggler, ...] = Field(default=(), description="ranks that compute slower")

    @model_validator(mode="after")
    def _check_rank_jitter(self) -> Variability:
        if self.rank_jitter is not None and self.rank_jitter.correlated:
            raise FieldError("rank_jitter.correlated", "rank_jitter is drawn per rank; for a draw the ranks share, "
                                                       "use jitter with correlated: true")
        return self

    @model_serializer(mode="wrap")
    def _drop_unset_rank_jitter(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave `rank_jitter` out when unset, so that variability written before it keeps its
        canonical JSON (and its sweep run keys)."""
        data = handler(self)
        if isinstance(data, dict) and data.get("rank_jitter", 0) is None:
            del data["rank_jitter"]
        return data

    def check_job(self, ranks: int, iterations: int) -> None:
        """Stragglers must name ranks and iterations of a job of `ranks` ranks and `iterations`
        iterations; a FieldError names the straggler's field (relative to this spec)."""
        for i, s in enumerate(self.stragglers):
            bad = [r for r in s.ranks if r >= ranks]
            if bad:
                raise FieldError(f"stragglers.{i}.ranks", f"rank {bad[0]} is not in the job: it has {ranks} ranks "
                                                          f"(0-{ranks - 1})")
            if s.iterations is not None and s.iterations[1] >= iterations:
                raise FieldError(f"stragglers.{i}.iterations",
                                 f"iteration {s.iterations[1]} is not run: training.iterations is {iterations} "
                                 f"(0-{iterations - 1})")


#: System fields added after scenarios were first keyed: left out of the canonical JSON when unset.
NEW_FIELDS = ("variability", "host_cores", "rank_hosts")


class System(Spec):
    """Compute rate and collective-layer settings (ASTRA-SIM system.json)."""

    peak_tflops: float = Field(default=100.0, gt=0, description="peak compute, TFLOPS")
    efficiency: float = Field(
        default=0.4, gt=0, le=1, description="achieved fraction of peak for model layers"
    )
    backward_factor: float = Field(
        default=2.0, gt=0, description="backward FLOPs as a multiple of forward FLOPs"
    )
    measured: MeasuredCompute | None = Field(
        default=None, description="measured compute times; overrides peak_tflops x efficiency"
    )
    collective_chunks: int = Field(
        default=1, ge=1, description="chunks each collective is split into (preferred-dataset-splits)"
    )
    active_chunks_per_dimension: int = Field(
        default=1, ge=1, description="chunks in flight per network dimension"
    )
    scheduling_policy: Literal["LIFO", "FIFO"] = Field(
        default="LIFO", description="order in which ready collectives are scheduled"
    )
    endpoint_delay_ns: int = Field(
        default=10, ge=1, description="per-message endpoint delay, ns (ASTRA-SIM aborts on 0)"
    )
    collective_optimization: Literal["baseline", "localBWAware"] = Field(
        default="baseline", description="ASTRA-SIM collective optimization"
    )
    local_mem_bw_gbps: float = Field(
        default=1600.0, gt=0, description="local memory bandwidth, GB/s (ASTRA-SIM local-mem-bw)"
    )
    variability: Variability | None = Field(
        default=None, description="compute jitter and stragglers (default: every rank computes alike, every iteration)"
    )
    host_cores: int | None = Field(
        default=None, ge=1,
        description="cores of every host, shared by the ranks on it: k ranks computing at once each run at "
        "min(1, host_cores / k) of their speed (processor sharing; backend flowsim only). Default: every rank "
        "computes on a device of its own",
    )
    rank_hosts: tuple[int, ...] | None = Field(
        default=None,
        description="with host_cores: the host of every rank (rank r on host rank_hosts[r]). Default: the "
        "topology's hosts (rank // gpus_per_host on leaf_spine, clos3 and clos_csv; elsewhere every rank a host "
        "of its own)",
    )

    @model_validator(mode="after")
    def _check_hosts(self) -> System:
        if self.rank_hosts is not None:
            if self.host_cores is None:
                raise FieldError("rank_hosts", "rank_hosts says which ranks share a host's cores; give host_cores "
                                               "(the cores of every host) too")
            if any(h < 0 for h in self.rank_hosts):
                raise FieldError("rank_hosts", f"expected host numbers >= 0, got {list(self.rank_hosts)}")
        return self

    @model_serializer(mode="wrap")
    def _drop_new_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave `variability`, `host_cores` and `rank_hosts` out when unset, so that scenarios
        written before them keep their canonical JSON (and their sweep run keys)."""
        data = handler(self)
        if isinstance(data, dict):
            for key in NEW_FIELDS:
                if data.get(key, 0) is None:
                    del data[key]
        return data



def check_hosts(system: System, ranks: int, prefix: str) -> None:
    """`system.rank_hosts` must name the host of each of the job's `ranks` ranks; a FieldError
    names the field below `prefix` (`system`)."""
    if system.rank_hosts is not None and len(system.rank_hosts) != ranks:
        raise FieldError(f"{prefix}.rank_hosts", f"expected the host of each of the {ranks} ranks, got "
                                                 f"{len(system.rank_hosts)} entries")


def check_variability(system: System, ranks: int, iterations: int, prefix: str) -> None:
    """`system.variability.check_job`, its FieldError naming the field below `prefix` (`system`)."""
    if system.variability is None:
        return
    try:
        system.variability.check_job(ranks, iterations)
    except FieldError as exc:
        raise FieldError(f"{prefix}.variability.{exc.field}", exc.message) from None
