"""Capture specs: a training job to run for real (model, workers, batch, strategy) and how to
record its packets (iterations, link shaping, snap length, where the workers run)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from simstudy.spec.base import FieldError, Spec
from simstudy.spec.framework import CAPTURED, PRESETS
from simstudy.spec.model import ModelSpec
from simstudy.spec.parallelism import Parallelism
from simstudy.spec.scenario import tag_model
from simstudy.spec.training import Training

#: Frameworks `simstudy capture` can run.
CaptureFramework = Literal["pytorch", "tensorflow", "horovod"]
#: Zoo models with a Keras version (simstudy.capturing.keras_models), for framework: tensorflow.
KERAS_MODELS = ("small_cnn", "lstm_lm", "encoder")
#: The `parallelism.framework` preset that simulates a captured framework's job (each preset says
#: which framework it is captured as: `Preset.captured_by`).
PRESET_OF = CAPTURED


#: tc tbf's bucket in `simstudy capture` by default: this long at the link's rate, and at least
#: `TBF_MIN_BURST_KIB` (see `Link.bucket_kib`).
TBF_BURST_S = 0.010
TBF_MIN_BURST_KIB = 32.0


class Link(Spec):
    """Shaping of every worker's link to the bridge, applied in both directions."""

    rate_mbit: float | None = Field(
        default=None, gt=0, description="link rate, Mbit/s (tc tbf); none leaves the link unshaped"
    )
    delay_ms: float = Field(default=0.0, ge=0, description="one-way delay added per link, ms (needs netem)")
    loss: float = Field(default=0.0, ge=0, lt=1, description="packet loss probability at each receiver")
    burst_kib: float | None = Field(
        default=None, gt=0, description="tbf bucket size, KiB (default: 10 ms at the rate, at least 32 KiB)"
    )

    @property
    def shaped(self) -> bool:
        return self.rate_mbit is not None or self.delay_ms > 0 or self.loss > 0

    def bucket_kib(self) -> float | None:
        """The tbf bucket the testbed gives each end of a link: `burst_kib`, else 10 ms at the rate
        and at least 32 KiB. None: no rate.

        A bucket is not a wire: after every pause tbf passes a full bucket at the veth's speed, so
        the first 250 KB of each exchange at 200 Mbit/s leave at 0.8-1.2 Gbit/s and the link is
        busy 10 ms less than a wire of that rate would be (`topology.token_bucket` simulates it).
        A smaller bucket is no better on a loaded machine: tokens are capped at the bucket while
        the qdisc's timer fires late, so the link loses time. With 1 ms a 4-worker DDP CNN at
        200 Mbit/s took 205 ms an iteration here, against 134 ms with 10 ms."""
        if self.rate_mbit is None:
            return None
        return self.burst_kib or max(TBF_MIN_BURST_KIB, self.rate_mbit * 1e6 / 8 * TBF_BURST_S / 1024)


class CaptureSettings(Spec):
    """How the job runs and is recorded."""

    iterations: int = Field(default=5, ge=1, description="training iterations recorded and marked in meta.json")
    warmup: int = Field(default=1, ge=0, description="iterations run before the recorded ones (not marked)")
    calibration: int = Field(
        default=5, ge=1, description="iterations without communication that time forward/backward compute "
        "(the workers run them together, so they share the cores as in training)"
    )
    where: Literal["namespaces", "loopback", "namespace"] | None = Field(
        default=None,
        description="namespaces: one network namespace per rank joined by a bridge (needs root); "
        "loopback: plain processes on 127.0.0.1; namespace: every rank a process in one network namespace "
        "of its own, on its address 10.0.0.1 (one host: the traffic goes through its loopback; needs root); "
        "default: namespaces when root, else loopback",
    )
    also_any: bool = Field(
        default=False, description="also record with `tcpdump -i any` (Linux cooked captures) into any/ beside "
        "the interfaces' captures, at the same time",
    )
    link: Link = Field(default_factory=Link, description="link shaping (namespaces only)")
    snaplen: int = Field(default=128, ge=64, le=65535, description="tcpdump snap length, bytes")
    buffer_kib: int = Field(default=65536, ge=1024, description="tcpdump capture buffer, KiB")
    mtu: int = Field(default=1500, ge=576, le=9000, description="MTU of the veths (namespaces only)")
    offloads: bool = Field(
        default=False, description="keep TSO/GSO/GRO on (frames up to 64 KB instead of MTU-sized packets)"
    )
    threads: int = Field(default=1, ge=1, description="torch intra-op threads per rank")
    seed: int = Field(default=0, description="seed of the model's initial parameters and the synthetic data")
    timeout_s: float = Field(default=900.0, gt=0, description="the whole job is stopped after this long")
    port: int = Field(default=29500, ge=1024, le=65535, description="the torch.distributed store port on rank 0")


