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


def test_no_iterations_without_repeating_bytes() -> None:
    assert find_iterations(pd.DataFrame(columns=["t_start_s", "t_end_s", "src", "dst", "bytes"])).count == 0
