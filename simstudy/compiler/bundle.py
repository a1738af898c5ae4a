"""A bundle: one ASTRA-SIM input set (ET files + network/system/memory/group configs)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from simstudy import layout
from simstudy.spec import spec_error
from simstudy.spec.collectives import DEFAULT_FOR, collective_algorithm

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from simstudy.chakra import Node


class BundleError(ValueError):
    """An input set that cannot be used, naming the file and what is wrong."""


class NetworkConfig(BaseModel):
    """The fields of ASTRA-SIM's analytical network.yml that simstudy reads: one entry per dimension."""

    model_config = ConfigDict(frozen=True, extra="allow")

    topology: list[Literal["Ring", "FullyConnected", "Switch"]] = Field(min_length=1)
    npus_count: list[int] = Field(min_length=1, description="NPUs of each dimension")
    bandwidth: list[float] = Field(min_length=1, description="GiB/s of each dimension's links")
    latency: list[float] = Field(min_length=1, description="ns of each dimension's links")

    @field_validator("npus_count")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(n < 1 for n in value):
            raise ValueError(f"expected positive NPU counts, got {value}")
        return value

    @field_validator("bandwidth", "latency")
    @classmethod
    def _finite(cls, value: list[float]) -> list[float]:
        if any(not (0 <= v < float("inf")) for v in value):
            raise ValueError(f"expected finite numbers >= 0, got {value}")
        return value

    @model_validator(mode="after")
    def _same_length(self) -> NetworkConfig:
        lengths = {len(self.topology), len(self.npus_count), len(self.bandwidth), len(self.latency)}
        if len(lengths) > 1:
            raise ValueError("topology, npus_count, bandwidth and latency must list the same number of dimensions")
        if not all(b > 0 for b in self.bandwidth):
            raise ValueError(f"bandwidth: expected numbers > 0, got {self.bandwidth}")
        return self


#: system.json keys of shared hosts (`System.host_cores`): the cores of every host, the host of every NPU
HOST_CORES = "simstudy.host_cores"
HOSTS = "simstudy.hosts"

IMPLEMENTATIONS = ("all-reduce-implementation", "all-gather-implementation", "reduce-scatter-implementation",
                   "all-to-all-implementation")



def _known(name: str) -> str:
    collective_algorithm(name)  # ValueError naming the known ones
    return name


#: A collective algorithm by ASTRA-SIM's name (or simstudy's).
Algorithm = Annotated[str, AfterValidator(_known)]


