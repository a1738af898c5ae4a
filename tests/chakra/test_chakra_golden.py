"""The annotated 83-byte ASTRA-SIM microbenchmark trace from docs/chakra-et-format.md, byte for byte."""

from __future__ import annotations

from pathlib import Path

from chakra_samples import GOLDEN, golden_node

from simstudy import chakra
from simstudy.chakra import Attr, AttrKind, CollectiveType, GlobalMetadata


def test_golden_is_83_bytes() -> None:
    assert len(GOLDEN) == 83


def test_encode_golden() -> None:
    assert chakra.encode_trace(GlobalMetadata(version="0.0.4"), [golden_node()]) == GOLDEN


def test_default_version_is_the_golden_one() -> None:
    assert chakra.encode_trace(GlobalMetadata(), [golden_node()]) == GOLDEN


def test_encode_golden_parts() -> None:
    assert chakra.frame(chakra.encode_metadata(GlobalMetadata())) == GOLDEN[:8]
    assert chakra.frame(chakra.encode_node(golden_node())) == GOLDEN[8:]


def test_decode_golden() -> None:
    meta, nodes = chakra.decode_trace(GOLDEN)
    assert meta == GlobalMetadata(version="0.0.4", attrs=[])
    assert nodes == [golden_node()]
    node = nodes[0]
    assert node.attrs == [
        Attr("is_cpu_op", AttrKind.BOOL, False),
        Attr("comm_type", AttrKind.INT64, 0),
        Attr("comm_size", AttrKind.INT64, 1048576),
    ]
    assert node.get("comm_size") == 1048576
    assert node.get("comm_type") == CollectiveType.ALL_REDUCE
    assert node.get("is_cpu_op") is False
    assert node.get("pg_name", "") == ""
    assert node.attr("missing") is None


def test_write_and_read_golden_file(tmp_path: Path) -> None:
    path = chakra.trace_path(tmp_path / "all_reduce", 3)
    assert path.name == "all_reduce.3.et"
    written = chakra.write_trace(path, GlobalMetadata(), [golden_node()])
    assert written == 83
    assert path.read_bytes() == GOLDEN
    assert chakra.read_trace(path) == (GlobalMetadata(), [golden_node()])
    assert list(chakra.iter_nodes(path)) == [golden_node()]
    assert [p.name for p in tmp_path.iterdir()] == ["all_reduce.3.et"]  # no temp file left
