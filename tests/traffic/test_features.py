"""The analysis pipeline recovers what synthetic traces were built with."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

from simstudy.traffic import empty_table, make_table
from simstudy.traffic.features import (
    MAX_VALUES,
    QUANTILE_LEVELS,
    Distribution,
    Features,
    analyze,
    bytes_per_iteration,
    flow_stats,
    hurst,
    iteration_period,
    on_off,
    rebin,
    traffic_matrix,
    training_rows,
)
from simstudy.traffic.iterations import find_iterations, interquartile_mean
from simstudy.traffic.timeline import throughput_timeline

PERIOD = 0.020
BURST = 0.005
RANKS = 4
CHUNKS = 5
CHUNK_BYTES = 250_000
ITERS = 10


def ring_table(*, iterations: int = ITERS, period_s: float = PERIOD, packets: int = 0, iteration_column: bool = True,
               control: bool = True, scale: int = 1, link: bool = False) -> pd.DataFrame:
    """A ring all-reduce every `period_s`: each rank sends CHUNKS chunks of CHUNK_BYTES to the next
    rank back to back over the first BURST seconds of an iteration (one row per chunk, or
    `packets` packets per chunk). Control rows (big, to rank 7) sit in the idle time."""
    t, e, src, dst, nbytes, flow, op, it, links = [], [], [], [], [], [], [], [], []
    dt = BURST / CHUNKS
    for k in range(iterations):
        for c in range(CHUNKS):
            s = k * period_s + c * dt
            for r in range(RANKS):
                if packets:
                    ts = s + (np.arange(packets) + 0.5) * dt / packets
                    t.append(ts)
                    e.append(ts)
                    nbytes.append(np.full(packets, CHUNK_BYTES // packets * scale))
                else:
                    t.append(np.array([s]))
                    e.append(np.array([s + dt]))
                    nbytes.append(np.array([CHUNK_BYTES * scale]))
                n = len(t[-1])
                src.append(np.full(n, r))
                dst.append(np.full(n, (r + 1) % RANKS))
                flow.append(np.full(n, k * 100 + c))
                op.append(np.full(n, "allreduce", dtype=object))
                it.append(np.full(n, k))
                links.append(np.full(n, f"l{r}", dtype=object))
        if control:
            for x in (t, e):
                x.append(np.array([k * period_s + 0.012]))
            src.append(np.array([0]))
            dst.append(np.array([7]))
            nbytes.append(np.array([10**9]))
            flow.append(np.array([99_999]))
            op.append(np.array(["control"], dtype=object))
            it.append(np.array([k]))
            links.append(np.array(["l0"], dtype=object))
    cols: dict[str, object] = {"t_start_s": np.concatenate(t), "t_end_s": np.concatenate(e),
                               "src": np.concatenate(src), "dst": np.concatenate(dst),
                               "bytes": np.concatenate(nbytes), "flow": np.concatenate(flow), "op": np.concatenate(op)}
    if iteration_column:
        cols["iteration"] = np.concatenate(it)
    if link:
        cols["link"] = np.concatenate(links)
    return make_table(cols)


def per_bin_table(counts: np.ndarray, bin_s: float = 1e-3) -> pd.DataFrame:
    """One packet per bin carrying that bin's bytes, in the middle of the bin (the first at 0)."""
    n = len(counts)
    t = (np.arange(n) + 0.5) * bin_s
    t[0] = 0.0
    return make_table({"t_start_s": t, "t_end_s": t, "src": np.zeros(n, dtype=int), "dst": np.ones(n, dtype=int),
                       "bytes": np.rint(counts).astype(np.int64), "flow": np.zeros(n, dtype=int),
                       "op": np.full(n, "udp", dtype=object)})


# --- period ----------------------------------------------------------------------------------


def test_period_from_autocorrelation() -> None:
    p = iteration_period(ring_table(iteration_column=False))
    assert p.method == "traffic" and "repeat the same bytes" in p.reason
    assert p.period_s == pytest.approx(PERIOD, rel=0.02)
    assert p.acf_strength > 0.9
    assert p.psd_period_s == pytest.approx(PERIOD, rel=0.02)
    assert math.isnan(p.iterations_period_s)


