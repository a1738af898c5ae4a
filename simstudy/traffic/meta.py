"""What is known about a capture besides its packets, as typed models: `CaptureMeta` (a capture
directory's meta.json, written by `simstudy capture` and read by every analysis), `Experiment`
(the fields of a public-dataset directory name) and `RankMap` (the `--ranks map.yaml` a user
gives to say which endpoint is which rank and role).

The models live in the traffic layer (6) so that the capture layer (8), which writes meta.json,
and the analyses, which read it, share one definition. They know nothing of specs: the
scenario and the capture spec are kept as the plain JSON objects `Scenario` and `CaptureSpec`
validate (in `simstudy.validation` and `simstudy.capturing`).

Every part of meta.json is optional, so that a hand-written file with only `ranks` (or only
`iterations`) is valid. Endpoints are written `"ip"`, `"ip:port"` or `"[ipv6]:port"`, or as
`{"ip": ..., "port": ...}`; a rank may have a list of them (a loopback capture, where a rank is
its ports).
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from simstudy import layout

__all__ = [
    "CaptureMeta",
    "Endpoint",
    "Experiment",
    "LinkInfo",
    "MetaError",
    "RankMap",
    "Wire",
    "load_rank_map",
    "parse_experiment_name",
    "read_meta",
    "write_meta",
]


class MetaError(ValueError):
    """A meta.json or rank map that cannot be read: names the file, the field and what was expected."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Endpoint(_Model):
    """A host, or one port of a host. Written as text: "10.0.0.1", "10.0.0.1:29500", "[fe80::1]:80"."""

    ip: str = Field(description="IPv4 or IPv6 address, normalised")
    port: int | None = Field(default=None, ge=0, le=65535, description="TCP/UDP port; none: any port of the host")

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """'ip', 'ip:port' or '[ipv6]:port' (ValueError otherwise)."""
        return cls.model_validate(text)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        text = value.strip()
        try:
            return {"ip": str(ipaddress.ip_address(text))}
        except ValueError:
            pass
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"not an endpoint (ip, ip:port or [ipv6]:port): {text!r}")
        return {"ip": host.strip("[]"), "port": int(port)}

    @field_validator("ip")
    @classmethod
    def _address(cls, v: str) -> str:
        try:
            return str(ipaddress.ip_address(v))
        except ValueError:
            raise ValueError(f"not an IPv4 or IPv6 address: {v!r}") from None

    @property
    def key(self) -> str:
        """"ip" or "ip:port" ("[ipv6]:port"): the form `to_traffic_table` looks endpoints up by."""
        if self.port is None:
            return self.ip
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"

    @model_serializer
    def _text(self) -> str:
        return self.key

    def __str__(self) -> str:
        return self.key


def _endpoints(value: Any) -> Any:
    """One endpoint or a list of them, as a list of Endpoints (None: none)."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _endpoint_map(value: Any) -> Any:
    """rank -> one endpoint or a list of them, as rank -> list of Endpoints."""
    if isinstance(value, Mapping):
        return {k: _endpoints(w) for k, w in value.items()}
    return value


class _RankEndpoints:
    """What a model with `ranks` (rank -> its endpoints) and `control` (endpoints that carry no
    training traffic) reads from them: both given as one endpoint or a list, and looked up by key.
    Each model declares the two fields itself (where they stand among its own, and their defaults)."""

    if TYPE_CHECKING:
        ranks: dict[int, list[Endpoint]]
        control: list[Endpoint]

    @field_validator("ranks", mode="before")
    @classmethod
    def _ranks(cls, v: Any) -> Any:
        return _endpoint_map(v)

    @field_validator("control", mode="before")
    @classmethod
    def _control(cls, v: Any) -> Any:
        return _endpoints(v)

    @property
    def rank_of(self) -> dict[str, int]:
        """{"ip" or "ip:port": rank} for `to_traffic_table`."""
        return {e.key: rank for rank, ends in self.ranks.items() for e in ends}

    @property
    def control_keys(self) -> list[str]:
        return [e.key for e in self.control]


class LinkInfo(BaseModel):
    """The testbed's link: shaping applied, the probe, and the goodput the simulation assumes."""

    model_config = ConfigDict(frozen=True, extra="allow")

    where: str | None = None
    rate_mbit: float | None = None
    burst_kib: float | None = Field(default=None, description="tc tbf's bucket at each end of a link, KiB")
    delay_ms: float = 0.0
    loss: float = 0.0
    mtu: int | None = None
    offloads: bool = False
    goodput_bps: float | None = Field(default=None, description="payload bits/s the simulated link carries")
    probe: dict[str, float] = Field(default_factory=dict, description="rtt_s and goodput_bps of one TCP stream")
    qdiscs: dict[str, dict[str, int]] = Field(default_factory=dict, description="tc -s counters per interface")


