"""Framework presets (`parallelism.framework`): how a training framework turns gradients into
messages. Each preset names its framework's defaults; every knob can be set in the spec.

```yaml
parallelism:
  dp: 8
  framework: horovod                                   # a name: the framework's defaults
  framework: {name: horovod, fusion_buffer_mib: 64, cycle_time_ms: 5}
  framework: {name: tensorflow_mwms, bytes_per_pack: 33554432}
  framework: {name: kungfu, graph: clique}
```

The defaults come from the frameworks' own code and docs; `simstudy.compiler.frameworks` cites
them next to the rule each preset compiles. A knob of another preset, or an unknown framework,
is a spec error that names the field and the knobs that apply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args

from pydantic import Field

from simstudy.spec.base import FieldError, Spec

if TYPE_CHECKING:
    from simstudy.spec.parallelism import Parallelism


class Preset(Spec):
    """What every framework preset says about itself, beyond its knobs: one class per preset holds
    everything the spec, capture and validation layers need to know of it (its compiler is its entry
    in `simstudy.compiler.frameworks.PRESETS`).

    * `captured_by`: the `simstudy capture` framework whose jobs this preset simulates (None: none);
    * `pull_requests`: the framework's transport pulls every chunk with a request from the receiver
      on the receiver's own connection (TensorFlow's gRPC RecvBuf), which `validate` adds to the
      simulated table before comparing connections;
    * `hybrids`: the preset compiles tensor, pipeline and sharded parallelism, not only data parallel;
    * `aggregations`: the aggregation kinds it compiles (`parallelism.aggregation.kind`; None: every
      kind, its all-reduce as the preset says and any other kind as that kind's compile step does);
    * `captured_aggregations`: the aggregation kinds its captured framework's workers run;
    * `captured_as`, `captured_all_reduce`: what its captured framework runs and its all-reduce, in
      messages;
    * `ring_only`: why the preset's all-reduce is a ring whatever `aggregation.algorithm` says (None:
      any algorithm);
    * `worker_options(port)`: what a captured job's workers get of the preset's knobs, under the key
      of its captured framework in the worker config.
    """

    captured_by: ClassVar[str | None] = None
    pull_requests: ClassVar[bool] = False
    hybrids: ClassVar[bool] = False
    aggregations: ClassVar[tuple[str, ...] | None] = ("allreduce",)
    captured_aggregations: ClassVar[tuple[str, ...]] = ("allreduce",)
    captured_as: ClassVar[str] = ""
    captured_all_reduce: ClassVar[str] = ""
    ring_only: ClassVar[str | None] = None
    #: the knob that sizes gradient messages is `parallelism.bucket_size_mib` (DDP's), not one of the preset's
    ddp_buckets: ClassVar[bool] = False

    def worker_options(self, port: int) -> dict[str, Any]:
        """Options of a captured job's worker, from this preset's knobs ({} when it has none)."""
        return {}

    @classmethod
    def compiles(cls, kind: str) -> bool:
        """The preset compiles aggregation kind `kind`."""
        return cls.aggregations is None or kind in cls.aggregations

    def check(self, parallelism: Parallelism) -> None:
        """What this preset needs of the rest of the parallelism (a `FieldError` when it is not met)."""
        if not self.hybrids and not parallelism.is_plain_data_parallel:
            raise FieldError("framework", f"the {self.name} preset models data parallelism only (tp = pp = 1, "
                                          "sharding none, one microbatch); use framework: pytorch_ddp for hybrids")
        agg = parallelism.aggregation
        if not self.compiles(agg.kind):
            others = " or ".join(n for n, m in PRESETS.items() if m.compiles(agg.kind))
            raise FieldError("aggregation", f"{self.name} has no {agg.noun}; use aggregation kind "
                                            f"{' or '.join(self.aggregations or ())} ({agg.noun}: {others})")
        if not self.ddp_buckets and not agg.ddp_buckets and "bucket_size_mib" in parallelism.model_fields_set:
            raise FieldError("bucket_size_mib", f"bucket_size_mib is PyTorch DDP's bucket cap; it does not apply "
                                                f"to framework {self.name} (see its knobs under framework)")
        algorithm = agg.all_reduce_algorithm
        if self.ring_only is not None and algorithm not in (None, "ring"):
            raise FieldError("aggregation.algorithm", self.ring_only.format(algorithm=algorithm, preset=self))

    name: str


class PyTorchDDP(Preset):
    """PyTorch DistributedDataParallel: gradient buckets of `parallelism.bucket_size_mib` (DDP's
    bucket_cap_mb, 25 MiB) in reverse parameter order, a 1 MiB first bucket with the default cap,
    each bucket all-reduced as soon as its last gradient is ready (overlapped with backward)."""

    captured_by: ClassVar[str | None] = "pytorch"
    captured_aggregations: ClassVar[tuple[str, ...]] = ("allreduce", "parameter_server")
    captured_as: ClassVar[str] = "torch.distributed over gloo (DDP or parameter servers)"
    captured_all_reduce: ClassVar[str] = "gloo's all-reduce"
    hybrids: ClassVar[bool] = True
    aggregations: ClassVar[tuple[str, ...] | None] = None
    ddp_buckets: ClassVar[bool] = True

    name: Literal["pytorch_ddp"] = Field(description="the preset (required, so that it is always written out)")


class Horovod(Preset):
    """Horovod tensor fusion: every `cycle_time_ms` the background thread fuses the gradients that
    became ready into buffers of at most `fusion_buffer_mib` and all-reduces each (ring) at the
    cycle's end."""

    captured_by: ClassVar[str | None] = "horovod"
    captured_as: ClassVar[str] = "Horovod's all-reduce over Gloo"
    captured_all_reduce: ClassVar[str] = "Horovod's Gloo all-reduce"

    def worker_options(self, port: int) -> dict[str, Any]:
        """Horovod's environment knobs (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME) and its
        rendezvous port."""
        return {"port": port, "fusion_threshold_bytes": int(self.fusion_buffer_mib * 1024 * 1024),
                "cycle_time_ms": self.cycle_time_ms}

    name: Literal["horovod"] = Field(description="the preset (required, so that it is always written out)")
    fusion_buffer_mib: float = Field(
        default=128.0, ge=0,
        description="HOROVOD_FUSION_THRESHOLD in MiB: the largest fused all-reduce (0: no fusion, one "
        "all-reduce per gradient). Horovod's default since 0.21 is 128 MiB (its docs still say 64)",
    )
    cycle_time_ms: float = Field(
        default=1.0, ge=0,
        description="HOROVOD_CYCLE_TIME in ms: the background thread's cycle; gradients ready within one "
        "cycle are fused and leave at the cycle's end (a wait in the ET); 0: no cycle, every gradient leaves "
        "alone when it is ready. Horovod's default since 0.21 is 1 ms (horovod/common/operations.cc "
        "SetCycleTimeMs(1); its docs still say 5)",
    )


