"""Parallelism specs: how the model and the batch are split over ranks, and how gradients meet."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from simstudy.spec.aggregation import (
    AGGREGATIONS,
    Aggregation,
    AggregationKind,
    AllReduce,
    AllReduceAlgorithm,
    Gossip,
    InNetwork,
    ParameterServer,
    extra_ranks_of,
    tag_aggregation,
)
from simstudy.spec.base import FieldError, Spec
from simstudy.spec.framework import FrameworkSpec, PyTorchDDP, framework_value

__all__ = [
    "AGGREGATIONS",
    "NEW_DEFAULTS",
    "Aggregation",
    "AggregationKind",
    "AllReduce",
    "AllReduceAlgorithm",
    "Gossip",
    "InNetwork",
    "Parallelism",
    "ParameterServer",
    "Zero",
    "dp_auto",
    "fill_dp",
]

class Zero(Spec):
    """How a ZeRO-1 distributed optimizer (`sharding: zero1`) buckets its messages, as Megatron-LM's
    distributed optimizer and DeepSpeed's ZeRO stage 1 name their knobs. Gradients are bucketed in
    backward order (a bucket closes before the layer that would take it over `reduce_bucket_elements`:
    DeepSpeed's ipg bucket) and each bucket is reduced over the data-parallel group as soon as its
    last gradient is ready (`parallelism.overlap`: DeepSpeed's overlap_comm, Megatron's
    overlap_grad_reduce) or after the whole backward; after the optimizer step on the rank's shard, the
    updated parameters are all-gathered in `max(1, shard x dp // allgather_bucket_elements)` pieces
    (DeepSpeed's all_gather_dp_groups)."""

    gradients: Literal["reduce_scatter", "allreduce"] = Field(
        default="reduce_scatter",
        description="reduce_scatter: each rank receives only its shard of every bucket (Megatron's distributed "
        "optimizer, the ZeRO paper); allreduce: every bucket all-reduced and each rank keeps its shard "
        "(DeepSpeed ZeRO-1/2 with use_multi_rank_bucket_allreduce, its default)",
    )
    reduce_bucket_elements: int = Field(
        default=500_000_000, ge=1,
        description="gradient bucket size in elements (DeepSpeed's reduce_bucket_size, default 5e8; Megatron's "
        "bucket_size)",
    )
    allgather_bucket_elements: int = Field(
        default=500_000_000, ge=1,
        description="parameter all-gather size in elements (DeepSpeed's allgather_bucket_size, default 5e8)",
    )


#: Parallelism fields added after run keys were first written: left out of the canonical JSON at
#: their defaults, so that earlier scenarios keep their sweep run keys.
NEW_DEFAULTS: dict[str, Any] = {"cp": 1, "ep": 1, "ep_a2a": "collective", "sp": False, "virtual_stages": 1,
                                "grad_accumulation_steps": 1, "zero": None, "staleness": 0}


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
    zero: Zero | None = Field(
        default=None,
        description="the ZeRO-1 distributed optimizer's buckets (with sharding zero1): gradients (reduce_scatter "
        "or allreduce), reduce_bucket_elements, allgather_bucket_elements; none: one reduce-scatter and one "
        "all-gather per DDP bucket of bucket_size_mib",
    )
    cp: int = Field(
        default=1, ge=1,
        description="context-parallel degree: every sequence's tokens split over cp ranks, whose attention "
        "layers pass key/value blocks around their ring point to point (ring attention); gradients are "
        "reduced over dp x cp ranks",
    )
    ep: int = Field(
        default=1, ge=1,
        description="expert-parallel degree: the experts of every mixture-of-experts layer sharded over ep "
        "ranks of the data-parallel group, tokens sent to their experts and back with an all-to-all in forward "
        "and in backward; ep divides dp",
    )
    ep_a2a: Literal["collective", "pairwise"] = Field(
        default="collective",
        description="how expert parallelism's all-to-alls travel: collective (one all-to-all node: ASTRA-SIM runs "
        "its direct algorithm over every rank, and within a smaller group relays every block around a ring, "
        "(n-1)/2 x the data per rank) or pairwise (point-to-point sends of each peer's share, the next peer "
        "first: NCCL's all-to-all as Megatron-LM and DeepSpeed call it, (n-1)/n x the data per rank)",
    )
    sp: bool = Field(
        default=False,
        description="Megatron sequence parallelism on the tensor-parallel group (tp > 1): each layer's all-reduce "
        "becomes a reduce-scatter after it and an all-gather before the next, activations between them and "
        "between pipeline stages are 1/tp of the sequence",
    )
    virtual_stages: int = Field(
        default=1, ge=1,
        description="model chunks per pipeline rank (Megatron's interleaved 1F1B, virtual pipeline stages): the "
        "layers are cut into pp x virtual_stages stages, rank s holding stages s, s + pp, ...; needs schedule "
        "1f1b and microbatches a multiple of pp",
    )
    grad_accumulation_steps: int = Field(
        default=1, ge=1,
        description="accumulation steps per iteration (DeepSpeed's gradient_accumulation_steps): each runs the "
        "schedule of `microbatches` microbatches, gradients are reduced over the data-parallel group after the "
        "last only; batch_size_per_worker = steps x microbatches x micro-batch size",
    )
    staleness: int = Field(
        default=0, ge=0,
        description="bounded staleness s (stale-synchronous parallel, Ho et al., NIPS'13; SAPipe): iteration i+1's "
        "forward may start before iteration i's gradient synchronisation (all-reduces or gossip receives, and "
        "the update after them) has finished, as long as it finishes before the forward of iteration i+s+1; 0: "
        "every forward waits for the synchronisation of the iteration before. Data parallelism with "
        "aggregation allreduce or gossip (sync)",
    )

    @model_serializer(mode="wrap")
    def _drop_default_framework(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave `framework` out when it is the default pytorch_ddp, so that scenarios written before
        presets existed keep their canonical JSON (and their sweep run keys)."""
        data = handler(self)
        if isinstance(data, dict):
            for key, default in NEW_DEFAULTS.items():
                if key in data and data[key] == default:
                    del data[key]
            if data.get("framework") == {"name": "pytorch_ddp"}:
                del data["framework"]
            elif not self.aggregation.ddp_buckets:
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
        """`aggregation` without `kind`: the kind its keys imply (`{servers: 2}`: a parameter server),
        else an all-reduce (so `{algorithm: direct}` works); see `tag_aggregation`."""
        if isinstance(data, dict) and isinstance(data.get("aggregation"), dict):
            data = {**data, "aggregation": tag_aggregation(data["aggregation"])}
        return data

    @property
    def compute_ranks(self) -> int:
        """Ranks that hold a model shard and compute: dp * tp * pp * cp."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def product(self) -> str:
        """How the compute ranks multiply out, for messages: `dp*tp*pp = 2*4*2` (cp too when > 1)."""
        names = ("dp", "tp", "pp", "cp") if self.cp > 1 else ("dp", "tp", "pp")
        return f"{'*'.join(names)} = {'*'.join(str(getattr(self, n)) for n in names)}"

    @property
    def microbatches_per_iteration(self) -> int:
        """Microbatches of one iteration over every accumulation step."""
        return self.microbatches * self.grad_accumulation_steps

    @property
    def server_ranks(self) -> int:
        """Extra ranks used only as servers (a parameter server's dedicated placement)."""
        return self.aggregation.extra_ranks

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
        return (self.tp == 1 and self.pp == 1 and self.sharding == "none" and self.microbatches == 1
                and self.cp == 1 and self.ep == 1 and self.grad_accumulation_steps == 1)

    def _check_llm(self) -> None:
        """What the LLM dimensions need of each other (their fit to the model is checked at compile time)."""
        if self.sp and self.tp == 1:
            raise FieldError("sp", "sequence parallelism splits the tensor-parallel group's activations: it needs "
                                   "tp > 1")
        if self.dp % self.ep:
            raise FieldError("ep", f"expert parallelism shards experts over ranks of the data-parallel group: ep = "
                                   f"{self.ep} must divide dp = {self.dp}")
        if self.ep > 1 and self.sharding in ("zero3", "fsdp"):
            raise FieldError("ep", f"expert parallelism with sharding {self.sharding} is not modelled; use sharding "
                                   "none or zero1")
        if self.zero is not None and self.sharding != "zero1":
            raise FieldError("zero", f"zero sets the buckets of the ZeRO-1 distributed optimizer; it needs sharding "
                                     f"zero1, not {self.sharding}")
        v = self.virtual_stages
        if v > 1:
            if self.pp == 1:
                raise FieldError("virtual_stages", "interleaved virtual stages cut the pipeline further: they need "
                                                   "pp > 1")
            if self.schedule != "1f1b":
                raise FieldError("virtual_stages", "virtual stages run Megatron's interleaved 1F1B schedule: use "
                                                   "schedule: 1f1b")
            if self.microbatches % self.pp:
                raise FieldError("microbatches", f"the interleaved schedule needs microbatches a multiple of pp = "
                                                 f"{self.pp} (as Megatron-LM does), got {self.microbatches}")

    def _check_staleness(self) -> None:
        """Bounded staleness is compiled for plain data parallelism by the kinds that say so."""
        if self.staleness and not (self.aggregation.bounded_staleness and self.is_plain_data_parallel):
            takes = " or ".join(k for k, m in AGGREGATIONS.items() if m.bounded_staleness)
            got = (f"aggregation {self.aggregation.kind}" if not self.aggregation.bounded_staleness
                   else self.product if self.tp * self.pp * self.cp > 1 else "more than plain data parallelism")
            raise FieldError("staleness", f"staleness = {self.staleness} is modelled for plain data parallelism (tp = "
                                          f"pp = cp = ep = 1, sharding none, one microbatch, no accumulation) with "
                                          f"aggregation {takes}; got {got} (use staleness: 0)")

    def _check_framework(self) -> None:
        """What the framework preset needs of the rest of the parallelism (the preset says)."""
        self.framework.check(self)

    @model_validator(mode="after")
    def _check(self) -> Parallelism:
        self.aggregation.check(self)
        self._check_staleness()
        self._check_framework()
        self._check_llm()
        if self.schedule == "1f1b" and self.pp > 1 and self.microbatches < self.pp:
            raise FieldError(
                "microbatches",
                f"the 1f1b schedule needs at least as many microbatches as pipeline stages "
                f"(pp = {self.pp}), got {self.microbatches}; raise microbatches or use schedule: gpipe",
            )
        return self


def dp_auto(parallelism: Any) -> bool:
    """A parallelism as given (a dict or None) leaves `dp` to `fill_dp`: it is left out or `auto`."""
    return parallelism is None or (isinstance(parallelism, dict) and parallelism.get("dp", "auto") == "auto")


def fill_dp(parallelism: Any, ranks: int) -> Any:
    """A parallelism (as given, before validation) whose `dp` is left out or `auto` takes the
    `ranks` left after the aggregation's extra ranks (dedicated servers), divided by tp x pp x cp:
    the one rule of `dp: auto`, for a scenario's topology and a cluster job's `gpus`. Anything
    else is returned as it is; when the ranks do not divide, dp stays out (and its error says why)."""
    if not dp_auto(parallelism):
        return parallelism
    par = {k: v for k, v in (parallelism or {}).items() if k != "dp"}
    split = [par.get(name, 1) for name in ("tp", "pp", "cp")]
    if all(isinstance(n, int) and n > 0 for n in split):
        model = split[0] * split[1] * split[2]
        rest = ranks - extra_ranks_of(par.get("aggregation"))
        if rest > 0 and rest % model == 0:
            par["dp"] = rest // model
    return par
