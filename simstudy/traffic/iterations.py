"""Iterations found from the traffic alone: the period, the bytes per iteration, and where the
whole iterations of steady training lie.

A capture without metadata has no iteration marks, and its timing is shaped by TCP, token buckets
and busy cores as much as by the job: iterations on one host jitter by tens of percent, a lossy
link stalls one now and then. What does not jitter is **what each sender sends per iteration**:
the same gradients, the same parameters, to a few bytes. So the iteration is found in bytes, and
its period follows from when those bytes are sent.

**Objective.** For a sender e with cumulative bytes C_e(t), a *repeat* of quantum q is a run of
consecutive cycles, each holding q bytes of e (within `QUANTUM_TOLERANCE`, or the control bytes
a cycle of e is expected to hold where they are more) and ending where e falls silent; the bytes
it explains are q times its cycles. The iteration is the cycle length T that maximises

    explained(T) = sum over senders e of the bytes of e's longest repeat whose typical cycle
                   lasts T (within `AGREE` of every other vote),

that is, the bytes of every sender explained by one repeating cycle, each sender counting as far
as it agrees on T. A sender votes only with a repeat that explains most of its own bytes
(`MAJORITY`): a run of small messages beside its bulk transfers is not its iteration. A sender
that never falls silent at the iteration's end (a parameter server's saturated link) explains
nothing and does not vote. Where no T explains most of the bytes of the senders that repeat,
no iteration is found. Only single
cycles count as explained: a run may bridge a cycle of up to `BRIDGE` quanta (a silence filled
by jitter or a stall), which keeps the run going but explains nothing, so a multiple kT never
explains more than T. A repeat counts only when chance would not give one as close (`CHANCE`), were the sender's
burst ends spread at random over its bytes: each cycle's chance of ending as near q bytes on as it
does in a silence at least as long as its own (an iteration ends at a long silence, and few
silences are that long: a Horovod job's bytes per iteration move by a few tenths of a percent
with its background thread's messages, while its setup sends hundreds of tiny bursts). A silence
is one place in bytes, whichever of its burst ends a cycle ends at: the end of the payload before
it or of a burst of control within it (Horovod's negotiation messages, 152 bytes each, fall into
the compute between iterations, and a cycle may end before or after them), combined
over the cycles by Fisher's method (but the one nearest the quantum: the quantum is their median,
so that cycle is exact by construction), times the quanta and starts tried. Large quanta
over dense burst ends chain by chance, but not to within the few bytes an iteration repeats to
(a link shaped into 64 KB bursts ends a burst every 2 ms, so any quantum finds a burst end within
a percent or two: the iteration's own chain ends within a few hundred bytes).

**Penalty for finer cuts.** A finer cut T/m explains as much as T where every sender's bytes
split into m equal parts that end at silences (the halves of a two-worker ring all-reduce, equal
gradient buckets, the chunks of a TensorFlow all-reduce). Of the cycle lengths that explain as
much as the most, short of it by no more than one of their own cycles per sender (a chain may miss
one at either end that a coarser one takes in, with a few bytes of setup), the shortest is taken;
it gives way to the shortest T/m whose repeats hold 1/m of its
quanta, explain as much up to one of its cycles per sender (the coarser quantum's larger
tolerance takes in a few bytes of setup), and whose parts are alike; and the cut taken gives way
to a coarser one that explains as much and in whose cycles its own parts differ. Parts differ
where, for every sender, their durations differ by their place in the cycle (Kruskal-Wallis, at
`CHANCE`) and their typical durations are more than `AGREE` apart (a two-worker ring all-reduce's
halves, one of them holding the compute, which every sender waits for; not the 1 ms bins a period
of 23.7 ms falls into, nor one worker of a parameter server on two shared cores whose iterations
alternate between a fast and a slow pace).

**Method.** (1) Each sender's traffic in 1 ms bins (`BIN_S`) is cut into bursts at every empty
bin, and where a bin of control only (below `CONTROL_BYTES`) is followed by a full one (stray
control packets that fill a silence do not join two iterations); the iteration ends at the end
of a burst. (2) Quanta tried: the bytes between any two of the sender's `BOUNDARIES` longest
silences (an iteration ends at one of its longer silences, the compute between iterations); a
silence lasts from a burst of payload to the next one, bursts of control within it (below
`CONTROL_BYTES`: heartbeats, rendezvous, metadata) do not end it.
(3) Each quantum's longest repeat is found by chaining each burst's end to the burst end q bytes
later (`_chains`); of the chains with the most single cycles, the one chance explains
least (every phase of a repeating cycle chains alike; its end is where the sender falls silent
longest, not a pause within it). The quantum is then the median bytes of its single cycles (the
pair of silences that proposed it may hold a few bytes of control more or less), and chained again.
Where chance would give that chain (`CHANCE`), the chain chance explains least of all is tried
(Fisher's combined p over its cycles, whatever their number): a sender whose longest silence falls
now at the iteration's end, now between two halves of its bytes (a Horovod worker on shared cores,
whose fused buffers leave during and after the backward pass), chains longest through the pauses
within its iterations, a few kilobytes off at each, and more exactly through its iterations' ends.
(4) Every sender's repeats are candidate cycle lengths (their cycles'
interquartile mean duration, `interquartile_mean`), scored by `explained`. (5) The chosen T
gives: the steady window, the reference's cycles (the sender that explains the most) where every
chosen sender repeats (a parameter broadcast of a whole number of quanta is no iteration), from
where any sender's first cycle starts to where any's last one ends; the bytes per iteration of
each sender, the slope of its cumulative bytes over the reference's cycles, or its quantum where
that is the same amount (within `AGREE`: not a few bytes of control); the period, the
interquartile mean of those senders' cycle durations, each cycle timed from the previous one's
end. The first cycle is left out of the slope and the durations (its start ends setup traffic,
not an iteration), so that jitter and stalls move them little.

Tolerances, each with its meaning and source:

* `BIN_S`: a silence is at least one empty 1 ms bin (TCP's gaps within a burst are tens of
  microseconds; the compute between iterations is milliseconds).
* `QUANTUM_TOLERANCE`: bytes of one cycle equal the quantum within 0.1% (an iteration's payload
  repeats to a few small control messages, hundreds of bytes in megabytes), or within the control
  bytes the cycle is expected to hold where they are more: the sender's mean bytes in a bin below
  `CONTROL_BYTES` times the cycle's bins (the quantum at the sender's mean rate), so that a
  sender's stray small packets, which fall into a cycle at random, are measured, not tuned.
* `MIN_CYCLES`: a repeat needs three cycles (two equal amounts are a coincidence of two bursts).
* `CHANCE`: a repeat counts when fewer than 0.01 as close are expected by chance among all the
  quanta and starts tried (one chance repeat in a hundred captures); the same level tells parts
  that differ.
* `BRIDGE`: a cycle may bridge two quanta (one silence lost).
* `AGREE`: two cycle lengths are one when within 20%, closer than the nearest ratio of whole
  iterations that is not one (5/4), so that jitter does not split a vote and a multiple never
  joins it. The votes for T lie within a factor sqrt(1.2) of it either way, so that any two of
  them are within 20% of each other (20% either way would let 0.8 T and 1.2 T vote together: a
  TensorFlow all-reduce sent in six equal chunks, every run of chunks repeating, read 4/3 of its
  iterations as one where one sender's eight-chunk cut and the others' six-chunk one did).
* `CONTROL_BYTES`: a burst of less than one full TCP segment (1448 bytes: a 1500-byte Ethernet
  MTU less 52 bytes of IP, TCP and timestamp headers) is control; payloads of megabytes are sent
  in full segments.
* `BOUNDARIES`: the 32 longest silences of a sender are tried as iteration ends (captures hold
  tens of iterations; a longer run of them is found from any two).
* `MAJORITY`: most is more than half. A sender's repeat counts where it explains most of that
  sender's bytes: four Horovod workers on two cores repeat their negotiation messages too (21 KB
  every 320 ms beside 2.1 MB of gradients per iteration), and where that was one worker's only
  repeat of the iteration's length it voted with 1% of its bytes and the steady window, where
  every voting sender repeats, shrank to one cycle. The iteration explains most of the bytes of the
  senders that repeat; a sender that never falls silent, such as a parameter server's saturated
  link, says nothing either way. Where the best cycle explains less, no iteration is found and the
  reason says so: the traffic is not one repeating iteration as its bytes show it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy.stats import chi2, kruskal

from simstudy.traffic.timeline import sender_bytes

__all__ = [
    "AGREE",
    "BIN_S",
    "CONTROL_BYTES",
    "MAJORITY",
    "MIN_CYCLES",
    "QUANTUM_TOLERANCE",
    "Candidate",
    "Iterations",
    "find_iterations",
    "interquartile_mean",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Bin width of the series, seconds: a silence is at least one empty bin.
BIN_S = 1e-3
#: A cycle holds the quantum when its bytes are within this share of it.
QUANTUM_TOLERANCE = 0.001
#: Fewest cycles of a repeat.
MIN_CYCLES = 3
#: Cycle lengths within this share of each other are one.
AGREE = 0.2
#: Longest silences of a sender tried as iteration ends.
BOUNDARIES = 32
#: Largest expected number of repeats as long as one found, were the burst ends random.
CHANCE = 0.01
#: Most iterations one cycle of a repeat may bridge.
BRIDGE = 2
#: Bytes below which a burst is control, not payload: one full TCP segment.
CONTROL_BYTES = 1448
#: A repeat explains more than this share of its sender's bytes, the iteration of the repeating senders'.
MAJORITY = 0.5



@dataclass(frozen=True)
class Candidate:
    """One candidate cycle length and what its repeats showed."""

    period_s: float
    found_by: tuple[str, ...]
    """The senders whose repeats last that long: "sender 3: 2.144 MB x 13" (quantum x cycles)."""
    acf: float
    """The share of all bytes its repeats explain (the objective)."""
    cycles: int
    """Cycles of the repeat that explains the most."""
    volume_cv: float
    """Bytes-weighted mean over its senders of the coefficient of variation of their bytes per
    cycle, relative to their quantum."""
    duration_cv: float
    """Coefficient of variation of its cycles' durations."""
    verdict: str
    """"chosen", or why not: "explains 35% of the bytes (chosen: 98%)"."""


