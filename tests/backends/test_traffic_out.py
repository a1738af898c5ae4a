"""What a run keeps of its transfers (rows streamed in row groups, per-link bins, or counts), the
identical-ranks shortcut, the progress callback, and a 4096-NPU run in bounded memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simstudy import layout
from simstudy.backends import BackendError, FlowsimBackend, RunResult, traffic_out, write_run
from simstudy.backends.base import Progress
from simstudy.backends.flowsim import DEFAULT, FULL, Shortcuts
from simstudy.backends.network import Network
from simstudy.compiler import Bundle, compile_scenario
from simstudy.compiler.topology_file import read_topology
from simstudy.linktable import COLUMNS, read_links
from simstudy.spec import Scenario
from simstudy.sweeps.runner import run_metrics
from simstudy.table import read_table

SPEC = {"name": "t", "model": "small_cnn", "parallelism": {"dp": 4, "bucket_size_mib": 0.5},
        "topology": {"kind": "switch", "npus": 4, "bandwidth_gbps": 10}, "system": {"collective_chunks": 2},
        "training": {"batch_size_per_worker": 4, "iterations": 2}}
PS = {"name": "ps", "model": "small_cnn", "parallelism": {"dp": 3, "bucket_size_mib": 0.25, "aggregation": {
    "kind": "parameter_server", "servers": 1}}, "topology": {"kind": "tree", "npus": 4, "fanout": 2},
      "training": {"batch_size_per_worker": 4, "iterations": 1}}


def compiled(spec: dict[str, object], tmp: Path) -> tuple[Scenario, Bundle]:
    res = compile_scenario(Scenario.model_validate(spec), tmp / "bundle")
    return res.scenario, res.bundle


def _sorted(t: pd.DataFrame) -> pd.DataFrame:
    return t.sort_values(list(t.columns), kind="stable").reset_index(drop=True)


def test_rows_stream_to_parquet_in_row_groups(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _, bundle = compiled(SPEC, tmp_path)
    whole = FlowsimBackend().run(bundle, tmp_path / "whole").traffic
    monkeypatch.setattr(traffic_out, "ROW_GROUP", 40)
    result = FlowsimBackend().run(bundle, tmp_path / "streamed")
    path = result.output.path
    assert path is not None and pq.ParquetFile(path).num_row_groups > 2
    assert result.output._table is None  # not held: read from disk on demand
    assert result.output.transfers == len(whole) and result.output.total_bytes == int(whole["bytes"].sum())
    streamed = result.traffic
    assert _sorted(streamed).equals(_sorted(whole))
    assert sum(len(c) for c in result.output.chunks()) == len(whole)
    write_run(result, tmp_path / "run")
    assert _sorted(read_table(tmp_path / "run" / layout.TRAFFIC)).equals(_sorted(whole))


@pytest.mark.parametrize("mode", ["fluid", "aware"])
def test_links_are_the_rows_put_on_their_routes(mode: str, tmp_path: Path) -> None:
    """Each link's bytes in links.parquet are the bytes of the transfers whose route crosses it; with
    fluid sharing no link carries more than its capacity in any bin."""
    _, bundle = compiled(PS, tmp_path)
    rows = FlowsimBackend(congestion=mode).run(bundle, tmp_path / "rows").traffic
    result = FlowsimBackend(congestion=mode, traffic="links", traffic_bin_s=1e-4).run(bundle, tmp_path / "links")
    links = result.links
    assert links is not None and list(links.columns) == list(COLUMNS)
    net = Network.from_topology(read_topology(bundle.topology))  # type: ignore[arg-type]
    expected = np.zeros(len(net.capacity))
    for s, d, b in zip(rows["src"], rows["dst"], rows["bytes"], strict=True):
        for link in net.route(int(s), int(d)):
            expected[link] += b
    got = links.groupby("link")["bytes"].sum()
    assert np.allclose(got.to_numpy(), expected[got.index.to_numpy()], rtol=1e-9)
    assert set(got.index) == set(np.flatnonzero(expected))
    assert set(links["tier"].unique()) == {"host", "level1"}
    if mode == "fluid":
        assert links["utilization"].max() <= 1 + 1e-6
    assert result.output.transfers == len(rows) and result.output.total_bytes == int(rows["bytes"].sum())
    write_run(result, tmp_path / "run")
    assert read_links(tmp_path / "run" / layout.LINKS).equals(links)
    assert not (tmp_path / "run" / layout.TRAFFIC).exists()


#: Data parallelism on a leaf-spine: no lanes, collectives timed alone with every member (kept as
#: counts when the run keeps no rows) and, per pair, reused.
LEAF_SPINE = {**SPEC, "parallelism": {"dp": 8, "bucket_size_mib": 0.5},
              "topology": {"kind": "leaf_spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 2, "gpus_per_host": 2,
                           "bandwidth_gbps": 10, "ecmp": "pair"}}


@pytest.mark.parametrize("spec", [SPEC, LEAF_SPINE], ids=["switch", "leaf_spine"])
def test_every_mode_counts_the_same_transfers(spec: dict[str, object], tmp_path: Path) -> None:
    """rows, links and none report the same transfers, bytes and bytes per rank (run.json and the
    sweep summary's metrics); none keeps nothing else."""
    scenario, bundle = compiled(spec, tmp_path)
    results = {m: FlowsimBackend(traffic=m).run(bundle, tmp_path / m) for m in ("rows", "links", "none")}
    metrics = {m: run_metrics(r, scenario) for m, r in results.items()}
    for m in ("links", "none"):
        assert {k: v for k, v in metrics[m].items() if k != "backend_wall_s"} == \
            {k: v for k, v in metrics["rows"].items() if k != "backend_wall_s"}
    assert metrics["rows"]["bytes_per_iter_rank_max"] > 0
    write_run(results["none"], tmp_path / "run")
    summary = json.loads((tmp_path / "run" / layout.RUN_JSON).read_text())
    assert summary["traffic"] == "none" and summary["transfers"] == len(results["rows"].traffic)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [layout.RUN_JSON, layout.SPANS]


def _run(bundle: Bundle, out: Path, shortcuts: Shortcuts = DEFAULT) -> RunResult:
    return FlowsimBackend(congestion="aware", shortcuts=shortcuts).run(bundle, out)


@pytest.mark.parametrize("other", [Shortcuts(identical_ranks=False), FULL], ids=["every_rank", "full"])
def test_identical_ranks_are_simulated_once(other: Shortcuts, tmp_path: Path) -> None:
    """Data parallelism on a switch: every rank runs the same trace and every collective finishes
    for all at once, so rank 0 stands for all; the result is the same as simulating every rank
    (with the other shortcuts, and with none)."""
    _, bundle = compiled(SPEC, tmp_path)
    once = _run(bundle, tmp_path / "once")
    assert once.details["identical_ranks"]
    every = _run(bundle, tmp_path / "every", other)
    assert not every.details["identical_ranks"]
    assert once.ranks == every.ranks
    assert _sorted(once.traffic).equals(_sorted(every.traffic))
    cols = ["rank", "node", "start_ns", "end_ns"]
    a = once.spans.sort_values(cols).reset_index(drop=True)
    b = every.spans.sort_values(cols).reset_index(drop=True)
    assert a[cols].equals(b[cols])
    for col in ("name", "kind"):
        assert (a[col].astype(str).to_numpy() == b[col].astype(str).to_numpy()).all()


def test_progress_is_fed_by_the_fraction_of_nodes_done(tmp_path: Path) -> None:
    _, bundle = compiled(PS, tmp_path)
    seen: list[Progress] = []
    FlowsimBackend(progress=seen.append).run(bundle, tmp_path / "w")
    fractions = [p.fraction for p in seen]
    assert seen and fractions[-1] == 1.0 and fractions == sorted(fractions) and 0 <= fractions[0] <= 1


def test_progress_tells_simulated_time_and_transfers(tmp_path: Path) -> None:
    """A run of several thousand transfers is followed by its transfers (the fraction of those it
    expects: every ring message of every rank), its simulated time and their rates; the last
    report is the run's whole."""
    spec = {**LEAF_SPINE, "parallelism": {"dp": 32, "bucket_size_mib": 0.5},
            "topology": {**LEAF_SPINE["topology"], "hosts_per_leaf": 4, "gpus_per_host": 4}}  # type: ignore[dict-item]
    _, bundle = compiled(spec, tmp_path)
    seen: list[Progress] = []
    result = FlowsimBackend(progress=seen.append, shortcuts=FULL).run(bundle, tmp_path / "w")
    assert len(seen) > 2
    last = seen[-1]
    assert last.fraction == 1.0 and last.sim_ns == result.finish_ns and last.transfers == result.output.transfers
    middle = seen[len(seen) // 2]
    assert 0 < middle.fraction < 1 and 0 < middle.sim_ns < result.finish_ns and middle.transfers > 0
    # the fraction is of the transfers expected (here exactly those of the run)
    assert abs(middle.fraction - middle.transfers / result.output.transfers) < 0.01
    assert middle.transfers_per_s > 0 and middle.sim_ns_per_s > 0
    assert [p.sim_ns for p in seen] == sorted(p.sim_ns for p in seen)
    # routing first, then simulating, then writing (the last report, with the run's whole)
    phases = [p.phase for i, p in enumerate(seen) if i == 0 or p.phase != seen[i - 1].phase]
    assert phases == ["route", "simulate", "write"]


@pytest.mark.slow
def test_a_4096_npu_all_reduce_runs_in_bounded_memory(tmp_path: Path) -> None:
    """A 1 GiB ring all-reduce of 4096 NPUs in 4 chunks (134 million transfers) keeping per-link bins:
    its peak memory stays under 1 GB (it is about 0.35 GB), and it finishes at ASTRA-SIM's time:
    per chunk, 10 + 8190 x (int(500 + 65536 / 53.687) + 10) + 4095 x 3 x floor(65536 / 1600) ns."""
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from simstudy import chakra
        def peak_rss_mb():  # this process's own high-water mark: ru_maxrss would report pytest's
            for line in open("/proc/self/status"):  # peak, which Linux carries across fork and exec
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        from simstudy.backends import FlowsimBackend
        from simstudy.chakra import CollectiveType, GlobalMetadata, Node, NodeType
        from simstudy.compiler import Bundle
        tmp = Path({str(tmp_path)!r})
        node = Node(0, "ar", NodeType.COMM_COLL_NODE, attrs=[chakra.is_cpu_op(False),
                    chakra.comm_type(CollectiveType.ALL_REDUCE), chakra.comm_size(2**30)])
        data = chakra.encode_trace(GlobalMetadata(), [node])
        for r in range(4096):
            chakra.trace_path(tmp / "ar", r).write_bytes(data)
        (tmp / "network.yml").write_text("topology: [ Ring ]\\nnpus_count: [ 4096 ]\\nbandwidth: [ 50.0 ]\\n"
                                         "latency: [ 500.0 ]\\n")
        (tmp / "system.json").write_text(json.dumps({{"endpoint-delay": 10, "active-chunks-per-dimension": 1,
            "preferred-dataset-splits": 4, "all-reduce-implementation": ["ring"], "local-mem-bw": 1600}}))
        r = FlowsimBackend(congestion="aware", traffic="links").run(
            Bundle(tmp / "ar", tmp / "network.yml", tmp / "system.json"), tmp / "w")
        print(json.dumps({{"finish": r.finish_ns, "transfers": r.output.transfers, "links": len(r.links),
                          "rss_mb": peak_rss_mb()}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    chunk = 10 + 8190 * (int(500 + 65536 / (50 * 2**30 / 1e9)) + 10) + 4095 * 3 * (65536 // 1600)
    assert res["finish"] == 4 * chunk
    assert res["transfers"] == 4 * 8190 * 4096 and res["links"] > 0
    assert res["rss_mb"] < 1000


def _one_all_reduce_on_a_leaf_spine(tmp: Path) -> Bundle:
    """One 64 MiB all-reduce of 64 GPUs (2 leaves, 4 hosts each, 8 GPUs a host) in 4 chunks: a
    run that is nearly all one collective timed alone (32,256 messages)."""
    from simstudy.compiler.topology_file import topology_of
    from tests.backends.bundles import collective_node, write_bundle

    topo = Scenario.model_validate({**LEAF_SPINE, "parallelism": {"dp": 64}, "topology": {
        **LEAF_SPINE["topology"], "hosts_per_leaf": 4, "gpus_per_host": 8}}).topology  # type: ignore[dict-item]
    return write_bundle(tmp, [("Switch", 64, 12.5, 500.0)], [[collective_node(0, "all_reduce", 64 << 20)]] * 64,
                        splits=4, topology=topology_of(topo).to_json())


def test_a_collective_timed_alone_shows_progress_and_times_out(tmp_path: Path) -> None:
    """A collective timed alone (in its own event queue) reports progress as it goes, transfers and
    simulated time growing, and is stopped at the run's deadline: before, a run that was one such
    collective said nothing until it ended and ran past its timeout."""
    bundle = _one_all_reduce_on_a_leaf_spine(tmp_path / "b")
    seen: list[Progress] = []
    # unaware: on a shared network a plan met once runs message by message (`Comms._worth_timing`)
    result = FlowsimBackend(progress=seen.append, traffic="none", congestion="unaware").run(bundle, tmp_path / "w")
    assert result.details["timed"] == 1 and result.details["fast"] == 1
    middle = [p for p in seen if 0 < p.fraction < 1]
    assert len(middle) >= 3
    assert 0 < middle[0].sim_ns < result.finish_ns and 0 < middle[0].transfers < result.output.transfers / 2
    assert [p.transfers for p in middle] == sorted(p.transfers for p in middle)
    assert [p.sim_ns for p in middle] == sorted(p.sim_ns for p in middle)
    assert all(p.transfers <= result.output.transfers for p in middle)
    with pytest.raises(BackendError, match="timed out"):
        FlowsimBackend(traffic="none", congestion="unaware").run(bundle, tmp_path / "t", timeout_s=1e-3)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 3)), min_size=1, max_size=60),
       st.integers(0, 2**40), st.sampled_from([1, 3, traffic_out.HELD]))
@settings(max_examples=200, deadline=None)
def test_counts_held_add_up_as_counted_one_by_one(calls: list[tuple[int, int]], seed: int, held: int) -> None:
    """`count` holds repeated arrays (a timing found again) and adds them up when `sent` is read:
    the same bytes per rank as adding every call as it comes, whatever the order, the repeats,
    ranks beyond the run's (left out) and the bound on what is held."""
    rng = np.random.default_rng(seed)
    arrays = [(rng.choice(12, size=k, replace=False).astype(np.int64),
               rng.integers(1, 2**30, size=k).astype(np.float64)) for k in rng.integers(1, 6, size=6).tolist()]
    ref = np.zeros(10)
    old = traffic_out.HELD
    traffic_out.HELD = held
    try:
        sink = traffic_out.TrafficSink(10)
        for which, times in calls:
            ranks, sent = arrays[which]
            for _ in range(times):
                sink.count(len(ranks), int(sent.sum()), ranks, sent)
                keep = ranks < len(ref)
                np.add.at(ref, ranks[keep], sent[keep])
            if which == 5:  # read in between: what is held is added, and holding starts again
                assert sink.sent.tolist() == ref.tolist()
    finally:
        traffic_out.HELD = old
    assert sink.sent.tolist() == ref.tolist()
    assert sink.transfers == sum(len(arrays[w][0]) * t for w, t in calls)
