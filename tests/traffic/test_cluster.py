"""Clustering runs and captures by traffic shape, on real analysed tables and a real sweep."""

from __future__ import annotations

import json
import math
import shutil
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simstudy.report.cluster_plot import plot_clusters, short_label
from simstudy.spec import Study
from simstudy.sweeps import LocalExecutor, run_study
from simstudy.table import make_table, write_table
from simstudy.traffic.cluster import (
    FEATURES_FOR_CLUSTERING,
    LOG10_FEATURES,
    Clustering,
    Item,
    cluster,
    feature_matrix,
    load_items,
)
from simstudy.traffic.features import analyze


def _allreduce(period_s: float, grad_bytes: int, *, npus: int = 4, iterations: int = 20,
               burst_s: float = 0.008) -> pd.DataFrame:
    """Ring all-reduce bursts once per iteration, late in the iteration, silent otherwise."""
    steps = 2 * (npus - 1)
    step_s = burst_s / steps
    it, step, rank = np.meshgrid(np.arange(iterations), np.arange(steps), np.arange(npus), indexing="ij")
    start = (it * period_s + 0.7 * period_s + step * step_s).ravel()
    n = start.size
    return make_table({"t_start_s": start, "t_end_s": start + step_s, "src": rank.ravel(),
                       "dst": ((rank + 1) % npus).ravel(), "bytes": np.full(n, grad_bytes // npus),
                       "flow": (it * steps + step).ravel(), "op": ["allreduce"] * n,
                       "iteration": it.ravel()})


def _streaming(rate_bps: float, *, duration_s: float = 1.0, chunk_s: float = 0.002) -> pd.DataFrame:
    """One sender at a constant rate, back-to-back chunks, 50 chunks per flow."""
    n = round(duration_s / chunk_s)
    t = np.arange(n) * chunk_s
    return make_table({"t_start_s": t, "t_end_s": t + chunk_s, "src": np.zeros(n), "dst": np.ones(n),
                       "bytes": np.full(n, int(rate_bps / 8 * chunk_s)), "flow": np.arange(n) // 50,
                       "op": ["p2p"] * n})


ALLREDUCE = {"ar-50ms": (0.05, 20_000_000), "ar-60ms": (0.06, 30_000_000), "ar-80ms": (0.08, 25_000_000),
             "ar-100ms": (0.10, 40_000_000)}
STREAMING = {"st-1g": 1e9, "st-2g": 2e9, "st-4g": 4e9}


@pytest.fixture(scope="module")
def items() -> list[Item]:
    """Two patterns, interleaved so that input order does not give the answer away."""
    ar = [Item(name, f"period={p * 1e3:g} ms", "sim", analyze(_allreduce(p, g)).scalars())
          for name, (p, g) in ALLREDUCE.items()]
    st = [Item(name, f"rate={r / 1e9:g} Gbit/s", "real", analyze(_streaming(r)).scalars())
          for name, r in STREAMING.items()]
    return [ar[0], st[0], ar[1], st[1], ar[2], st[2], ar[3]]


def _partition(c: Clustering) -> set[frozenset[str]]:
    return {frozenset(names) for names in c.groups().values()}


# --- clustering ------------------------------------------------------------------------------


def test_two_patterns_are_found_and_separated_exactly(items: list[Item]) -> None:
    c = cluster(items)
    assert c.k == 2 and "silhouette" in c.note
    assert _partition(c) == {frozenset(ALLREDUCE), frozenset(STREAMING)}
    # clusters numbered by first item; groups keep input order
    assert c.groups() == {0: ["ar-50ms", "ar-60ms", "ar-80ms", "ar-100ms"], 1: ["st-1g", "st-2g", "st-4g"]}
    assert c.silhouette is not None and c.silhouette > 0.4
    assert set(c.scores) == set(range(2, 7)) and max(c.scores, key=c.scores.__getitem__) == 2
    assert c.scores[2] == pytest.approx(c.silhouette)
    # the matrix is standardized, the PCA picture separates the groups along PC1
    assert c.matrix.shape == (7, len(c.features))
    np.testing.assert_allclose(c.matrix.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(c.matrix.std(axis=0), 1.0)
    assert c.pcs.shape == (7, 2) and 0.5 < c.explained[0] <= 1.0 and sum(c.explained) <= 1.0 + 1e-12
    pc1 = {it.name: x for it, x in zip(c.items, c.pcs[:, 0], strict=True)}
    ar, st = [pc1[n] for n in ALLREDUCE], [pc1[n] for n in STREAMING]
    assert max(ar) < min(st) or max(st) < min(ar)
    # what tells them apart: duty cycle and burst length among the top features
    top = [f for f, _ in c.distinguishing(4)]
    assert {"duty_cycle", "burst_mean_s"} & set(top)
    med0, med1 = c.cluster_medians(0), c.cluster_medians(1)
    assert med0["duty_cycle"] < 0.3 < 0.9 < med1["duty_cycle"]
    # the median is taken in log10 (between 60 and 80 ms: their geometric mean), then undone
    assert med0["period_s"] == pytest.approx(math.sqrt(0.06 * 0.08), rel=1e-3)


def test_clustering_is_deterministic(items: list[Item]) -> None:
    a, b = cluster(items), cluster(items)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.pcs, b.pcs)
    assert a.scores == b.scores and a.lines() == b.lines()
    c = cluster(items, seed=7)
    assert _partition(c) == _partition(a)


def test_given_k(items: list[Item]) -> None:
    c = cluster(items, k=3)
    assert c.k == 3 and c.note == "k=3 given" and c.scores == {} and len(set(c.labels.tolist())) == 3
    # three clusters refine the two patterns: no cluster mixes them
    for names in c.groups().values():
        assert set(names) <= set(ALLREDUCE) or set(names) <= set(STREAMING)
    one = cluster(items, k=1)
    assert one.k == 1 and one.silhouette is None and one.groups() == {0: [it.name for it in items]}
    assert one.distinguishing() == []


def test_log10_features_and_the_feature_choice(items: list[Item]) -> None:
    assert set(FEATURES_FOR_CLUSTERING) <= set(items[0].scalars)
    for scale_bound in ("rows", "total_bytes", "duration_s", "iterations", "flow_count", "rank_count"):
        assert scale_bound not in FEATURES_FOR_CLUSTERING
    assert {"period_s", "bytes_per_iter_mean", "throughput_mean_bps", "flow_size_median"} <= LOG10_FEATURES
    assert not {"duty_cycle", "hurst", "period_strength"} & LOG10_FEATURES
    m = feature_matrix(items[:1], ["period_s", "duty_cycle", "nothing"])
    assert m[0, 0] == pytest.approx(math.log10(0.05)) and m[0, 1] == pytest.approx(items[0].scalars["duty_cycle"])
    assert math.isnan(m[0, 2])
    zero = feature_matrix([Item("z", "", "sim", {"burst_mean_s": 0.0})], ["burst_mean_s"])
    assert zero[0, 0] == pytest.approx(-6.0)  # floored, not -inf


def test_nan_imputation_and_dropped_columns(items: list[Item]) -> None:
    # streaming has no idle periods: idle_mean_s is NaN there and imputed with the median
    c = cluster(items)
    assert c.imputed == {"idle_mean_s": 3}
    j = c.features.index("idle_mean_s")
    known = [math.log10(it.scalars["idle_mean_s"]) for it in items if it.name in ALLREDUCE]
    for i, it in enumerate(c.items):
        if it.name in STREAMING:
            assert c.values[i, j] == pytest.approx(float(np.median(known)))
    # a constant column and a column missing everywhere are dropped and said so
    extra = [Item(it.name, it.label, it.source, {**it.scalars, "hurst": math.nan, "duty_cycle": 0.5})
             for it in items]
    d = cluster(extra, features=(*FEATURES_FOR_CLUSTERING, "not_a_metric"))
    assert "hurst" not in d.features and "duty_cycle" not in d.features
    assert d.dropped["hurst"] == "missing in every item"
    assert d.dropped["duty_cycle"].startswith("the same in every item")
    assert d.dropped["not_a_metric"] == "not a scalar of any item"
    assert _partition(d) == {frozenset(ALLREDUCE), frozenset(STREAMING)}
    text = "\n".join(d.lines())
    assert "dropped: " in text and "hurst (missing in every item)" in text and "imputed with the median" in text
    # missing keys count as NaN too
    partial = [Item(it.name, it.label, it.source, {k: v for k, v in it.scalars.items() if k != "period_s"})
               if it.name == "st-1g" else it for it in items]
    assert cluster(partial).imputed["period_s"] == 1


def test_few_items_and_identical_items(items: list[Item]) -> None:
    one = cluster(items[:1])
    assert one.k == 1 and "too few" in one.note and one.groups() == {0: [items[0].name]}
    assert one.silhouette is None and one.pcs.shape == (1, 2) and one.explained == (0.0, 0.0)
    two = cluster(items[:2])
    assert two.k == 1 and "2 items: too few to choose k" in two.note
    assert cluster(items[:2], k=2).groups() == {0: [items[0].name], 1: [items[1].name]}
    same = [Item(f"copy{i}", "", "sim", dict(items[0].scalars)) for i in range(4)]
    c = cluster(same)
    assert c.k == 1 and "same features" in c.note and c.features == () and len(c.dropped) > 0
    assert c.lines()[0].startswith("4 items in 1 cluster ")


def test_errors(items: list[Item]) -> None:
    with pytest.raises(ValueError, match="no items"):
        cluster([])
    with pytest.raises(ValueError, match=r"no usable features: none of .* has a value in any of the 2 items"):
        cluster([Item("a", "", "sim", {"rows": 1.0}), Item("b", "", "sim", {"duty_cycle": math.nan})])
    with pytest.raises(ValueError, match=r"k must be between 1 and the number of items \(7\), got 9"):
        cluster(items, k=9)
    with pytest.raises(ValueError, match="k=2 but the items have only 1 distinct"):
        cluster([Item(f"c{i}", "", "sim", dict(items[0].scalars)) for i in range(3)], k=2)
    with pytest.raises(ValueError, match=r"names must be unique; repeated: \['ar-50ms'\]"):
        cluster([items[0], items[0], items[1]])
    with pytest.raises(ValueError, match="source must be 'sim' or 'real'"):
        Item("x", "", "simulated", {})  # type: ignore[arg-type]


def test_lines_list_every_cluster_and_member(items: list[Item]) -> None:
    lines = cluster(items).lines()
    text = "\n".join(lines)
    assert lines[0].startswith("7 items in 2 clusters, silhouette ")
    assert "cluster 0 (4 items):" in text and "cluster 1 (3 items):" in text
    for it in items:
        assert any(it.name in line and it.label in line and f"[{it.source}]" in line for line in lines)
    assert "distinguishing features" in lines[-1] and "median: " in text


# --- loading from disk -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sweep")
    study = Study.model_validate({
        "name": "cluster_tiny",
        "base": {"model": "small_cnn", "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10},
                 "training": {"iterations": 3}},
        "axes": {"parallelism.aggregation.kind": ["allreduce", "parameter_server"], "topology.npus": [2, 4]},
    })
    result = run_study(study, tmp, tmp / "out", executor=LocalExecutor(1), progress=False)
    assert result.all_ok
    return tmp / "out"


def test_load_items_from_a_real_sweep(sweep_dir: Path) -> None:
    items = load_items([sweep_dir])
    summary = pd.read_parquet(sweep_dir / "summary.parquet")
    assert [it.name for it in items] == list(summary["key"])
    assert {it.label for it in items} == {f"parallelism.aggregation.kind={a}, topology.npus={n}"
                                          for a in ("allreduce", "parameter_server") for n in (2, 4)}
    assert all(it.source == "sim" for it in items)
    # the scalars are the summary's and agree with each run's features.json
    first = items[0]
    from_json = load_items([sweep_dir / "runs" / first.name])[0]
    assert from_json.source == "sim" and from_json.name == first.name
    for f in FEATURES_FOR_CLUSTERING:
        a, b = first.scalars[f], from_json.scalars[f]
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b)
    c = cluster(items)
    assert 1 <= c.k <= 3 and sorted(n for g in c.groups().values() for n in g) == sorted(it.name for it in items)
    assert any("topology.npus=4" in line for line in c.lines())


