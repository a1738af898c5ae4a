"""Fit the compute model to a captured job: `system.measured` at the job's own pace, its jitter and
its stragglers, from what the capture's meta.json logged.

**What a capture logs** (`simstudy.traffic.meta.CaptureMeta`, written by `simstudy capture`):

- `iterations`: per worker, the wall-clock [start, end] of every recorded iteration. In a
  synchronous job every rank waits for the others, so its iteration time is the job's: the
  slowest rank's compute plus the communication the job could not hide behind it.
- `steps`: per worker and iteration, the phases the worker timed. What each holds depends on
  the framework (the fit tells them apart by the keys; `compute_only_keys`):

  * torch DDP (`forward_us`, `backward_us`, `optimizer_us`): the forward holds no
    communication; the backward holds the bucket all-reduces DDP launches from its hooks and
    the wait for the last one (it returns when every bucket is reduced); the optimizer is a
    local SGD update. Compute alone: the forward (and the optimizer).
  * torch parameter-server worker and Horovod (`forward_us`, `backward_us`, `exchange_us`):
    the forward holds no communication; the backward posts the pushes (nonblocking `isend`)
    or enqueues Horovod's all-reduces from its hooks and never waits for them; `exchange_us`
    is the wait for the pushes and pulls (parameter server) or for Horovod's all-reduces plus
    the SGD update. Compute alone: forward and backward.
  * TensorFlow MultiWorkerMirrored (`step_us`): one `tf.function` that computes, all-reduces
    and applies; there is no phase without communication.
- `compute`: per worker, calibration passes run without communication (the workers in
  lock-step), which the recorded scenario's `system.measured` comes from. On one host, where
  the workers' communication runs on the cores that compute, and on shared cores generally,
  the training steps run slower than these passes.

**How the compute is derived: iteration time minus the communication the simulation exposes.**
The compute-only phases (the forward everywhere but TensorFlow, the backward of parameter
servers and Horovod) are timed on shared, busy cores in single iterations and vary by a factor
of 2 between ranks and passes; TensorFlow logs none, and DDP's backward mixes compute and
communication. The iteration times are logged by every framework, are the quantity the verdict
compares (`period_s`: their interquartile mean), and need no split of a phase. So the fit takes
the logged period T and finds the factor (the *pace*) on the recorded compute at which the
simulated job has that period: one simulation of the recorded scenario gives its period P0 and
the compute per iteration C (the slowest rank's), so P0 - C is the communication it exposes;
then secant steps on the pace, each a simulation of the fitted system, until the simulated
period is within `PERIOD_TOLERANCE` of T (at most `MAX_RUNS` simulations). The fitted
`system.measured` is the recorded one times the pace (per layer and in total).

This makes the period a consequence of the fit: `validate --fit` marks it (`DETERMINES`) and
judges the network's metrics (bytes per iteration, who talks with whom, connections, the duty
cycle at the iteration's scale) with the fitted compute. A scenario whose network is wrong
cannot be rescued by compute: when the simulated communication alone takes longer than the
logged iteration, the pace would have to go below `MIN_PACE` and the fit says so (the period
then still fails).

**Jitter** (`variability.jitter`, empirical) comes from the intervals between a rank's logged
iteration starts: each over that rank's median. They hold the communication's variation too
(TCP, retransmissions); taken as compute's, they are applied as the same relative spread, not
stretched to the compute alone (which, where communication is most of the iteration, would turn
a few percent of TCP noise into factors of 2). A draw is one of these factors (the compiler
divides them by their mean). `correlated: true` when the job is synchronous (its ranks wait for
each other: their iteration intervals are one quantity timed on each rank) or when the ranks'
series move together anyway: their mean pairwise Pearson correlation is at least `CORRELATED`.
The samples are then the job's factor per iteration (the mean over ranks), else every rank's
factor of every iteration.

**Rank jitter** (`variability.rank_jitter`, empirical, a draw per rank and iteration on top of
the job's): how the ranks of one iteration differ from each other, where they contend for cores
(a host of the recorded system holds more ranks than `host_cores`), from the compute-only phases
where they hold the whole compute (forward and backward: parameter servers, Horovod). Each
rank's time in a step over the mean of all ranks' times in that step (what the ranks shared in
that step, the job's factor, is taken out: the intervals model it), over that ratio's median for
the rank (a rank slower in every step is a straggler, below, not jitter). Where the ranks share
cores this is large: 4 workers on 2 cores are not served in equal shares step by step (their
forward and backward differ by up to 2x within one step), so they reach their pushes at
different times and the parameter server's traffic spreads over the step, as the simulation of
identical ranks, pushing together, does not (duty cycle 0.38-0.41 logged against 0.26-0.31
simulated). Drawn from the whole single-pass times instead of these residuals, the job's
variation would be counted twice and the ranks put further out of step than the logged ones.
Ranks with cores of their own are not served unevenly by a scheduler: what makes their phases
differ is the communication's own work on their cores (Horovod's background thread reduces and
sends while the backward runs), which the simulation models as communication, so there is none
for them (with it, Horovod's fused all-reduces waited for the slowest rank and its simulated
duty cycle rose to 1.0 against 0.75-0.9 logged).
None where the steps log no phase that holds the whole compute (DDP's forward is a part of it,
and its backward holds the wait that makes up for it; TensorFlow logs none).

**Stragglers** come from the compute-only phases where they hold the whole compute (forward and
backward: parameter servers, Horovod; iteration times cannot show stragglers, as in a
synchronous job everyone waits for them): a rank straggles when its median compute-only time is
at least `STRAGGLER_RATIO` times the median of the other ranks' medians, and it is above the
others' median in at least `STRAGGLER_CONSISTENCY` of the iterations. Below that ratio a rank's
difference is within what shared cores make of single passes. Its slowdown is on its whole
compute: 1 + (its median - the others') / the recorded compute per iteration. DDP logs the
forward alone without waiting: a rank whose forward is slower waits less in its backward (in the
captures the ranks' forward + backward agree within a few percent while their forwards differ by
2x), so the forward is no evidence of a straggler, and TensorFlow's steps have no compute-only
phase: no stragglers are derived for either (the ratios are reported).

**Shared hosts.** When the recorded job's ranks share their hosts' cores (`system.host_cores`,
see `simstudy.validation.shared_hosts_scenario`), its `measured` is already a rank's time alone
(the shared times scaled by min(1, C/k)), and the simulation shares the cores again. The fit
scales that alone-pace compute and simulates it shared, so the fitted `measured` stays a
rank's time alone: k ranks computing at once on C < k cores run at C/k of it, and the period
they make is the logged one.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from simstudy.spec import Scenario
from simstudy.spec.system import MIN_FACTOR, Jitter, Straggler, System, Variability
from simstudy.traffic.iterations import interquartile_mean
from simstudy.traffic.meta import CaptureMeta

__all__ = [
    "CORRELATED",
    "DETERMINES",
    "MAX_RUNS",
    "MIN_PACE",
    "PERIOD_TOLERANCE",
    "PLAUSIBLE_PACE",
    "STRAGGLER_CONSISTENCY",
    "STRAGGLER_RATIO",
    "Fit",
    "FitError",
    "FitRun",
    "Simulated",
    "StragglerFinding",
    "compute_only",
    "compute_only_keys",
    "find_stragglers",
    "fit_system",
    "jitter_of",
    "rank_jitter_of",
    "scaled_system",
    "scaled_times",
    "with_system",
]

#: The fit stops when the simulated period is within this fraction of the logged one.
PERIOD_TOLERANCE = 0.01
#: At most this many simulations (the recorded scenario's included).
MAX_RUNS = 6
#: The smallest pace the fit takes: below it the simulated communication alone is longer than the
#: logged iteration, which no compute explains.
MIN_PACE = 0.02
#: Ranks' factors are drawn together when their iteration intervals correlate at least this much.
CORRELATED = 0.5
#: A rank straggles when its compute-only time is at least this many times the others'...
STRAGGLER_RATIO = 1.25
#: ... and above their median in at least this fraction of the iterations.
STRAGGLER_CONSISTENCY = 0.75

#: A fitted pace outside these bounds is reported as unlikely to be compute alone (calibrated and
#: training compute on the captures' shared cores differ by up to 2x).
PLAUSIBLE_PACE = (0.5, 2.0)
#: The metrics `validate --fit` marks as determined by the fit, with how.
DETERMINES: dict[str, str] = {
    "period_s": "set by the fit: the compute's pace is fitted so that the simulated period is the logged one",
    "throughput_mean_bps": "follows the fit: bytes per iteration over the fitted period",
}


class FitError(ValueError):
    """A capture the compute model cannot be fitted to (names the file and what is missing)."""


def compute_only_keys(step: Mapping[str, float]) -> tuple[str, ...]:
    """The phases of a logged step that hold no communication (see the module docstring): the
    forward alone for DDP (`optimizer_us` logged), forward and backward where the wait is a phase
    of its own (`exchange_us`: parameter servers, Horovod), none for a whole step (`step_us`)."""
    if "forward_us" not in step:
        return ()
    if "exchange_us" in step and "backward_us" in step:
        return ("forward_us", "backward_us")
    return ("forward_us",)


def compute_only(meta: CaptureMeta) -> dict[int, list[float]]:
    """Each worker's compute-only time of each logged step, seconds (empty for frameworks that log none)."""
    out: dict[int, list[float]] = {}
    for rank, steps in sorted(meta.steps.items()):
        keys = compute_only_keys(steps[0]) if steps else ()
        if keys:
            out[rank] = [sum(float(s.get(k, 0.0)) for k in keys) / 1e6 for s in steps]
    return out


