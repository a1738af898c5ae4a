"""A bundle: one ASTRA-SIM input set (ET files + network/system/memory/group configs)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from simstudy import layout


class BundleError(ValueError):
    """An input set that cannot be used, naming the file and what is wrong."""


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
        data = _read_yaml(self.network)
        counts = data.get("npus_count") if isinstance(data, dict) else None
        if not isinstance(counts, list) or not counts or not all(isinstance(c, int) and c > 0 for c in counts):
            raise BundleError(f"{self.network}: npus_count: expected a list of positive integers")
        n = 1
        for c in counts:
            n *= c
        return n

    def check(self) -> None:
        """Every file the simulator opens exists: configs and one ET file per rank."""
        for p in (self.network, self.system, self.remote_memory, self.comm_group, self.topology):
            if p is not None and not p.is_file():
                raise BundleError(f"{p}: file not found")
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


def _read_yaml(path: Path) -> object:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise BundleError(f"{path}: invalid YAML: {exc}") from None


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