def test_load_items_falls_back_to_run_directories(sweep_dir: Path, tmp_path: Path) -> None:
    """A summary without feature columns (a sweep run without the features analysis)."""
    copy = tmp_path / "copy"
    shutil.copytree(sweep_dir, copy, ignore=shutil.ignore_patterns("bundle", "work"))
    summary = pd.read_parquet(copy / "summary.parquet")
    summary.drop(columns=[c for c in FEATURES_FOR_CLUSTERING if c in summary.columns]).to_parquet(
        copy / "summary.parquet", index=False)
    fallback, direct = load_items([copy]), load_items([sweep_dir])
    assert [it.name for it in fallback] == [it.name for it in direct]
    for a, b in zip(fallback, direct, strict=True):
        for f in FEATURES_FOR_CLUSTERING:
            x, y = a.scalars[f], b.scalars[f]
            assert (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y)
    # the same run directories given twice: names get their top directory in front
    both = load_items([sweep_dir, copy])
    assert len({it.name for it in both}) == 8 and all(it.name.startswith(("out/", "copy/")) for it in both)


#: A valid pcap with no packets: the global header (magic, v2.4, snap length 65535, Ethernet).
EMPTY_PCAP = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)


def _capture_dir(d: Path, table: pd.DataFrame, *, meta: bool) -> Path:
    """A capture directory as `simstudy analyze` leaves it: captures (or meta.json) and analysis/features.json."""
    (d / "analysis").mkdir(parents=True)
    (d / "worker0.pcap").write_bytes(EMPTY_PCAP)
    if meta:
        (d / "meta.json").write_text("{}")
    (d / "analysis" / "features.json").write_text(json.dumps(analyze(table).to_json()))
    return d


