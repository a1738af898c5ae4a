"""The iteration finder with a stated objective (`simstudy.traffic.iterations_objective`, not yet
wired in): on jittery iterations whose bytes repeat, it finds the bytes per iteration exactly
and the typical iteration."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simstudy.traffic.iterations_objective import find_iterations, interquartile_mean


def _jittery(seed: int, n: int = 20) -> tuple[pd.DataFrame, float]:
    """Two senders, each iteration two buckets (1,054,248 and 372,992 bytes in 1448-byte packets,
    one per 0.1 ms), 2-15 ms of silence between the buckets and 20-40 ms between iterations."""
    rng = np.random.default_rng(seed)
    rows, t, starts = [], 0.0, []
    for _ in range(n):
        starts.append(t)
        for bucket, gap in ((1_054_248, rng.uniform(2e-3, 15e-3)), (372_992, rng.uniform(20e-3, 40e-3))):
            for src in (0, 1):
                left, k = bucket, 0
                while left > 0:
                    size = min(1448, left)
                    rows.append((t + k * 1e-4, src, 1 - src, size))
                    left, k = left - size, k + 1
            t += k * 1e-4 + gap
    table = pd.DataFrame(rows, columns=["t_start_s", "src", "dst", "bytes"])
    table["t_end_s"] = table["t_start_s"]
    return table, interquartile_mean(np.diff(starts))


@pytest.mark.parametrize("seed", range(3))
def test_bytes_per_iteration_and_period_of_jittery_iterations(seed: int) -> None:
    table, period = _jittery(seed)
    found = find_iterations(table)
    assert found.bytes_per_iteration == pytest.approx(2 * 1_427_240, rel=1e-9)
    assert found.period_s == pytest.approx(period, rel=0.05)
    assert found.count >= 15


def _stalled_with_heartbeats(seed: int, n: int = 40) -> tuple[pd.DataFrame, float, float]:
    """Two senders, each iteration 1,427,240 bytes in 1448-byte packets (one per 0.1 ms) stalled
    once at a random packet for 3-5 ms, then 20-40 ms of compute in which both send a 17-byte
    heartbeat every 2 ms: the stalls are the longest silences, the compute is cut into short ones.
    Returns the table, the typical iteration and the mean bytes per iteration."""
    rng = np.random.default_rng(seed)
    rows, t, starts = [], 0.0, []
    for _ in range(n):
        starts.append(t)
        stall_at, stall = int(rng.integers(50, 900)), rng.uniform(3e-3, 5e-3)
        packets = [1448] * (1_427_240 // 1448) + [1_427_240 % 1448]
        for k, size in enumerate(packets):
            for src in (0, 1):
                rows.append((t + k * 1e-4 + (stall if k >= stall_at else 0.0), src, 1 - src, size))
        t += len(packets) * 1e-4 + stall
        compute = rng.uniform(20e-3, 40e-3)
        for beat in np.arange(1e-3, compute - 1e-3, 2e-3):
            for src in (0, 1):
                rows.append((t + beat, src, 1 - src, 17))
        t += compute
    table = pd.DataFrame(rows, columns=["t_start_s", "src", "dst", "bytes"])
    table["t_end_s"] = table["t_start_s"]
    return table, interquartile_mean(np.diff(starts)), float(table["bytes"].sum()) / n


@pytest.mark.parametrize("seed", range(2))
def test_heartbeats_in_the_silence_between_iterations_do_not_hide_it(seed: int) -> None:
    """Bursts of control do not end a silence: the compute between iterations, cut by heartbeats,
    is still where an iteration ends, not the stalls within one."""
    table, period, per_iteration = _stalled_with_heartbeats(seed)
    found = find_iterations(table)
    assert found.bytes_per_iteration == pytest.approx(per_iteration, rel=1e-4)
    assert found.period_s == pytest.approx(period, rel=0.05)
    assert found.count >= 30


def _sender(parts: list[tuple[int, float]], gaps: list[int]) -> pd.DataFrame:
    """Rows of one sender in 1 ms bins: each part's bytes spread over its bins, then its silence."""
    v: list[float] = []
    for (width, nbytes), gap in zip(parts, gaps, strict=True):
        v += [nbytes / width] * width + [0.0] * gap
    busy = np.flatnonzero(np.array(v))
    table = pd.DataFrame({"t_start_s": (busy + 0.5) * 1e-3, "src": 0, "dst": 1,
                          "bytes": np.array(v)[busy].astype(np.int64)})
    table["t_end_s"] = table["t_start_s"]
    return table


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
    assert found.count >= n - 3
    assert found.period_s == pytest.approx((sum(gaps) / n + 2) * 1e-3, rel=0.15)


@pytest.mark.parametrize(("compute", "per_iteration"), [((10, 20), 500_000), ((20, 40), 1_000_000)])
def test_which_split_of_a_cycle_stands(compute: tuple[int, int], per_iteration: int) -> None:
    """Two equal buckets per cycle, the first followed by 10-20 ms of silence, the second by
    `compute`: where the halves are alike each half is an iteration; where one half holds the
    compute (20-40 ms) the whole cycle is one."""
    rng = np.random.default_rng(1)
    n = 24
    gaps = np.ravel(np.column_stack([rng.integers(10, 21, size=n), rng.integers(*compute, size=n)])).tolist()
    found = find_iterations(_sender([(2, 500_000.0)] * 2 * n, gaps))
    assert found.bytes_per_iteration == pytest.approx(per_iteration, rel=1e-9)


def test_no_iterations_without_repeating_bytes() -> None:
    assert find_iterations(pd.DataFrame(columns=["t_start_s", "t_end_s", "src", "dst", "bytes"])).count == 0