class CaptureSpec(Spec):
    """A real training job and its capture. The scenario that `validate` simulates is built from
    it with a switch topology of the job's ranks, the link's rate and the measured compute."""

    name: str = Field(default="capture", description="job name (letters, digits, _ . -)")
    framework: CaptureFramework = Field(
        default="pytorch",
        description="the training framework that runs the job: pytorch (torch.distributed over gloo: DDP "
        "or parameter servers), tensorflow (MultiWorkerMirroredStrategy over gRPC, Keras models) or horovod "
        "(Horovod's PyTorch API over Gloo)",
    )
    model: ModelSpec = Field(description="a zoo model name or a zoo reference with options")
    parallelism: Parallelism = Field(default_factory=Parallelism, description="dp and aggregation")
    training: Training = Field(default_factory=Training, description="batch per worker; fp32 only")
    capture: CaptureSettings = Field(default_factory=CaptureSettings, description="how the job is recorded")

    @model_validator(mode="before")
    @classmethod
    def _short_forms(cls, data: Any) -> Any:
        if isinstance(data, dict) and "model" in data:
            data = {**data, "model": tag_model(data["model"])}
        if isinstance(data, dict) and isinstance(data.get("framework"), str):
            par = data.get("parallelism")
            par = dict(par) if isinstance(par, dict) else {}
            preset = PRESET_OF.get(data["framework"])
            if preset is not None and "framework" not in par:
                par["framework"] = preset  # the preset that simulates this framework's job
                data = {**data, "parallelism": par}
        return data

    @model_validator(mode="after")
    def _check(self) -> CaptureSpec:
        p = self.parallelism
        if p.tp != 1 or p.pp != 1 or p.sharding != "none" or p.cp != 1 or p.ep != 1 or p.grad_accumulation_steps != 1:
            raise ValueError("a capture runs data parallelism only: tp = 1, pp = 1, sharding none")
        agg = p.aggregation
        preset = p.framework
        if preset.name != PRESET_OF[self.framework]:
            raise FieldError("parallelism.framework", f"a {self.framework} job is simulated with the "
                             f"{PRESET_OF[self.framework]} preset, not {preset.name}")
        if agg.kind not in preset.captured_aggregations:
            who = [m.captured_by for m in PRESETS.values() if agg.kind in m.captured_aggregations]
            raise FieldError("parallelism.aggregation", f"a {self.framework} capture runs {preset.captured_as}; "
                             f"{agg.noun}s are captured with framework: {' or '.join(map(str, who)) or 'none'}")
        agg.check_capture(p.dp, preset)
        if self.framework == "tensorflow" and self.model.kind == "zoo" and self.model.zoo not in KERAS_MODELS:
            raise FieldError("model", f"{self.model.zoo!r} has no Keras version for a tensorflow capture; "
                             f"expected one of {', '.join(KERAS_MODELS)}")
        if self.training.precision != "fp32":
            raise ValueError("a capture trains in fp32: training.precision must be fp32")
        if "iterations" in self.training.model_fields_set:
            raise ValueError("give the recorded iterations as capture.iterations, not training.iterations")
        if self.model.kind != "zoo":
            raise ValueError("a capture needs a zoo model (a name or {zoo: ..., options: ...}), "
                             "so that a real torch model can be built from it")
        return self

    @property
    def ranks(self) -> int:
        return self.parallelism.total_ranks

    def scenario_dict(self, *, bandwidth_gbps: float, latency_ns: float,
                      measured: dict[str, Any] | None = None) -> dict[str, Any]:
        """The scenario of this job on a switch of its ranks (as a dict for `Scenario`)."""
        data: dict[str, Any] = {
            "name": self.name,
            "model": self.model.model_dump(mode="json"),
            "parallelism": self.parallelism.model_dump(mode="json"),
            "topology": {"kind": "switch", "npus": self.ranks, "bandwidth_gbps": bandwidth_gbps,
                         "latency_ns": latency_ns},
            "training": {**self.training.model_dump(mode="json"), "iterations": self.capture.iterations},
        }
        if measured is not None:
            data["system"] = {"measured": measured}
        return data