def test_load_items_from_captures_and_run_directories(tmp_path: Path, items: list[Item]) -> None:
    captures = tmp_path / "captures"
    for i, (name, rate) in enumerate(STREAMING.items()):
        _capture_dir(captures / f"pytorch-{name}-sgd-32-gloo-10ms", _streaming(rate), meta=i == 0)
    run = tmp_path / "ar-run"  # a run directory with its traffic only: analysed on loading
    run.mkdir()
    write_table(_allreduce(0.05, 20_000_000), run / "traffic.parquet")
    (run / "run.json").write_text("{}")
    analysis = captures / "pytorch-st-4g-sgd-32-gloo-10ms" / "analysis"
    loaded = load_items([captures, run, analysis])
    names = [it.name for it in loaded]
    # an analysis/ directory is named after its parent; a name given twice gets its top directory in front
    assert names == ["pytorch-st-1g-sgd-32-gloo-10ms", "pytorch-st-2g-sgd-32-gloo-10ms",
                     "captures/pytorch-st-4g-sgd-32-gloo-10ms", "ar-run", "analysis/pytorch-st-4g-sgd-32-gloo-10ms"]
    assert [it.source for it in loaded] == ["real", "real", "real", "sim", "real"]
    assert loaded[3].scalars["period_s"] == pytest.approx(items[0].scalars["period_s"])
    assert loaded[0].scalars["duty_cycle"] == pytest.approx(items[1].scalars["duty_cycle"])
    c = cluster([*loaded[:4], *items[2:5]])
    assert _partition(c) == {frozenset({*names[:3], "st-2g"}), frozenset({"ar-run", "ar-60ms", "ar-80ms"})}
    # without a run.json or captures: traffic.parquet is a simulation, a bare features.json a capture
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "features.json").write_text((analysis / "features.json").read_text())
    (run / "run.json").unlink()
    assert [(it.name, it.source) for it in load_items([bare, run])] == [("bare", "real"), ("ar-run", "sim")]


