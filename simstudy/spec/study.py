"""A study: a base scenario, the axes swept over it, the backend, and how results are checked.

```yaml
name: cnn_vs_rnn
base: {model: resnet50, topology: ../topologies/switch8_25g.yaml, training: {iterations: 2}}
axes:                                  # product of every axis (and of every zip group)
  model: [resnet50, mobilenetv2, lstm_lm, bert_base]
  topology.npus: [4, 8]                # dotted paths into the scenario
zip:                                   # values that move together, one group per entry
  - {topology.bandwidth_gbps: [10, 100], system.peak_tflops: [20, 120]}
backend: flowsim
baseline: {tolerance: 1e-6, tolerances: {iteration_ms: 0.01}}
```
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from simstudy.spec.base import Spec, listed

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.([A-Za-z_][A-Za-z0-9_]*|[0-9]+))*$")


Analysis = Literal["features"]


def _default_analyses() -> list[Analysis]:
    return ["features"]


class Congestion(StrEnum):
    """How a network model treats transfers that share a link: one member per mode, with what it
    means (`meaning`). The modes a backend models are listed in its entry of `simstudy.backends.registry`."""

    FLUID = "fluid"
    UNAWARE = "unaware"
    AWARE = "aware"
    NS3 = "ns3"

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]

    @property
    def chosen(self) -> bool:
        """Whether a spec may ask for it (`ns3` comes with the ns3 backend, not from a spec)."""
        return self is not Congestion.NS3

    @property
    def shares_links(self) -> bool:
        """Whether transfers on one link slow each other (all but `unaware`)."""
        return self is not Congestion.UNAWARE

    @property
    def fluid(self) -> bool:
        """Whether rates are solved max-min over the links (a route's links with their multiplicity)."""
        return self is Congestion.FLUID

    @property
    def fifo(self) -> bool:
        """Whether each link is a FIFO queue that messages wait in, hop by hop."""
        return self is Congestion.AWARE


_MEANINGS = {
    Congestion.FLUID: "every transfer a flow, links shared max-min fairly",
    Congestion.UNAWARE: "ASTRA-SIM's congestion-unaware model",
    Congestion.AWARE: "ASTRA-SIM's congestion-aware model: store-and-forward, one FIFO queue per link",
    Congestion.NS3: "ns-3's packet network: TCP, queues, token buckets, losses",
}


#: The modes a spec may give (`congestion:`, `--congestion`).
CONGESTION_CHOICES = tuple(m.value for m in Congestion if m.chosen)


if TYPE_CHECKING:
    ChosenCongestion = Congestion
else:  # validated as the Literal of the modes a spec may give (its errors list them), kept as the enum
    ChosenCongestion = Annotated[Literal[CONGESTION_CHOICES], AfterValidator(Congestion)]


def _aware_in_schema(schema: dict[str, Any]) -> None:
    """The schema also takes `aware` (see `BackendOptions._old_names`), as the loader does."""
    schema["properties"]["aware"] = {"default": False, "description": "the older name of congestion: aware (true)",
                                     "title": "Aware", "type": "boolean"}


class BackendOptions(Spec):
    """Options passed to the backend of every run of the study."""

    model_config = ConfigDict(json_schema_extra=_aware_in_schema)

    congestion: ChosenCongestion = Field(
        default=Congestion.FLUID,
        description="flowsim's network model: "
        + listed([f"{m.value} ({m.meaning})" for m in Congestion if m.chosen])
        + "; with backend astrasim, aware selects the congestion-aware binary",
    )
    timeout_s: float = Field(default=3600.0, gt=0, description="seconds before one run is abandoned")
    traffic: Literal["rows", "links", "none", "pcap"] = Field(
        default="rows",
        description="what a run keeps of its transfers: rows (the traffic table, one row per transfer, streamed to "
        "traffic.parquet), links (bytes per link per time bin in links.parquet: small at any scale), none, or "
        "pcap (backend ns3: the rows and ns-3's pcaps, one per rank interface, in pcap/)",
    )
    traffic_bin_s: float = Field(default=1e-3, gt=0, description="traffic: links: width of a time bin, seconds")
    engine: Literal["auto", "compiled", "python"] = Field(
        default="auto",
        description="flowsim's engine: compiled (its compiled core, built where a C++ compiler was present at "
        "install: the fluid network model in C++), python (the reference, equal to the nanosecond) or auto "
        "(compiled where built); run.json's details.engine says which ran",
    )
    et_files: bool = Field(
        default=False,
        description="write every rank's Chakra ET file into the run's bundle/ (astrasim reads them, so it always "
        "does; flowsim and ns3 run from the compiled graphs in memory, and their bundle/ holds the configs only)",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        """Two older ways to say `congestion`: `contention: true|false` (links shared or not, from
        before `congestion`) and `aware: true|false` (astrasim's congestion-aware binary: `aware:
        true` is `congestion: aware`, on every backend)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "contention" in data:
            old = data.pop("contention")
            if not isinstance(old, bool):
                raise ValueError(f"contention: expected true or false, got {old!r} (it is now congestion: "
                                 "fluid|unaware|aware)")
            _alias(data, "contention", str(old).lower(), Congestion.FLUID if old else Congestion.UNAWARE)
        if "aware" in data:
            old = data.pop("aware")
            if not isinstance(old, bool):
                raise ValueError(f"aware: expected true or false, got {old!r} (it is now congestion: aware)")
            if old:
                _alias(data, "aware", "true", Congestion.AWARE)
        return data


def _alias(data: dict[str, Any], name: str, value: str, mode: Congestion) -> None:
    """`name: value` in `data` stands for `congestion: mode`; a different congestion is an error."""
    given = data.get("congestion")
    if given is not None and given != mode:
        raise ValueError(f"{name}: {value} means congestion: {mode.value}, but congestion is "
                         f"{given.value if isinstance(given, Congestion) else given!r}; give congestion only")
    data["congestion"] = mode.value


#: The backends' names: `simstudy.backends.registry` has one entry for each (and checks this list).
BackendName = Literal["flowsim", "astrasim", "ns3"]


class BackendSpec(BackendOptions):
    """Which simulator runs a scenario, with its options: what `simulate` needs besides the scenario.
    What each backend takes of the options is its entry in `simstudy.backends.registry`."""

    name: BackendName = Field(
        default="flowsim",
        description="simulator: flowsim (built in), astrasim (binary) or ns3 (flowsim's engine on ns-3's packet "
        "network: TCP, queues, token buckets, losses; needs the ns3 wheel)",
    )


class Baseline(Spec):
    """How `--baseline` compares a summary with a stored one: relative tolerances per metric."""

    tolerance: float = Field(default=1e-6, ge=0, description="relative tolerance of every metric not listed")
    tolerances: dict[str, float] = Field(
        default_factory=dict, description="relative tolerance per metric (summary column name)"
    )
    metrics: list[str] | None = Field(
        default=None, description="the metrics compared (default: every numeric result column)"
    )

    @field_validator("tolerances")
    @classmethod
    def _non_negative(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [k for k, v in value.items() if v < 0]
        if bad:
            raise ValueError(f"tolerances must be >= 0 (negative for {', '.join(bad)})")
        return value

    def tolerance_of(self, metric: str) -> float:
        return self.tolerances.get(metric, self.tolerance)


class PlotSpec(Spec):
    """One comparison plot: a metric (y) against a swept axis (x), one bar per `hue` value."""

    y: str = Field(description="summary column to plot, e.g. iteration_ms")
    x: str | None = Field(default=None, description="swept axis on the x axis (default: the first axis)")
    hue: str | None = Field(default=None, description="swept axis for the bars of one group (default: the second)")


class Study(Spec):
    """A base scenario and the axes swept over it."""

    name: str = Field(description="study name: the output directory results/<name>/ (letters, digits, _ . -)")
    description: str = Field(default="", description="what the study asks, for the report")
    base: dict[str, Any] = Field(description="the base scenario (any scenario field; parts may be YAML files)")
    axes: dict[str, list[Any]] = Field(
        default_factory=dict, description="dotted scenario path -> values; the sweep is their product"
    )
    zip: list[dict[str, list[Any]]] = Field(
        default_factory=list, description="groups of paths whose values move together (equal lengths)"
    )
    backend: BackendName = Field(default="flowsim", description="simulator of every run")
    backend_options: BackendOptions = Field(default_factory=BackendOptions, description="backend options")
    analyses: list[Analysis] = Field(
        default_factory=_default_analyses,
        description="per-run analyses: `features` adds the traffic features (period, bursts, flows, Hurst...) "
        "to features.json and the summary; [] keeps times and bytes only",
    )
    baseline: Baseline = Field(default_factory=Baseline, description="tolerances of `--baseline` checks")
    plots: list[PlotSpec] | None = Field(
        default=None, description="comparison plots (default: iteration time and bytes per iteration)"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"{value!r} must start with a letter or digit and hold only letters, digits, _ . -")
        return value

    @model_validator(mode="after")
    def _check(self) -> Study:
        seen: set[str] = set()
        groups = [dict(self.axes.items())] + [dict(g) for g in self.zip]
        for i, group in enumerate(groups):
            lengths = {len(v) for v in group.values()}
            if i > 0 and len(lengths) > 1:
                raise ValueError(f"zip group {i - 1}: every path needs the same number of values, got "
                                 + ", ".join(f"{k}: {len(v)}" for k, v in group.items()))
            for path, values in group.items():
                if not _PATH.match(path):
                    raise ValueError(f"axis {path!r} is not a dotted scenario path such as topology.npus "
                                     "(or jobs.1.start_ms: a number picks a list item)")
                if path == "name" or path.startswith("name."):
                    raise ValueError("the scenario name is set by the study; it cannot be swept")
                if path in seen:
                    raise ValueError(f"axis {path!r} appears twice")
                if not values:
                    raise ValueError(f"axis {path!r} has no values")
                seen.add(path)
        return self

    @property
    def backend_spec(self) -> BackendSpec:
        """The backend of every run: `backend` with `backend_options`."""
        return BackendSpec(name=self.backend, **self.backend_options.model_dump())

    @property
    def axis_paths(self) -> list[str]:
        """Every swept path, axes first, then zip groups, in file order."""
        return [*self.axes, *(p for g in self.zip for p in g)]
