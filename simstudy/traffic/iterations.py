"""Iterations found from the traffic alone: the period, where each iteration starts and ends, and
which of them are whole steady-state iterations.

A capture without metadata has no iteration marks, and its traffic at the millisecond scale is
shaped by TCP and token buckets as much as by the job: the strongest 1 ms periodicity of a
200 Mbit/s link can be a 2.3 ms pacing period, and a link-bound all-reduce leaves only short
quiet gaps. So the period is chosen among candidates at several time scales by what makes it
the iteration: **a true iteration period repeats the same bytes per cycle**, sender by sender.

1. Series: bytes per 1 ms bin of every sender (a training endpoint), and their *activity*, the
   sum over senders of each sender's rate over its own peak (so that a parameter server's
   saturated link and its workers' short pushes count alike).
2. Candidates: peaks of the autocorrelation and of the periodogram of the activity and of the
   total, in 1 ms, 10 ms and 100 ms bins (`SCALES_S`), from 2 bins to a third of the trace, and
   their `HARMONICS` (the iteration may show only as a multiple or a sub-multiple); candidates
   within `MERGE_TOLERANCE` of each other are one.
3. Cycles of a candidate T: common boundaries where the activity is lowest, each searched
   within +-`SNAP` x T of one period after the previous one (so that jitter does not
   accumulate), the first in the quietest phase of the activity folded at T; after a gap longer
   than the search window the next boundary is the onset of the next traffic. The trace's first
   and last byte also bound a cycle. Each sender's bytes per cycle are cut at its own quietest
   point within +-`SNAP`/2 periods of each common boundary, so that a burst that straddles the
   common boundary is not split. The cut is made again at the period it measures when the seed
   was off (a peak of a coarse series).
4. Steady cycles: the longest run of consecutive cycles whose bytes are within
   `STEADY_TOLERANCE` of the typical cycle (the value most cycles agree with); two neighbours
   that are off only because a boundary fell between them count as steady together. Setup
   traffic (the initial parameter broadcast, a rendezvous) and partial iterations at either
   end of the capture fall outside.
5. A candidate is *strong* when it has at least `MIN_CYCLES` steady cycles holding at least
   `MIN_COVERAGE` of the bytes, every sender's bytes per cycle vary by at most `MAX_VOLUME_CV`
   over them (bytes-weighted mean of the coefficients of variation) and the cycles' durations
   by at most `MAX_DURATION_CV`. Pacing periods fail this (their cycles hold a burst or a
   compute gap, and few bytes), and so do sub-multiples of the iteration (alternate cycles
   differ) and non-integer multiples (boundaries fall in the quiet gaps, so their cycles hold
   one or two iterations).
6. The iteration is the strong candidate whose cycles repeat the same bytes most exactly (at a
   tie: the most steady cycles, the most regular, the shortest); a whole multiple of a shorter
   strong candidate that repeats its bytes as well (within `VOLUME_CV_NOISE`) gives way to it
   unless the shorter one's boundaries cut through traffic where the multiple's fall in quiet
   gaps (`QUIET_MARGIN`: a ring all-reduce of two workers, one pack after backward, runs its
   reduce-scatter straight into its all-gather with the same bytes),
   and a candidate that repeats its bytes exactly (`EXACT_CV`) but whose alternate cycles differ
   in length by `ALTERNATION` gives way to its double (a ring all-reduce of two workers moves
   the same bytes in its reduce-scatter and its all-gather, but only one half holds the compute
   gap). Its period is the slope of the steady run's found boundaries against their cycle number.
   When no candidate is strong, the one that comes closest among those with `MIN_CYCLES` steady
   cycles holding `MIN_COVERAGE` of the bytes is chosen and said to be weak; when none has
   those, no iteration is found (never a pacing period).
7. Whole iterations: the stretch of traffic between gaps longer than a period that holds the
   steady run counts `count` iterations when the senders whose cycles are cut cleanly agree that
   it holds a whole number of their cycles (a parameter server's link that never pauses is cut
   less cleanly than its workers'); its bytes divided by that are the bytes per iteration, and
   boundaries inside it do not matter. A sender whose stretch holds a quarter of a cycle more
   than that (the initial broadcast) counts its typical cycle (the median, when most of its
   cycles agree with it) instead. Otherwise the steady cycles are counted.

`Candidate` records every candidate with what rejected it, and `Iterations.reason` says why the
chosen one won, so that a person can check the choice against the plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import fft as sfft
from scipy.signal import find_peaks

from simstudy.traffic.timeline import sender_bytes

__all__ = [
    "MAX_MULTIPLE",
    "MAX_VOLUME_CV",
    "MERGE_TOLERANCE",
    "MIN_CYCLES",
    "SCALES_S",
    "SNAP",
    "STEADY_TOLERANCE",
    "Candidate",
    "Iterations",
    "find_iterations",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Bin widths of the series the candidates come from, seconds.
SCALES_S = (1e-3, 1e-2, 1e-1)
#: Peaks kept per method, series and scale (highest first).
PEAKS_PER_SERIES = 6
#: Autocorrelation peaks less prominent than this are noise.
ACF_MIN_PROMINENCE = 0.05
#: Candidates closer than this (relative) are the same candidate.
MERGE_TOLERANCE = 0.04
#: A boundary is searched within +- this fraction of a period around its predicted place.
SNAP = 0.25
#: Smoothing of the activity when looking for the quietest point: this fraction of a period.
SMOOTH = 1 / 25
#: A cycle is steady when its bytes are within this fraction of the typical cycle's.
STEADY_TOLERANCE = 0.15
#: Multiples of every peak that are candidates too (the iteration may show only as a harmonic).
HARMONICS = (0.5, 1 / 3, 2.0)
#: Fewest steady cycles a strong candidate has.
MIN_CYCLES = 3
#: Smallest share of the training bytes a strong candidate's steady cycles hold.
MIN_COVERAGE = 0.3
#: Differences in `Candidate.volume_cv` smaller than this are noise: a whole multiple of a
#: period repeats its bytes as exactly as the period itself, and the shorter one is chosen.
#: Bytes that a boundary misplaces move to the neighbouring cycle, so a multiple's sums cancel
#: them: a 4-worker TensorFlow capture's iterations (99-127 ms, CPU-bound) repeat within 2.4%,
#: their pairs within 0.0%.
VOLUME_CV_NOISE = 0.03
#: A strong candidate whose alternate cycles differ in mean length by this much is half the
#: iteration when its double repeats the bytes as exactly.
ALTERNATION = 0.1
#: A shorter candidate takes the place of its whole multiple only when its boundaries are about
#: as quiet: their mean activity, relative to the mean activity of busy bins, at most this much
#: higher than the multiple's. A sub-multiple that splits the iteration's traffic where it does
#: not pause (a ring all-reduce of two workers: the reduce-scatter runs straight into the
#: all-gather, with the same bytes) cuts every other cycle in the middle of the traffic.
QUIET_MARGIN = 0.25
#: Bytes per cycle that vary less than this repeat exactly (cycles cut in silent gaps).
EXACT_CV = 0.01
#: ... and when the difference is this many times its standard error (the cycles' jitter).
ALTERNATION_SIGNIFICANCE = 3.0
#: Senders whose even and odd cycles differ in bytes by this much (and significantly) alternate.
ALTERNATION_BYTES = 0.03
#: Coefficients of variation closer than this are a tie.
TIE = 0.005
#: Largest coefficient of variation of a sender's bytes per cycle for a strong candidate.
MAX_VOLUME_CV = 0.10
#: Largest coefficient of variation of the cycles' durations for a strong candidate: a
#: sub-multiple of the iteration that happens to split its bytes evenly (a ring all-reduce's
#: reduce-scatter and all-gather halves) cuts cycles of alternating lengths.
MAX_DURATION_CV = 0.15
#: A strong candidate that is k times a shorter strong one (k <= this, within `MULTIPLE_TOLERANCE`)
#: is that one's multiple, not the iteration.
MAX_MULTIPLE = 8
MULTIPLE_TOLERANCE = 0.06
#: The stretch of traffic the steady cycles lie in counts whole iterations when every sender's
#: bytes in it are within this many of its cycles' worth of the same whole number of them.
STRETCH_TOLERANCE = 0.05
STRETCH_CLEAN_SHARE = 0.25
SETUP_SHARE = 0.25
#: A sender's typical cycle is known when this share of its steady cycles is within CLEAN_CYCLE of it.
CLEAN_SHARE = 0.5
CLEAN_CYCLE = 0.02
#: Bin width of the series the cycles are cut from, seconds.
BIN_S = 1e-3


@dataclass(frozen=True)
class Candidate:
    """One candidate period and what its cycles showed."""

    period_s: float
    found_by: tuple[str, ...]
    """Where it was a peak: "acf 10 ms activity", "psd 1 ms total", ..."""
    acf: float
    """The highest autocorrelation among the peaks it came from (0 for periodogram-only)."""
    cycles: int
    """Steady cycles found at this period."""
    volume_cv: float
    """Bytes-weighted mean over senders of the coefficient of variation of their bytes per
    steady cycle (NaN with fewer than 2 steady cycles)."""
    duration_cv: float
    """Coefficient of variation of the steady cycles' durations (NaN with fewer than 2)."""
    verdict: str
    """"chosen", or why not: "too few steady cycles", "bytes per cycle vary 23%", "2 x 103 ms"..."""


