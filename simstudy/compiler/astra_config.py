"""ASTRA-SIM configuration files: network.yml, system.json, remote_memory.json, comm_group.json.

The one module that knows ASTRA-SIM's config vocabulary (see astra-sim-interface.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simstudy import layout
from simstudy.compiler.bundle import HOST_CORES, HOSTS
from simstudy.files import write_json, write_text
from simstudy.spec import Dim, Scenario, System, npu_hosts, topology_dims
from simstudy.spec.collectives import FALLBACK, system_implementations

#: ASTRA-SIM's analytical network reads bandwidth in GB/s with GB = 2^30 bytes.
GIB = 2**30

ASTRA_DIM = {"ring": "Ring", "fully_connected": "FullyConnected", "switch": "Switch"}


def gbps_to_astra(bandwidth_gbps: float) -> float:
    """Gigabits per second (10^9 bit/s) to ASTRA-SIM's GiB/s."""
    return bandwidth_gbps * 1e9 / 8 / GIB


def _fmt(x: float) -> str:
    return repr(float(x))


def network_yaml(dims: tuple[Dim, ...]) -> str:
    """The analytical network config for these dimensions."""
    return (
        f"topology: [ {', '.join(ASTRA_DIM[d.type] for d in dims)} ]\n"
        f"npus_count: [ {', '.join(str(d.npus) for d in dims)} ]\n"
        f"bandwidth: [ {', '.join(_fmt(gbps_to_astra(d.bandwidth_gbps)) for d in dims)} ]  # GiB/s\n"
        f"latency: [ {', '.join(_fmt(d.latency_ns) for d in dims)} ]  # ns\n"
    )


def system_config(scenario: Scenario) -> dict[str, Any]:
    """The system.json content."""
    algorithm = scenario.parallelism.aggregation.all_reduce_algorithm
    out = system_json(scenario.system, len(topology_dims(scenario.topology)), algorithm or FALLBACK.name)
    s = scenario.system
    if s.host_cores is not None:  # shared hosts: simstudy's own keys, which ASTRA-SIM does not read
        out[HOST_CORES] = s.host_cores
        out[HOSTS] = list(s.rank_hosts if s.rank_hosts is not None else npu_hosts(scenario.topology))
    return out


def system_json(s: System, dims: int, algorithm: str) -> dict[str, Any]:
    """The system.json content for `dims` network dimensions and the all-reduce `algorithm` (spec name)."""
    n = dims
    impl = system_implementations(algorithm)
    return {
        "scheduling-policy": s.scheduling_policy,
        "endpoint-delay": s.endpoint_delay_ns,
        "active-chunks-per-dimension": s.active_chunks_per_dimension,
        "preferred-dataset-splits": s.collective_chunks,
        "all-reduce-implementation": [impl["all_reduce"]] * n,
        "all-gather-implementation": [impl["all_gather"]] * n,
        "reduce-scatter-implementation": [impl["reduce_scatter"]] * n,
        "all-to-all-implementation": [impl["all_to_all"]] * n,
        "collective-optimization": s.collective_optimization,
        "local-mem-bw": s.local_mem_bw_gbps,
        "boost-mode": 0,
        "roofline-enabled": 0,
        "peak-perf": s.peak_tflops,
        "trace-enabled": 0,
    }


REMOTE_MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}


def write_configs(scenario: Scenario, groups: dict[int, tuple[int, ...]], out: Path) -> dict[str, Path]:
    """Write every config file into `out`; returns name -> path."""
    return write_config_files(topology_dims(scenario.topology), system_config(scenario), groups, out)


def write_config_files(dims: tuple[Dim, ...], system: dict[str, Any], groups: dict[int, tuple[int, ...]],
                       out: Path) -> dict[str, Path]:
    """Write network.yml (these dimensions), system.json, remote_memory.json and comm_group.json."""
    paths = {
        "network": out / layout.NETWORK,
        "system": out / layout.SYSTEM,
        "remote_memory": out / layout.REMOTE_MEMORY,
    }
    write_text(paths["network"], network_yaml(dims))
    write_json(paths["system"], system, indent=2)
    write_json(paths["remote_memory"], REMOTE_MEMORY, indent=2)
    if groups:
        paths["comm_group"] = out / layout.COMM_GROUP
        write_json(paths["comm_group"], {str(k): list(v) for k, v in sorted(groups.items())}, indent=2)
    return paths
