"""Parallelism specs: how the model and the batch are split over ranks, and how gradients meet."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from simstudy.spec.base import FieldError, Spec
from simstudy.spec.framework import FrameworkSpec, PyTorchDDP, framework_value

AllReduceAlgorithm = Literal["ring", "direct", "halving_doubling", "double_binary_tree"]


class AllReduce(Spec):
    """Gradients are summed with an all-reduce collective among the data-parallel ranks."""

    kind: Literal["allreduce"] = "allreduce"
    algorithm: AllReduceAlgorithm = Field(
        default="ring",
        description="collective algorithm: ring, direct, halving_doubling or double_binary_tree, for "
        "collectives of every rank; a smaller group's collectives (with tp or pp > 1) always run as a "
        "ring over the group, as ASTRA-SIM runs communicator groups",
    )


class ParameterServer(Spec):
    """Workers push gradients to parameter servers and pull updated parameters back.

    Parameters are sharded evenly over the servers. `colocated` servers run on the first
    `servers` worker ranks; `dedicated` servers are extra ranks after the workers.
    """

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


Aggregation = Annotated[AllReduce | ParameterServer, Field(discriminator="kind")]


class Parallelism(Spec):
    """Degrees of data (dp), tensor (tp) and pipeline (pp) parallelism and their options."""

    dp: int = Field(default=1, ge=1, description="data-parallel degree (model replicas)")
    tp: int = Field(default=1, ge=1, description="tensor/model-parallel degree")
    pp: int = Field(default=1, ge=1, description="pipeline-parallel degree (stages)")
    aggregation: Aggregation = Field(
        default_factory=AllReduce, description="how data-parallel replicas combine gradients"
    )
    framework: FrameworkSpec = Field(
        default_factory=lambda: PyTorchDDP(name="pytorch_ddp"),
        description="the framework preset that turns gradients into messages: pytorch_ddp (default), horovod, "
        "tensorflow_mwms or kungfu; a name, or {name: ..., knob: value} (see simstudy.spec.framework)",
    )
    bucket_size_mib: float = Field(
        default=25.0,
        gt=0,
        description="gradient bucket size in MiB (PyTorch DDP's default bucket_cap_mb is 25); with the "
        "default, the first bucket closes at 1 MiB as in DDP, otherwise at this size too",
    )
    overlap: bool = Field(
        default=True,
        description="start each bucket's communication as soon as its gradients are ready "
        "(overlap with backward); false waits for the whole backward pass",
    )
    microbatches: int = Field(
        default=1,
        ge=1,
        description="microbatches per iteration: the pipeline's microbatches (with pp = 1, gradient "
        "accumulation); each is batch_size_per_worker / microbatches samples",
    )
    schedule: Literal["gpipe", "1f1b"] = Field(
        default="1f1b",
        description="pipeline schedule: gpipe (all forwards, then all backwards) or 1f1b "
        "(PipeDream-Flush: warm-up forwards, then one forward one backward)",
    )
    sharding: Literal["none", "zero1", "zero3", "fsdp"] = Field(
        default="none",
        description="data-parallel state sharding: none (all-reduce gradients), zero1 (reduce-scatter "
        "gradients, all-gather updated parameters), zero3 or fsdp (all-gather each layer's parameters "
        "before its forward and backward, reduce-scatter its gradients after backward)",
    )

    @model_serializer(mode="wrap")
    def _drop_default_framework(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave `framework` out when it is the default pytorch_ddp, so that scenarios written before
        presets existed keep their canonical JSON (and their sweep run keys)."""
        data = handler(self)
        if isinstance(data, dict):
            if data.get("framework") == {"name": "pytorch_ddp"}:
                del data["framework"]
            elif isinstance(self.aggregation, AllReduce):
                data.pop("bucket_size_mib", None)  # DDP's knob: another preset's dump leaves it out
        return data

    @model_validator(mode="before")
    @classmethod
    def _framework_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "framework" in data:
            data = {**data, "framework": framework_value(data["framework"])}
        return data

    @model_validator(mode="before")
    @classmethod
    def _aggregation_kind(cls, data: Any) -> Any:
        """`aggregation` without `kind`: a parameter server if it names servers, placement or mode,
        else an all-reduce (so `{algorithm: direct}` works)."""
        agg = data.get("aggregation") if isinstance(data, dict) else None
        if isinstance(agg, dict) and "kind" not in agg:
            ps = any(k in agg for k in ("servers", "placement", "mode"))
            data = {**data, "aggregation": {"kind": "parameter_server" if ps else "allreduce", **agg}}
        return data

    @property
    def compute_ranks(self) -> int:
        """Ranks that hold a model shard and compute: dp * tp * pp."""
        return self.dp * self.tp * self.pp

    @property
    def server_ranks(self) -> int:
        """Extra ranks used only as parameter servers (dedicated placement)."""
        agg = self.aggregation
        if isinstance(agg, ParameterServer) and agg.placement == "dedicated":
            return agg.servers
        return 0

    @property
    def total_ranks(self) -> int:
        """Every rank of the job: compute ranks plus dedicated servers."""
        return self.compute_ranks + self.server_ranks

    @property
    def bucket_size_bytes(self) -> int:
        """Gradient bucket size in bytes."""
        return int(self.bucket_size_mib * 1024 * 1024)

    @property
    def is_plain_data_parallel(self) -> bool:
        """Only data parallelism: no model split, no sharding, one microbatch."""
        return self.tp == 1 and self.pp == 1 and self.sharding == "none" and self.microbatches == 1

    def _check_framework(self) -> None:
        """What the framework preset needs of the rest of the parallelism (the preset says)."""
        self.framework.check(self)

    @model_validator(mode="after")
    def _check(self) -> Parallelism:
        agg = self.aggregation
        if isinstance(agg, ParameterServer):
            if self.tp != 1 or self.pp != 1:
                field = "tp" if self.tp != 1 else "pp"
                raise FieldError(field, f"a parameter server needs tp = 1 and pp = 1 (pure data parallel), "
                                        f"got {field} = {getattr(self, field)}")
            if agg.placement == "colocated" and agg.servers > self.dp:
                raise ValueError(
                    f"{agg.servers} colocated servers do not fit on dp = {self.dp} workers; "
                    "use placement: dedicated or fewer servers"
                )
            if self.sharding != "none":
                raise FieldError("sharding", f"sharding ({self.sharding!r}) applies to all-reduce data "
                                             "parallelism, not a parameter server; use sharding: none")
            if self.microbatches != 1:
                raise FieldError("microbatches", "a parameter server trains one batch per iteration; "
                                                 f"microbatches must be 1, got {self.microbatches}")
        self._check_framework()
        if self.schedule == "1f1b" and self.pp > 1 and self.microbatches < self.pp:
            raise FieldError(
                "microbatches",
                f"the 1f1b schedule needs at least as many microbatches as pipeline stages "
                f"(pp = {self.pp}), got {self.microbatches}; raise microbatches or use schedule: gpipe",
            )
        return self
