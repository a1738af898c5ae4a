"""Framework presets (`parallelism.framework`) compiled into the messages each framework sends.

One table, `PRESETS`: a preset's name -> its compiler (scenario -> per-rank execution graph)
and its message rule (scenario -> the all-reduce messages of one iteration, in issue order), one
module each:

* `pytorch_ddp`: DDP's gradient buckets (`simstudy.compiler.data_parallel`);
* `horovod`: tensor fusion per background cycle (`horovod.py`);
* `tensorflow_mwms`: MultiWorkerMirroredStrategy's gradient packs (`tensorflow_mwms.py`);
* `kungfu`: per-tensor all-reduce as point-to-point reduce and broadcast messages along a graph
  (`kungfu.py`).

The collective presets share one graph builder (`allreduce.compile_messages`): forward, backward,
one all-reduce per message issued when its last gradient is ready (or after the whole backward
without `overlap`), the optimizer step after every all-reduce.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simstudy.compiler.costs import Bucket, ddp_buckets, layer_costs
from simstudy.compiler.data_parallel import compile_data_parallel
from simstudy.compiler.frameworks.allreduce import compile_messages
from simstudy.compiler.frameworks.horovod import horovod_messages
from simstudy.compiler.frameworks.kungfu import compile_kungfu, kungfu_messages
from simstudy.compiler.frameworks.tensorflow_mwms import mwms_packs
from simstudy.compiler.graph import ExecutionGraph
from simstudy.spec import Scenario

__all__ = ["PRESETS", "Preset", "compile_framework", "messages"]


@dataclass(frozen=True)
class Preset:
    """A framework preset: its messages of one iteration and its execution graph."""

    name: str
    messages: Callable[[Scenario], list[Bucket]]
    compile: Callable[[Scenario], ExecutionGraph]


def _ddp_messages(scenario: Scenario) -> list[Bucket]:
    p = scenario.parallelism
    return ddp_buckets(layer_costs(scenario, scenario.resolved_model), p.bucket_size_bytes)


PRESETS: dict[str, Preset] = {
    "pytorch_ddp": Preset("pytorch_ddp", _ddp_messages, compile_data_parallel),
    "horovod": Preset("horovod", horovod_messages, lambda s: compile_messages(s, horovod_messages(s), "fused")),
    "tensorflow_mwms": Preset("tensorflow_mwms", mwms_packs, lambda s: compile_messages(s, mwms_packs(s), "pack")),
    "kungfu": Preset("kungfu", kungfu_messages, compile_kungfu),
}


def messages(scenario: Scenario) -> list[Bucket]:
    """The gradient messages of one iteration under the scenario's framework preset (KungFu: one
    per gradient tensor, each then cut into chunks and sent along its graph)."""
    return PRESETS[scenario.parallelism.framework.name].messages(scenario)


def compile_framework(scenario: Scenario) -> ExecutionGraph:
    """The execution graph of plain data parallelism with all-reduce under the framework preset."""
    return PRESETS[scenario.parallelism.framework.name].compile(scenario)
