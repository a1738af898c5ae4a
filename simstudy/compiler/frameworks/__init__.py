"""Framework presets (`parallelism.framework`) compiled into the messages each framework sends.

One table, `PRESETS`, checked complete against the spec's presets (`simstudy.spec.framework.PRESETS`)
on import: a preset's name -> its message rule (scenario -> the all-reduce messages of one iteration,
in issue order) and its compiler (scenario -> per-rank execution graph; by default one all-reduce
per message), one module each:

* `pytorch_ddp`: DDP's gradient buckets (`simstudy.compiler.data_parallel`);
* `horovod`: tensor fusion per background cycle, each cycle's buffers issued at its end (`horovod.py`);
* `tensorflow_mwms`: MultiWorkerMirroredStrategy's gradient packs (`tensorflow_mwms.py`);
* `kungfu`: per-tensor all-reduce as point-to-point reduce and broadcast messages along a graph
  (`kungfu.py`).

The collective presets share one graph builder (`simstudy.compiler.data_parallel.compile_messages`):
forward, backward, one all-reduce per message issued when its last gradient is ready (or after the
whole backward without `overlap`), the optimizer step after every all-reduce.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simstudy.compiler.costs import Bucket
from simstudy.compiler.data_parallel import Wait, compile_messages, ddp_messages, message_template
from simstudy.compiler.frameworks.horovod import cycle_waits, horovod_messages
from simstudy.compiler.frameworks.kungfu import compile_kungfu, kungfu_messages
from simstudy.compiler.frameworks.tensorflow_mwms import mwms_packs
from simstudy.compiler.graph import ExecutionGraph, RankGraph
from simstudy.compiler.registry import require_complete
from simstudy.spec import Scenario
from simstudy.spec.framework import PRESETS as SPEC_PRESETS

__all__ = ["PRESETS", "Preset", "compile_framework", "framework_template", "messages"]


@dataclass(frozen=True)
class Preset:
    """A framework preset: its messages of one iteration and its execution graph (by default one
    all-reduce per message, named `allreduce.<label><index>.it<iteration>`)."""

    messages: Callable[[Scenario], list[Bucket]]
    label: str = "bucket"
    compile_graph: Callable[[Scenario], ExecutionGraph] | None = None
    #: the framework's waits before some messages leave (Horovod's cycle), if it has any
    waits: Callable[[Scenario], Sequence[Wait]] | None = None

    def compile(self, scenario: Scenario) -> ExecutionGraph:
        if self.compile_graph is not None:
            return self.compile_graph(scenario)
        return compile_messages(scenario, self.messages(scenario), self.label, self._waits(scenario))

    def template(self, scenario: Scenario) -> RankGraph | None:
        """The one graph every rank runs (None: a preset whose ranks run graphs of their own)."""
        if self.compile_graph is not None:
            return None
        return message_template(scenario, self.messages(scenario), self.label, self._waits(scenario))

    def _waits(self, scenario: Scenario) -> Sequence[Wait]:
        return self.waits(scenario) if self.waits is not None else ()


PRESETS: dict[str, Preset] = {
    "pytorch_ddp": Preset(ddp_messages, "bucket"),
    "horovod": Preset(horovod_messages, "fused", waits=cycle_waits),
    "tensorflow_mwms": Preset(mwms_packs, "pack"),
    "kungfu": Preset(kungfu_messages, compile_graph=compile_kungfu),
}


require_complete(PRESETS, SPEC_PRESETS, "simstudy.compiler.frameworks.PRESETS")


def messages(scenario: Scenario) -> list[Bucket]:
    """The gradient messages of one iteration under the scenario's framework preset (KungFu: one
    per gradient tensor, each then cut into chunks and sent along its graph)."""
    return PRESETS[scenario.parallelism.framework.name].messages(scenario)


def framework_template(scenario: Scenario) -> RankGraph | None:
    """The one graph every rank of plain data parallelism runs under its preset (None: one per rank)."""
    return PRESETS[scenario.parallelism.framework.name].template(scenario)


def compile_framework(scenario: Scenario) -> ExecutionGraph:
    """The execution graph of plain data parallelism with all-reduce under the framework preset."""
    return PRESETS[scenario.parallelism.framework.name].compile(scenario)
