"""Building blocks shared by strategies: a forward and a backward pass over layers."""

from __future__ import annotations

from simstudy.compiler.costs import LayerCost, whole_us
from simstudy.compiler.graph import RankGraph


def forward(g: RankGraph, costs: list[LayerCost], it: int, after: list[int]) -> list[int]:
    """Chain one forward task per layer; the first waits for `after`. Returns their ids."""
    ids: list[int] = []
    prev = list(after)
    for c in costs:
        tid = g.compute(
            f"fwd.{c.name}.it{it}",
            whole_us(c.fwd_us),
            prev,
            flops=c.fwd_flops,
            tensor_bytes=max(1, c.grad_bytes + c.activation_bytes),
            iteration=it,
        )
        ids.append(tid)
        prev = [tid]
    return ids


def backward(g: RankGraph, costs: list[LayerCost], it: int, after: list[int]) -> dict[int, int]:
    """Chain one backward task per layer in reverse order. Returns layer index -> task id."""
    ids: dict[int, int] = {}
    prev = list(after)
    for c in reversed(costs):
        tid = g.compute(
            f"bwd.{c.name}.it{it}",
            whole_us(c.bwd_us),
            prev,
            flops=int(c.fwd_flops * 2),
            tensor_bytes=max(1, c.grad_bytes + c.activation_bytes),
            iteration=it,
        )
        ids[c.index] = tid
        prev = [tid]
    return ids


def next_forward_after(ends: list[int], syncs: list[int], staleness: int) -> list[int]:
    """What the next iteration's forward waits for, given each iteration so far's last compute
    task before its synchronisation (`ends`: the end of its backward) and the task that ends its
    synchronisation (`syncs`: the update after its all-reduces or receives). Staleness 0: the last
    iteration's synchronisation. Staleness s: the last iteration's backward, and the
    synchronisation of the iteration s before it (iteration i's must end before the forward of
    iteration i + s + 1), so up to s synchronisations run behind the compute."""
    if staleness == 0:
        return syncs[-1:]
    behind = len(syncs) - 1 - staleness
    return ends[-1:] + ([syncs[behind]] if behind >= 0 else [])
