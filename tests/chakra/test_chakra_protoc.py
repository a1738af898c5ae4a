"""Cross-check against the reference protobuf implementation through `protoc --encode` (optional).

The schema below is written from the tables of docs/chakra-et-format.md, plus a `Batch`
wrapper so that one protoc run encodes a whole random trace. Skipped when protoc is absent.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest
from chakra_samples import GOLDEN, golden_node
from chakra_strategies import metadata, nodes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simstudy import chakra
from simstudy.chakra import Attr, AttrKind, GlobalMetadata, IOInfo, Node

PROTOC = shutil.which("protoc")
pytestmark = pytest.mark.skipif(PROTOC is None, reason="protoc is not installed")

ELEMENT_TYPES = [
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
    "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
]  # fmt: skip


def schema() -> str:
    members = []
    wrappers = []
    for i, elem in enumerate(ELEMENT_TYPES):
        wrapper = elem.capitalize() + "List"
        members.append(f"    {elem} {elem}_val = {3 + 2 * i};\n    {wrapper} {elem}_list = {4 + 2 * i};")
        wrappers.append(f"message {wrapper} {{ repeated {elem} values = 1; }}")
    oneof = "\n".join(members)
    return f"""syntax = "proto3";
package ChakraProtoMsg;
message AttributeProto {{
  string name = 1;
  string doc_string = 2;
  oneof value {{
{oneof}
  }}
}}
{chr(10).join(wrappers)}
message GlobalMetadata {{ string version = 1; repeated AttributeProto attr = 2; }}
enum NodeType {{
  INVALID_NODE = 0; METADATA_NODE = 1; MEM_LOAD_NODE = 2; MEM_STORE_NODE = 3;
  COMP_NODE = 4; COMM_SEND_NODE = 5; COMM_RECV_NODE = 6; COMM_COLL_NODE = 7;
}}
message IOInfo {{ string values = 1; string shapes = 2; string types = 3; }}
message Node {{
  uint64 id = 1; string name = 2; NodeType type = 3;
  repeated uint64 ctrl_deps = 4; repeated uint64 data_deps = 5;
  uint64 start_time_micros = 6; uint64 duration_micros = 7;
  IOInfo inputs = 8; IOInfo outputs = 9; repeated AttributeProto attr = 10;
}}
message Batch {{ GlobalMetadata meta = 1; repeated Node nodes = 2; }}
"""


@pytest.fixture(scope="module")
def proto_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("proto")
    (directory / "et.proto").write_text(schema())
    return directory


def protoc_encode(proto_dir: Path, text: str) -> bytes:
    assert PROTOC is not None
    done = subprocess.run(
        [PROTOC, f"--proto_path={proto_dir}", "--encode=ChakraProtoMsg.Batch", "et.proto"],
        input=text.encode(),
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


# -- protobuf text format of our values --


def quoted(value: str | bytes) -> str:
    raw = value.encode() if isinstance(value, str) else value
    return '"' + "".join(f"\\{byte:03o}" for byte in raw) + '"'


def scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | bytes):
        return quoted(value)
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def attr_text(attr: Attr) -> str:
    parts = [f"name: {quoted(attr.name)}", f"doc_string: {quoted(attr.doc_string)}"]
    if attr.kind == AttrKind.NOT_SET:
        pass
    elif attr.kind.is_list:
        assert isinstance(attr.value, tuple)
        values = " ".join(f"values: {scalar(v)}" for v in attr.value)
        parts.append(f"{attr.kind.field_name} {{ {values} }}")
    else:
        parts.append(f"{attr.kind.field_name}: {scalar(attr.value)}")
    return "attr { " + " ".join(parts) + " }"


def io_text(field: str, info: IOInfo | None) -> str:
    if info is None:
        return ""
    return f"{field} {{ values: {quoted(info.values)} shapes: {quoted(info.shapes)} types: {quoted(info.types)} }}"


def node_text(node: Node) -> str:
    parts = [f"id: {node.id}", f"name: {quoted(node.name)}", f"type: {node.type.name}"]
    parts += [f"ctrl_deps: {d}" for d in node.ctrl_deps]
    parts += [f"data_deps: {d}" for d in node.data_deps]
    parts += [f"start_time_micros: {node.start_time_micros}", f"duration_micros: {node.duration_micros}"]
    parts += [io_text("inputs", node.inputs), io_text("outputs", node.outputs)]
    parts += [attr_text(a) for a in node.attrs]
    return "nodes { " + " ".join(parts) + " }"


def batch_text(meta: GlobalMetadata, node_list: list[Node]) -> str:
    meta_attrs = " ".join(attr_text(a) for a in meta.attrs)
    lines = [f"meta {{ version: {quoted(meta.version)} {meta_attrs} }}"]
    return "\n".join(lines + [node_text(n) for n in node_list]) + "\n"


def our_batch(meta: GlobalMetadata, node_list: list[Node]) -> bytes:
    parts = [b"\x0a" + chakra.frame(chakra.encode_metadata(meta))]
    parts += [b"\x12" + chakra.frame(chakra.encode_node(n)) for n in node_list]
    return b"".join(parts)


def test_golden_through_protoc(proto_dir: Path) -> None:
    meta = GlobalMetadata()
    expected = protoc_encode(proto_dir, batch_text(meta, [golden_node()]))
    assert expected == our_batch(meta, [golden_node()])
    assert expected[1:9] + expected[10:] == GOLDEN  # Batch keys 0a and 12 dropped: the ET frames


@given(metadata(), st.lists(nodes(), max_size=5))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_bytes_equal_protobuf(proto_dir: Path, meta: GlobalMetadata, node_list: list[Node]) -> None:
    reference = protoc_encode(proto_dir, batch_text(meta, node_list))
    assert our_batch(meta, node_list) == reference
