"""Throughput timelines conserve bytes and put them in the right bins."""

from __future__ import annotations

import numpy as np
import pytest

from simstudy.traffic import TrafficTableError, make_table
from simstudy.traffic.timeline import throughput_timeline


def table(rows: list[tuple[float, float, int, int, int]]) -> object:
    a = np.array(rows, dtype=object)
    return make_table({"t_start_s": a[:, 0].astype(float), "t_end_s": a[:, 1].astype(float),
                       "src": a[:, 2].astype(int), "dst": a[:, 3].astype(int), "bytes": a[:, 4].astype(int),
                       "flow": np.arange(len(rows)), "op": ["p2p"] * len(rows)})


def test_transfers_spread_over_their_interval() -> None:
    t = table([(0.0002, 0.0026, 0, 1, 240), (0.0005, 0.0005, 1, 0, 7), (0.0022, 0.0027, 0, 1, 50)])
    tl = throughput_timeline(t, 1e-3, t0_s=0.0)  # type: ignore[arg-type]
    # 240 B over 2.4 ms: 80, 100, 60 per 1 ms bin; the packet lands whole in bin 0.
    np.testing.assert_allclose(tl.total * 1e-3, [87, 100, 110])
    np.testing.assert_allclose(tl.series["0->1"] * 1e-3, [80, 100, 110])
    assert tl.total.sum() * 1e-3 == pytest.approx(297)


def test_bytes_conserved_on_random_tables() -> None:
    rng = np.random.default_rng(7)
    start = rng.uniform(0, 0.05, 500)
    end = start + rng.exponential(0.002, 500) * (rng.random(500) > 0.3)
    rows = [(s, e, 0, 1, int(b)) for s, e, b in zip(start, end, rng.integers(1, 10**6, 500), strict=True)]
    t = table(rows)
    for bin_s in (1e-3, 1e-2):
        tl = throughput_timeline(t, bin_s)  # type: ignore[arg-type]
        assert tl.total.sum() * bin_s == pytest.approx(sum(r[4] for r in rows), rel=1e-9)


def test_schema_rejects_bad_tables() -> None:
    with pytest.raises(TrafficTableError, match="ends before it starts"):
        table([(1.0, 0.5, 0, 1, 10)])
    with pytest.raises(TrafficTableError, match="missing required columns"):
        make_table({"t_start_s": [0.0]})
