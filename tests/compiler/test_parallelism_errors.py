"""Parallelism that cannot work: one clear error naming the file, the field and what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simstudy.compiler import compile_scenario
from simstudy.spec import SpecError, load_scenario

PS1 = {"kind": "parameter_server", "servers": 1, "placement": "colocated"}
GPT = {"zoo": "decoder", "options": {"layers": 2, "hidden": 64, "heads": 4, "seq_len": 32, "vocab": 256}}

CASES = {
    # name: (spec, field, words the message must hold)
    "npus_mismatch": ({"model": GPT, "parallelism": {"dp": 2, "tp": 3}, "topology": {"kind": "ring", "npus": 8}},
                      "parallelism", ["8 NPUs", "dp*tp*pp = 2*3*1 = 6"]),
    "tp_heads": ({"model": GPT, "parallelism": {"dp": 1, "tp": 3}, "topology": {"kind": "ring", "npus": 3}},
                 "parallelism.tp", ["tp = 3", "4 attention heads"]),
    "pp_layers": ({"model": GPT, "parallelism": {"dp": 1, "pp": 8, "microbatches": 8},
                   "topology": {"kind": "switch", "npus": 8}, "training": {"batch_size_per_worker": 8}},
                  "parallelism.pp", ["pp = 8", "has 7"]),
    "layerwise_layers": ({"model": "small_cnn", "parallelism": {"dp": 1, "tp": 3, "pp": 3, "schedule": "gpipe"},
                          "topology": {"kind": "switch", "npus": 9}},
                         "parallelism.tp", ["layer-wise", "tp*pp = 3*3 = 9", "it has 8"]),
    "1f1b_microbatches": ({"model": GPT, "parallelism": {"dp": 1, "pp": 4, "microbatches": 2},
                           "topology": {"kind": "switch", "npus": 4}},
                          "parallelism.microbatches", ["1f1b", "pp = 4", "got 2"]),
    "batch_split": ({"model": GPT, "parallelism": {"dp": 1, "pp": 2, "microbatches": 3},
                     "topology": {"kind": "switch", "npus": 2}, "training": {"batch_size_per_worker": 8}},
                    "parallelism.microbatches", ["3 microbatches", "batch_size_per_worker = 8"]),
    "sharding_ps": ({"model": GPT, "parallelism": {"dp": 4, "sharding": "zero1", "aggregation": PS1},
                     "topology": {"kind": "switch", "npus": 4}},
                    "parallelism.sharding", ["'zero1'", "parameter server"]),
    "tp_ps": ({"model": GPT, "parallelism": {"dp": 2, "tp": 2, "aggregation": PS1},
               "topology": {"kind": "switch", "npus": 4}},
              "parallelism.tp", ["parameter server", "tp = 2"]),
    "gossip_peers": ({"model": "small_cnn", "parallelism": {"dp": 8, "aggregation": {"graph": "exponential",
                                                                                      "peers": 4}},
                      "topology": {"kind": "switch", "npus": 8}},
                     "parallelism.aggregation.peers", ["exponential", "3 powers of two below dp = 8", "peers = 4"]),
    "gossip_ring_peers": ({"model": "small_cnn", "parallelism": {"dp": 3, "aggregation": {"peers": 3}},
                           "topology": {"kind": "switch", "npus": 3}},
                          "parallelism.aggregation.peers", ["2 other workers", "peers = 3"]),
    "gossip_one_worker": ({"model": "small_cnn", "parallelism": {"dp": 1, "aggregation": {"kind": "gossip"}},
                           "topology": {"kind": "switch", "npus": 1}},
                          "parallelism.dp", ["dp >= 2", "dp = 1"]),
    "gossip_tp": ({"model": GPT, "parallelism": {"dp": 2, "tp": 2, "aggregation": {"kind": "gossip"}},
                   "topology": {"kind": "switch", "npus": 4}},
                  "parallelism.aggregation", ["gossip", "plain data parallelism"]),
    "staleness_ps": ({"model": GPT, "parallelism": {"dp": 4, "staleness": 1, "aggregation": PS1},
                      "topology": {"kind": "switch", "npus": 4}},
                     "parallelism.staleness", ["staleness = 1", "allreduce or gossip", "parameter_server"]),
    "staleness_tp": ({"model": GPT, "parallelism": {"dp": 2, "tp": 2, "staleness": 2},
                      "topology": {"kind": "switch", "npus": 4}},
                     "parallelism.staleness", ["staleness = 2", "plain data parallelism", "dp*tp*pp = 2*2*1"]),
    "staleness_async_gossip": ({"model": "small_cnn", "parallelism": {"dp": 4, "staleness": 1, "aggregation": {
        "peers": 2, "mode": "async"}}, "topology": {"kind": "switch", "npus": 4}},
                               "parallelism.staleness", ["async gossip", "mode: sync"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_error_names_file_and_field(case: str, tmp_path: Path) -> None:
    spec, field, words = CASES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(yaml.safe_dump({"name": case, **spec}))
    with pytest.raises(SpecError) as info:
        compile_scenario(load_scenario(path), tmp_path / "out", source=path)
    err = info.value
    assert err.file == str(path)
    assert err.field == field
    for w in words:
        assert w in err.message, (w, err.message)
    assert not (tmp_path / "out").exists()


def test_error_in_referenced_parallelism_file_names_that_file(tmp_path: Path) -> None:
    par = tmp_path / "workloads" / "pp4.yaml"
    par.parent.mkdir()
    par.write_text("pp: 4\nmicrobatches: 2\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("model: gpt2\nparallelism: workloads/pp4.yaml\ntopology: {kind: switch, npus: 4}\n")
    with pytest.raises(SpecError) as info:
        load_scenario(spec)
    assert info.value.file == str(par.resolve()) and info.value.field == "microbatches"
