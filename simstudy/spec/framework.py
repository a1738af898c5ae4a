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

The defaults come from the frameworks' own code and docs; `simstudy.compile.frameworks` cites
them next to the rule each preset compiles. A knob of another preset, or an unknown framework,
is a spec error that names the field and the knobs that apply.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field

from simstudy.spec.base import FieldError, Spec


class PyTorchDDP(Spec):
    """PyTorch DistributedDataParallel: gradient buckets of `parallelism.bucket_size_mib` (DDP's
    bucket_cap_mb, 25 MiB) in reverse parameter order, a 1 MiB first bucket with the default cap,
    each bucket all-reduced as soon as its last gradient is ready (overlapped with backward)."""

    name: Literal["pytorch_ddp"] = Field(description="the preset (required, so that it is always written out)")


class Horovod(Spec):
    """Horovod tensor fusion: every `cycle_time_ms` the background thread fuses the gradients that
    became ready into buffers of at most `fusion_buffer_mib` and all-reduces each (ring)."""

    name: Literal["horovod"] = Field(description="the preset (required, so that it is always written out)")
    fusion_buffer_mib: float = Field(
        default=128.0, ge=0,
        description="HOROVOD_FUSION_THRESHOLD in MiB: the largest fused all-reduce (0: no fusion, one "
        "all-reduce per gradient). Horovod's default since 0.21 is 128 MiB (its docs still say 64)",
    )
    cycle_time_ms: float = Field(
        default=1.0, ge=0,
        description="HOROVOD_CYCLE_TIME in ms: the background thread's cycle; gradients ready within one "
        "cycle are fused. Horovod's default since 0.21 is 1 ms (its docs still say 5)",
    )


class TensorFlowMWMS(Spec):
    """TensorFlow MultiWorkerMirroredStrategy: gradients concatenated into packs of
    `bytes_per_pack` (0: one pack of all of them) in reverse variable order, each pack all-reduced
    with RingReduce once all of its gradients are ready."""

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


class KungFu(Spec):
    """KungFu: every gradient tensor all-reduced on its own, in chunks of `chunk_kib`, each chunk
    reduced up and broadcast down the edges of the named graph as point-to-point messages."""

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

#: name -> preset model: the one table of framework presets in the spec.
PRESETS: dict[str, type[Spec]] = {get_args(m.model_fields["name"].annotation)[0]: m
                                  for m in (PyTorchDDP, Horovod, TensorFlowMWMS, KungFu)}


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
