"""TensorFlow MultiWorkerMirroredStrategy's gradient all-reduce, as TensorFlow 2.x does it.

Keras's optimizer sums the gradients with the replica context's `all_reduce`, which MWMS's
`CollectiveAllReduce._all_reduce` implements [tensorflow/python/distribute/cross_device_ops.py]:
the dense gradients are reversed ("so that there's better chance that values follows the order
in which they are calculated") and grouped by `cross_device_utils.group_by_size(values,
bytes_per_pack)`: a new pack starts when the current one holds more than `bytes_per_pack` bytes,
and `bytes_per_pack = 0` (the default of `tf.distribute.experimental.CommunicationOptions`) puts
every gradient in one pack. In a `tf.function` every pack is concatenated and all-reduced as one
tensor (`CollectiveReplicaLauncher.batch_all_reduce`), so it is issued once all of its gradients
are ready; the packs are ordered by an ordering token.

The implementation hint AUTO resolves on CPU to RingReduce
[tensorflow/core/common_runtime/collective_param_resolver_local.cc `GetCollectiveName`:
REDUCTION_COLLECTIVE -> nccl ? "NcclReduce" : "RingReduce"]. RingReduce splits the tensor into
group_size x subdivisions chunks, with up to 2 subdivisions per device so that chunks stay
under 4 MiB [tensorflow/core/common_runtime/ring_alg.cc, kMaxChunkSizeBytes], and a worker
pulls each chunk from its ring predecessor with a RecvBuf RPC over gRPC whose response carries
the bytes [distributed_runtime/collective_rma_distributed.cc]: every worker sends
2 (N - 1) / N of the pack, as any ring.

Compiled here at layer granularity (a zoo layer's tensors are packed together): the packs in
reverse layer order, each an all-reduce issued when its earliest layer's backward is done.
"""

from __future__ import annotations

from simstudy.compiler.costs import Bucket, layer_costs
from simstudy.spec import Scenario
from simstudy.spec.framework import TensorFlowMWMS


def mwms_packs(scenario: Scenario) -> list[Bucket]:
    """The packs of one iteration, in issue order (`group_by_size` over reversed gradients)."""
    fw = scenario.parallelism.framework
    assert isinstance(fw, TensorFlowMWMS)
    costs = layer_costs(scenario, scenario.resolved_model)
    packs: list[list[int]] = []
    last = 0
    for cost in reversed(costs):
        if cost.grad_bytes == 0:
            continue
        if not packs or (fw.bytes_per_pack > 0 and last > fw.bytes_per_pack):
            packs.append([])
            last = 0
        packs[-1].append(cost.index)
        last += cost.grad_bytes
    return [Bucket(i, tuple(layers), sum(costs[j].grad_bytes for j in layers)) for i, layers in enumerate(packs)]