def test_packet_trace_gives_the_same_period() -> None:
    transfers = iteration_period(ring_table(iteration_column=False))
    packets = iteration_period(ring_table(iteration_column=False, packets=40))
    assert packets.method == "traffic"
    assert packets.period_s == pytest.approx(PERIOD, rel=0.02)
    assert packets.period_s == pytest.approx(transfers.period_s, rel=0.01)


def test_period_from_iteration_column_and_boundaries() -> None:
    p = iteration_period(ring_table())
    assert p.method == "iterations" and p.strength == pytest.approx(1.0)
    assert p.period_s == pytest.approx(PERIOD, rel=1e-9)
    assert p.acf_period_s == pytest.approx(PERIOD, rel=0.02)  # still reported
    starts = [k * PERIOD for k in range(ITERS)]
    for given in (starts, [starts, starts[1:]], {0: starts, 3: starts[:4]}):
        b = iteration_period(ring_table(iteration_column=False), boundaries=given)
        assert b.method == "boundaries"
        assert b.period_s == pytest.approx(PERIOD, rel=1e-9)


def _bursty(period_s: float, iterations: int, bursts: list[tuple[float, float, int]], seed: int,
            jitter: float = 0.0, noise_pps: int = 0) -> pd.DataFrame:
    """Packets (20 us apart on average) in bursts (offset, duration, bytes) every period."""
    rng = np.random.default_rng(seed)
    ts, bs = [], []
    t = 0.0
    for _ in range(iterations):
        for off, dur, nb in bursts:
            n = int(dur / 20e-6)
            ts.append(t + off + np.sort(rng.uniform(0, dur, n)))
            bs.append(np.full(n, nb // n))
        t += period_s * (1 + jitter * rng.standard_normal())
    if noise_pps:
        n = int(noise_pps * t)
        ts.append(rng.uniform(0, t, n))
        bs.append(np.full(n, 66))
    times, nbytes = np.concatenate(ts), np.concatenate(bs)
    n = len(times)
    return make_table({"t_start_s": times, "t_end_s": times, "src": np.zeros(n, dtype=int),
                       "dst": np.ones(n, dtype=int), "bytes": nbytes, "flow": np.zeros(n, dtype=int),
                       "op": np.full(n, "tcp", dtype=object)})


@pytest.mark.parametrize(
    ("period_s", "bursts", "jitter", "noise"),
    [
        (0.0237, [(0.002, 0.006, 10**6)], 0.0, 0),  # not a whole number of bins
        (0.050, [(0.005, 0.003, 10**6), (0.030, 0.010, 3 * 10**6)], 0.0, 0),  # two buckets per iteration
        (0.030, [(0.0, 0.008, 10**6)], 0.02, 2000),  # jitter and stray small packets
    ],
)
def test_period_of_harder_traces(period_s: float, bursts: list[tuple[float, float, int]], jitter: float,
                                 noise: int) -> None:
    table = _bursty(period_s, 40, bursts, seed=3, jitter=jitter, noise_pps=noise)
    p = iteration_period(table)
    assert p.method == "traffic"
    assert p.period_s == pytest.approx(period_s, rel=0.02)
    f = analyze(table)
    assert f.bytes_per_iteration.iterations == 40
    assert f.bytes_per_iteration.mean == pytest.approx(sum(b[2] for b in bursts), rel=0.01)


@pytest.mark.parametrize("seed", range(5))
def test_the_typical_iteration_is_the_mean_of_the_middle_half(seed: int) -> None:
    """`interquartile_mean`: within the quartiles, deaf to a quarter of stalls, and smooth where the
    median jumps: durations in two clusters (compute on shared cores alternating between paces)."""
    rng = np.random.default_rng(seed)
    d = rng.gamma(4.0, 5.0, size=int(rng.integers(8, 60)))
    q1, q3 = np.quantile(d, [0.25, 0.75])
    m = interquartile_mean(d)
    assert q1 <= m <= q3
    slow = d.copy()
    slow[np.argsort(d)[-len(d) // 5:]] *= 50  # a fifth of the iterations stall
    assert interquartile_mean(slow) == pytest.approx(m, rel=0.15)
    two = np.array([15.0] * 10 + [21.0] * 9)  # one more sample in the slow cluster:
    more = np.append(two, 21.0)
    assert abs(np.median(more) / np.median(two) - 1) > 0.15  # the median jumps by a fifth (15 to 18)
    assert abs(interquartile_mean(more) / interquartile_mean(two) - 1) < 0.08
    assert math.isnan(interquartile_mean(np.zeros(0)))


def _sender(parts: list[tuple[int, float]], gaps: list[int]) -> pd.DataFrame:
    """Rows of one sender in 1 ms bins: each part's bytes spread over its bins, followed by its
    silence."""
    v: list[float] = []
    for (width, nbytes), gap in zip(parts, gaps, strict=True):
        v += [nbytes / width] * width + [0.0] * gap
    busy = np.flatnonzero(np.array(v))
    t = (busy + 0.5) * 1e-3
    return make_table({"t_start_s": t, "t_end_s": t, "src": np.zeros(len(t), dtype=int),
                       "dst": np.ones(len(t), dtype=int), "bytes": np.array(v)[busy].astype(np.int64),
                       "flow": np.zeros(len(t), dtype=int), "op": np.full(len(t), "tcp", dtype=object)})


@pytest.mark.parametrize("seed", range(4))
def test_a_senders_iterations_where_no_silence_length_separates_them(seed: int) -> None:
    """Two buckets per iteration (1,054,248 and 372,992 bytes, a one-host parameter server's), the
    silence between them up to as long as the one between iterations (0-15 ms and 3-15 ms: jitter
    on shared cores; at 0 the second push follows the first in one burst): the bursts whose bytes
    add up to one quantum are the iterations."""
    rng = np.random.default_rng(seed)
    n = 20
    gaps = np.ravel(np.column_stack([rng.integers(0, 16, size=n), rng.integers(3, 16, size=n)])).tolist()
    found = find_iterations(_sender([(1, 1_054_248.0), (1, 372_992.0)] * n, gaps))
    assert found.bytes_per_iteration == pytest.approx(1_427_240, rel=1e-9)
    assert found.count >= n - 3  # nearly every iteration (the first one's start is setup's end)
    assert found.period_s == pytest.approx((sum(gaps) / n + 2) * 1e-3, rel=0.15)


@pytest.mark.parametrize(("compute", "per_iteration"), [((10, 20), 500_000), ((20, 40), 1_000_000)])
def test_which_split_of_a_cycle_stands(compute: tuple[int, int], per_iteration: int) -> None:
    """Two equal buckets per cycle, the first followed by 10-20 ms of silence, the second by
    `compute`: where the halves are alike (10-20 ms after each) each half is an iteration; where
    one half holds the compute (20-40 ms) the whole cycle is one."""
    rng = np.random.default_rng(1)
    n = 24
    gaps = np.ravel(np.column_stack([rng.integers(10, 21, size=n), rng.integers(*compute, size=n)])).tolist()
    found = find_iterations(_sender([(2, 500_000.0)] * 2 * n, gaps))
    assert found.bytes_per_iteration == pytest.approx(per_iteration, rel=1e-9)


def test_period_of_flat_or_tiny_traces_is_nan() -> None:
    p = iteration_period(per_bin_table(np.full(500, 1000.0)))
    assert (p.method, math.isnan(p.period_s)) == ("none", True)
    assert math.isnan(iteration_period(empty_table()).period_s)


# --- bytes, matrix, flows --------------------------------------------------------------------


@pytest.mark.parametrize(("packets", "column"), [(0, True), (0, False), (40, True), (40, False)])
def test_bytes_per_iteration_is_exact(packets: int, column: bool) -> None:
    table = ring_table(packets=packets, iteration_column=column)
    b = bytes_per_iteration(table, period=iteration_period(table))
    assert b.method == ("iteration_column" if column else "period")
    assert b.ranks == (0, 1, 2, 3)
    assert b.iterations == ITERS
    np.testing.assert_array_equal(b.per_worker, np.full(RANKS, CHUNKS * CHUNK_BYTES))
    assert b.mean == CHUNKS * CHUNK_BYTES
    # a float period works too; a trace cut mid-burst at both ends (2/5 of the first
    # iteration, 3/5 of the last) holds ITERS - 1 iterations' worth of bytes
    assert bytes_per_iteration(table, period=PERIOD).mean == CHUNKS * CHUNK_BYTES
    start = table["t_start_s"]
    cut = table[(start >= 0.003) & (start < (ITERS - 1) * PERIOD + 0.003)].drop(columns="iteration", errors="ignore")
    b = bytes_per_iteration(cut, period=PERIOD)
    assert (b.iterations, b.mean) == (ITERS - 1, CHUNKS * CHUNK_BYTES)


def test_matrix_is_exact_and_excludes_control() -> None:
    m = traffic_matrix(ring_table())
    assert m.ranks == (0, 1, 2, 3)
    want = np.zeros((4, 4), dtype=np.int64)
    for r in range(RANKS):
        want[r, (r + 1) % RANKS] = ITERS * CHUNKS * CHUNK_BYTES
    np.testing.assert_array_equal(m.bytes, want)
    assert m.bytes.dtype == np.int64
    np.testing.assert_allclose(m.fractions, want / want.sum())
    assert m.total == want.sum()


@pytest.mark.parametrize("packets", [0, 40])
def test_flow_counts_are_exact(packets: int) -> None:
    f = flow_stats(ring_table(packets=packets))
    assert f.count == ITERS * CHUNKS * RANKS
    assert f.per_pair == {f"{r}->{(r + 1) % RANKS}": ITERS * CHUNKS for r in range(RANKS)}
    np.testing.assert_array_equal(f.sizes.quantiles, np.full(21, CHUNK_BYTES))
    assert f.durations.mean == pytest.approx(BURST / CHUNKS * (1 - 1 / packets if packets else 1))


def test_control_rows_are_excluded_everywhere() -> None:
    with_control, without = ring_table(), ring_table(control=False)
    assert len(training_rows(with_control)) == len(without)
    assert training_rows(without) is without
    a, b = analyze(with_control), analyze(without)
    assert a.scalars() == b.scalars()
    assert dataclasses.replace(a, roles=b.roles) == b  # only the roles know of the control endpoint
    assert [e.endpoint for e in a.roles.endpoints if e.role == "control"] == ["rank 7"]


# --- on/off ----------------------------------------------------------------------------------


@pytest.mark.parametrize("packets", [0, 40])
def test_on_off_of_the_ring(packets: int) -> None:
    table = ring_table(packets=packets)
    o = on_off(table)
    assert o.duty_cycle == pytest.approx(BURST / PERIOD)
    assert (o.bursts.count, o.idles.count) == (ITERS, ITERS - 1)
    np.testing.assert_allclose(o.bursts.values, BURST)
    np.testing.assert_allclose(o.idles.values, PERIOD - BURST)
    np.testing.assert_allclose(o.burst_bytes.values, RANKS * CHUNKS * CHUNK_BYTES)
    peak = RANKS * CHUNKS * CHUNK_BYTES / BURST
    assert o.peak_bytes_per_s == pytest.approx(peak)
    total = ITERS * RANKS * CHUNKS * CHUNK_BYTES
    bins = len(throughput_timeline(training_rows(table), 1e-3).total)
    assert bins in (185, 186)  # ((ITERS - 1) * PERIOD + BURST) / 1 ms, and maybe an empty last bin
    assert o.mean_bytes_per_s == pytest.approx(total / (bins * 1e-3))
    assert o.peak_to_mean == pytest.approx(peak / o.mean_bytes_per_s)


def test_on_off_threshold_and_stray_packets() -> None:
    table = _bursty(0.02, 20, [(0.0, 0.005, 10**6)], seed=1, noise_pps=3000)
    default = on_off(table)
    assert default.duty_cycle == pytest.approx(0.25, abs=0.06)
    assert default.bursts.count == 20
    anything = on_off(table, threshold=0.0)
    assert anything.duty_cycle > 0.9  # 3 stray packets per ms: every bin has bytes
    # spreading transfers over bins leaves rounding residue in idle bins: not traffic
    ring = on_off(ring_table(iterations=200), threshold=0.0)
    assert ring.bursts.count == 200 and ring.duty_cycle == pytest.approx(0.25)
    with pytest.raises(ValueError, match="threshold"):
        on_off(table, threshold=1.5)


# --- Hurst -----------------------------------------------------------------------------------


def _fgn(n: int, h: float, rng: np.random.Generator) -> np.ndarray:
    """Fractional Gaussian noise by circulant embedding (Davies-Harte)."""
    k = np.arange(n + 1)
    g = 0.5 * (np.abs(k + 1) ** (2 * h) - 2 * np.abs(k) ** (2 * h) + np.abs(k - 1) ** (2 * h))
    c = np.concatenate([g, g[-2:0:-1]])
    lam = np.maximum(np.fft.fft(c).real, 0)
    z = rng.standard_normal(len(c)) + 1j * rng.standard_normal(len(c))
    return np.asarray(np.fft.fft(np.sqrt(lam / len(c)) * z).real[:n])


def _pareto_on_off(n: int, sources: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Sum of on/off sources with Pareto(alpha) on and off periods (in bins): long-range dependent."""
    out = np.zeros(n)
    for _ in range(sources):
        t, on = int(rng.integers(0, 50)), bool(rng.random() < 0.5)
        while t < n:
            d = int(np.ceil(rng.pareto(alpha) + 1))
            if on:
                out[t: t + d] += 100
            t += d
            on = not on
    return out + 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hurst_of_independent_bins_is_one_half(seed: int) -> None:
    rng = np.random.default_rng(seed)
    assert hurst(per_bin_table(rng.poisson(1000, 1 << 15) + 1.0)) == pytest.approx(0.5, abs=0.1)


@pytest.mark.parametrize("seed", [0, 1])
def test_hurst_of_long_range_dependent_traffic_is_high(seed: int) -> None:
    rng = np.random.default_rng(seed)
    assert hurst(per_bin_table(10_000 + 300 * _fgn(1 << 15, 0.9, rng))) > 0.7
    assert hurst(per_bin_table(_pareto_on_off(1 << 15, 50, 1.2, rng))) > 0.7


def test_hurst_is_nan_when_too_short_or_flat() -> None:
    assert math.isnan(hurst(per_bin_table(np.arange(1.0, 50.0))))
    assert math.isnan(hurst(per_bin_table(np.full(1000, 7.0))))


# --- Features --------------------------------------------------------------------------------


def test_analyze_and_scalars() -> None:
    f = analyze(ring_table())
    s = f.scalars()
    for name in ("total_bytes", "duration_s", "period_s", "bytes_per_iter_mean", "duty_cycle", "peak_to_mean",
                 "burst_mean_s", "idle_mean_s", "burst_bytes_mean", "flow_count", "flow_size_median", "hurst",
                 "throughput_mean_bps", "throughput_p99_bps"):
        assert isinstance(s[name], float), name
    assert s["total_bytes"] == ITERS * RANKS * CHUNKS * CHUNK_BYTES
    assert s["duration_s"] == pytest.approx((ITERS - 1) * PERIOD + BURST)
    assert s["period_s"] == pytest.approx(PERIOD)
    assert s["bytes_per_iter_mean"] == CHUNKS * CHUNK_BYTES
    assert s["duty_cycle"] == pytest.approx(0.25)
    assert s["burst_mean_s"] == pytest.approx(BURST) and s["idle_mean_s"] == pytest.approx(PERIOD - BURST)
    assert s["burst_bytes_mean"] == pytest.approx(RANKS * CHUNKS * CHUNK_BYTES)
    assert (s["flow_count"], s["flow_size_median"]) == (ITERS * CHUNKS * RANKS, CHUNK_BYTES)
    assert s["throughput_mean_bps"] == pytest.approx(8 * f.on_off.mean_bytes_per_s)  # bits per second
    assert s["throughput_p99_bps"] == pytest.approx(8 * f.on_off.peak_bytes_per_s)
    assert f.ranks == (0, 1, 2, 3)
    assert f.link_timeline_1ms is None


def test_timelines_conserve_bytes_and_the_10ms_one_matches_a_direct_one() -> None:
    table = ring_table(control=False)
    f = analyze(table)
    total = ITERS * RANKS * CHUNKS * CHUNK_BYTES
    for tl in (f.timeline_1ms, f.timeline_10ms):
        assert tl.total.sum() * tl.bin_s == pytest.approx(total)
    direct = throughput_timeline(table, 1e-2)
    assert f.timeline_10ms.bin_s == pytest.approx(1e-2)
    assert set(direct.series) == set(f.timeline_10ms.series) == {"total", "0->1", "1->2", "2->3", "3->0"}
    for k, v in direct.series.items():
        np.testing.assert_allclose(f.timeline_10ms.series[k], v, rtol=1e-9, atol=1e-3)


def test_link_timelines_when_the_table_has_links() -> None:
    f = analyze(ring_table(link=True))
    assert f.link_timeline_1ms is not None and f.link_timeline_10ms is not None
    assert set(f.link_timeline_1ms.series) == {"total", "l0", "l1", "l2", "l3"}
    np.testing.assert_allclose(f.link_timeline_1ms.total, f.timeline_1ms.total)
    assert f.link_timeline_1ms.series["l2"].sum() * 1e-3 == pytest.approx(ITERS * CHUNKS * CHUNK_BYTES)


def test_features_json_round_trip() -> None:
    for table in (ring_table(), ring_table(link=True, packets=10), empty_table()):
        f = analyze(table)
        text = json.dumps(f.to_json(), allow_nan=False)
        back = Features.from_json(json.loads(text))
        assert back == f
        assert back.to_json() == f.to_json()
    assert analyze(ring_table()) != analyze(ring_table(scale=2))
    with pytest.raises(ValueError, match="not a features document"):
        Features.from_json({"format": "something else"})


def test_long_traces_are_summarised_for_json() -> None:
    f = analyze(ring_table(iterations=400, packets=4))  # 8 s: 8000 bins of 1 ms
    assert len(f.timeline_1ms.total) > MAX_VALUES
    d = json.loads(json.dumps(f.to_json()))
    assert len(d["timeline_1ms"]["series"]["total"]) <= MAX_VALUES
    assert len(d["on_off"]["rates"]["values"]) == MAX_VALUES
    back = Features.from_json(d)
    assert back.to_json() == d  # idempotent
    assert back.scalars() == f.scalars()
    assert back.timeline_1ms.total.sum() * back.timeline_1ms.bin_s == pytest.approx(f.total_bytes)


def test_distribution_summary() -> None:
    x = np.random.default_rng(5).exponential(3.0, 10_000)
    d = Distribution.of(x)
    assert d.count == 10_000 and d.mean == pytest.approx(x.mean())
    np.testing.assert_allclose(d.quantiles, np.quantile(x, QUANTILE_LEVELS))
    assert len(d.values) == MAX_VALUES and np.all(np.diff(d.values) >= 0)
    assert d.quantile(0.99) == pytest.approx(np.quantile(x, 0.99), rel=0.01)
    small = Distribution.of([3.0, 1.0, 2.0])
    np.testing.assert_array_equal(small.values, [1.0, 2.0, 3.0])
    assert Distribution.of([]).count == 0 and math.isnan(Distribution.of([]).median)


def test_rebin() -> None:
    tl = throughput_timeline(ring_table(), 1e-3)
    assert rebin(tl, 1) is tl
    r = rebin(tl, 7)
    assert r.total.sum() * r.bin_s == pytest.approx(tl.total.sum() * tl.bin_s)
    assert len(r.total) == -(-len(tl.total) // 7)
    with pytest.raises(ValueError):
        rebin(tl, 0)


def test_empty_and_all_control_tables() -> None:
    only_control = ring_table()
    only_control = only_control[only_control["op"] == "control"]
    for table in (empty_table(), only_control):
        f = analyze(table)
        s = f.scalars()
        assert (s["total_bytes"], s["flow_count"], s["rows"]) == (0.0, 0.0, 0.0)
        assert math.isnan(s["period_s"]) and math.isnan(s["hurst"]) and math.isnan(s["duty_cycle"])
        assert f.matrix.ranks == ()


def test_unmapped_endpoints_of_a_capture() -> None:
    """Captures give rank -1 to endpoints that are not ranks: their traffic is not training traffic."""
    table = ring_table(packets=4, control=False)
    table.loc[table.index[::7], "dst"] = -1
    f = analyze(table)
    assert f.ranks == (0, 1, 2, 3)
    assert f.total_bytes == table.loc[table["dst"] >= 0, "bytes"].sum()
    assert sum(f.flows.per_pair.values()) == f.flows.count
    assert not any(label.endswith("->-1") for label in f.flows.per_pair)


def test_every_analysis_is_a_field_of_features_and_back() -> None:
    """The table of analyses and the typed Features agree: one entry per field, in field order."""
    import dataclasses

    from simstudy.traffic.compare import DEFAULT_TOLERANCES, DISTRIBUTIONS
    from simstudy.traffic.features import ANALYSES

    assert [a.name for a in ANALYSES] == [f.name for f in dataclasses.fields(Features)]
    f = analyze(ring_table())
    declared = {m.name for a in ANALYSES for m in a.metrics}
    assert declared == set(DEFAULT_TOLERANCES)
    for name in declared:
        base, _, how = name.partition(":")
        assert (name in f.scalars()) if not how else (base in DISTRIBUTIONS or base == "traffic_matrix"), name
