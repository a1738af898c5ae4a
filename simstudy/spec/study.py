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
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from simstudy.spec.base import Spec

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.([A-Za-z_][A-Za-z0-9_]*|[0-9]+))*$")


Analysis = Literal["features"]


def _default_analyses() -> list[Analysis]:
    return ["features"]


Congestion = Literal["fluid", "unaware", "aware"]


class BackendOptions(Spec):
    """Options passed to the backend of every run of the study."""

    congestion: Congestion = Field(
        default="fluid",
        description="flowsim's network model: fluid (every transfer a flow, links shared max-min fairly), unaware "
        "(ASTRA-SIM's congestion-unaware model) or aware (ASTRA-SIM's congestion-aware model: store-and-forward, "
        "one FIFO queue per link); with backend astrasim, aware selects the congestion-aware binary",
    )
    aware: bool = Field(default=False, description="astrasim: use the congestion-aware binary")
    timeout_s: float = Field(default=3600.0, gt=0, description="seconds before one run is abandoned")
    traffic: Literal["rows", "links", "none", "pcap"] = Field(
        default="rows",
        description="what a run keeps of its transfers: rows (the traffic table, one row per transfer, streamed to "
        "traffic.parquet), links (bytes per link per time bin in links.parquet: small at any scale), none, or "
        "pcap (backend ns3: the rows and ns-3's pcaps, one per rank interface, in pcap/)",
    )
    traffic_bin_s: float = Field(default=1e-3, gt=0, description="traffic: links: width of a time bin, seconds")

    @model_validator(mode="before")
    @classmethod
    def _old_contention(cls, data: Any) -> Any:
        """Studies written before `congestion` said `contention: true|false` (links shared or not)."""
        if isinstance(data, dict) and "contention" in data:
            data = dict(data)
            old = data.pop("contention")
            if not isinstance(old, bool):
                raise ValueError(f"contention: expected true or false, got {old!r} (it is now congestion: "
                                 "fluid|unaware|aware)")
            mode = "fluid" if old else "unaware"
            if data.get("congestion", mode) != mode:
                raise ValueError(f"contention: {str(old).lower()} means congestion: {mode}, but congestion is "
                                 f"{data['congestion']!r}; give congestion only")
            data["congestion"] = mode
        return data


BackendName = Literal["flowsim", "astrasim", "ns3"]


class BackendSpec(BackendOptions):
    """Which simulator runs a scenario, with its options: what `simulate` needs besides the scenario."""

    name: BackendName = Field(
        default="flowsim",
        description="simulator: flowsim (built in), astrasim (binary) or ns3 (flowsim's engine on ns-3's packet "
        "network: TCP, queues, token buckets, losses; needs the ns3 wheel)",
    )

    @model_validator(mode="after")
    def _astrasim_congestion(self) -> BackendSpec:
        if self.name == "astrasim" and self.congestion == "aware" and not self.aware:
            object.__setattr__(self, "aware", True)
        if self.traffic == "pcap" and self.name != "ns3":
            raise ValueError(f"traffic: pcap needs backend ns3 (the packet network), not {self.name}")
        return self

    @property
    def key(self) -> str:
        """The part of a run key that names the simulator and its result-changing options (what
        a run keeps of its transfers changes its files, so it is part of the key unless `rows`)."""
        base = {"flowsim": f"flowsim:congestion={self.congestion}", "astrasim": f"astrasim:aware={self.aware}",
                "ns3": "ns3"}[self.name]
        if self.traffic == "pcap":
            return f"{base}:traffic=pcap"
        if self.traffic == "links":
            return f"{base}:traffic=links:{self.traffic_bin_s!r}"
        if self.traffic == "none":
            return f"{base}:traffic=none"
        return base


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
