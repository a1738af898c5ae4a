"""A phase whose steps all send the same is stored as one step (a ring's 2(N-1) steps of N
messages: N messages kept, not 2N(N-1)): read step by step, it is the phase stored whole."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simstudy.backends.flowsim.system import PhaseProgram, _program
from simstudy.compiler.collectives import ALGORITHMS


def steps_of(ph: PhaseProgram, n: int) -> list[list[tuple[list[int], list[int], int]]]:
    """Every step's (destinations, bytes, messages in) per simulated rank, read as CollectiveRun reads them."""
    out = []
    for s in range(ph.steps):
        t = s % ph.stored
        out.append([(ph.out_dst[ph.out_ptr[t * n + i]: ph.out_ptr[t * n + i + 1]].tolist(),
                     ph.out_bytes[ph.out_ptr[t * n + i]: ph.out_ptr[t * n + i + 1]].tolist(),
                     int(ph.in_count[t, i])) for i in range(n)])
    return out


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(ALGORITHMS)),
       st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]), st.integers(2, 9),
       st.booleans(), st.randoms(use_true_random=False), st.booleans())
def test_a_phase_stored_as_one_step_reads_as_the_whole(name: str, kind: str, n: int, reverse: bool, rnd: object,
                                                        lane: bool) -> None:
    algo = ALGORITHMS[name]
    members = list(range(n))
    rnd.shuffle(members)  # type: ignore[attr-defined]
    m = np.asarray(members, dtype=np.int64)
    try:
        pattern = algo.pattern(kind, m, 4096, only=0 if lane else None, reverse=reverse)
    except (ValueError, KeyError, NotImplementedError):
        return  # not an algorithm of this collective or of this many ranks
    if not pattern.steps:
        return
    sim = m[:1] if lane else m
    args = {"kind": kind, "queue": 0, "delay": 10, "proc": {}, "mem_bw": 1600.0, "offset": 0, "symmetry": None,
            "dim": -1, "steps": pattern.steps}
    whole = _program(pattern, sim, None if lane else {}, len(sim), compress=False, **args)  # type: ignore[arg-type]
    kept = _program(pattern, sim, None if lane else {}, len(sim), **args)  # type: ignore[arg-type]
    assert whole.stored == whole.steps
    assert steps_of(kept, len(sim)) == steps_of(whole, len(sim))
    if name == "ring" and pattern.steps > 1:
        assert kept.stored == 1 and len(kept.out_dst) == len(sim)
