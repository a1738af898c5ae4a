"""The one periodicity module: the autocorrelation by FFT and by the direct sum agree, the period of a
periodic series is found between bins, and amounts count in whole periods."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simstudy.traffic.period import acf_period, autocorrelation, centred, psd_period, whole_periods


def pulses(n: int, period: float, seed: int = 0) -> np.ndarray:
    """A burst of 3 bins every `period` bins (not a whole number), with a little noise."""
    rng = np.random.default_rng(seed)
    x = rng.random(n) * 0.05
    for k in np.arange(0.0, n - 3, period):
        x[int(k): int(k) + 3] += 1.0
    return x


def test_the_direct_sum_and_the_fft_give_one_autocorrelation() -> None:
    y = centred(pulses(600, 23.7))
    assert y is not None
    by_fft, direct = autocorrelation(y), autocorrelation(y, direct_below=len(y) + 1)
    assert len(by_fft) == len(direct) == len(y) // 2 + 1
    assert by_fft[0] == pytest.approx(1.0) and direct[0] == pytest.approx(1.0)
    np.testing.assert_allclose(by_fft, direct, rtol=0, atol=1e-9)


def test_the_period_between_bins_and_its_multiples_passed_over() -> None:
    x = pulses(5000, 23.7)
    coarse, height = acf_period(x, 1e-3, refine=0)
    fine, _ = acf_period(x, 1e-3)
    assert height > 0.5
    assert coarse == pytest.approx(0.0237, rel=0.01)  # the first peak, not one at a multiple
    assert fine == pytest.approx(0.0237, rel=1e-3)  # measured again at its tenth multiple
    assert psd_period(x, 1e-3)[0] == pytest.approx(0.0237, rel=0.03)


def test_no_period_in_a_flat_or_short_series() -> None:
    for x in (np.full(100, 2.0), np.arange(5.0)):
        period, height = acf_period(x, 1e-3)
        assert math.isnan(period) and height == 0.0
        assert math.isnan(psd_period(x, 1e-3)[0])


def test_negative_peaks_only_where_asked() -> None:
    """A random walk whose autocorrelation peaks only below 0: with the counters' parameters (every
    peak, negative ones too) the highest one is reported with its negative height, which their
    `MIN_STRENGTH` then refuses; with the packets' (positive peaks only) there is none."""
    x = np.cumsum(np.random.default_rng(2).normal(size=30))
    period, height = acf_period(x, 0.5, longest=10, prominence=None, positive=False, share=0.9, refine=0)
    assert height < 0 and math.isfinite(period)
    period, height = acf_period(x, 0.5, longest=10, prominence=None, positive=True, share=0.9, refine=0)
    assert math.isnan(period) and height == 0.0


def test_whole_periods_are_the_nearest_whole_number_and_what_is_left() -> None:
    n, off = whole_periods([10.0, 14.9, 2.5, 3.5, 0.0], [5.0, 5.0, 1.0, 1.0, 2.0])
    assert n.tolist() == [2, 3, 2, 4, 0]  # halves to even, as round() does
    np.testing.assert_allclose(off, [0.0, 0.02, 0.5, 0.5, 0.0])
