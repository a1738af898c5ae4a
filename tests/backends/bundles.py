"""Hand-made bundles (one collective per rank, as ASTRA-SIM's microbenchmarks), and the check that
flowsim agrees with an ASTRA-SIM binary on a bundle (`agree`)."""

from __future__ import annotations

import json
from pathlib import Path

from simstudy import chakra
from simstudy.backends import AstraSimBackend, FlowsimBackend
from simstudy.chakra import CollectiveType, GlobalMetadata, Node, NodeType
from simstudy.compiler import Bundle

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


TYPES = {"all_reduce": CollectiveType.ALL_REDUCE, "all_gather": CollectiveType.ALL_GATHER,
         "reduce_scatter": CollectiveType.REDUCE_SCATTER, "all_to_all": CollectiveType.ALL_TO_ALL,
         "broadcast": CollectiveType.BROADCAST}


def collective_node(node_id: int, kind: str, size: int, *, deps: tuple[int, ...] = (),
                    group: str | None = None) -> Node:
    """A collective node as ASTRA-SIM's microbenchmarks write it (no simstudy attributes)."""
    attrs = [chakra.is_cpu_op(False), chakra.comm_type(TYPES[kind]), chakra.comm_size(size)]
    if group is not None:
        attrs.append(chakra.pg_name(group))
    return Node(node_id, f"{kind}{node_id}", NodeType.COMM_COLL_NODE, data_deps=list(deps), attrs=attrs)


def write_bundle(out: Path, dims: list[tuple[str, int, float, float]], traces: list[list[Node]], *,
                 algorithm: str | list[str] = "ring", active: int = 1, splits: int = 1,
                 optimization: str = "baseline", groups: dict[str, list[int]] | None = None,
                 topology: dict[str, object] | None = None) -> Bundle:
    """A bundle of the given per-rank traces on ASTRA-SIM dimensions (topology, NPUs, GiB/s, ns),
    every collective configured with `algorithm` (one, or one per dimension); `topology` is a
    topology.json to write beside it."""
    out.mkdir(parents=True)
    for r, nodes in enumerate(traces):
        chakra.write_trace(chakra.trace_path(out / "w", r), GlobalMetadata(), nodes)
    cols = {"topology": [d[0] for d in dims], "npus_count": [d[1] for d in dims],
            "bandwidth": [d[2] for d in dims], "latency": [d[3] for d in dims]}
    (out / "network.yml").write_text("".join(f"{k}: [ {', '.join(map(str, v))} ]\n" for k, v in cols.items()))
    algos = [algorithm] * len(dims) if isinstance(algorithm, str) else algorithm
    (out / "system.json").write_text(json.dumps({
        "scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": active,
        "preferred-dataset-splits": splits, "all-reduce-implementation": algos,
        "all-gather-implementation": algos, "reduce-scatter-implementation": algos,
        "all-to-all-implementation": algos, "collective-optimization": optimization, "local-mem-bw": MEM_BW}))
    group_file = topo_file = None
    if groups:
        group_file = out / "groups.json"
        group_file.write_text(json.dumps(groups))
    if topology is not None:
        topo_file = out / "topology.json"
        topo_file.write_text(json.dumps(topology))
    return Bundle(out / "w", out / "network.yml", out / "system.json", comm_group=group_file, topology=topo_file)


def agree(binary: Path, aware: bool, b: Bundle, tmp: Path, *, rel: float = 0.0) -> None:
    """flowsim's `aware` (or `unaware`) mode finishes every rank of `b` within `rel` of the ASTRA-SIM
    binary's finish time (0: at the same nanosecond), with the same bytes between the same ranks."""
    mode = "aware" if aware else "unaware"
    a = AstraSimBackend(binary, aware=aware).run(b, tmp / f"a_{mode}", timeout_s=300)
    f = FlowsimBackend(congestion=mode).run(b, tmp / f"f_{mode}", timeout_s=300)
    for fr, ar in zip(f.ranks, a.ranks, strict=True):
        assert abs(fr.finish_ns - ar.finish_ns) <= rel * ar.finish_ns, (mode, fr, ar)
    fb = f.traffic.groupby(["src", "dst"], observed=True)["bytes"].sum()
    ab = a.traffic.groupby(["src", "dst"], observed=True)["bytes"].sum()
    assert fb.equals(ab)