@dataclass(frozen=True)
class Iterations:
    """The iterations found in a trace (see the module docstring)."""

    period_s: float
    """The typical iteration (NaN when none was found; see the module docstring, (5))."""
    candidates: tuple[Candidate, ...]
    reason: str
    starts_s: FloatArray
    """Start of every steady cycle (table time)."""
    ends_s: FloatArray
    """End of every steady cycle (the next one's start)."""
    bytes: FloatArray
    """Bytes of every steady cycle (all senders)."""
    senders: tuple[int, ...]
    sender_bytes: FloatArray
    """Bytes each sender sent in each steady cycle: cycles x senders."""
    count: int
    """Whole iterations counted over the steady cycles (a cycle that bridges two counts two)."""
    window_s: tuple[float, float]
    """From the first steady cycle's start to the last one's end (table time; NaN, NaN when none):
    whole iterations of steady training, where the other analyses look."""
    counted_s: tuple[float, float]
    """The stretch the iterations were counted over (`window_s`)."""
    per_iteration: FloatArray
    """Bytes per iteration of every sender (`senders`)."""
    counted_by: str
    """"quantum": the senders' repeating bytes; "none"."""

    @property
    def bytes_per_iteration(self) -> float:
        """All senders' bytes per iteration (NaN when none was found)."""
        return float(self.per_iteration.sum()) if self.count else math.nan


