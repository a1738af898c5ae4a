"""A scenario: one training job on one network, everything a simulation needs."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from simstudy.spec.base import FieldError, Spec
from simstudy.spec.collectives import collective_algorithm
from simstudy.spec.model import Model, ModelSpec, ZooModel
from simstudy.spec.parallelism import AllReduce, Parallelism, dp_auto, fill_dp
from simstudy.spec.system import System, check_hosts, check_variability
from simstudy.spec.topology import Topology
from simstudy.spec.training import Training

_TOPOLOGY: TypeAdapter[Topology] = TypeAdapter(Topology)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def fill_topology_dp(data: dict[str, Any]) -> dict[str, Any]:
    """`parallelism.dp` left out (or `auto`) takes the NPUs the topology has left (`fill_dp`), so
    that sweeping `topology.npus` scales the data-parallel degree with it."""
    par = data.get("parallelism", {})
    if not dp_auto(par):
        return data
    try:
        npus = _TOPOLOGY.validate_python(data.get("topology")).total_npus
    except ValidationError:
        npus = 0  # dp stays out: the topology's own error is reported by validation
    return {**data, "parallelism": fill_dp(par, npus)}


def tag_model(value: Any) -> Any:
    """Accept the short forms of a model: `resnet50` or `{zoo: resnet50, ...}` or `{layers: ...}`."""
    if isinstance(value, str):
        return {"kind": "zoo", "zoo": value}
    if isinstance(value, dict) and "kind" not in value:
        if "zoo" in value:
            return {"kind": "zoo", **value}
        if "layers" in value:
            return {"kind": "layers", **value}
    return value


class Scenario(Spec):
    """Model x parallelism x topology x system x training."""

    name: str = Field(
        default="scenario",
        description="scenario name; used as the Chakra trace prefix (letters, digits, _ . -)",
    )
    model: ModelSpec = Field(description="a zoo model name, a zoo reference or explicit layers")
    parallelism: Parallelism = Field(
        default_factory=Parallelism,
        description="dp/tp/pp and aggregation; dp left out (or `auto`) fills the topology's NPUs",
    )
    topology: Topology = Field(description="the network")
    system: System = Field(default_factory=System, description="compute and collective settings")
    training: Training = Field(default_factory=Training, description="batch, iterations, precision")

    @model_validator(mode="before")
    @classmethod
    def _short_forms(cls, data: Any) -> Any:
        if isinstance(data, dict) and "model" in data:
            data = {**data, "model": tag_model(data["model"])}
        if isinstance(data, dict) and "topology" in data:
            data = fill_topology_dp(data)
        return data

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if not _NAME.match(self.name):
            raise ValueError(
                f"name {self.name!r} must start with a letter or digit and hold only letters, "
                "digits, '_', '.' and '-'"
            )
        npus = self.topology.total_npus
        need = self.parallelism.total_ranks
        if npus != need:
            p = self.parallelism
            detail = f"{p.product} = {p.compute_ranks}"
            if p.server_ranks:
                detail += f" + {p.server_ranks} dedicated servers"
            what = p.product.split(" = ")[0]
            raise FieldError("parallelism", f"topology has {npus} NPUs but the parallelism needs {need} "
                                            f"({detail}); {what} must equal the topology's NPUs")
        agg = self.parallelism.aggregation
        try:
            agg.check_topology(self.topology.kind)
        except FieldError as exc:
            raise FieldError(f"parallelism.{exc.field}", exc.message) from None
        dp = self.parallelism.dp
        p = self.parallelism
        problem = collective_algorithm(agg.algorithm).scenario_error(dp, p.tp == p.pp == 1) if isinstance(
            agg, AllReduce) else None
        if problem:
            raise FieldError("parallelism.aggregation.algorithm", problem)
        m = self.parallelism.microbatches
        gas = self.parallelism.grad_accumulation_steps
        batch = self.training.batch_size_per_worker
        if batch % m:
            raise FieldError("parallelism.microbatches",
                             f"{m} microbatches do not split training.batch_size_per_worker = {batch} evenly; "
                             "the batch must be a multiple of microbatches")
        if batch % (m * gas):
            raise FieldError("parallelism.grad_accumulation_steps",
                             f"{gas} accumulation steps of {m} microbatches do not split "
                             f"training.batch_size_per_worker = {batch} evenly; the batch must be a multiple of "
                             "grad_accumulation_steps x microbatches")
        check_variability(self.system, need, self.training.iterations, "system")
        check_hosts(self.system, need, "system")
        return self

    @property
    def npus(self) -> int:
        """Ranks (NPUs) in the job."""
        return self.topology.total_npus

    @property
    def resolved_model(self) -> Model:
        """The explicit model; raises if the model is still a zoo reference."""
        if isinstance(self.model, ZooModel):
            raise ValueError(f"model {self.model.zoo!r} is not resolved; call simstudy.compiler.resolve")
        return self.model


def canonical_json(scenario: Spec) -> str:
    """The canonical JSON of a scenario (or any spec: a cluster): every field, sorted keys, no whitespace."""
    import json

    return json.dumps(scenario.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
