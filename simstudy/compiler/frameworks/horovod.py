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
the scenario's compute costs, counted from the start of backward); those ready within one
cycle [k c, (k + 1) c) form one cycle's list, fused greedily in ready order into buffers of at
most the threshold. Each fused buffer is one all-reduce issued when its last gradient is ready:
the wait of up to one cycle before the background thread picks it up is not modelled, nor the
coordination messages (a few hundred bytes per cycle) that Horovod's controller exchanges.
"""

from __future__ import annotations

import math

from simstudy.compiler.costs import Bucket, layer_costs
from simstudy.spec import Scenario
from simstudy.spec.framework import Horovod


def horovod_messages(scenario: Scenario) -> list[Bucket]:
    """The fused all-reduces of one iteration, in issue order."""
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
    out: list[Bucket] = []
    for _, layers in cycles:
        current: list[int] = []
        size = 0
        for i in layers:
            b = costs[i].grad_bytes
            if current and (threshold == 0 or size + b > threshold):
                out.append(Bucket(len(out), tuple(current), size))
                current, size = [], 0
            current.append(i)
            size += b
        if current:
            out.append(Bucket(len(out), tuple(current), size))
    return out