def interquartile_mean(x: FloatArray) -> float:
    """The mean of the middle half of `x` (its values from the 25th to the 75th percentile): the
    typical one of jittery iteration durations. Stalls (a TCP retransmission timeout) and short
    outliers fall outside it, as with the median; but where durations form two clusters (compute
    on two shared cores alternates between paces) the median jumps from one to the other with a
    single sample, and this moves smoothly. The mean of one or two values; NaN for none."""
    v = np.asarray(x, dtype=np.float64)
    if len(v) == 0:
        return math.nan
    if len(v) <= 2:
        return float(v.mean())
    q1, q3 = np.quantile(v, [0.25, 0.75])
    return float(v[(v >= q1) & (v <= q3)].mean())


@dataclass(frozen=True)
class _Repeat:
    """One sender's repeat: the bin at which each cycle ends (the first: where the first starts)."""

    sender: int
    quantum: float
    bounds: IntArray
    cycle_bytes: FloatArray
    single: NDArray[np.bool_]
    tolerance: float

    @property
    def cycles(self) -> int:
        """Iterations along the chain, bridged ones included."""
        return round(float(self.cycle_bytes.sum()) / self.quantum)

    @property
    def explained(self) -> float:
        return float(self.cycle_bytes[self.single].sum())

    @functools.cached_property
    def durations(self) -> FloatArray:
        """Bins from each single cycle's end to the next's: the first cycle is left out, as its start
        ends what went before (setup traffic, a rendezvous), not an iteration."""
        return np.diff(self.bounds)[1:][self.single[1:]].astype(np.float64)

    @functools.cached_property
    def period(self) -> float:
        """The typical single cycle's duration, bins."""
        return interquartile_mean(self.durations)