class SystemConfig(BaseModel):
    """The fields of ASTRA-SIM's system.json that simstudy reads (others are left to ASTRA-SIM)."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    scheduling_policy: Literal["LIFO", "FIFO"] = Field(default="LIFO", alias="scheduling-policy")
    endpoint_delay: float = Field(default=10, ge=0, allow_inf_nan=False, alias="endpoint-delay")
    active_chunks: int = Field(default=1, ge=1, alias="active-chunks-per-dimension")
    splits: int = Field(default=1, ge=1, alias="preferred-dataset-splits")
    all_reduce: list[Algorithm] = Field(default=[DEFAULT_FOR["all_reduce"].astra], min_length=1,
                                        alias="all-reduce-implementation")
    all_gather: list[Algorithm] = Field(default=[DEFAULT_FOR["all_gather"].astra], min_length=1,
                                        alias="all-gather-implementation")
    reduce_scatter: list[Algorithm] = Field(default=[DEFAULT_FOR["reduce_scatter"].astra], min_length=1,
                                            alias="reduce-scatter-implementation")
    all_to_all: list[Algorithm] = Field(default=[DEFAULT_FOR["all_to_all"].astra], min_length=1,
                                        alias="all-to-all-implementation")
    optimization: Literal["baseline", "localBWAware"] = Field(default="baseline", alias="collective-optimization")
    local_mem_bw: float = Field(default=1600, gt=0, allow_inf_nan=False, alias="local-mem-bw")
    peak_perf: float = Field(default=1, gt=0, allow_inf_nan=False, alias="peak-perf")
    #: simstudy's shared hosts (`system.host_cores`; flowsim only, ASTRA-SIM ignores the keys): the
    #: cores of every host and the host of every NPU
    host_cores: int | None = Field(default=None, ge=1, alias=HOST_CORES)
    hosts: list[int] | None = Field(default=None, alias=HOSTS)

    @model_validator(mode="after")
    def _hosts_together(self) -> SystemConfig:
        if (self.host_cores is None) != (self.hosts is None):
            raise ValueError(f"{HOST_CORES} and {HOSTS} go together (the cores of every host, the host of every NPU)")
        if self.hosts is not None and any(h < 0 for h in self.hosts):
            raise ValueError(f"{HOSTS}: expected host numbers >= 0, got {self.hosts}")
        return self

    def implementations(self) -> dict[str, list[str]]:
        """The algorithm of each dimension, by system.json field."""
        return dict(zip(IMPLEMENTATIONS, (self.all_reduce, self.all_gather, self.reduce_scatter, self.all_to_all),
                        strict=True))


@dataclass(frozen=True)
class Bundle:
    """Paths of one ASTRA-SIM input set; `workload` is the ET prefix (`<prefix>.<rank>.et`).
    `topology` (topology.json) is simstudy's typed network; without it backends use network.yml."""

    workload: Path
    network: Path
    system: Path
    remote_memory: Path | None = None
    comm_group: Path | None = None
    scenario: Path | None = None
    topology: Path | None = None
    #: every rank's Chakra nodes in memory (`compile_scenario(..., et_files=False)`), read instead of
    #: ET files, which the directory then does not hold
    traces: list[list[Node]] | None = field(default=None, repr=False, compare=False)
    #: with `traces`: each rank's task list (`chakra_out.graph_templates`): ranks of one number hold
    #: nodes that differ at most in their groups and peers, never in what a run's tables take from them
    templates: list[int] | None = field(default=None, repr=False, compare=False)
    #: with `traces`: data-parallel replicas that run alike (`compiler.replicas`: replicas[k, i] is
    #: the i-th rank of replica k), or None
    replicas: NDArray[np.int64] | None = field(default=None, repr=False, compare=False)

    @property
    def directory(self) -> Path:
        return self.workload.parent

    @property
    def name(self) -> str:
        return self.workload.name

    def et_path(self, rank: int) -> Path:
        return self.workload.with_name(f"{self.workload.name}.{rank}.et")

    @property
    def npus(self) -> int:
        """NPU count from the network config: the product of npus_count."""
        n = 1
        for c in self.network_config().npus_count:
            n *= c
        return n

    def network_config(self) -> NetworkConfig:
        """network.yml, validated; BundleError naming the file and the field."""
        return _validate(NetworkConfig, _read_yaml(self.network), self.network)

    def system_config(self) -> SystemConfig:
        """system.json, validated; BundleError naming the file and the field."""
        system = _validate(SystemConfig, _read_json(self.system), self.system)
        dims = self.network_config().npus_count
        for alias, names in system.implementations().items():
            for d, name in enumerate(names):
                n = dims[min(d, len(dims) - 1)]
                if not collective_algorithm(name).fits_dimension(n):
                    raise BundleError(f"{self.system}: {alias}.{d}: {name} needs a power-of-two dimension; "
                                      f"{self.network} npus_count.{d} is {n}")
        if system.hosts is not None and len(system.hosts) != self.npus:
            raise BundleError(f"{self.system}: {HOSTS}: expected the host of each of the {self.npus} NPUs of "
                              f"{self.network}, got {len(system.hosts)}")
        return system

    def check(self) -> None:
        """Every file the simulator opens exists and its fields are usable: configs and one ET
        file per rank (or, in memory, one graph per rank)."""
        for p in (self.network, self.system, self.remote_memory, self.comm_group, self.topology):
            if p is not None and not p.is_file():
                raise BundleError(f"{p}: file not found")
        self.system_config()
        if self.traces is not None:
            if len(self.traces) != self.npus:
                raise BundleError(f"{self.network}: {self.npus} NPUs, but the bundle's compiled graphs hold "
                                  f"{len(self.traces)} ranks")
            return
        missing = [r for r in range(self.npus) if not self.et_path(r).is_file()]
        if missing:
            raise BundleError(
                f"{self.et_path(missing[0])}: missing ET file for rank {missing[0]} "
                f"({len(missing)} of {self.npus} ranks missing)"
            )

    @classmethod
    def from_dir(cls, directory: str | Path) -> Bundle:
        """The bundle in a directory written by `simstudy compile`."""
        d = Path(directory)
        if not d.is_dir():
            raise BundleError(f"{d}: not a directory")
        scenario = d / layout.SCENARIO
        prefix = _prefix_from_scenario(scenario) if scenario.is_file() else _prefix_from_files(d)
        group = d / layout.COMM_GROUP
        memory = d / layout.REMOTE_MEMORY
        topology = d / layout.TOPOLOGY
        return cls(
            workload=d / prefix,
            network=d / layout.NETWORK,
            system=d / layout.SYSTEM,
            remote_memory=memory if memory.is_file() else None,
            comm_group=group if group.is_file() else None,
            scenario=scenario if scenario.is_file() else None,
            topology=topology if topology.is_file() else None,
        )


C = TypeVar("C", bound=BaseModel)


def _validate(cls: type[C], data: object, path: Path) -> C:
    if not isinstance(data, dict):
        raise BundleError(f"{path}: expected a mapping of {cls.__name__} fields, got {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise BundleError(str(spec_error(exc, data, None, path, cls))) from None
    except ValueError as exc:  # an unknown algorithm
        raise BundleError(f"{path}: {exc}") from None


def _read(path: Path, parse: Callable[[str], object], fmt: str, invalid: type[Exception]) -> object:
    """`parse` of the file's text; BundleError naming the file when it is missing, unreadable or
    not valid `fmt` (`invalid`: the parser's error)."""
    try:
        return parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}: cannot read file: {exc}") from None
    except invalid as exc:
        raise BundleError(f"{path}: invalid {fmt}: {' '.join(str(exc).split())}") from None


def _read_yaml(path: Path) -> object:
    return _read(path, yaml.safe_load, "YAML", yaml.YAMLError)


def _read_json(path: Path) -> object:
    return _read(path, json.loads, "JSON", ValueError)


def _prefix_from_scenario(path: Path) -> str:
    try:
        name = json.loads(path.read_text(encoding="utf-8"))["name"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BundleError(f"{path}: name: cannot read the scenario name ({exc})") from None
    return str(name)


def _prefix_from_files(d: Path) -> str:
    prefixes = sorted({m.group(1) for p in d.glob("*.0.et") if (m := re.match(r"(.+)\.0\.et$", p.name))})
    if len(prefixes) != 1:
        raise BundleError(f"{d}: expected exactly one '<prefix>.0.et' trace set, found {prefixes or 'none'}")
    return prefixes[0]