@dataclass(frozen=True)
class StragglerFinding:
    """A rank's compute-only time against the other ranks': the ratio of medians and the fraction
    of iterations it was above their median."""

    rank: int
    ratio: float
    above: float
    excess_s: float
    """Its median less the others' median, seconds."""

    @property
    def straggles(self) -> bool:
        return self.ratio >= STRAGGLER_RATIO and self.above >= STRAGGLER_CONSISTENCY


def find_stragglers(times: Mapping[int, Sequence[float]]) -> tuple[StragglerFinding, ...]:
    """Every rank's `StragglerFinding` (none with fewer than two ranks)."""
    if len(times) < 2:
        return ()
    n = min(len(v) for v in times.values())
    medians = {r: statistics.median(v[:n]) for r, v in times.items() if n}
    out = []
    for r, v in times.items():
        others = [medians[o] for o in times if o != r]
        ref = statistics.median(others)
        above = [v[i] > statistics.median(times[o][i] for o in times if o != r) for i in range(n)]
        out.append(StragglerFinding(r, medians[r] / ref if ref > 0 else 1.0, sum(above) / n if n else 0.0,
                                    medians[r] - ref))
    return tuple(out)


def _intervals(meta: CaptureMeta) -> dict[int, list[float]]:
    """Each worker's intervals between consecutive logged iteration starts, seconds."""
    return {r: [b[0] - a[0] for a, b in itertools.pairwise(spans)]
            for r, spans in sorted(meta.iterations.items()) if len(spans) > 1}