def _bursts(v: FloatArray) -> tuple[IntArray, IntArray, FloatArray]:
    """A sender's bursts (runs of busy bins, also cut where a full bin follows one of control
    only): first bin, end bin (exclusive), cumulative bytes at each end (with 0 before the first)."""
    busy = np.flatnonzero(v > 0)
    full = v[busy] >= CONTROL_BYTES
    cut = np.flatnonzero((np.diff(busy) > 1) | (~full[:-1] & full[1:]))
    starts = np.concatenate([busy[:1], busy[cut + 1]]).astype(np.int64)
    ends = np.concatenate([busy[cut], busy[-1:]]).astype(np.int64) + 1
    cum = np.concatenate([[0.0], np.cumsum(v)])
    return starts, ends, np.concatenate([[0.0], cum[ends]])


Chain = tuple[IntArray, NDArray[np.bool_]]


def _chains(at: FloatArray, q: float, tolerance: float, rarity: FloatArray) -> Iterator[Chain]:
    """Indices into `at` (cumulative bytes at burst ends) of the chain that holds the most single
    cycles, each next index q bytes on (within `tolerance` of q), or k q on where no
    burst ends at q (k up to `BRIDGE`: a silence filled by jitter or a stall merges iterations);
    and whether each step is a single cycle. Of the chains that hold as many, the one chance
    explains least (Fisher's -2 sum log p over its single cycles, `_chance`): every phase of a
    repeating cycle chains alike, and it is the iteration's end, not a pause within it, where the
    sender falls silent longest. Then, if asked for, the chain chance explains least of all
    (Fisher's combined p, for chains of any number of single cycles)."""
    n = len(at)
    nxt, single = np.full(n, -1), np.zeros(n, np.bool_)
    for k in range(BRIDGE, 0, -1):  # the smallest k that hits wins
        target = at + k * q
        after = np.clip(np.searchsorted(at, target), 0, n - 1)
        before = np.clip(after - 1, 0, n - 1)
        j = np.where(np.abs(at[after] - target) <= np.abs(at[before] - target), after, before)
        hit = (np.abs(at[j] - target) <= tolerance * q) & (j > np.arange(n))
        nxt, single = np.where(hit, j, nxt), np.where(hit, k == 1, single)
    to = np.maximum(nxt, 0)
    weight = np.where(single, -2 * np.log(_chance(np.abs(at[to] - at - q), rarity[to], at[-1])), 0.0)
    score, stat = np.zeros(n, np.int64), np.zeros(n)
    while True:  # single cycles (and their statistic) along each chain, every link at once until none grows
        grown = np.where(nxt >= 0, score[nxt] + single, 0)
        summed = np.where(nxt >= 0, stat[nxt] + weight, 0.0)
        if np.array_equal(grown, score) and np.array_equal(summed, stat):
            break
        score, stat = grown, summed

    def walk(start: int) -> Chain:
        chain = [start]
        while nxt[chain[-1]] >= 0 and score[chain[-1]] > 0:
            chain.append(int(nxt[chain[-1]]))
        c = np.asarray(chain, dtype=np.int64)
        return c, np.asarray(single[c[:-1]], dtype=np.bool_)

    yield walk(int(np.argmax(np.where(score == score.max(), stat, -np.inf))))
    yield walk(int(np.argmin(np.where(score > 0, chi2.logsf(stat, 2 * np.maximum(score, 1)), np.inf))))