@dataclass(frozen=True)
class Iterations:
    """The iterations found in a trace (see the module docstring)."""

    period_s: float
    """Median duration of the steady cycles (NaN when no candidate is strong)."""
    candidates: tuple[Candidate, ...]
    reason: str
    starts_s: FloatArray
    """Start of every steady cycle (table time)."""
    ends_s: FloatArray
    """End of every steady cycle (the next one's start, or the end of the traffic)."""
    bytes: FloatArray
    """Bytes of every steady cycle (all senders)."""
    senders: tuple[int, ...]
    sender_bytes: FloatArray
    """Bytes each sender sent in each steady cycle: cycles x senders."""
    count: int
    """Whole iterations counted: the steady cycles, or the iterations of the whole stretch of
    traffic they lie in when its bytes are a whole number of cycles (see `counted_by`)."""
    window_s: tuple[float, float]
    """From the first steady cycle's start to the last one's end (table time; NaN, NaN when none):
    whole iterations of steady training, where the other analyses look."""
    counted_s: tuple[float, float]
    """The stretch the iterations were counted over (`window_s`, or the stretch of traffic around it)."""
    per_iteration: FloatArray
    """Bytes per iteration of every sender (`senders`), over `counted_s`."""
    counted_by: str
    """"cycles": the steady cycles; "stretch": the traffic between two gaps (or the trace's
    ends) holds `count` times the steady cycles' bytes, within `STRETCH_TOLERANCE` cycles, so
    its bytes are divided by that (boundaries inside the stretch then do not matter); "none"."""

    @property
    def bytes_per_iteration(self) -> float:
        """All senders' bytes per iteration (NaN when none was found)."""
        return float(self.per_iteration.sum()) if self.count else math.nan