def _correlation(series: Mapping[int, Sequence[float]]) -> float:
    """Mean pairwise Pearson correlation of the ranks' series (NaN with fewer than two ranks or
    three values, or a constant series)."""
    n = min((len(v) for v in series.values()), default=0)
    if len(series) < 2 or n < 3:
        return math.nan
    x = np.array([list(v[:n]) for v in series.values()], dtype=float)
    if np.any(x.std(axis=1) == 0):
        return math.nan
    c = np.corrcoef(x)
    return float(c[np.triu_indices(len(x), 1)].mean())


def jitter_of(series: Mapping[int, Sequence[float]], seed: int = 0, *,
              synchronous: bool = False) -> tuple[Jitter | None, float]:
    """The empirical jitter of per-rank, per-iteration times (module docstring): each time over its
    rank's median, and the ranks' correlation; None without times. `synchronous`: the ranks wait
    for each other, so their factors are drawn together whatever the correlation."""
    rho = _correlation(series)
    n = min((len(v) for v in series.values()), default=0)
    if n == 0:
        return None, rho
    rel = {r: [t / m for t in v[:n]] if (m := statistics.median(v[:n])) > 0 else [1.0] * n for r, v in series.items()}
    correlated = synchronous or rho >= CORRELATED
    if correlated:
        values = [statistics.fmean(v[i] for v in rel.values()) for i in range(n)]
    else:
        values = [f for v in rel.values() for f in v]
    samples = tuple(round(max(MIN_FACTOR, f), 4) for f in values)
    return Jitter(distribution="empirical", samples=samples, seed=seed, correlated=correlated), rho


def rank_jitter_of(times: Mapping[int, Sequence[float]], seed: int = 0) -> Jitter | None:
    """How the ranks of one step differ (module docstring): each rank's time over the step's mean
    over ranks, over that ratio's median for the rank; None with fewer than two ranks or steps."""
    n = min((len(v) for v in times.values()), default=0)
    if len(times) < 2 or n < 2:
        return None
    x = np.array([list(v[:n]) for v in times.values()], dtype=float)
    mean = x.mean(axis=0)
    if np.any(mean <= 0):
        return None
    rel = x / mean
    rel /= np.median(rel, axis=1, keepdims=True)
    samples = tuple(round(max(MIN_FACTOR, float(f)), 4) for f in rel.ravel())
    return Jitter(distribution="empirical", samples=samples, seed=seed)


