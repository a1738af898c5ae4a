"""flowsim's `unaware` and `aware` modes against both ASTRA-SIM binaries across the system settings
ASTRA-SIM accepts: every native collective algorithm (ring, direct, halving-doubling, double binary
tree) for every collective it implements, one or two chunks in flight, one or several chunks, and
multi-dimensional collectives with the baseline and localBWAware optimizations (the aware binary
takes one dimension only). Finish times must be equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simstudy import chakra
from simstudy.backends import AstraSimBackend, FlowsimBackend
from simstudy.backends.locate import describe_search, find_astra_sim
from simstudy.chakra import CollectiveType, GlobalMetadata, Node, NodeType
from simstudy.compiler import Bundle

pytestmark = pytest.mark.astrasim

TYPES = {"all_reduce": CollectiveType.ALL_REDUCE, "all_gather": CollectiveType.ALL_GATHER,
         "reduce_scatter": CollectiveType.REDUCE_SCATTER, "all_to_all": CollectiveType.ALL_TO_ALL}


def bundle(out: Path, topology: list[str], npus: list[int], kind: str, algorithm: str, active: int, splits: int,
           optimization: str = "baseline") -> Bundle:
    out.mkdir(parents=True)
    node = Node(0, kind, NodeType.COMM_COLL_NODE, attrs=[chakra.is_cpu_op(False), chakra.comm_type(TYPES[kind]),
                                                         chakra.comm_size(4 << 20)])
    total = 1
    for n in npus:
        total *= n
    for r in range(total):
        chakra.write_trace(chakra.trace_path(out / "w", r), GlobalMetadata(), [node])
    k = len(npus)
    lines = {"topology": topology, "npus_count": npus, "bandwidth": [50.0] * k, "latency": [500.0] * k}
    (out / "network.yml").write_text("".join(f"{key}: [ {', '.join(map(str, v))} ]\n" for key, v in lines.items()))
    (out / "system.json").write_text(json.dumps({
        "scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": active,
        "preferred-dataset-splits": splits, "all-reduce-implementation": [algorithm] * k,
        "all-gather-implementation": [algorithm] * k, "reduce-scatter-implementation": [algorithm] * k,
        "all-to-all-implementation": [algorithm] * k, "collective-optimization": optimization, "local-mem-bw": 1600}))
    return Bundle(out / "w", out / "network.yml", out / "system.json")


def check(b: Bundle, tmp: Path, modes: tuple[str, ...] = ("unaware", "aware")) -> None:
    for mode in modes:
        binary = find_astra_sim(aware=mode == "aware")
        if binary is None:
            pytest.skip(f"no ASTRA-SIM binary: {describe_search(aware=mode == 'aware')}")
        a = AstraSimBackend(binary, aware=mode == "aware").run(b, tmp / f"a{mode}", timeout_s=120)
        f = FlowsimBackend(congestion=mode).run(b, tmp / f"f{mode}")
        assert [r.finish_ns for r in f.ranks] == [r.finish_ns for r in a.ranks], mode


CASES = [(kind, algo) for algo in ("ring", "direct", "halvingDoubling")
         for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
         if not (algo == "halvingDoubling" and kind == "all_to_all")] + [("all_reduce", "doubleBinaryTree")]


@pytest.mark.parametrize(("kind", "algorithm"), CASES)
@pytest.mark.parametrize(("active", "splits"), [(1, 4), (2, 4)])
def test_one_dimension(kind: str, algorithm: str, active: int, splits: int, tmp_path: Path) -> None:
    """8 NPUs on a ring, where peers are 1 to 4 hops away and links are shared by several messages."""
    check(bundle(tmp_path / "b", ["Ring"], [8], kind, algorithm, active, splits), tmp_path)


@pytest.mark.parametrize("optimization", ["baseline", "localBWAware"])
@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter"])
def test_three_dimensions(kind: str, optimization: str, tmp_path: Path) -> None:
    check(bundle(tmp_path / "b", ["Ring", "Switch", "FullyConnected"], [2, 2, 2], kind, "ring", 2, 4, optimization),
          tmp_path, modes=("unaware",))
