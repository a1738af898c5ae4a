"""Pipeline parallelism: stages over consecutive layers balanced by compute, and schedules.

A model's layers are cut into `parts` consecutive, non-empty stages so that the largest stage
compute (forward + backward time) is as small as it can be (the linear-partition problem,
solved exactly). Each stage runs `m` microbatches in the order of its schedule:

* gpipe: every forward F0..F(m-1), then every backward B(m-1)..B0 (Huang et al. 2019);
* 1f1b: PipeDream-Flush (Narayanan et al. 2021): stage k of K runs min(K-k-1, m) warm-up
  forwards, then alternates one forward and one backward, then drains the remaining backwards.

Between neighbouring stages, each microbatch's output activation goes forward and the gradient
of that activation comes back, as SEND/RECV pairs whose tags name iteration, microbatch and
direction (see `p2p_tag`).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Op = tuple[Literal["F", "B"], int]
#: A forward or backward of one microbatch on one of a rank's model chunks (interleaved schedule)
ChunkOp = tuple[Literal["F", "B"], int, int]
FORWARD, BACKWARD = 0, 1


def balanced_stages(weights: list[float], parts: int) -> list[list[int]]:
    """Cut layer indices 0..n-1 into `parts` consecutive non-empty stages minimising the largest
    stage weight (ties: the earliest cut). Zero total weight cuts by layer count."""
    n = len(weights)
    if not 1 <= parts <= n:
        raise ValueError(f"cannot cut {n} layers into {parts} stages")
    w = np.asarray(weights, dtype=np.float64)
    if w.sum() <= 0:
        w = np.ones(n)
    prefix = np.concatenate([[0.0], np.cumsum(w)])
    # best[j, i]: the smallest possible largest stage when layers [0, i) form j+1 stages.
    best = np.full((parts, n + 1), np.inf)
    cut = np.zeros((parts, n + 1), dtype=np.int64)
    best[0, 1:] = prefix[1:]
    for j in range(1, parts):
        for i in range(j + 1, n + 1):
            lo = np.arange(j, i)  # the last stage is [lo, i)
            cost = np.maximum(best[j - 1, lo], prefix[i] - prefix[lo])
            k = int(np.argmin(cost))
            best[j, i] = cost[k]
            cut[j, i] = lo[k]
    stages: list[list[int]] = []
    end = n
    for j in range(parts - 1, 0, -1):
        start = int(cut[j, end])
        stages.append(list(range(start, end)))
        end = start
    stages.append(list(range(0, end)))
    return stages[::-1]


def schedule(kind: str, stages: int, stage: int, microbatches: int) -> list[Op]:
    """The order in which `stage` (0-based, of `stages`) runs forwards and backwards."""
    m = microbatches
    if kind == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in reversed(range(m))]
    if kind != "1f1b":
        raise ValueError(f"unknown pipeline schedule {kind!r}")
    warm = min(stages - stage - 1, m)
    ops: list[Op] = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        ops += [("F", warm + i), ("B", i)]
    ops += [("B", i) for i in range(m - warm, m)]
    return ops


def interleaved_schedule(stages: int, stage: int, microbatches: int, chunks: int) -> list[ChunkOp]:
    """Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, `forward_backward_pipelining_with_interleaving`):
    rank `stage` of `stages` holds `chunks` model chunks (virtual stages stage, stage + stages, ...).
    The k-th forward runs microbatch (k // (stages x chunks)) x stages + k % stages on chunk
    (k // stages) % chunks (the k-th backward on the chunks in reverse order); a rank runs
    (stages - stage - 1) x 2 + (chunks - 1) x stages warm-up forwards, then one forward one backward,
    then the remaining backwards. `microbatches` must be a multiple of `stages`."""
    if microbatches % stages:
        raise ValueError(f"the interleaved schedule needs microbatches ({microbatches}) a multiple of the "
                         f"stages ({stages})")
    total = microbatches * chunks
    group = stages * chunks

    def op(kind: Literal["F", "B"], k: int) -> ChunkOp:
        chunk = (k % group) // stages
        return kind, (k // group) * stages + k % stages, chunk if kind == "F" else chunks - 1 - chunk

    warm = min((stages - stage - 1) * 2 + (chunks - 1) * stages, total)
    ops = [op("F", k) for k in range(warm)]
    for k in range(total - warm):
        ops += [op("F", warm + k), op("B", k)]
    ops += [op("B", k) for k in range(total - warm, total)]
    return ops


def p2p_tag(iteration: int, microbatch: int, microbatches: int, direction: int, chunk: int = 0,
            chunks: int = 1) -> int:
    """The tag of one activation (FORWARD) or gradient (BACKWARD) transfer between two stages
    (`chunk`: the model chunk of the earlier of the two, with interleaved virtual stages).
    Unique per sender/receiver pair, which is what SEND/RECV matching keys on."""
    return ((iteration * microbatches + microbatch) * chunks + chunk) * 2 + direction