class Wire(_Model):
    """Framing on the testbed's wire."""

    mss: int = Field(gt=0, description="payload bytes of a full packet: TCP's maximum segment size (RoCE's MTU)")
    header_bytes: int = Field(ge=0, description="IP + TCP (RoCE: IP, UDP, BTH and ICRC) header bytes of every packet")


Span = tuple[float, float]


def _span(s: Any) -> Any:
    if isinstance(s, list | tuple) and len(s) in (1, 2):
        end = s[1] if len(s) == 2 and s[1] is not None else math.nan
        return (s[0], end)
    return s


class CaptureMeta(_Model, _RankEndpoints):
    """A capture directory's meta.json (see the module docstring; every field is optional). Keys
    it does not know are kept (`model_extra`) and reported by `simstudy analyze`, not refused: a
    hand-written file may carry notes of its own."""

    model_config = ConfigDict(frozen=True, extra="allow")

    simstudy: str | None = Field(default=None, description="simstudy version that wrote the capture")
    torch: str | None = Field(default=None, description="torch version of the job")
    framework: str | None = Field(default=None, description="the job's framework: pytorch, tensorflow, ...")
    framework_version: str | None = Field(default=None, description="that framework's version")
    created: str | None = Field(default=None, description="when the capture was made (ISO 8601)")
    spec: dict[str, Any] | None = Field(default=None, description="the capture spec (CaptureSpec JSON)")
    scenario: dict[str, Any] | None = Field(default=None, description="the scenario to simulate (Scenario JSON)")
    ranks: dict[int, list[Endpoint]] = Field(default_factory=dict, description="rank -> its endpoint(s)")
    control: list[Endpoint] = Field(default_factory=list, description="endpoints of the store/control connection")
    iterations: dict[int, list[Span]] = Field(
        default_factory=dict, description="rank -> [start_s, end_s] of each recorded iteration, on the pcap clock "
        "(end may be null)")
    steps: dict[int, list[dict[str, float]]] = Field(default_factory=dict, description="per-iteration step times")
    compute: dict[int, dict[str, Any]] = Field(default_factory=dict, description="calibration passes per worker")
    servers: dict[int, dict[str, Any]] = Field(default_factory=dict, description="parameter-server counters")
    link: LinkInfo | None = None
    wire: Wire | None = None
    tcpdump: dict[str, dict[str, int]] = Field(default_factory=dict, description="tcpdump's counters per file")
    buckets: list[int] | None = Field(default=None, description="compiled DDP bucket sizes, bytes")
    ddp_buckets: dict[int, list[int]] = Field(default_factory=dict, description="buckets DDP used, per rank")
    strategy: Literal["ddp", "ps"] | None = None
    host_cores: int | None = Field(
        default=None, ge=1, description="cores the ranks could run on, per host (the capturing process's CPU "
        "affinity; captures before simstudy recorded it have none)")

    @field_validator("iterations", mode="before")
    @classmethod
    def _spans(cls, v: Any) -> Any:
        """A span may be [start] alone, or end in null: its end is then unknown (NaN)."""
        if not isinstance(v, Mapping):
            return v
        return {k: [_span(s) for s in spans] if isinstance(spans, list) else spans for k, spans in v.items()}

    def iteration_durations_s(self) -> list[float]:
        """Every logged iteration's duration (end - start), every rank, in order."""
        return [e - s for spans in self.iterations.values() for s, e in spans if math.isfinite(e)]

    def start_intervals_s(self) -> list[float]:
        """The time between consecutive logged iteration starts, every rank, in order (what the
        traffic shows as the period: the next iteration starts when this one's sends are done)."""
        return [b[0] - a[0] for spans in self.iterations.values() for a, b in itertools.pairwise(spans)]