# ---------------------------------------------------------------------------------------------
# candidates


def _acf(x: FloatArray) -> FloatArray:
    """Unbiased autocorrelation, 1 at lag 0, up to lag n // 2."""
    n = len(x)
    y = x - x.mean()
    nfft = sfft.next_fast_len(2 * n, real=True)
    spec = sfft.rfft(y, nfft)
    acf = sfft.irfft(spec.real ** 2 + spec.imag ** 2, nfft)[: n // 2 + 1]
    return np.asarray(acf / acf[0] * n / (n - np.arange(len(acf))), dtype=np.float64)


def _parabolic(y: FloatArray, i: int) -> float:
    if i <= 0 or i >= len(y) - 1:
        return float(i)
    a, b, c = float(y[i - 1]), float(y[i]), float(y[i + 1])
    den = a - 2 * b + c
    return float(i) if den == 0 else i + 0.5 * (a - c) / den


def _peaks(x: FloatArray, bin_s: float, label: str) -> list[tuple[float, str, float]]:
    """(period, source, acf height) of the strongest autocorrelation and periodogram peaks, from
    2 bins to a third of the series."""
    n = len(x)
    if n < 8 or not np.any(x - x.mean()):
        return []
    out: list[tuple[float, str, float]] = []
    acf = _acf(x)
    top = max(2, n // 3)
    peaks, _ = find_peaks(acf[: top + 1], prominence=ACF_MIN_PROMINENCE)
    peaks = peaks[(peaks >= 2) & (acf[peaks] > 0)]
    for p in peaks[np.argsort(-acf[peaks])][:PEAKS_PER_SERIES]:
        out.append((_parabolic(acf, int(p)) * bin_s, f"acf {label}", float(acf[p])))
    y = x - x.mean()
    nfft = sfft.next_fast_len(max(4 * n, 64), real=True)
    spec = sfft.rfft(y, nfft)
    power = spec.real ** 2 + spec.imag ** 2
    freqs = sfft.rfftfreq(nfft, bin_s)
    ok = (freqs >= 3.0 / (n * bin_s)) & (freqs <= 0.5 / bin_s)
    peaks, _ = find_peaks(np.where(ok, power, 0.0))
    for k in peaks[np.argsort(-power[peaks])][:PEAKS_PER_SERIES]:
        f = _parabolic(power, int(k)) * (freqs[1] - freqs[0])
        if f > 0:
            out.append((1.0 / f, f"psd {label}", 0.0))
    return out


def _merge(found: list[tuple[float, str, float]], longest_s: float) -> list[tuple[float, tuple[str, ...], float]]:
    """Candidates within MERGE_TOLERANCE of each other as one (the period of the highest acf, or the first)."""
    found = sorted((f for f in found if 2 * BIN_S <= f[0] <= longest_s), key=lambda f: f[0])
    groups: list[list[tuple[float, str, float]]] = []
    for f in found:
        if groups and f[0] <= groups[-1][0][0] * (1 + MERGE_TOLERANCE):
            groups[-1].append(f)
        else:
            groups.append([f])
    out = []
    for g in groups:
        best = max(g, key=lambda f: f[2])
        out.append((best[0] if best[2] > 0 else float(np.median([f[0] for f in g])),
                    tuple(dict.fromkeys(f[1] for f in g)), max(f[2] for f in g)))
    return out


def _scaled(x: FloatArray, factor: int) -> FloatArray:
    n = len(x) // factor
    return np.asarray(x[: n * factor].reshape(n, factor).sum(axis=1), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# cycles of one candidate


@dataclass
class _Cut:
    bounds: IntArray  # bin indices of the common boundaries
    real: NDArray[np.bool_]  # whether each boundary is a found one (not the trace's first/last byte)
    volumes: FloatArray  # cycles x senders, each sender cut at its own quietest point near each boundary
    run: tuple[int, int]  # steady cycles [a, b)


def _smooth(x: FloatArray, width: int) -> FloatArray:
    """Moving mean over `width` bins (along the first axis)."""
    if width <= 1:
        return x
    c = np.concatenate([np.zeros((1, *x.shape[1:])), np.cumsum(x, axis=0)])
    n = len(x)
    lo = np.clip(np.arange(n) - width // 2, 0, n)
    hi = np.clip(np.arange(n) + width - width // 2, 0, n)
    return np.asarray((c[hi] - c[lo]) / width, dtype=np.float64)


def _quietest(act: FloatArray, lo: int, hi: int) -> int:
    """The middle of the longest run of (nearly) lowest activity in [lo, hi)."""
    seg = act[lo:hi]
    level = seg.min() + 0.02 * (seg.max() - seg.min())
    low = seg <= level
    e = np.diff(np.concatenate([[0], low, [0]]).astype(np.int8))
    s, t = np.flatnonzero(e == 1), np.flatnonzero(e == -1)
    i = int(np.argmax(t - s))
    a, b = lo + int(s[i]), lo + int(t[i])
    return (a + b) // 2


def _fold_phase(act: FloatArray, start: int, period: float) -> float:
    """The quietest phase (0..1) of the activity folded at `period` bins from `start`."""
    phases = 64
    k = np.arange(start, len(act))
    ph = np.minimum((((k - start) / period) % 1.0 * phases).astype(np.int64), phases - 1)
    hist = np.bincount(ph, weights=act[start:], minlength=phases) / np.maximum(np.bincount(ph, minlength=phases), 1)
    quiet = hist <= hist.min() + 0.02 * (hist.max() - hist.min())
    e = np.diff(np.concatenate([[0], quiet, quiet, [0]]).astype(np.int8))
    s, t = np.flatnonzero(e == 1), np.flatnonzero(e == -1)
    lengths = np.minimum(t - s, phases)
    i = int(np.argmax(lengths))
    return float((s[i] + lengths[i] / 2) / phases) % 1.0


def _boundaries(smooth: FloatArray, total: FloatArray, first: int, last: int, period: float) -> tuple[
        list[int], list[bool]]:
    """Common cycle boundaries: the quietest activity within +-SNAP periods of one period after
    the previous boundary (the first in the quietest folded phase), the onset of the next traffic
    after a gap, and the trace's first and last byte."""
    busy = np.concatenate([[0], np.cumsum(total > 0)])
    b0 = first + _fold_phase(smooth, first, period) * period
    lo, hi = max(first, round(b0 - SNAP * period)), min(last + 1, round(b0 + SNAP * period) + 1)
    bounds, real = [first], [False]
    b = _quietest(smooth, lo, hi) if hi > lo else first
    if b > first:
        bounds.append(b)
        real.append(True)
    while True:
        lo, hi = round(b + (1 - SNAP) * period), round(b + (1 + SNAP) * period) + 1
        if lo > last:
            break
        if busy[min(hi, len(total))] - busy[b + 1] == 0:  # a gap longer than the window: next onset
            rest = np.flatnonzero(total[hi:last + 1] > 0)
            if len(rest) == 0:
                break
            b = hi + int(rest[0])
        else:
            b = max(_quietest(smooth, lo, min(hi, last + 1)), b + 1)
        bounds.append(b)
        real.append(True)
    if bounds[-1] <= last:
        bounds.append(last + 1)
        real.append(False)
    return bounds, real


def _cut(act: FloatArray, volume: FloatArray, total: FloatArray, first: int, last: int, period: float) -> _Cut:
    """Cycles at `period` bins in [first, last] and each sender's bytes in each: a sender's own
    cut is its quietest point within +-SNAP/2 periods of each common boundary, so that a burst
    that straddles the common boundary is not split."""
    width = max(1, round(period * SMOOTH))
    bounds, real = _boundaries(_smooth(act, width), total, first, last, period)
    edges = np.asarray(bounds, dtype=np.int64)
    own = _smooth(volume, width)
    half = max(1, round(SNAP * period / 2))
    cum = np.vstack([np.zeros((1, volume.shape[1])), np.cumsum(volume, axis=0)])
    per_cycle = np.empty((len(edges) - 1, volume.shape[1]))
    for e in range(volume.shape[1]):
        cuts = edges.copy()
        for k in range(1, len(edges) - 1):
            lo = max(int(cuts[k - 1]) + 1, int(edges[k]) - half)
            hi = min(int(edges[k + 1]), int(edges[k]) + half + 1, last + 1)
            if hi > lo:
                cuts[k] = _quietest(own[:, e], lo, hi)
        per_cycle[:, e] = np.diff(cum[cuts, e])
    return _Cut(edges, np.asarray(real, dtype=np.bool_), per_cycle, _steady(per_cycle.sum(axis=1)))


def _refined_cut(act: FloatArray, volume: FloatArray, total: FloatArray, first: int, last: int,
                 period: float) -> _Cut:
    """`_cut` at `period`, and again at the period its cycles measure when that differs (a seed
    from a coarse series is off by up to half a bin)."""
    cut = _cut(act, volume, total, first, last, period)
    measured = _fit_period(cut)
    if math.isfinite(measured) and abs(measured / period - 1) > MERGE_TOLERANCE / 2:
        again = _cut(act, volume, total, first, last, measured)
        if again.run[1] - again.run[0] >= cut.run[1] - cut.run[0]:
            return again
    return cut


def _fit_period(cut: _Cut) -> float:
    """Bins per cycle: the slope of the found boundaries of the steady run against their cycle
    number (least squares; NaN with fewer than 3)."""
    a, b = cut.run
    k = np.arange(a, b + 1)
    real = cut.real[a:b + 1]
    if real.sum() < 3:
        return math.nan
    return float(np.polyfit(k[real], cut.bounds[a:b + 1][real].astype(np.float64), 1)[0])


def _steady(v: FloatArray) -> tuple[int, int]:
    """The longest run of cycles near the typical volume (see the module docstring)."""
    n = len(v)
    if n == 0:
        return 0, 0
    agree = np.array([np.count_nonzero(np.abs(v / x - 1) <= STEADY_TOLERANCE) if x > 0 else 0 for x in v])
    typical = float(v[np.lexsort((-v, -agree))[0]])
    if typical <= 0:
        return 0, 0
    ok = np.abs(v / typical - 1) <= STEADY_TOLERANCE
    pair = np.abs((v[:-1] + v[1:]) / (2 * typical) - 1) <= STEADY_TOLERANCE / 2
    for k in np.flatnonzero(pair & ~ok[:-1] & ~ok[1:]):
        ok[k] = ok[k + 1] = True
    e = np.diff(np.concatenate([[0], ok, [0]]).astype(np.int8))
    s, t = np.flatnonzero(e == 1), np.flatnonzero(e == -1)
    if len(s) == 0:
        return 0, 0
    i = int(np.argmax(t - s))
    return int(s[i]), int(t[i])


def _duration_cv(cut: _Cut) -> float:
    """Coefficient of variation of the durations of the steady cycles bounded by found boundaries."""
    a, b = cut.run
    whole = cut.real[a:b] & cut.real[a + 1:b + 1]
    d = np.diff(cut.bounds)[a:b][whole].astype(np.float64)
    return float(d.std() / d.mean()) if len(d) >= 2 else 0.0


def _alternates(cut: _Cut, volume_cv: float) -> str:
    """Why the steady cycles of a cut look like halves of the iteration (empty when they do not):
    an exact repeat of bytes whose even and odd cycles differ in length (`_alternation`), or
    senders holding most of the bytes whose even and odd cycles differ in bytes by at least
    `ALTERNATION_BYTES`, each beyond `ALTERNATION_SIGNIFICANCE` standard errors."""
    a, b = cut.run
    v = cut.volumes[a:b]
    if len(v) >= 6:
        even, odd = v[0::2], v[1::2]
        diff = np.abs(even.mean(axis=0) - odd.mean(axis=0))
        se = np.sqrt(even.var(axis=0, ddof=1) / len(even) + odd.var(axis=0, ddof=1) / len(odd))
        mean = v.mean(axis=0)
        differ = (diff >= ALTERNATION_BYTES * mean) & (diff > ALTERNATION_SIGNIFICANCE * se) & (mean > 0)
        if mean.sum() > 0 and mean[differ].sum() >= 0.5 * mean.sum():
            return (f"senders holding {mean[differ].sum() / mean.sum():.0%} of the bytes send "
                    f"{float(np.median(diff[differ] / mean[differ])):.0%} more in one than in the other")
    length = _alternation(cut) if volume_cv <= EXACT_CV else 0.0
    return f"in length by {length:.0%}" if length >= ALTERNATION else ""


def _alternation(cut: _Cut) -> float:
    """How much the even and the odd whole steady cycles differ in mean length, relative (0 with
    fewer than 4): a sub-multiple of the iteration alternates between the half with the compute
    gap and the half without."""
    a, b = cut.run
    whole = cut.real[a:b] & cut.real[a + 1:b + 1]
    d = np.diff(cut.bounds)[a:b].astype(np.float64)
    if whole.sum() < 4 or not whole.all():
        return 0.0
    even, odd = d[0::2], d[1::2]
    diff = abs(even.mean() - odd.mean())
    noise = math.sqrt(even.var(ddof=1) / len(even) + odd.var(ddof=1) / len(odd))
    if diff < ALTERNATION_SIGNIFICANCE * noise:  # no more than the cycles' own jitter
        return 0.0
    return float(diff / d.mean())


def _volume_cv(volumes: FloatArray) -> float:
    """Bytes-weighted mean over senders of the coefficient of variation of bytes per cycle."""
    if len(volumes) < 2:
        return math.nan
    mean = volumes.mean(axis=0)
    w = mean / mean.sum() if mean.sum() > 0 else mean
    cv = np.where(mean > 0, volumes.std(axis=0) / np.where(mean > 0, mean, 1.0), 0.0)
    return float((w * cv).sum())


# ---------------------------------------------------------------------------------------------
# the choice


def _none(reason: str, candidates: tuple[Candidate, ...] = ()) -> Iterations:
    empty = np.zeros(0)
    return Iterations(math.nan, candidates, reason, empty, empty, empty, (), np.zeros((0, 0)), 0,
                      (math.nan, math.nan), (math.nan, math.nan), empty, "none")


def find_iterations(rows: pd.DataFrame) -> Iterations:
    """The iterations of a table's training rows (see the module docstring)."""
    if len(rows) == 0:
        return _none("no training traffic")
    t0 = float(rows["t_start_s"].min())
    senders, volume = sender_bytes(rows, BIN_S, t0)  # bins x senders
    total = volume.sum(axis=1)
    peak = volume.max(axis=0)
    act = (volume / np.where(peak > 0, peak, 1.0)).sum(axis=1)
    busy = np.flatnonzero(total > 0)
    first, last = int(busy[0]), int(busy[-1])
    span = last - first + 1
    found: list[tuple[float, str, float]] = []
    for scale in SCALES_S:
        factor = max(1, round(scale / BIN_S))
        for label, series in (("activity", act), ("total", total)):
            x = _scaled(series[first:last + 1], factor)
            found += _peaks(x, factor * BIN_S, f"{round(scale * 1e3):g} ms {label}")
    longest = span * BIN_S / MIN_CYCLES
    seeds = list(found)
    for period, source, _ in found:  # the iteration may show only as its multiple or sub-multiple
        seeds += [(period * k, f"{k:.3g} x {source}", 0.0) for k in HARMONICS]
    merged = _merge(seeds, longest)
    if not merged:
        return _none("no periodicity: the traffic has no autocorrelation or periodogram peak")
    cuts = [_refined_cut(act, volume, total, first, last, period_s / BIN_S) for period_s, _, _ in merged]
    quiet = _Quiet(act, float(act[total > 0].mean()))
    stats = [_stats(c, total.sum(), quiet, max(1, round(p / BIN_S * SMOOTH)))
             for c, (p, _, _) in zip(cuts, merged, strict=True)]
    verdicts: dict[int, str] = {}
    strong = []
    for i, s in enumerate(stats):
        if s.cycles < MIN_CYCLES:
            verdicts[i] = f"{s.cycles} steady cycles (needs {MIN_CYCLES})"
        elif s.coverage < MIN_COVERAGE:
            verdicts[i] = f"its steady cycles hold {s.coverage:.0%} of the bytes (needs {MIN_COVERAGE:.0%})"
        elif not s.volume_cv <= MAX_VOLUME_CV:
            verdicts[i] = f"bytes per cycle vary {s.volume_cv:.1%} (at most {MAX_VOLUME_CV:.0%})"
        elif not s.duration_cv <= MAX_DURATION_CV:
            verdicts[i] = f"cycle durations vary {s.duration_cv:.0%} (at most {MAX_DURATION_CV:.0%})"
        else:
            strong.append(i)
    weak = False
    if not strong:  # the most regular candidate that holds the bulk of the bytes, said to be weak
        strong = [i for i, s in enumerate(stats) if s.cycles >= MIN_CYCLES and s.coverage >= MIN_COVERAGE
                  and math.isfinite(s.period_s)]
        weak = True
        if not strong:
            candidates = tuple(Candidate(p, src, acf, stats[i].cycles, stats[i].volume_cv, stats[i].duration_cv,
                                         verdicts[i]) for i, (p, src, acf) in enumerate(merged))
            return _none("no candidate has steady cycles that hold the bulk of the bytes: no iteration found",
                         candidates)
    # the most exact repeat of bytes; at a tie, the most steady cycles, the most regular, the shortest
    best = min(strong, key=lambda i: (round(stats[i].volume_cv / TIE), -stats[i].cycles,
                                      round(stats[i].duration_cv / TIE), stats[i].period_s))
    for i in sorted(strong, key=lambda i: stats[i].period_s):
        k = stats[best].period_s / stats[i].period_s
        if (i != best and round(k) >= 2 and abs(k / round(k) - 1) <= MULTIPLE_TOLERANCE
                and stats[i].volume_cv <= stats[best].volume_cv + VOLUME_CV_NOISE):
            if stats[i].quiet > stats[best].quiet + QUIET_MARGIN:
                verdicts[i] = (f"1/{round(k)} of {stats[best].period_s * 1e3:.4g} ms: its boundaries cut through "
                               f"traffic (activity there {stats[i].quiet:.0%} of the busy mean, against "
                               f"{stats[best].quiet:.0%})")
                continue
            verdicts[best] = f"{round(k)} x {stats[i].period_s * 1e3:.4g} ms, which repeats its bytes as well"
            best = i
            break
    # a candidate whose alternate cycles differ (in length, or in what its senders send) is half the iteration
    why = _alternates(cuts[best], stats[best].volume_cv)
    if why:
        for i in strong:
            k = stats[i].period_s / stats[best].period_s
            if abs(k / 2 - 1) <= MULTIPLE_TOLERANCE:
                verdicts[best] = f"half of {stats[i].period_s * 1e3:.4g} ms: its alternate cycles differ ({why})"
                best = i
                break
    for i in strong:
        if i != best and i not in verdicts:
            same = abs(stats[i].period_s / stats[best].period_s - 1) <= MERGE_TOLERANCE
            verdicts[i] = ("the same cycles" if same else
                           f"bytes per cycle vary {stats[i].volume_cv:.1%} (chosen: {stats[best].volume_cv:.1%})")
    verdicts[best] = "chosen" if not weak else "chosen, weak"
    candidates = tuple(Candidate(p, src, acf, stats[i].cycles, stats[i].volume_cv, stats[i].duration_cv, verdicts[i])
                       for i, (p, src, acf) in enumerate(merged))
    cut, s = cuts[best], stats[best]
    a, b = cut.run
    volumes = cut.volumes[a:b]
    reason = ("no candidate repeats its bytes within the limits; the one that comes closest: " if weak else
              "the period whose cycles repeat the same bytes most exactly: ")
    reason += (f"{b - a} steady cycles holding "
              f"{s.coverage:.0%} of the bytes, each sender's bytes per cycle vary {s.volume_cv:.1%}; "
              f"period = slope of its {s.boundaries} boundaries against their cycle number")
    lo, hi = int(cut.bounds[a]), int(cut.bounds[b])
    count, window, per = b - a, (lo, hi), volumes.mean(axis=0)
    counted_by = "cycles"
    s_lo, s_hi = _stretch(total, lo, hi, s.period_s / BIN_S)
    stretch = volume[s_lo:s_hi + 1].sum(axis=0)
    cycle = np.median(volumes, axis=0)  # a sender's typical cycle, whatever one mis-cut cycle holds
    n = _whole_cycles(stretch, cycle)
    if n >= b - a:
        # a sender most of whose cycles agree (so that its typical cycle is known) but whose stretch
        # holds a quarter of a cycle more or less than n of them sent setup traffic too (the
        # initial parameter broadcast): its typical cycle is its bytes per iteration
        agree = (np.abs(volumes / np.where(cycle > 0, cycle, 1.0) - 1) <= CLEAN_CYCLE).mean(axis=0)
        setup = (np.abs(stretch - n * cycle) > SETUP_SHARE * cycle) & (agree >= CLEAN_SHARE)
        per = np.where(setup, cycle, stretch / n)
        count, window, counted_by = n, (s_lo, s_hi + 1), "stretch"
        reason += (f"; bytes per iteration = the bytes of the stretch of traffic the cycles lie in / {n} (the "
                   "senders whose cycles are cut cleanly hold that many cycles' worth)")
    else:
        reason += f"; bytes per iteration = the mean of the {b - a} steady cycles"
    edges = t0 + cut.bounds.astype(np.float64) * BIN_S
    return Iterations(s.period_s, candidates, reason, edges[a:b], edges[a + 1:b + 1], volumes.sum(axis=1),
                      tuple(int(x) for x in senders),
                      volumes, count, (t0 + lo * BIN_S, t0 + hi * BIN_S),
                      (t0 + window[0] * BIN_S, t0 + window[1] * BIN_S), per, counted_by)


def _whole_cycles(stretch: FloatArray, cycle: FloatArray) -> int:
    """How many whole cycles a stretch of traffic holds, from the senders whose bytes in it are
    a whole number of their cycle's bytes (within `STRETCH_TOLERANCE`): they must agree and
    hold at least `STRETCH_CLEAN_SHARE` of the bytes; 0 when they do not. A sender that never
    pauses (a parameter server's saturated link) has no clean cut; its neighbours decide."""
    sent = cycle > 0
    each = stretch[sent] / cycle[sent]
    clean = np.abs(each - np.round(each)) <= STRETCH_TOLERANCE
    counts = set(np.round(each[clean]).astype(np.int64).tolist())
    if len(counts) != 1 or stretch[sent][clean].sum() < STRETCH_CLEAN_SHARE * stretch.sum():
        return 0
    return int(counts.pop())


def _stretch(total: FloatArray, lo: int, hi: int, period: float) -> tuple[int, int]:
    """The first and last busy bin of the traffic around [lo, hi) up to a gap longer than a period."""
    busy = np.flatnonzero(total > 0)
    gaps = np.flatnonzero(np.diff(busy) > period)
    starts = np.concatenate([[busy[0]], busy[gaps + 1]])
    ends = np.concatenate([busy[gaps], [busy[-1]]])
    first = int(np.searchsorted(ends, lo, side="left"))
    last = int(np.searchsorted(starts, max(hi - 1, lo), side="right")) - 1
    return int(starts[min(first, len(starts) - 1)]), int(ends[max(last, 0)])


@dataclass(frozen=True)
class _Stats:
    cycles: int
    coverage: float
    volume_cv: float
    duration_cv: float
    period_s: float
    boundaries: int
    quiet: float  # mean activity at the steady run's found boundaries / mean activity of busy bins


class _Quiet:
    """The activity around given bins (its moving mean, as `_smooth` gives it) relative to the
    mean activity of busy bins, from one cumulative sum shared by every candidate."""

    def __init__(self, act: FloatArray, busy_act: float) -> None:
        self.cum = np.concatenate([[0.0], np.cumsum(act)])
        self.n = len(act)
        self.busy_act = busy_act

    def at(self, bins: IntArray, width: int) -> float:
        if not len(bins) or self.busy_act <= 0:
            return 0.0
        lo = np.clip(bins - width // 2, 0, self.n)
        hi = np.clip(bins + width - width // 2, 0, self.n)
        return float(((self.cum[hi] - self.cum[lo]) / width).mean() / self.busy_act)


def _stats(cut: _Cut, total: float, quiet: _Quiet, width: int) -> _Stats:
    """What a cut shows: steady cycles, the share of bytes they hold, their consistency, the
    period as the mean duration of the steady cycles bounded by found boundaries (NaN if none),
    and how quiet the traffic is (smoothed over `width` bins) where those boundaries fall."""
    a, b = cut.run
    coverage = float(cut.volumes[a:b].sum() / total) if total > 0 else 0.0
    return _Stats(b - a, coverage, _volume_cv(cut.volumes[a:b]), _duration_cv(cut), _fit_period(cut) * BIN_S,
                  int(cut.real[a:b + 1].sum()), quiet.at(cut.bounds[a:b + 1][cut.real[a:b + 1]], width))
