"""Horovod's tensor fusion, as Horovod 0.28.1 (the last release) does it.

Horovod's background thread runs a cycle every HOROVOD_CYCLE_TIME; in each it takes the
gradients whose hooks fired since the last cycle (ready tensors), fuses them in order into
fusion buffers of at most HOROVOD_FUSION_THRESHOLD bytes (a tensor larger than the threshold
goes alone; 0 disables fusion) and all-reduces each buffer (Gloo's or MPI's ring on CPU)
[horovod/docs/tensor-fusion.rst; horovod/common/controller.cc `FuseResponses`].

Defaults, from the code: `horovod/common/operations.cc` sets the fusion threshold to
128 * 1024 * 1024 bytes and the cycle time to 1 ms (`SetTensorFusionThresholdBytes(128 * 1024 *
1024)`, `SetCycleTimeMs(1)`), as `horovodrun --help` says ("default: 128", "default: 1"); the
change from 64 MB and 5 ms came in 0.21.0 (PR #2468, "Changed default cycle time from 5ms to 1ms
and fusion threshold from 64MB to 128MB"); docs/tensor-fusion.rst still says 64 MB. Set
`fusion_buffer_mib: 64, cycle_time_ms: 5` for a Horovod before 0.21.

The rule compiled here: gradients become ready at the end of their layer's backward (times from
the scenario's compute costs, counted from the start of backward, where the cycles start too);
those ready within one cycle [k c, (k + 1) c) form one cycle's list, fused greedily in ready
order into buffers of at most the threshold. The background thread takes a cycle's list at the
cycle's end: every fused buffer of cycle k is one all-reduce issued at (k + 1) c, after a wait
(`horovod.cycle<k>`, a CPU op: it takes neither the device nor a core) from its cycle's last
ready gradient to the cycle's end, on the ET's own clock (whole microseconds of backward nodes;
the end rounded half up). The wait is written into the ET files, so both backends run it; its
length is fixed at compile time (a rank slowed by jitter, a straggler or a shared host waits as
long, so it issues later than the cycle's end). `cycle_time_ms: 0` has no cycle: every gradient
leaves alone as soon as it is ready. Not modelled: the coordination messages (a few hundred bytes
per cycle) that Horovod's controller exchanges, and a cycle delayed by the previous one's
all-reduces (the next all-reduce waits for the rank's communication to be free instead).
"""

from __future__ import annotations

import math

from simstudy.compiler.costs import Bucket, LayerCost, layer_costs, whole_us
from simstudy.compiler.data_parallel import Wait
from simstudy.spec import Scenario
from simstudy.spec.framework import Horovod


def _fused_cycles(scenario: Scenario) -> list[tuple[int, list[Bucket]]]:
    """Every cycle that has ready gradients (its number k, from the start of backward) and its
    fused buffers, in issue order."""
    fw = scenario.parallelism.framework
    assert isinstance(fw, Horovod)
    costs = layer_costs(scenario, scenario.resolved_model)
    threshold = int(fw.fusion_buffer_mib * 1024 * 1024)
    cycle_us = fw.cycle_time_ms * 1000.0
    cycles: list[tuple[int, list[int]]] = []  # (cycle number, layer indices in ready order)
    t = 0.0
    for order, cost in enumerate(reversed(costs)):
        t += cost.bwd_us
        if cost.grad_bytes == 0:
            continue
        k = math.floor(t / cycle_us) if cycle_us > 0 else order
        if cycles and cycles[-1][0] == k:
            cycles[-1][1].append(cost.index)
        else:
            cycles.append((k, [cost.index]))
    out: list[tuple[int, list[Bucket]]] = []
    n = 0
    for k, layers in cycles:
        buffers: list[Bucket] = []
        current: list[int] = []
        size = 0
        for i in layers:
            b = costs[i].grad_bytes
            if current and (threshold == 0 or size + b > threshold):
                buffers.append(Bucket(n + len(buffers), tuple(current), size))
                current, size = [], 0
            current.append(i)
            size += b
        if current:
            buffers.append(Bucket(n + len(buffers), tuple(current), size))
        n += len(buffers)
        out.append((k, buffers))
    return out


def horovod_messages(scenario: Scenario) -> list[Bucket]:
    """The fused all-reduces of one iteration, in issue order."""
    return [b for _, buffers in _fused_cycles(scenario) for b in buffers]


def cycle_waits(scenario: Scenario) -> list[Wait]:
    """Each cycle's wait from its last ready gradient to its end (none without a cycle)."""
    fw = scenario.parallelism.framework
    assert isinstance(fw, Horovod)
    if fw.cycle_time_ms <= 0:
        return []
    done = _backward_ends_us(layer_costs(scenario, scenario.resolved_model))
    out = []
    for k, buffers in _fused_cycles(scenario):
        last = buffers[-1].layers[-1]
        end_us = whole_us((k + 1) * fw.cycle_time_ms * 1000.0)
        out.append(Wait(f"horovod.cycle{k}", last, max(0, end_us - done[last]), tuple(b.index for b in buffers)))
    return out


def _backward_ends_us(costs: list[LayerCost]) -> dict[int, int]:
    """When each layer's backward node ends on the ET's clock (whole microseconds from the start of backward)."""
    t, out = 0, {}
    for c in reversed(costs):
        t += whole_us(c.bwd_us)
        out[c.index] = t
    return out
