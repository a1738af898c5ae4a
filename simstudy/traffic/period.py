"""Periodicity of a series, one module for every analysis that looks for a period: the
autocorrelation, the periodogram, their peaks, and how many periods' worth an amount holds.

Three analyses use it, each on its own series and with its own choice among the peaks:

* the iteration finder (`simstudy.traffic.iterations`): its candidate periods are the strongest
  peaks of the autocorrelation (`acf_peaks`) and of the periodogram (`periodogram`) of each
  sender's activity and of the total, in 1, 10 and 100 ms bins;
* the analysis of a table (`simstudy.traffic.per_iteration`), whether its rows are packets,
  simulated transfers or link bins: the period of the 1 ms total by `acf_period` and
  `psd_period`, reported beside the period of the iterations found (and taken when none is);
  and the number of iterations a trace holds (`whole_periods`), as the iteration finder counts
  them over a stretch of traffic;
* the analysis of switch counters (`simstudy.traffic.counter_features`): the period of a port's
  or a tier's throughput per grid step by `acf_period`, with the parameters it states.

Conventions, stated once: a series is looked at minus its mean (`centred`), and holds no period
when it is shorter than `MIN_BINS` or flat. The autocorrelation is unbiased (the sum at each lag
divided by the number of its products, so that a periodic series peaks as high at its tenth period
as at its first) and normalised to 1 at lag 0, at lags 0 to n // 2. A peak is a local maximum at
lag 2 or more (lag 1 only says the series is smooth), placed between bins by the parabola through
it and its neighbours (`parabolic`).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import fft as sfft
from scipy.signal import find_peaks

__all__ = [
    "HARMONIC_SHARE",
    "MIN_BINS",
    "MIN_PROMINENCE",
    "REFINE_PERIODS",
    "acf_peaks",
    "acf_period",
    "autocorrelation",
    "centred",
    "parabolic",
    "periodogram",
    "psd_period",
    "whole_periods",
]

FloatArray = NDArray[np.float64]

#: A series shorter than this (bins) holds no period.
MIN_BINS = 8
#: Autocorrelation peaks less prominent than this are noise.
MIN_PROMINENCE = 0.05
#: The first autocorrelation peak at least this fraction of the highest is the period (the later
#: ones are its multiples).
HARMONIC_SHARE = 0.8
#: `acf_period` refines the period on the peak at up to this many periods (sub-bin precision).
REFINE_PERIODS = 10


def centred(x: FloatArray) -> FloatArray | None:
    """`x` minus its mean; None when it is shorter than `MIN_BINS` or flat (no period)."""
    if len(x) < MIN_BINS:
        return None
    y = x - x.mean()
    return y if np.any(y) else None


def parabolic(y: FloatArray, i: int) -> float:
    """Sub-sample position of the extremum at `i` (the parabola through i-1, i, i+1)."""
    if i <= 0 or i >= len(y) - 1:
        return float(i)
    a, b, c = float(y[i - 1]), float(y[i]), float(y[i + 1])
    den = a - 2 * b + c
    return float(i) if den == 0 else i + 0.5 * (a - c) / den


def autocorrelation(y: FloatArray, *, direct_below: int = 0) -> FloatArray:
    """Unbiased autocorrelation of a centred series, 1 at lag 0, at lags 0 to n // 2: by FFT, or by
    the direct sum when the series is shorter than `direct_below` (the counters' analysis, whose
    few hundred samples cost nothing either way, has always summed them directly)."""
    n = len(y)
    if n < direct_below:
        raw = np.correlate(y, y, "full")[n - 1: n + n // 2]
    else:
        nfft = sfft.next_fast_len(2 * n, real=True)
        spec = sfft.rfft(y, nfft)
        raw = sfft.irfft(spec.real ** 2 + spec.imag ** 2, nfft)[: n // 2 + 1]
    return np.asarray(raw / raw[0] * n / (n - np.arange(len(raw))), dtype=np.float64)


def acf_peaks(acf: FloatArray, longest: int, *, prominence: float | None = MIN_PROMINENCE,
              positive: bool = True) -> NDArray[np.int64]:
    """Lags of the peaks of `acf` from 2 to `longest`: those at least `prominence` above their
    surroundings (None: every local maximum), and only those above 0 when `positive`."""
    peaks, _ = find_peaks(acf[: longest + 1], prominence=prominence)
    keep = peaks >= 2
    if positive:
        keep &= acf[peaks] > 0
    return np.asarray(peaks[keep], dtype=np.int64)


def acf_period(x: FloatArray, bin_s: float, *, longest: int | None = None,
               prominence: float | None = MIN_PROMINENCE, positive: bool = True, share: float = HARMONIC_SHARE,
               refine: int = REFINE_PERIODS, direct_below: int = 0) -> tuple[float, float]:
    """(period, height) of the first autocorrelation peak (`acf_peaks` up to lag `longest`, by
    default n // 2) at least `share` of the highest one's height: a periodic series peaks at every
    multiple of its period too, and noise may favour one of them. With `refine`, the period is
    measured again on the peak near its m-th multiple (m up to `refine`, when that peak is at least
    half as high): m times the precision. (NaN, 0) when the series has no peak."""
    y = centred(x)
    if y is None:
        return math.nan, 0.0
    acf = autocorrelation(y, direct_below=direct_below)
    peaks = acf_peaks(acf, len(acf) - 1 if longest is None else longest, prominence=prominence,
                      positive=positive)
    if len(peaks) == 0:
        return math.nan, 0.0
    first = int(peaks[np.argmax(acf[peaks] >= share * acf[peaks].max())])
    height = float(acf[first])
    lag = parabolic(acf, first)
    m = min(refine, int((len(acf) - 2) // lag))
    if m >= 2:
        half = max(1, int(lag / 4))
        lo = max(1, round(m * lag) - half)
        hi = min(len(acf) - 1, round(m * lag) + half + 1)
        j = lo + int(np.argmax(acf[lo:hi]))
        if acf[j] >= 0.5 * height:
            lag = parabolic(acf, j) / m
    return lag * bin_s, height


def periodogram(y: FloatArray, bin_s: float, nfft: int) -> tuple[FloatArray, FloatArray]:
    """(power, frequency in Hz) of a centred series in `bin_s` bins, zero-padded to `nfft` samples."""
    spec = sfft.rfft(y, nfft)
    return spec.real ** 2 + spec.imag ** 2, sfft.rfftfreq(nfft, bin_s)


def psd_period(x: FloatArray, bin_s: float) -> tuple[float, float]:
    """(period, power fraction) of the periodogram's highest peak, at periods from 2 bins to half
    the series (padded up to 4 times, to 2^22 samples at most): its power, main lobe included,
    over all the power but the mean's. (NaN, 0) for a series without a period."""
    y = centred(x)
    if y is None:
        return math.nan, 0.0
    n = len(y)
    pad = max(1, min(4, (1 << 22) // n))
    nfft = sfft.next_fast_len(pad * n, real=True)
    power, freqs = periodogram(y, bin_s, nfft)
    valid = np.flatnonzero((freqs >= 2.0 / (n * bin_s)) & (freqs <= 0.5 / bin_s))
    total = float(power[1:].sum())
    if len(valid) == 0 or total <= 0:
        return math.nan, 0.0
    k = int(valid[np.argmax(power[valid])])
    f = parabolic(power, k) * (freqs[1] - freqs[0])
    lobe = max(1, round(nfft / n))
    strength = float(power[max(1, k - lobe): k + lobe + 1].sum()) / total
    return (float(1.0 / f) if f > 0 else math.nan), min(1.0, strength)


def whole_periods(amount: ArrayLike, per_period: ArrayLike) -> tuple[NDArray[np.int64], FloatArray]:
    """How many periods' worth `amount` holds at `per_period` each (elementwise): the nearest whole
    number (halves to even) and how far `amount` is from it, in periods. The number of iterations
    a stretch of traffic holds is its bytes counted so, by the iteration finder and by the bytes
    per iteration of a trace without iterations found."""
    each = np.asarray(amount, dtype=np.float64) / np.asarray(per_period, dtype=np.float64)
    nearest = np.round(each)
    return nearest.astype(np.int64), np.abs(each - nearest)