class TensorFlowMWMS(Preset):
    """TensorFlow MultiWorkerMirroredStrategy: gradients concatenated into packs of
    `bytes_per_pack` (0: one pack of all of them) in reverse variable order, each pack all-reduced
    with RingReduce once all of its gradients are ready."""

    captured_by: ClassVar[str | None] = "tensorflow"
    captured_as: ClassVar[str] = "MultiWorkerMirroredStrategy (collective all-reduce)"
    captured_all_reduce: ClassVar[str] = "TensorFlow's CPU all-reduce (RingReduce)"
    pull_requests: ClassVar[bool] = True
    aggregations: ClassVar[tuple[str, ...] | None] = ("allreduce", "parameter_server")  # TF's ParameterServerStrategy
    ring_only: ClassVar[str | None] = ("TensorFlow's CPU all-reduce is RingReduce (implementation "
                                       "{preset.implementation}): use ring, not {algorithm}")

    def worker_options(self, port: int) -> dict[str, Any]:
        """CommunicationOptions of the job's MultiWorkerMirroredStrategy."""
        return {"bytes_per_pack": self.bytes_per_pack, "implementation": self.implementation}

    name: Literal["tensorflow_mwms"] = Field(description="the preset (required, so that it is always written out)")
    bytes_per_pack: int = Field(
        default=0, ge=0,
        description="CommunicationOptions.bytes_per_pack: a pack closes once it holds more than this many "
        "bytes; 0 (TensorFlow's default) puts every gradient in one pack",
    )
    implementation: Literal["auto", "ring"] = Field(
        default="auto",
        description="CommunicationOptions.implementation: auto (TensorFlow's default) is RingReduce on CPU, "
        "as ring is; NCCL needs GPUs",
    )


KungFuGraph = Literal["star", "tree", "binary_tree_star", "clique"]


class KungFu(Preset):
    """KungFu: every gradient tensor all-reduced on its own, in chunks of `chunk_kib`, each chunk
    reduced up and broadcast down the edges of the named graph as point-to-point messages."""

    ring_only: ClassVar[str | None] = ("kungfu all-reduces along framework.graph (point-to-point reduce and "
                                       "broadcast), not a collective algorithm ({algorithm})")

    name: Literal["kungfu"] = Field(description="the preset (required, so that it is always written out)")
    graph: KungFuGraph = Field(
        default="binary_tree_star",
        description="KUNGFU_ALLREDUCE_STRATEGY: star (rank 0 is the root), tree (a star in every host, "
        "the hosts' first ranks a star under rank 0), binary_tree_star (a star in every host, the hosts' "
        "first ranks a binary tree; KungFu's default across hosts) or clique (chunk i rooted at rank i mod N)",
    )
    peers_per_host: int = Field(
        default=1, ge=1, description="workers per host (consecutive ranks); KungFu's graphs start from a "
        "star among the workers of one host",
    )
    chunk_kib: int = Field(default=1024, ge=1, description="KungFu splits every all-reduce into chunks of "
                                                            "this size (1 MiB)")


FrameworkSpec = Annotated[PyTorchDDP | Horovod | TensorFlowMWMS | KungFu, Field(discriminator="name")]

#: name -> preset model, in the union's order: the one table of framework presets in the spec.
PRESETS: dict[str, type[Preset]] = {get_args(m.model_fields["name"].annotation)[0]: m
                                    for m in get_args(get_args(FrameworkSpec)[0])}
#: capture framework -> the preset that simulates its jobs
CAPTURED: dict[str, str] = {m.captured_by: name for name, m in PRESETS.items() if m.captured_by is not None}


def framework_value(value: Any) -> Any:
    """A framework given as a name becomes {name: ...}; names and knobs are checked against the
    presets, so that the error names the knob and what the chosen preset accepts."""
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        return value
    name = value.get("name")
    if name not in PRESETS:
        raise FieldError("framework", f"unknown framework {name!r}; expected one of {', '.join(PRESETS)}")
    knobs = [k for k in PRESETS[name].model_fields if k != "name"]
    for key in value:
        if key != "name" and key not in knobs:
            owners = [n for n, m in PRESETS.items() if key in m.model_fields]
            where = f" (a knob of {', '.join(owners)})" if owners else ""
            raise FieldError(f"framework.{key}", f"{key!r} does not apply to framework {name}{where}; "
                                                 f"{name}'s knobs: {', '.join(knobs) or 'none'}")
    return value