def test_load_items_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such directory"):
        load_items([tmp_path / "missing"])
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"empty: unknown layout; expected a sweep directory \(summary.parquet"):
        load_items([tmp_path / "empty"])
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "worker0.pcap").write_bytes(EMPTY_PCAP)
    with pytest.raises(ValueError, match=r"raw: a capture directory that has not been analysed .* `simstudy analyze"):
        load_items([raw])
    with pytest.raises(ValueError, match="has not been analysed"):
        load_items([tmp_path])  # in a directory of directories too
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "features.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match=r"features\.json: not a readable features document"):
        load_items([bad])


# --- plot ------------------------------------------------------------------------------------


def test_plot_clusters_writes_a_png(items: list[Item], tmp_path: Path) -> None:
    out = plot_clusters(cluster(items), tmp_path / "clusters.png")
    assert out == tmp_path / "clusters.png" and out.stat().st_size > 5000
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    single = plot_clusters(cluster(items[:1]), tmp_path / "one.png")
    assert single.stat().st_size > 0


def test_short_label() -> None:
    assert short_label("parallelism.aggregation.kind=allreduce, topology.npus=4") == "kind=allreduce, npus=4"
    assert short_label("x" * 40, limit=10) == "x" * 9 + "…"
    assert short_label("rate=1 Gbit/s") == "rate=1 Gbit/s"
