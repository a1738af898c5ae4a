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
   gap). Its period is the slope of the steady run's found boundaries against their cycle number,
   or, when their durations vary more than `JITTER` (compute-bound iterations on busy cores,
   drifting with the load) or the iterations are counted over more than the steady run (step
   7), the typical time between each sender's iterations' worth of bytes (the mean of the
   middle half of those times, `interquartile_mean`) over the stretch it was counted on (its
   cumulative bytes cross every whole multiple of its bytes per iteration at the end of that
   iteration's sends).
   When no candidate is strong, the one that comes closest among those with `MIN_CYCLES` steady
   cycles holding `MIN_COVERAGE` of the bytes is chosen and said to be weak; when none has
   those, no iteration is found (never a pacing period).
7. Whole iterations: the stretch of traffic between gaps longer than a period that holds the
   steady run counts `count` iterations when the senders whose cycles are cut cleanly find that
   it holds a whole number of their cycles: the fewest of their numbers, when the others are at
   most `SETUP_CYCLES` more (setup traffic only adds: the initial parameter broadcast is a
   whole cycle's worth for the rank that sends it; a parameter server's link that never pauses
   is cut less cleanly than its workers'); its bytes divided by that are the bytes per
   iteration, and boundaries inside it do not matter. A sender whose stretch holds a quarter of
   a cycle more than that (the initial broadcast) counts its typical cycle (the median, when
   most of its cycles agree with it) instead. Otherwise the steady cycles are counted.
   A counted cycle holds m iterations when every sender's cumulative bytes reach each 1/m of
   it at a silence, in parts of one length ending at silences of one kind
   (`_split_at_silences`), and each sender's bursts (8) or a strong periodic candidate repeat at
   it (`_split_choice`).

8. Bursts: where compute, not a network, sets the pace (ranks on one host, 2 busy cores), the
   iterations jitter by tens of percent, so no one period cuts them, and the cycles of a
   periodic candidate hold a varying number of iterations. Each sender's traffic is then cut
   at its own silences instead: its bursts (tiny ones, under `NOISE_SHARE` of a typical one,
   left out) cut wherever it is silent for at least some length (each length it shows is
   tried), the pieces grouped k at a time (k up to `MAX_GROUP`: DDP's buckets, a parameter
   server's pieces); a sender's cycles are the grouping of the shortest median duration whose
   steady groups repeat their bytes within `MAX_VOLUME_CV` and alternate neither in length, nor
   in bytes (`ALTERNATION_BYTES`: a parameter server's two buckets of 1.39 and 1.55 MB), nor in
   the silences that end them (`_unequal_silences`: on a link-bound job two equal buckets take
   as long as each other, but the gap after one is short and after the other long).
   Where no one silence length separates its iterations (jitter makes the gap between a
   parameter server's two pushes as long as the forward pass between iterations, and sometimes
   none), a sender's cycles are the runs of bursts whose cumulative bytes reach each whole
   multiple of one quantum at a burst's end (`_quantum_cycles`, within `QUANTUM_TOLERANCE`: an
   iteration's bytes repeat to a few bytes); they replace the grouping when they are the same
   cycle over more of the capture, or when the grouping holds a whole number of them that end at
   silences of one kind.
   When the senders with such cycles hold at least half the bytes, their bytes-weighted median
   cycle is a candidate ("bursts"); it is
   the iteration when no periodic candidate is strong, when the chosen one's cycles hold a
   whole multiple of its bytes (within `BURST_MULTIPLE_BYTES`) and repeat them no better, or
   when it repeats its bytes `BURST_EXACTER` times more exactly with at least twice the
   cycles (a periodic cut through jittery iterations holds a varying number of them). Bursts
   that are chunks of one periodic cycle (`_chunks_of_one`: a link-bound all-reduce sent in
   chunks) are not its multiple, unless a strong periodic candidate repeats at the bursts'
   period too: chunks of one iteration do not repeat as a period of their own (the gap between
   iterations breaks them), jittery iterations do, and a periodic cut of several of them falls
   in the longest of their gaps, which the chunks' test takes for the longer gaps of iterations
   (a one-host LSTM of 4 workers: 33 ms iterations, cut in threes at 100 ms). Its
   period is the typical time between each sender's iterations' worth of bytes, as in 6 (the
   median cycle duration when too few cross), its bytes per
   iteration each sender's median group (the senders without cycles: their bytes over the
   steady cycles of the busiest sender with cycles, divided by their number).

`Candidate` records every candidate with what rejected it, and `Iterations.reason` says why the
chosen one won, so that a person can check the choice against the plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import fft as sfft
from scipy.signal import find_peaks

from simstudy.traffic.period import acf_peaks, autocorrelation, centred, parabolic, periodogram, whole_periods
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
    "interquartile_mean",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Bin widths of the series the candidates come from, seconds.
SCALES_S = (1e-3, 1e-2, 1e-1)
#: Peaks kept per method, series and scale (highest first).
PEAKS_PER_SERIES = 6
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
#: A strong candidate whose steady cycles hold less than this share of what another's hold is a
#: phase of the iteration (31% against 90% on a lossy 4-worker Horovod capture), not the iteration.
COVERAGE_SHARE = 0.5
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
#: Setup traffic adds at most this many cycles' worth to a sender's stretch (the initial parameter
#: broadcast, forwarded along a chain of ranks).
SETUP_CYCLES = 2
#: A sender's typical cycle is known when this share of its steady cycles is within CLEAN_CYCLE of it.
CLEAN_SHARE = 0.5
CLEAN_CYCLE = 0.02
#: Bin width of the series the cycles are cut from, seconds.
BIN_S = 1e-3
#: Most silence lengths tried as what separates a sender's cycles (quantiles beyond that).
MAX_GAPS = 48
#: A burst holding less than this share of the sender's typical (90th percentile) burst is noise.
NOISE_SHARE = 0.01
#: Most bursts grouped into one cycle.
MAX_GROUP = 4
#: Quanta of bytes tried as a sender's cycle when no grouping of its bursts repeats
#: (`_quantum_cycles`): the bytes from the end of each of its first this many bursts ...
QUANTUM_STARTS = 8
#: ... to the end of each of the next this many ...
QUANTUM_SPAN = 3 * MAX_GROUP
#: ... whose run of cycles holds at least this share of the sender's bytes, each cycle's bytes within
#: this of the quantum (an iteration's bytes repeat to a few notices of 48 bytes; chunks of
#: buckets of different sizes do not).
QUANTUM_COVERAGE = 0.5
QUANTUM_TOLERANCE = 0.005
#: Cycles whose durations vary more than this jitter: the period is then the typical time between each
#: sender's iterations' worth of bytes, not the slope through the steady cycles' boundaries.
JITTER = 0.05
#: A cycle holds several iterations when this share of its 1/m parts end at a sender's silence ...
SPLIT_SHARE = 0.9
#: ... for senders holding this share of the bytes.
SPLIT_SENDERS = 0.5
#: The silences ending the parts of a cycle split into iterations are of one kind: their medians
#: within this factor of each other.
SILENCE_RATIO = 2.0
#: The bursts' cycles are chunks of one periodic cycle when the silences at its boundaries are this
#: many times longer than those inside it (medians; one-host captures whose periodic cycles hold
#: several jittery iterations: 0.95-1.13, link-bound TensorFlow chunks: 1.8 and more).
CHUNK_SILENCE = 1.5
#: ... and only when their steady cycles hold at least this share of what the periodic
#: candidate's hold (one-host captures whose jitter breaks the bursts' runs: 0.31 and more; bursts
#: of part of an iteration on a link-bound parameter server or TensorFlow job: 0.24 and less) ...
BURST_COVERAGE = 0.4
#: ... or they find this many times the periodic candidate's steady cycles (cycles of 1/k of the
#: period find up to k times as many in the same traffic; one-host: 1.8 where the share is 0.31;
#: the bursts of part of an iteration above: 1.33 and less).
BURST_CYCLES = 1.5
#: Senders whose cycles of bursts are within this of each other agree on the iteration.
BURST_MULTIPLE_TOLERANCE = 0.15
#: ... or when it repeats its bytes this many times more exactly, with twice the cycles or more.
BURST_EXACTER = 0.25
#: A periodic candidate is a multiple of the bursts' cycle when its bytes per cycle are within
#: this of a whole multiple of the bursts' bytes per cycle.
BURST_MULTIPLE_BYTES = 0.05


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
    its bytes are divided by that (boundaries inside the stretch then do not matter); "bursts":
    each sender's median cycle of bursts (see the module docstring, 8); "none"."""

    @property
    def bytes_per_iteration(self) -> float:
        """All senders' bytes per iteration (NaN when none was found)."""
        return float(self.per_iteration.sum()) if self.count else math.nan


def interquartile_mean(x: FloatArray) -> float:
    """The mean of the middle half of `x` (its values from the 25th to the 75th percentile): the
    typical one of jittery iteration durations. Stalls (a TCP retransmission timeout) and short
    outliers fall outside it, as with the median; but where durations form two clusters (compute
    on two shared cores alternates between paces) the median jumps from one to the other with a
    single sample, and this moves smoothly. NaN for no values."""
    v = np.asarray(x, dtype=np.float64)
    if len(v) == 0:
        return math.nan
    q1, q3 = np.quantile(v, [0.25, 0.75])
    return float(v[(v >= q1) & (v <= q3)].mean())


# ---------------------------------------------------------------------------------------------
# candidates


def _peaks(x: FloatArray, bin_s: float, label: str) -> list[tuple[float, str, float]]:
    """(period, source, acf height) of the strongest autocorrelation and periodogram peaks, from
    2 bins to a third of the series."""
    y = centred(x)
    if y is None:
        return []
    n = len(y)
    out: list[tuple[float, str, float]] = []
    acf = autocorrelation(y)
    peaks = acf_peaks(acf, max(2, n // 3))
    for p in peaks[np.argsort(-acf[peaks])][:PEAKS_PER_SERIES]:
        out.append((parabolic(acf, int(p)) * bin_s, f"acf {label}", float(acf[p])))
    power, freqs = periodogram(y, bin_s, sfft.next_fast_len(max(4 * n, 64), real=True))
    ok = (freqs >= 3.0 / (n * bin_s)) & (freqs <= 0.5 / bin_s)
    peaks, _ = find_peaks(np.where(ok, power, 0.0))
    for k in peaks[np.argsort(-power[peaks])][:PEAKS_PER_SERIES]:
        f = parabolic(power, int(k)) * (freqs[1] - freqs[0])
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
    bursts = _bursts(volume, total)
    if bursts is not None and bursts.cycles < MIN_CYCLES:
        bursts = None
    if not merged:
        if bursts is not None:
            return _from_bursts(bursts, volume, total, t0, senders, (), "no periodicity at any scale, but "
                                "every sender's bursts repeat")
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
            if bursts is not None:
                return _from_bursts(bursts, volume, total, t0, senders, candidates, "no periodic candidate has "
                                    "steady cycles that hold the bulk of the bytes")
            return _none("no candidate has steady cycles that hold the bulk of the bytes: no iteration found",
                         candidates)
    # among those whose steady cycles hold the bulk of what any holds, the most exact repeat of
    # bytes; at a tie, the most steady cycles, the most regular, the shortest
    # (or whose whole multiple does: a shorter period's steady run breaks where a stall falls)
    most = max(stats[i].coverage for i in strong)
    bulk = [j for j in strong if stats[j].coverage >= COVERAGE_SHARE * most]

    def per_cycle(i: int) -> float:
        a, b = cuts[i].run
        return float(cuts[i].volumes[a:b].sum(axis=1).mean())

    def divides(i: int) -> bool:  # its cycles' bytes and its period both a whole number of times
        for j in bulk:
            k, t = per_cycle(j) / max(per_cycle(i), 1.0), merged[j][0] / merged[i][0]
            if (round(k) >= 2 and abs(k / round(k) - 1) <= BURST_MULTIPLE_BYTES and round(t) == round(k)
                    and abs(t / round(t) - 1) <= BURST_MULTIPLE_TOLERANCE):
                return True
        return False

    for i in strong:
        if i not in bulk and not divides(i):
            verdicts[i] = (f"its steady cycles hold {stats[i].coverage:.0%} of the bytes, against {most:.0%} "
                           "for another")
    strong = [i for i in strong if i in bulk or divides(i)]
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
    if bursts is not None:
        a, b = cuts[best].run
        agree = bursts.typical > 0  # the senders whose bursts make the cycle: bytes, not times, as jitter
        k = float(cuts[best].volumes[a:b][:, agree].sum(axis=1).mean() / bursts.typical.sum())  # moves only times
        held = (bursts.coverage >= BURST_COVERAGE * stats[best].coverage
                or bursts.cycles >= BURST_CYCLES * stats[best].cycles)
        # chunks of one iteration do not repeat as a period of their own; jittery iterations do
        periodic = any(abs(stats[i].period_s / bursts.period_s - 1) <= BURST_MULTIPLE_TOLERANCE for i in strong)
        multiple = (held and round(k) >= 2 and abs(k / round(k) - 1) <= BURST_MULTIPLE_BYTES
                    and (periodic or not _chunks_of_one(bursts, cuts[best])))
        finer = (held and bursts.volume_cv <= stats[best].volume_cv * BURST_EXACTER
                 and bursts.cycles >= 2 * stats[best].cycles and k >= 1.5)
        if weak or finer or (multiple and bursts.volume_cv <= stats[best].volume_cv + VOLUME_CV_NOISE):
            if weak:
                verdicts[best] = why = "weak, where every sender's bursts repeat"
            elif multiple:
                verdicts[best] = f"{round(k)} x the bursts' cycle ({k:.3g} times its bytes), which repeats as well"
                why = f"the chosen periodic candidate ({stats[best].period_s * 1e3:.4g} ms) holds {round(k)} of them"
            else:
                verdicts[best] = why = (f"{k:.3g} bursts' cycles, which repeat their bytes more exactly "
                                        f"({bursts.volume_cv:.2%} against {stats[best].volume_cv:.2%})")
            candidates = tuple(Candidate(p, src, acf, stats[i].cycles, stats[i].volume_cv, stats[i].duration_cv,
                                         verdicts.get(i, "")) for i, (p, src, acf) in enumerate(merged))
            return _from_bursts(bursts, volume, total, t0, senders, candidates, why)
    verdicts[best] = "chosen" if not weak else "chosen, weak"
    candidates = tuple(Candidate(p, src, acf, stats[i].cycles, stats[i].volume_cv, stats[i].duration_cv, verdicts[i])
                       for i, (p, src, acf) in enumerate(merged))
    if bursts is not None:
        same = abs(stats[best].period_s / bursts.period_s - 1) <= BURST_MULTIPLE_TOLERANCE
        note = "the same iterations" if same else f"not 1/k of the chosen {stats[best].period_s * 1e3:.4g} ms"
        candidates += (Candidate(bursts.period_s, (bursts.label,), 0.0, bursts.cycles, bursts.volume_cv,
                                 bursts.duration_cv, note),)
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
    cycle = np.median(volumes, axis=0)  # a sender's typical cycle, whatever one mis-cut cycle holds
    s_lo, s_hi, stretch, n = _counted_stretch(volume, total, lo, hi, s.period_s / BIN_S, cycle)
    if n >= b - a:
        # a sender most of whose cycles agree (so that its typical cycle is known) but whose stretch
        # holds a quarter of a cycle more or less than n of them sent setup traffic too (the
        # initial parameter broadcast): its typical cycle is its bytes per iteration
        agree = (np.abs(volumes / np.where(cycle > 0, cycle, 1.0) - 1) <= CLEAN_CYCLE).mean(axis=0)
        per = _per_iteration(stretch, n, cycle, agree >= CLEAN_SHARE)
        count, window, counted_by = n, (s_lo, s_hi + 1), "stretch"
        reason += (f"; bytes per iteration = the bytes of the stretch of traffic the cycles lie in / {n} (the "
                   "senders whose cycles are cut cleanly hold that many cycles' worth)")
    else:
        reason += f"; bytes per iteration = the mean of the {b - a} steady cycles"
    edges = t0 + cut.bounds.astype(np.float64) * BIN_S
    period_s = s.period_s
    uneven = s.duration_cv > JITTER or count > b - a  # jitter, or iterations beyond the steady run
    crossed = _crossing_period(volume, per, window[0], window[1], count) if uneven else math.nan
    if math.isfinite(crossed):
        reason = reason.replace("period = slope of its", f"period = {crossed * 1e3:.4g} ms, the typical time between "
                                "each sender's iterations' worth of bytes (slope of its")
        reason = reason.replace(" boundaries against their cycle number", " boundaries against their cycle number: "
                                f"{period_s * 1e3:.4g} ms)", 1)
        period_s = crossed
    split = _split_choice(_split_at_silences(volume, per, window[0], window[1]), period_s,
                          None if bursts is None else bursts.period_s, [stats[i].period_s for i in strong])
    if split > 1:  # the cycles hold `split` iterations each, which the senders' silences separate
        per, count = per / split, count * split
        crossed = _crossing_period(volume, per, window[0], window[1], count)
        period_s = crossed if math.isfinite(crossed) else period_s / split
        reason += (f"; each of these holds {split} iterations: every sender's cumulative bytes reach each "
                   f"1/{split} of them at a silence (period {period_s * 1e3:.4g} ms, the typical time between them)")
        was = next(c for c in candidates if c.verdict.startswith("chosen"))
        candidates = (*(replace(c, verdict=f"{split} x the iteration, whose bytes end at the senders' silences")
                        if c is was else c for c in candidates),
                      Candidate(period_s, (f"1/{split} x {was.period_s * 1e3:.4g} ms, at silences",), 0.0, count,
                                was.volume_cv, was.duration_cv, "chosen"))
    return Iterations(period_s, candidates, reason, edges[a:b], edges[a + 1:b + 1], volumes.sum(axis=1),
                      tuple(int(x) for x in senders),
                      volumes, count, (t0 + lo * BIN_S, t0 + hi * BIN_S),
                      (t0 + window[0] * BIN_S, t0 + window[1] * BIN_S), per, counted_by)


def _split_at_silences(volume: FloatArray, per: FloatArray, lo: int, hi: int) -> list[int]:
    """How many iterations each counted cycle may hold, stage by stage (empty: it is one): the
    smallest m such that, for the senders holding most of the bytes, nearly every whole multiple
    of 1/m of their cycle's bytes is reached at the end of a burst (within `CLEAN_CYCLE` of it),
    the parts take as long as each other (`_unequal_parts`) and end at silences of one kind
    (`_unequal_silences`); then the same again for the parts (m up to `MAX_GROUP` each time, the
    running product listed). A cycle that is the iteration splits nowhere: its 1/m parts end in
    the middle of the traffic (a ring's reduce-scatter runs straight into its all-gather), or at
    the silence between two buckets of its gradient, after parts of different lengths (the one
    with the forward pass is longer). Which stage stands is `_split_choice`'s."""
    total = 1
    stages: list[int] = []
    while True:
        found = 0
        for m in range(2, MAX_GROUP + 1):
            held = clean = 0.0
            for e in range(volume.shape[1]):
                b = float(per[e]) / (total * m)
                v = volume[lo:hi, e]
                sent = float(v.sum())
                if b <= 0 or sent < MIN_CYCLES * b:
                    continue
                starts, ends, nbytes = _bursts_of(v, 2)
                at_ends = np.cumsum(nbytes)
                levels = b * np.arange(1, int(sent / b + CLEAN_CYCLE) + 1)
                after = np.clip(np.searchsorted(at_ends, levels), 0, len(at_ends) - 1)
                before = np.clip(after - 1, 0, len(at_ends) - 1)
                closer = np.where(np.abs(at_ends[after] - levels) <= np.abs(at_ends[before] - levels), after, before)
                near = np.abs(at_ends[closer] - levels)
                held += sent
                inner = closer[closer < len(starts) - 1]
                silences = (starts[inner + 1] - ends[inner]).astype(np.float64)
                if (np.mean(near <= CLEAN_CYCLE * b) >= SPLIT_SHARE
                        and not _unequal_parts(np.diff(ends[closer]).astype(np.float64), total * m, ALTERNATION,
                                               MIN_CYCLES)
                        and not _unequal_silences(silences, total * m)):
                    clean += sent
            if held > 0 and clean >= SPLIT_SENDERS * volume[lo:hi].sum():
                found = m
                break
        if not found:
            return stages
        total *= found
        stages.append(total)


def _split_choice(stages: list[int], period_s: float, bursts_s: float | None, strong_s: list[float]) -> int:
    """How many iterations each cycle of `period_s` holds, given the stages `_split_at_silences`
    found: the deepest stage (or 1, the cycle itself) at which each sender's own bursts (their
    period `bursts_s`) repeat too, else its parts are parts of one iteration (the chunks of a
    link-bound all-reduce end at silences as well); without bursts that say so, the deepest stage
    at which a strong periodic candidate (`strong_s`) repeats, as chunks of one iteration do not
    (the gap between iterations breaks them: a 4-worker TensorFlow LSTM's iteration, 183 ms,
    repeats its bytes within 6.9% where its double does within 1.2%, and its bursts find no cycles);
    bursts that repeat at neither the cycle nor any stage (cut at silences that jitter puts inside
    iterations too) leave the first stage, which its silences and lengths alone support."""
    agreed = [k for k in (1, *stages)
              if bursts_s is not None and abs(period_s / k / bursts_s - 1) <= BURST_MULTIPLE_TOLERANCE]
    if agreed:
        return agreed[-1]
    periodic = [k for k in stages if any(abs(p * k / period_s - 1) <= MULTIPLE_TOLERANCE for p in strong_s)]
    if periodic:
        return periodic[-1]
    return stages[0] if stages and bursts_s is not None else 1


def _unequal_parts(values: FloatArray, parts: int, share: float, least: int) -> bool:
    """Whether `values` (a cycle's parts in turn: lengths, or bytes), taken as the `parts` parts of
    each cycle, differ in mean by `share` of the mean and significantly
    (`ALTERNATION_SIGNIFICANCE` standard errors); False with fewer than `least` of each part.
    Two gradient buckets, each ending at a silence, can hold half the bytes each, but the part
    with the forward pass is the longer one, where the parts of a cycle that holds several
    iterations take as long as each other (and a parameter server's buckets of 1.39 and 1.55 MB
    alternate in bytes)."""
    groups = [values[k::parts] for k in range(parts)]
    if min(len(g) for g in groups) < least or values.mean() <= 0:  # too few to tell
        return False
    means = np.array([g.mean() for g in groups])
    errors = np.array([g.var(ddof=1) / len(g) for g in groups])
    hi, lo = int(np.argmax(means)), int(np.argmin(means))
    diff = float(means[hi] - means[lo])
    noise = math.sqrt(errors[hi] + errors[lo])
    return diff >= share * float(values.mean()) and diff > ALTERNATION_SIGNIFICANCE * noise


def _unequal_silences(silences: FloatArray, parts: int) -> bool:
    """Whether the silences that end the `parts` parts of each cycle differ in kind: the median of
    one part's silences at least `SILENCE_RATIO` times another's (at least a bin). The parts of a
    cycle that holds several iterations each end at the gap between iterations; a cycle cut at the
    silence between two gradient buckets of one iteration alternates a short gap with the long
    one before the next forward pass (a link-bound transformer: 2 ms against 10-35 ms)."""
    groups = [silences[k::parts] for k in range(parts)]
    if min(len(g) for g in groups) < MIN_CYCLES:  # too few to tell
        return False
    medians = np.array([max(float(np.median(g)), 1.0) for g in groups])
    return bool(medians.max() >= SILENCE_RATIO * medians.min())


# ---------------------------------------------------------------------------------------------
# cycles cut at each sender's silences (jittery, compute-bound jobs)


@dataclass(frozen=True)
class _SenderCycles:
    """One sender's cycles: starts and ends (bins) and bytes of its steady groups of bursts."""

    starts: IntArray
    ends: IntArray
    bytes: FloatArray
    gap: int
    group: int
    """Bursts per cycle; 0: as many as add up to the cycle's bytes (`_quantum_cycles`)."""

    @property
    def period(self) -> float:
        return float(np.median(np.diff(self.starts))) if len(self.starts) >= 2 else math.nan

    def uneven(self, parts: int) -> bool:
        """Whether the cycles, taken `parts` at a time, differ part by part: in length, in the
        silence that ends them or in bytes (`_unequal_parts`, `_unequal_silences`). Cycles of half
        an iteration alternate: the gap before a forward pass, then one between buckets; two
        buckets of different sizes in turn."""
        return (_unequal_parts(np.diff(self.starts).astype(np.float64), parts, ALTERNATION, 2)
                or _unequal_silences((self.starts[1:] - self.ends[:-1]).astype(np.float64), parts)
                or _unequal_parts(self.bytes, parts, ALTERNATION_BYTES, 2))

    @property
    def how(self) -> str:
        if self.group == 0:
            return f"bursts, as many as add up to {self.bytes.mean() / 1e6:.3g} MB"
        return f"bursts (silences >= {self.gap} ms, {self.group} per cycle)"


@dataclass(frozen=True)
class _Bursts:
    """The bursts candidate (see the module docstring, 8)."""

    period_s: float
    volume_cv: float
    duration_cv: float
    coverage: float
    cycles: int
    starts: IntArray  # the reference sender's steady cycles (bins)
    ends: IntArray
    per_iteration: FloatArray  # every sender
    sender_bytes: FloatArray  # cycles x senders, each sender's bytes within the reference cycles
    label: str
    typical: FloatArray  # each sender's median cycle (0 for the senders without cycles that agree)
    clean: FloatArray  # the share of each sender's cycles within CLEAN_CYCLE of its typical one


def _bursts_of(v: FloatArray, gap: int) -> tuple[IntArray, IntArray, FloatArray]:
    """Runs of busy bins with silences shorter than `gap` bins bridged: starts, ends (exclusive), bytes."""
    busy = np.flatnonzero(v > 0)
    if len(busy) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    cut = np.flatnonzero(np.diff(busy) > gap)
    starts = np.concatenate([[busy[0]], busy[cut + 1]]).astype(np.int64)
    ends = np.concatenate([busy[cut], [busy[-1]]]).astype(np.int64) + 1
    cum = np.concatenate([[0.0], np.cumsum(v)])
    return starts, ends, cum[ends] - cum[starts]


def _sender_cycles(v: FloatArray) -> _SenderCycles | None:
    """The sender's cycles: its bursts cut at every silence of at least some length (each length
    it has is tried, up to `MAX_GAPS` of them) and grouped k at a time; the grouping of the
    shortest median duration whose steady groups repeat their bytes and do not alternate in
    length, or its bursts cut by bytes (`_quantum_cycles`) where those are the same cycle over
    more of the capture or its iterations (None when neither repeats)."""
    starts, ends, nbytes = _bursts_of(v, 1)
    if len(nbytes) < MIN_CYCLES + 1:
        return None
    keep = nbytes >= NOISE_SHARE * float(np.quantile(nbytes, 0.9))
    starts, ends, nbytes = starts[keep], ends[keep], nbytes[keep]
    silences = starts[1:] - ends[:-1]
    lengths = np.unique(silences)[::-1]
    if len(lengths) > MAX_GAPS:
        lengths = np.unique(np.quantile(silences, np.linspace(0, 1, MAX_GAPS), method="nearest"))[::-1]
    best: _SenderCycles | None = None
    cum = np.concatenate([[0.0], np.cumsum(nbytes)])
    for gap in lengths.tolist():
        cut = np.flatnonzero(silences >= gap)
        if len(cut) < MIN_CYCLES:
            continue
        first = np.concatenate([[0], cut + 1])  # burst index of each segment's first burst
        last = np.concatenate([cut, [len(nbytes) - 1]])
        seg_bytes = cum[last + 1] - cum[first]
        for k in range(1, MAX_GROUP + 1):
            for offset in range(k):
                m = (len(seg_bytes) - offset) // k
                if m < MIN_CYCLES + 1:
                    continue
                idx = offset + k * np.arange(m)
                g = seg_bytes[offset: offset + k * m].reshape(m, k).sum(axis=1)
                a, b = _steady(g)
                if b - a < max(MIN_CYCLES, m // 2):
                    continue
                run = g[a:b]
                if not run.std() <= MAX_VOLUME_CV * run.mean():
                    continue
                c = _SenderCycles(starts[first[idx[a:b]]], ends[last[idx[a:b] + k - 1]], run, int(gap), k)
                if best is not None and c.period >= best.period * (1 - MERGE_TOLERANCE):
                    continue
                if c.uneven(2):  # half the iteration
                    continue
                best = c
    quantum = _quantum_cycles(starts, ends, nbytes)
    if best is None or quantum is None:
        return best if best is not None else quantum
    ratio = float(np.median(best.bytes)) / float(np.median(quantum.bytes))
    if abs(ratio - 1) <= BURST_MULTIPLE_BYTES:  # the same cycle: the longer run
        return quantum if len(quantum.starts) > len(best.starts) else best
    # the grouping holds m quanta: they are its iterations when they end at silences of one kind
    # (jitter), not chunks of it that end at short gaps but for the one before the next forward pass
    m = round(ratio)
    if m >= 2 and abs(ratio / m - 1) <= BURST_MULTIPLE_BYTES and not quantum.uneven(m):
        return quantum
    return best


def _quantum_cycles(starts: IntArray, ends: IntArray, nbytes: FloatArray) -> _SenderCycles | None:
    """The sender's cycles where no one silence length separates them (jitter makes the gap between
    a parameter server's two pushes as long as the forward pass between iterations, so its bursts
    per iteration vary in number): the longest run of bursts whose cumulative bytes reach each
    whole multiple of one quantum at the end of a burst (within `QUANTUM_TOLERANCE` of it), for the
    quanta the first `QUANTUM_STARTS` bursts and up to `QUANTUM_SPAN` after each add up to; the
    quantum of the shortest median duration whose run holds `QUANTUM_COVERAGE` of the sender's
    bytes in at least `MIN_CYCLES` cycles and does not alternate (as in `_sender_cycles`). None
    when none does."""
    cum = np.cumsum(nbytes)  # bytes up to the end of each burst
    sent = float(cum[-1]) if len(cum) else 0.0
    n = len(cum)
    best: _SenderCycles | None = None
    tried: set[int] = set()
    for i in range(min(n, QUANTUM_STARTS)):
        for j in range(i + 1, min(n, i + 1 + QUANTUM_SPAN)):
            q = float(cum[j] - cum[i])
            key = round(math.log(q) / math.log1p(QUANTUM_TOLERANCE)) if q > 0 else 0
            if q <= 0 or key in tried or q * MIN_CYCLES > sent:
                continue
            tried.add(key)
            target = cum + q
            after = np.clip(np.searchsorted(cum, target), 0, n - 1)
            before = np.clip(after - 1, 0, n - 1)
            nxt = np.where(np.abs(cum[after] - target) <= np.abs(cum[before] - target), after, before)
            hit = (np.abs(cum[nxt] - target) <= QUANTUM_TOLERANCE * q) & (nxt > np.arange(n))
            run = np.zeros(n, np.int64)  # cycles chained from each burst's end
            for k in range(n - 1, -1, -1):
                run[k] = run[nxt[k]] + 1 if hit[k] else 0
            first = int(np.argmax(run))
            if run[first] < MIN_CYCLES or run[first] * q < QUANTUM_COVERAGE * sent:
                continue
            bounds = [first]
            for _ in range(int(run[first])):
                bounds.append(int(nxt[bounds[-1]]))
            b = np.array(bounds)
            c = _SenderCycles(starts[b[:-1] + 1], ends[b[1:]], np.diff(cum[b]).astype(np.float64), 1, 0)
            if best is not None and c.period >= best.period * (1 - MERGE_TOLERANCE):
                continue
            if not c.uneven(2):
                best = c
    return best


def _bursts(volume: FloatArray, total: FloatArray) -> _Bursts | None:
    """The bursts candidate of a bins x senders series: the senders whose cycles agree (within
    `BURST_MULTIPLE_TOLERANCE`) on the shortest cycle any group of them holding a quarter of the
    bytes shows (a sender that serves several others, a parameter server, may group its bursts
    into a multiple), when they hold at least a third of the bytes; None otherwise."""
    sent = volume.sum(axis=0)
    if sent.sum() <= 0:
        return None
    found = {e: c for e in range(volume.shape[1]) if sent[e] > 0 and (c := _sender_cycles(volume[:, e])) is not None
             and math.isfinite(c.period)}
    agree: list[int] = []
    for e in sorted(found, key=lambda e: found[e].period):
        group = [x for x in found if abs(found[x].period / found[e].period - 1) <= BURST_MULTIPLE_TOLERANCE]
        if sent[group].sum() >= 0.25 * sent.sum():
            agree = group
            break
    if not agree or sent[agree].sum() < MIN_COVERAGE * sent.sum():
        return None
    ids = sorted(agree, key=lambda e: found[e].period)
    weights = sent[ids] / sent[ids].sum()
    period = float(np.array([found[e].period for e in ids])[np.searchsorted(np.cumsum(weights), 0.5)])
    ref = found[max(ids, key=lambda e: sent[e])]
    n = len(ref.starts)
    bounds = np.concatenate([ref.starts, [ref.ends[-1]]])
    cum = np.vstack([np.zeros((1, volume.shape[1])), np.cumsum(volume, axis=0)])
    within = np.diff(cum[np.clip(bounds, 0, len(volume))], axis=0)  # cycles x senders
    typical = np.array([float(np.median(found[e].bytes)) if e in agree else 0.0 for e in range(volume.shape[1])])
    clean = np.array([float(np.mean(np.abs(found[e].bytes / typical[e] - 1) <= CLEAN_CYCLE)) if e in agree else 0.0
                      for e in range(volume.shape[1])])
    per = np.where(typical > 0, typical, within.sum(axis=0) / n)
    cvs = np.array([found[e].bytes.std() / found[e].bytes.mean() for e in ids])
    d = np.diff(ref.starts).astype(np.float64)
    coverage = float(sum(found[e].bytes.sum() for e in ids) / total.sum()) if total.sum() > 0 else 0.0
    return _Bursts(period * BIN_S, float((weights * cvs).sum()), float(d.std() / d.mean()) if len(d) >= 2 else 0.0,
                   coverage, n, ref.starts, ref.ends, np.asarray(per, dtype=np.float64), within,
                   ref.how, typical, clean)


def _chunks_of_one(b: _Bursts, cut: _Cut) -> bool:
    """Whether the bursts' cycles are chunks of one periodic cycle rather than whole iterations: the
    silences between the reference sender's cycles that hold one of the periodic cut's boundaries
    are `CHUNK_SILENCE` times longer (medians, at least a bin) than the silences inside a cycle (a
    link-bound TensorFlow all-reduce sends its gradient in chunks, 8 ms apart, with the forward
    pass, 15 ms and more, between iterations). Where compute sets the pace, jittery iterations
    end at silences of one kind, wherever the periodic cut falls."""
    a, z = cut.run
    bounds = cut.bounds[a:z + 1]
    ends, starts = b.ends[:-1], b.starts[1:]
    bounds = np.sort(bounds)
    holds = np.searchsorted(bounds, ends, side="left") < np.searchsorted(bounds, starts + 1, side="right")
    if not holds.any() or holds.all():
        return False
    silence = (starts - ends).astype(np.float64)
    inner = max(float(np.median(silence[~holds])), 1.0)
    return float(np.median(silence[holds])) >= CHUNK_SILENCE * inner


def _crossing_period(volume: FloatArray, per: FloatArray, lo: int, hi: int, count: int) -> float:
    """The typical iteration: each sender's cumulative bytes over [lo, hi) cross every whole number
    of its bytes per iteration at the end of that iteration's sends; the interquartile mean
    (`interquartile_mean`) of the times between crossings of every sender whose window holds a
    whole number of iterations (within `STRETCH_TOLERANCE`), pooled: a handful of iterations per
    sender gives a handful of times, and the middle half of a handful is one or two. Jitter,
    stalls and drift of the iterations' lengths move it little, where a slope through a subset of
    the cycles follows them. NaN when no sender has at least `MIN_CYCLES` crossings."""
    if count < MIN_CYCLES + 1:
        return math.nan
    times = []
    for e in range(volume.shape[1]):
        b = float(per[e])
        v = volume[lo:hi, e]
        if b <= 0:
            continue
        n, off = whole_periods(float(v.sum()), b)
        if off > STRETCH_TOLERANCE or n < MIN_CYCLES + 1:
            continue
        cum = np.cumsum(v)
        levels = b * np.arange(1, int(n) + 1) - STRETCH_TOLERANCE * b
        i = np.minimum(np.searchsorted(cum, levels, side="left"), len(v) - 1)
        before = np.where(i > 0, cum[np.maximum(i - 1, 0)], 0.0)
        at = i + (levels - before) / np.where(v[i] > 0, v[i], 1.0)  # within the bin, as if spread evenly
        d = np.diff(at)
        if len(d) >= MIN_CYCLES:
            times.append(d)
    if not times:
        return math.nan
    return interquartile_mean(np.concatenate(times)) * BIN_S


def _from_bursts(b: _Bursts, volume: FloatArray, total: FloatArray, t0: float, senders: IntArray,
                 candidates: tuple[Candidate, ...], why: str) -> Iterations:
    """The iterations of the bursts candidate (see the module docstring, 8): counted over the stretch
    of traffic around the busiest sender's steady cycles when the senders with cycles agree that it
    holds a whole number of theirs, and the typical time between each sender's iterations' worth
    of bytes as the period."""
    lo, hi = int(b.starts[0]), int(b.ends[-1])
    count, window, per, counted = b.cycles, (lo, hi), b.per_iteration, "bursts"
    s_lo, s_hi, stretch, n = _counted_stretch(volume, total, lo, hi, b.period_s / BIN_S, b.typical)
    how = f"each sender's median cycle, over {b.cycles} cycles"
    if n >= b.cycles:
        count, window, counted = n, (s_lo, s_hi + 1), "stretch"
        per = _per_iteration(stretch, n, b.typical, b.clean >= CLEAN_SHARE)
        how = f"the bytes of the stretch of traffic the cycles lie in / {n}"
    period_s = b.period_s
    crossed = _crossing_period(volume, per, window[0], window[1], count)
    if math.isfinite(crossed):
        period_s = crossed
    chosen = Candidate(period_s, (b.label,), 0.0, b.cycles, b.volume_cv, b.duration_cv, "chosen")
    reason = (f"every sender's traffic cut at its own silences: {why}; {b.cycles} steady cycles of the busiest "
              f"sender ({b.label}) holding {b.coverage:.0%} of the bytes, each sender's bytes per cycle vary "
              f"{b.volume_cv:.1%}, their durations {b.duration_cv:.0%} (jitter); period = "
              + ("the typical time between each sender's iterations' worth of bytes" if math.isfinite(crossed)
                 else "the median cycle") + f"; bytes per iteration = {how}")
    starts = t0 + b.starts.astype(np.float64) * BIN_S
    ends = np.concatenate([starts[1:], [t0 + float(b.ends[-1]) * BIN_S]])
    return Iterations(period_s, (*candidates, chosen), reason, starts, ends, b.sender_bytes.sum(axis=1),
                      tuple(int(x) for x in senders), b.sender_bytes, count, (float(starts[0]), float(ends[-1])),
                      (t0 + window[0] * BIN_S, t0 + window[1] * BIN_S), np.asarray(per, dtype=np.float64), counted)


def _whole_cycles(stretch: FloatArray, cycle: FloatArray) -> int:
    """How many whole cycles a stretch of traffic holds, from the senders whose bytes in it are
    a whole number of their cycle's bytes (within `STRETCH_TOLERANCE`): the fewest such number
    (setup traffic only adds: the initial parameter broadcast is a whole cycle's worth for the
    rank that sends it), when the others hold at most `SETUP_CYCLES` more and the senders at
    the fewest hold at least `STRETCH_CLEAN_SHARE` of the bytes; 0 otherwise. A sender that
    never pauses (a parameter server's saturated link) has no clean cut; its neighbours decide."""
    sent = cycle > 0
    counts, off = whole_periods(stretch[sent], cycle[sent])
    clean = off <= STRETCH_TOLERANCE
    counts = counts[clean]
    if not len(counts) or counts.max() - counts.min() > SETUP_CYCLES:
        return 0
    n = int(counts.min())
    if stretch[sent][clean][counts == n].sum() < STRETCH_CLEAN_SHARE * stretch.sum():
        return 0
    return n


def _per_iteration(stretch: FloatArray, n: int, cycle: FloatArray, known: NDArray[np.bool_]) -> FloatArray:
    """Each sender's bytes per iteration over a stretch of `n` iterations: its bytes there / n,
    except for a sender whose typical cycle is `known` (most of its cycles agree with it) but
    whose stretch holds more than `SETUP_SHARE` of a cycle more or less than n of them: it sent
    setup traffic too (the initial parameter broadcast), and its typical cycle is its bytes per
    iteration."""
    setup = (np.abs(stretch - n * cycle) > SETUP_SHARE * cycle) & known
    return np.asarray(np.where(setup, cycle, stretch / n), dtype=np.float64)


def _stretches(total: FloatArray, period: float) -> tuple[IntArray, IntArray]:
    """First and last busy bin of every stretch of traffic between gaps longer than a period."""
    busy = np.flatnonzero(total > 0)
    gaps = np.flatnonzero(np.diff(busy) > period)
    return (np.concatenate([[busy[0]], busy[gaps + 1]]).astype(np.int64),
            np.concatenate([busy[gaps], [busy[-1]]]).astype(np.int64))


def _stretch(total: FloatArray, lo: int, hi: int, period: float) -> tuple[int, int]:
    """The first and last busy bin of the traffic around [lo, hi) up to a gap longer than a period."""
    starts, ends = _stretches(total, period)
    first = int(np.searchsorted(ends, lo, side="left"))
    last = int(np.searchsorted(starts, max(hi - 1, lo), side="right")) - 1
    return int(starts[min(first, len(starts) - 1)]), int(ends[max(last, 0)])


def _counted_stretch(volume: FloatArray, total: FloatArray, lo: int, hi: int, period: float,
                     cycle: FloatArray) -> tuple[int, int, FloatArray, int]:
    """The stretch of traffic around [lo, hi) (`_stretch`) and the whole cycles it holds
    (`_whole_cycles`), grown over the stretches beside it while each holds a whole number of
    cycles too (at least one; stretches of less than `STRETCH_TOLERANCE` of a cycle, stray
    packets, are passed over): a stall of the machine (descheduled ranks, a retransmission
    timeout) longer than a period splits the training traffic but does not end it. First and
    last bin, each sender's bytes there, and the cycles (0 when the stretch itself holds no whole
    number of them)."""
    s_lo, s_hi = _stretch(total, lo, hi, period)
    sums = volume[s_lo:s_hi + 1].sum(axis=0)
    n = _whole_cycles(sums, cycle)
    if n <= 0:
        return s_lo, s_hi, sums, 0
    starts, ends = _stretches(total, period)
    i = int(np.searchsorted(starts, s_lo))
    j = int(np.searchsorted(ends, s_hi))
    small = STRETCH_TOLERANCE * cycle
    for step, edge in ((-1, i), (1, j)):
        k = edge + step
        while 0 <= k < len(starts):
            part = volume[starts[k]:ends[k] + 1].sum(axis=0)
            stray = bool(np.all(part <= small))
            m = 0 if stray else _whole_cycles(part, cycle)
            if m == 0 and not stray:
                break
            if m > 0:
                n += m
                if step < 0:
                    s_lo = int(starts[k])
                else:
                    s_hi = int(ends[k])
            k += step
    return s_lo, s_hi, volume[s_lo:s_hi + 1].sum(axis=0), n


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