def scaled_times(measured: dict[str, Any], factor: float) -> dict[str, Any]:
    """`system.measured` (as JSON) with every time times `factor`."""
    out = {k: (v * factor if k.endswith("_us") and v is not None else v) for k, v in measured.items()}
    out["layers"] = {name: {k: v * factor for k, v in t.items()} for name, t in (measured.get("layers") or {}).items()}
    return out


def scaled_system(system: System, pace: float, variability: Variability | None = None) -> System:
    """`system` with its compute `pace` times as long (measured times, or the FLOPs rate divided by
    `pace`) and `variability` in place of its own."""
    data = system.model_dump(mode="json")
    if data.get("measured"):
        data["measured"] = scaled_times(data["measured"], pace)
    else:
        data["peak_tflops"] = system.peak_tflops / pace
    data["variability"] = variability.model_dump(mode="json") if variability is not None else None
    return System.model_validate(data)


@dataclass(frozen=True)
class Simulated:
    """What the fit needs of one simulation: its period and the compute per iteration of its
    slowest rank (seconds)."""

    period_s: float
    compute_s: float


@dataclass(frozen=True)
class FitRun:
    """One simulation of the fit: the pace it ran and the period it made."""

    pace: float
    period_s: float
    variability: bool


@dataclass(frozen=True)
class Fit:
    """The compute model fitted to a capture, and what it was derived from."""

    system: System
    """The fitted system (`measured` at the job's pace, its variability, the recorded hosts)."""
    recorded: System
    """The system of the scenario the fit started from."""
    period_s: float
    """The logged period: interquartile mean of the intervals between iteration starts."""
    intervals: int
    recorded_compute_s: float
    """Compute per iteration of the recorded scenario's slowest rank."""
    exposed_s: float
    """The communication the recorded scenario's simulation exposes per iteration (P0 - C)."""
    pace: float
    runs: tuple[FitRun, ...]
    correlation: float
    stragglers: tuple[StragglerFinding, ...]
    compute_only: tuple[str, ...]
    """The logged phases the stragglers were found from (empty: none logged)."""
    logged_compute_only_s: float | None = None
    """The median of those phases over every worker and step."""
    sharing: float = 1.0
    """How much longer the workers compute on their shared hosts than alone: max(1, k/C) for k
    workers on a host of C cores (1: no shared hosts)."""
    notes: tuple[str, ...] = ()

    @property
    def simulated_period_s(self) -> float:
        """The fitted system's simulated period."""
        return next(r.period_s for r in self.runs[1:] if r.pace == self.pace)

    @property
    def converged(self) -> bool:
        """The fitted system's simulated period is within `PERIOD_TOLERANCE` of the logged one."""
        return abs(self.simulated_period_s - self.period_s) <= PERIOD_TOLERANCE * self.period_s

    @property
    def determines(self) -> dict[str, str]:
        """The metrics the fit determines (`DETERMINES`)."""
        return dict(DETERMINES)

    def lines(self) -> list[str]:
        """What was derived, one line each."""
        ms = 1e3
        first = self.runs[0]
        v = self.system.variability
        out = [f"logged period {self.period_s * ms:.2f} ms (interquartile mean of {self.intervals} intervals "
               "between iteration starts)",
               f"recorded compute {self.recorded_compute_s * ms:.2f} ms per iteration; its simulation: period "
               f"{first.period_s * ms:.2f} ms, exposed communication {self.exposed_s * ms:.2f} ms",
               f"pace {self.pace:.3f} x the recorded compute: {self.recorded_compute_s * self.pace * ms:.2f} ms per "
               f"iteration; simulated period {self.simulated_period_s * ms:.2f} ms "
               f"({(self.simulated_period_s / self.period_s - 1) * 100:+.1f}%, {len(self.runs)} simulations)"]
        m = self.system.measured
        if m is not None and m.forward_us is not None and m.backward_us is not None:
            out.append(f"measured: forward {m.forward_us / 1e3:.2f} ms, backward {m.backward_us / 1e3:.2f} ms"
                       + (f", optimizer {m.optimizer_us / 1e3:.2f} ms" if m.optimizer_us is not None else ""))
        if m is not None and self.compute_only and self.logged_compute_only_s is not None:
            fitted = sum(getattr(m, k) or 0.0 for k in self.compute_only) / 1e6 * self.sharing
            shared = f" shared (x{self.sharing:g} a rank's time alone)" if self.sharing != 1 else ""
            out.append(f"logged {' + '.join(self.compute_only)}: median {self.logged_compute_only_s * ms:.2f} ms per "
                       f"step; the fit's {fitted * ms:.2f} ms{shared}")
        rho = "n/a" if math.isnan(self.correlation) else f"{self.correlation:.2f}"
        j = v.jitter if v is not None else None
        if j is not None:
            out.append(f"jitter: empirical from the iteration intervals, {_summary(j)}; correlated: "
                       f"{str(j.correlated).lower()} (the ranks' series correlate {rho}, threshold {CORRELATED})")
        else:
            out.append("jitter: none (no per-iteration times logged)")
        rj = v.rank_jitter if v is not None else None
        if rj is not None:
            out.append(f"rank jitter: empirical from {' + '.join(self.compute_only)} (each rank's time over the step's "
                       f"mean over ranks, over its median), {_summary(rj)}; drawn per rank and iteration on top of "
                       "the jitter")
        elif len(self.compute_only) < 2:
            out.append("rank jitter: none (no logged phase holds the whole compute)")
        else:
            out.append("rank jitter: none (no host holds more ranks than cores)")
        if not self.compute_only:
            out.append("stragglers: none derived (the steps log no phase without communication)")
        elif len(self.compute_only) == 1:
            ratios = ", ".join(f"{f.rank}: {f.ratio:.2f}" for f in self.stragglers)
            out.append(f"stragglers: none derived (the steps' {self.compute_only[0]} is a part of the compute, and the "
                       f"backward holds the wait that makes up for it; {self.compute_only[0]} ratios {ratios})")
        else:
            found = [f for f in self.stragglers if f.straggles]
            slow = {s.ranks[0]: s.slowdown for s in (v.stragglers if v is not None else ())}
            parts = ", ".join(f"rank {f.rank}: {f.ratio:.2f} x the others in {f.above:.0%} of iterations, "
                              f"slowdown {slow.get(f.rank, 1.0):.3f}" for f in found)
            ratios = ", ".join(f"{f.rank}: {f.ratio:.2f}" for f in self.stragglers)
            out.append(f"stragglers: {parts or 'none'} (from {' + '.join(self.compute_only)}; rule: >= "
                       f"{STRAGGLER_RATIO} x the others' median in >= {STRAGGLER_CONSISTENCY:.0%} of iterations; "
                       f"ratios {ratios})")
        if self.system.host_cores is not None:
            out.append(f"shared hosts: {self.system.host_cores} cores per host, ranks on hosts "
                       f"{list(self.system.rank_hosts or ())}; measured is a rank's time alone")
        out += [f"note: {n}" for n in self.notes]
        return out