def _problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    return f"{where}: {err['msg']}"


def read_meta(directory: Path) -> CaptureMeta | None:
    """The directory's meta.json (None when there is none); MetaError naming the field when it is not valid."""
    path = directory / layout.META
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MetaError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MetaError(f"{path}: expected a JSON object")
    try:
        return CaptureMeta.model_validate(data)
    except (ValidationError, ValueError) as exc:
        raise MetaError(f"{path}: {_problem(exc) if isinstance(exc, ValidationError) else exc}") from None


def write_meta(meta: CaptureMeta, path: Path) -> None:
    """Write meta.json (indented, NaN as null)."""
    path.write_text(meta.model_dump_json(indent=1, exclude_none=False), encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Public dataset directory names


_DELAY = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|ms|s)$")
_DELAY_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


class Experiment(_Model):
    """The fields of an experiment directory named `framework-model-optimizer-batchsize-backend-delay[-topology]`."""

    framework: str = Field(description="pytorch, tensorflow, mxnet, ...")
    model: str = Field(description="the model, as named (may contain hyphens)")
    optimizer: str
    batch_size: int = Field(ge=0, description="batch size per worker")
    backend: str = Field(description="communication backend: gloo, nccl, ps, ...")
    delay: str = Field(description="the added link delay as written, e.g. 10ms")
    delay_s: float = Field(ge=0, description="the same in seconds")
    topology: str | None = None


def parse_experiment_name(name: str) -> Experiment | None:
    """The fields of a directory named `framework-model-optimizer-batchsize-backend-delay[-topology]`,
    or None when the name does not have that shape. The model may itself contain hyphens: the name
    is anchored on the batch size and the delay."""
    parts = name.split("-")
    for j in range(4, len(parts)):
        m = _DELAY.match(parts[j])
        if not m or not parts[j - 2].isdigit():
            continue
        if j - 3 < 2 or not all(parts[:j - 3]) or not parts[j - 3] or not parts[j - 1]:
            continue
        if not all(parts[j + 1 :]):
            continue
        return Experiment(
            framework=parts[0], model="-".join(parts[1 : j - 3]), optimizer=parts[j - 3],
            batch_size=int(parts[j - 2]), backend=parts[j - 1], delay=parts[j],
            delay_s=float(m.group(1)) * _DELAY_S[m.group(2)], topology="-".join(parts[j + 1 :]) or None,
        )
    return None


# ---------------------------------------------------------------------------------------------
# --ranks map.yaml


class RankMap(_Model, _RankEndpoints):
    """Which endpoint is which rank, and what each rank does (`--ranks map.yaml`); overrides the
    roles found from the traffic.

    ```yaml
    ranks: {0: 10.0.0.1, 1: 10.0.0.2, 2: 10.0.0.3}   # rank -> endpoint(s)
    servers: [2]                                     # ranks that are parameter servers
    control: ["10.0.0.1:29500"]                      # endpoints that carry no training traffic
    ```
    Ranks not listed as servers are workers. Endpoints that are not listed keep rank -1 and are
    left out of the training metrics."""

    ranks: dict[int, list[Endpoint]] = Field(description="rank -> endpoint(s)")
    servers: list[int] = Field(default_factory=list, description="ranks that are parameter servers")
    control: list[Endpoint] = Field(default_factory=list, description="endpoints that are not training traffic")


def load_rank_map(path: str | Path) -> RankMap:
    """Read a rank map (YAML or JSON); MetaError naming the file and the field when it is not valid."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MetaError(f"{path}: cannot read the rank map: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise MetaError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise MetaError(f"{path}: expected a mapping with `ranks` (rank -> endpoint), optional `servers` and "
                        "`control`")
    try:
        return RankMap.model_validate(data)
    except (ValidationError, ValueError) as exc:
        raise MetaError(f"{path}: {_problem(exc) if isinstance(exc, ValidationError) else exc}") from None