def _chance(off: FloatArray, rarity: FloatArray, total: float) -> FloatArray:
    """Each cycle's chance of ending as near its quantum on (`off` bytes) as it does, were the
    sender's silences spread at random over its `total` bytes: of ending within `off` of it in a
    silence at least as long as its own (`rarity`: their number)."""
    return np.minimum(1.0, 2 * np.maximum(off, 1.0) * rarity / total)


def _repeats(v: FloatArray, sender: int) -> list[_Repeat]:
    """Every quantum's longest repeat of one sender's bins (see the module docstring), one per
    quantum (within `QUANTUM_TOLERANCE`), with at least `MIN_CYCLES` cycles, that explains most
    of the sender's bytes (`MAJORITY`)."""
    if np.count_nonzero(v) < 2:
        return []
    starts, ends, at = _bursts(v)
    when = np.concatenate([starts[:1], ends])  # the bin at each entry of `at`
    payload = np.flatnonzero(np.diff(at) >= CONTROL_BYTES)  # bursts that are not control
    if len(payload) == 0:
        return []
    # every burst end's silence: from the payload burst it follows (itself, or the last one before a
    # burst of control within the silence) to the next payload burst; none before the first payload
    ahead = np.concatenate([starts[payload], [len(v)]])
    gap = ahead[np.minimum(np.searchsorted(ahead, when), len(ahead) - 1)] - when
    after = np.searchsorted(payload + 1, np.arange(len(at)), side="right") - 1  # the payload burst it follows
    quiet = np.where(after >= 0, gap[payload[np.maximum(after, 0)] + 1], 0)
    silence = quiet[payload + 1]  # after each payload burst
    # how many silences are at least as long (each one place in bytes, the control bursts within it too)
    rarity = np.maximum(len(silence) - np.searchsorted(np.sort(silence), quiet), 1).astype(np.float64)
    # the control bytes a cycle is expected to hold: their rate (the mean bin below a full segment)
    # times the cycle's duration (q at the sender's mean rate)
    small = v[v < CONTROL_BYTES]  # none where the sender is busy in every bin: no control rate
    tolerance = max(QUANTUM_TOLERANCE, (float(small.mean()) if len(small) else 0.0) * len(v) / at[-1])
    tried = np.unique(np.concatenate([[0], payload[np.argsort(-silence, kind="stable")[:BOUNDARIES]] + 1]))
    q = (at[tried][None, :] - at[tried][:, None]).ravel()
    q = np.unique(q[(q > 0) & (q * MIN_CYCLES <= at[-1])])
    out: list[_Repeat] = []
    last = -math.inf
    for x in q:  # ascending: quanta within the tolerance of the last one tried are the same
        if x <= last * (1 + QUANTUM_TOLERANCE):
            continue
        last = x
        chain, single = next(_chains(at, float(x), tolerance, rarity))
        if single.sum() < MIN_CYCLES:
            continue
        x = float(np.median(np.diff(at[chain])[single]))  # the quantum, as its cycles hold it
        for chain, single in _chains(at, x, tolerance, rarity):  # the longest, then the rarest
            if single.sum() < MIN_CYCLES:
                continue
            # the chain's chance (Fisher's method over its cycles), among every quantum and start tried;
            # the quantum was fit to the cycles, so the one nearest it (its own median) is left out
            off = np.abs(np.diff(at[chain])[single] - x)
            rest = np.arange(len(off)) != np.argmin(off)
            p = _chance(off[rest], rarity[chain[1:][single]][rest], at[-1])
            if len(q) * len(at) * chi2.sf(-2 * np.log(p).sum(), 2 * len(p)) <= CHANCE:
                r = _Repeat(sender, float(x), when[chain], np.diff(at[chain]), single, tolerance)
                if r.explained > MAJORITY * at[-1]:
                    out.append(r)
                break
    return out