def _summary(jitter: Jitter) -> str:
    """An empirical jitter's samples: how many, their cv and range."""
    s = np.array(jitter.samples)
    return f"{len(s)} samples, cv {s.std() / s.mean():.3f}, range {s.min():.2f}-{s.max():.2f}"


def logged_period(meta: CaptureMeta) -> tuple[float, int]:
    """The interquartile mean of the intervals between logged iteration starts (the period the
    analysis takes of iteration marks) and their number."""
    diffs = np.array(meta.start_intervals_s(), dtype=float)
    diffs = diffs[np.isfinite(diffs) & (diffs > 0)]
    if len(diffs) == 0:
        return math.nan, 0
    return float(interquartile_mean(diffs)), len(diffs)


def with_system(scenario: Scenario, system: System) -> Scenario:
    """`scenario` with `system` in place of its own, validated (stragglers must name its ranks)."""
    data = scenario.model_dump(mode="json")
    data["system"] = system.model_dump(mode="json")
    return Scenario.model_validate(data)


def fit_system(meta: CaptureMeta, scenario: Scenario, simulate: Callable[[Scenario, int], Simulated], *,
               source: str = "meta.json", seed: int = 0) -> Fit:
    """Fit `scenario`'s compute to the job `meta` logged (see the module docstring).

    `simulate(scenario, k)` runs the k-th simulation of the fit and returns its period and compute
    per iteration. FitError when the capture logged fewer than two iterations."""
    period, count = logged_period(meta)
    if count == 0:
        raise FitError(f"{source}: iterations: the fit needs each worker's iteration starts (at least two "
                       "iterations)")
    recorded = scenario.system.model_copy(update={"variability": None})
    base = with_system(scenario, recorded)
    first = simulate(base, 0)
    runs = [FitRun(1.0, first.period_s, False)]
    compute = first.compute_s
    exposed = max(0.0, first.period_s - compute)
    notes: list[str] = []
    if compute <= 0:
        raise FitError(f"{source}: the recorded scenario has no compute to fit")

    only = compute_only(meta)
    keys = compute_only_keys(next(iter(meta.steps.values()))[0]) if only else ()
    findings = find_stragglers(only)
    whole = len(keys) > 1  # the phases hold the whole compute (forward and backward), no wait
    stragglers = tuple(Straggler(ranks=(f.rank,), slowdown=round(1 + f.excess_s / compute, 3)) for f in findings
                       if whole and f.straggles and f.rank < scenario.npus)
    synchronous = scenario.parallelism.aggregation.synchronous
    jitter, rho = jitter_of(_intervals(meta), seed, synchronous=synchronous)
    ranks = {r: v for r, v in only.items() if r < scenario.npus}
    spread = rank_jitter_of(ranks, seed) if whole and _contended(recorded) else None
    variability = (Variability(jitter=jitter, rank_jitter=spread, stragglers=stragglers)
                   if jitter or spread or stragglers else None)

    def run(pace: float) -> FitRun:
        sim = simulate(with_system(base, scaled_system(recorded, pace, variability)), len(runs))
        runs.append(FitRun(pace, sim.period_s, variability is not None))
        return runs[-1]

    pace = (period - exposed) / compute
    if pace < MIN_PACE:
        notes.append(f"the simulated communication alone ({exposed * 1e3:.2f} ms per iteration) is longer than the "
                     f"logged iteration ({period * 1e3:.2f} ms): no compute explains the difference, the scenario's "
                     "network or job is not the captured one")
        pace = MIN_PACE
    last = run(pace)
    prev: FitRun | None = None
    while len(runs) < MAX_RUNS and abs(last.period_s - period) > PERIOD_TOLERANCE * period:
        # seconds of period per unit of pace: the compute, all exposed, until two fitted runs give a secant
        slope = compute if prev is None else (last.period_s - prev.period_s) / (last.pace - prev.pace)
        if not math.isfinite(slope) or slope <= 0:
            break
        nxt = max(MIN_PACE, last.pace + (period - last.period_s) / slope)
        if nxt == last.pace:
            break
        prev, last = last, run(nxt)
    best = min(runs[1:], key=lambda r: abs(r.period_s - period))
    system = scaled_system(recorded, best.pace, variability)
    low, high = PLAUSIBLE_PACE
    if not low <= best.pace <= high:
        notes.append(f"the fitted compute is {best.pace:.2f} x the recorded one, outside {low}-{high}: the gap between "
                     "the simulated and the logged period is likely not (only) compute")
    if abs(best.period_s - period) > PERIOD_TOLERANCE * period:
        notes.append(f"not converged: the closest simulated period is {best.period_s * 1e3:.2f} ms against "
                     f"{period * 1e3:.2f} ms logged")
    return Fit(system=system, recorded=recorded, period_s=period, intervals=count, recorded_compute_s=compute,
               exposed_s=exposed, pace=best.pace, runs=tuple(runs), correlation=rho, stragglers=findings,
               compute_only=keys, notes=tuple(notes),
               logged_compute_only_s=statistics.median(t for v in only.values() for t in v) if only else None,
               sharing=_sharing(recorded, list(meta.steps)))


def _contended(system: System) -> bool:
    """Whether a host of `system` holds more ranks than it has cores (`host_cores`)."""
    if system.host_cores is None or system.rank_hosts is None:
        return False
    hosts = list(system.rank_hosts)
    return any(hosts.count(h) > system.host_cores for h in set(hosts))


def _sharing(system: System, workers: Sequence[int]) -> float:
    """max(1, k/C): k the most `workers` on one host of `system.host_cores` C cores."""
    if system.host_cores is None or system.rank_hosts is None:
        return 1.0
    hosts = [system.rank_hosts[r] for r in workers if 0 <= r < len(system.rank_hosts)]
    together = max((hosts.count(h) for h in set(hosts)), default=1)
    return max(1.0, together / system.host_cores)
