"""Hand-made bundles: one collective per rank, as ASTRA-SIM's microbenchmarks."""

from __future__ import annotations

import json
from pathlib import Path

from simstudy import chakra
from simstudy.chakra import CollectiveType, GlobalMetadata, Node, NodeType
from simstudy.compile import Bundle

GIB = 2**30
MEM_BW = 1600.0  # local-mem-bw, GB/s (bytes per ns)


def bundle(tmp: Path, topology: str, npus: int, size: int, *, groups: dict[str, list[int]] | None = None,
           splits: int = 1, active: int = 1, bandwidth_gibps: float = 1.0, latency_ns: float = 500.0) -> Bundle:
    """One all-reduce of `size` bytes per rank, over the rank's group when `groups` is given."""
    tmp.mkdir(parents=True)
    for r in range(npus):
        attrs = [chakra.is_cpu_op(False), chakra.comm_type(CollectiveType.ALL_REDUCE), chakra.comm_size(size)]
        if groups:
            attrs.append(chakra.pg_name(next(g for g, m in groups.items() if r in m)))
        chakra.write_trace(chakra.trace_path(tmp / "ar", r), GlobalMetadata(),
                           [Node(0, "ar", NodeType.COMM_COLL_NODE, attrs=attrs)])
    (tmp / "network.yml").write_text(f"topology: [ {topology} ]\nnpus_count: [ {npus} ]\n"
                                     f"bandwidth: [ {bandwidth_gibps} ]\nlatency: [ {latency_ns} ]\n")
    (tmp / "system.json").write_text(json.dumps({
        "scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": active,
        "preferred-dataset-splits": splits, "all-reduce-implementation": ["ring"],
        "all-gather-implementation": ["ring"], "reduce-scatter-implementation": ["ring"],
        "all-to-all-implementation": ["direct"], "collective-optimization": "baseline", "local-mem-bw": MEM_BW}))
    group_file = None
    if groups:
        group_file = tmp / "groups.json"
        group_file.write_text(json.dumps(groups))
    return Bundle(tmp / "ar", tmp / "network.yml", tmp / "system.json", comm_group=group_file)