def _explained(repeats: list[_Repeat], period: float) -> dict[int, _Repeat]:
    """Each sender's repeat that explains the most among those lasting `period` (within a factor
    sqrt(1 + `AGREE`) of it either way: any two of them within `AGREE` of each other)."""
    best: dict[int, _Repeat] = {}
    half = math.sqrt(1 + AGREE)
    for r in repeats:
        if 1 / half <= r.period / period <= half and (r.sender not in best or r.explained > best[r.sender].explained):
            best[r.sender] = r
    return best


def _alike(fine: dict[int, _Repeat], coarse: dict[int, _Repeat]) -> bool | None:
    """Whether `fine` cuts each cycle of `coarse` into m > 1 parts that are alike; None where it is
    no such cut: every sender of `coarse` has a repeat in `fine` of 1/m its quantum, and the two
    explain as much up to one cycle of `coarse` per sender (the coarser quantum's larger tolerance
    takes in a few bytes of setup). The parts differ where, for every sender, their durations
    differ by their place in the cycle: a Kruskal-Wallis test by the place, at `CHANCE`, and
    their typical durations more than `AGREE` apart (a two-worker ring all-reduce's halves, one of
    them holding the compute; not the 1 ms bins that a period of 23.7 ms falls into)."""
    if not set(coarse) <= set(fine):
        return None
    m = round(coarse[next(iter(coarse))].quantum / fine[next(iter(coarse))].quantum)
    differ = []
    for e, c in coarse.items():
        f = fine[e]
        if m < 2 or abs(m * f.quantum / c.quantum - 1) > max(f.tolerance, c.tolerance):
            return None
        if abs(f.explained - c.explained) > c.quantum:
            return None
        place = np.cumsum(np.round(f.cycle_bytes / f.quantum)) % m  # where in the coarse cycle each part ends
        d = np.diff(f.bounds)[1:].astype(np.float64)  # the first cycle left out, as in `durations`
        groups = [d[f.single[1:] & (place[1:] == k)] for k in range(m)]
        if min(len(g) for g in groups) < 2:
            return None
        typical = [interquartile_mean(g) for g in groups]
        differ.append(bool(max(typical) > (1 + AGREE) * min(typical) and kruskal(*groups).pvalue < CHANCE))
    return not all(differ)


def _candidate(period: float, chosen: dict[int, _Repeat], total: float, ids: IntArray, verdict: str) -> Candidate:
    """A cycle length as a `Candidate`: found by the senders whose repeats last that long, `acf` the
    share of all bytes they explain (the objective), cycles those of the one that explains most."""
    ref = max(chosen.values(), key=lambda r: r.explained)
    sent = np.array([r.explained for r in chosen.values()])
    cvs = np.array([r.cycle_bytes[r.single].std() / r.quantum for r in chosen.values()])
    d = np.concatenate([r.durations for r in chosen.values()])
    return Candidate(period * BIN_S, tuple(f"sender {ids[r.sender]}: {r.quantum / 1e6:.4g} MB x {r.cycles}"
                                           for r in chosen.values()), float(sent.sum() / total), ref.cycles,
                     float((sent * cvs).sum() / sent.sum()), float(d.std() / d.mean()), verdict)


def _none(reason: str, candidates: tuple[Candidate, ...] = ()) -> Iterations:
    empty = np.zeros(0)
    return Iterations(math.nan, candidates, reason, empty, empty, empty, (), np.zeros((0, 0)), 0,
                      (math.nan, math.nan), (math.nan, math.nan), empty, "none")


def find_iterations(rows: pd.DataFrame) -> Iterations:
    """The iterations of a table's training rows (see the module docstring)."""
    if len(rows) == 0:
        return _none("no training traffic")
    t0 = float(rows["t_start_s"].min())
    ids, volume = sender_bytes(rows, BIN_S, t0)  # bins x senders
    total = float(volume.sum())
    repeats = [r for e in range(volume.shape[1]) for r in _repeats(volume[:, e], e)]
    if not repeats or total <= 0:
        return _none("no sender repeats the same bytes over three cycles ending at silences in most of its bytes")
    scored: list[tuple[float, dict[int, _Repeat]]] = []
    for period in sorted({r.period for r in repeats}):
        votes = _explained(repeats, period)
        if not any(abs(p / period - 1) <= AGREE for p, _ in scored):
            scored.append((period, votes))
        else:  # the same cycle length as one scored: keep the one that explains more
            i = next(i for i, (p, _) in enumerate(scored) if abs(p / period - 1) <= AGREE)
            if sum(r.explained for r in votes.values()) > sum(r.explained for r in scored[i][1].values()):
                scored[i] = (period, votes)
    explained = [sum(r.explained for r in v.values()) for _, v in scored]
    top = max(range(len(scored)), key=lambda i: explained[i])
    def quanta(i: int) -> float:
        """One cycle per sender of cut i: "as much" is short of the other by no more (a chain may miss
        one at either end that a coarser one takes in, with a few bytes of setup)."""
        return sum(r.quantum for r in scored[i][1].values())

    best = min((i for i in range(len(scored)) if explained[i] >= explained[top] - quanta(i)),
               key=lambda i: scored[i][0])
    best = min((i for i in range(len(scored)) if _alike(scored[i][1], scored[best][1])),
               key=lambda i: scored[i][0], default=best)
    for i in sorted(range(len(scored)), key=lambda i: scored[i][0]):  # coarser cuts, as much, whose parts differ
        if (scored[i][0] > scored[best][0] and explained[i] >= explained[best] - quanta(i)
                and _alike(scored[best][1], scored[i][1]) is False):
            best = i
    period, chosen = scored[best]
    share = {i: sum(r.explained for r in v.values()) / total for i, (_, v) in enumerate(scored)}
    # most of the bytes of the senders that repeat anything (one that never falls silent says nothing)
    heard = float(volume[:, sorted({r.sender for r in repeats})].sum())
    refused = explained[best] <= MAJORITY * heard

    def verdict(i: int) -> str:
        if i == best and not refused:
            return "chosen"
        return f"explains {share[i]:.0%} of the bytes" + ("" if refused else f" (chosen: {share[best]:.0%})")

    candidates = tuple(_candidate(p, v, total, ids, verdict(i)) for i, (p, v) in enumerate(scored))
    if refused:
        return _none(f"no cycle explains most of the bytes of the senders that repeat (the best, "
                     f"{period * BIN_S * 1e3:.4g} ms, explains {explained[best] / heard:.0%} of them): their bytes "
                     "do not repeat from iteration to iteration ending at silences", candidates)
    return _found(volume, ids, t0, chosen, candidates, share[best])


def _first_start(r: _Repeat) -> int:
    """Where a sender's first iteration begins: its first cycle's start, or one typical cycle before
    that cycle's end where the cycle lasts longer (by more than `AGREE`): its start then ended setup
    traffic (a parameter broadcast, a rendezvous), not an iteration, as `_Repeat.durations` takes it.
    (A first cycle may be shorter: a trace that starts with a burst lacks the compute before it.)"""
    if len(r.bounds) > 2 and (r.bounds[1] - r.bounds[0]) > (1 + AGREE) * r.period:
        return int(r.bounds[1] - round(r.period))
    return int(r.bounds[0])


def _steady(chosen: dict[int, _Repeat]) -> _Repeat:
    """The cycles of the repeat that explains the most that lie where every chosen sender repeats
    (from the latest `_first_start` to the earliest last cycle's end, within half a cycle): one
    sender's setup traffic (a parameter broadcast) that happens to be a whole number of quanta is
    no iteration, nor is a cycle that holds setup traffic and an iteration. The first starts, the
    last ends, where any sender's does (within half a cycle)."""
    ref = max(chosen.values(), key=lambda r: r.explained)
    lo = max(_first_start(r) for r in chosen.values())
    hi = min(int(r.bounds[-1]) for r in chosen.values())
    # the reference's cycles that lie in [lo, hi] (within half a cycle); one that straddles lo starts there
    half = ref.period / 2
    i = min(int(np.searchsorted(ref.bounds, lo - half, side="left")), len(ref.bounds) - 1)
    straddled = i > 0 and ref.bounds[i] - lo > half
    i -= int(straddled)
    j = max(int(np.searchsorted(ref.bounds, hi + half, side="right")) - 1, 0)
    if j - i < 1:
        return ref
    bounds = ref.bounds[i:j + 1].copy()
    if straddled:
        bounds[0] = lo
    for r in chosen.values():  # the first cycle starts, the last ends, where any sender's does
        bounds[0] = np.min(r.bounds[np.abs(r.bounds - bounds[0]) < ref.period / 2], initial=bounds[0])
        bounds[-1] = np.max(r.bounds[np.abs(r.bounds - bounds[-1]) < ref.period / 2], initial=bounds[-1])
    return dataclasses.replace(ref, bounds=bounds, cycle_bytes=ref.cycle_bytes[i:j], single=ref.single[i:j])


def _found(volume: FloatArray, ids: IntArray, t0: float, chosen: dict[int, _Repeat],
           candidates: tuple[Candidate, ...], share: float) -> Iterations:
    """The iterations of the chosen repeats (see the module docstring, (5))."""
    ref = _steady(chosen)
    lo, hi = int(ref.bounds[0]), int(ref.bounds[-1])
    cum = np.vstack([np.zeros((1, volume.shape[1])), np.cumsum(volume, axis=0)])
    within = np.diff(cum[ref.bounds], axis=0)  # cycles x senders
    n = ref.cycles
    k = np.concatenate([[0], np.cumsum(np.round(ref.cycle_bytes / ref.quantum))])  # iterations at each bound
    # the others: the slope of their bytes over iterations, the first cycle left out as in `durations`
    per = np.polyfit(k[1:], cum[ref.bounds[1:]], 1)[0] if len(k) > 2 else np.diff(cum[ref.bounds], axis=0)[0]
    # its quantum, exact, where it is the same amount (not a few bytes of control, nor a multiple)
    exact = {e: r for e, r in chosen.items() if abs(r.quantum / per[e] - 1) <= AGREE} or chosen
    for e, r in exact.items():
        per[e] = r.explained / r.single.sum()
    durations = np.concatenate([r.durations for r in exact.values()])
    period_s = interquartile_mean(durations) * BIN_S
    edges = t0 + ref.bounds.astype(np.float64) * BIN_S
    reason = (f"the cycle length whose repeats explain the most bytes ({share:.0%}): {len(chosen)} of "
              f"{volume.shape[1]} senders repeat the same bytes every cycle, ending at a silence; period = the "
              f"typical duration of their cycles; bytes per iteration = each one's bytes per cycle"
              + (", the others' bytes over the steady cycles / their number" if len(chosen) < volume.shape[1] else ""))
    window = (t0 + lo * BIN_S, t0 + hi * BIN_S)
    return Iterations(period_s, candidates, reason, edges[:-1], edges[1:], within.sum(axis=1),
                      tuple(int(x) for x in ids), within, n, window, window, np.asarray(per, dtype=np.float64),
                      "quantum")
