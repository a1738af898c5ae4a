"""The per-rank execution graph that every parallelism strategy produces.

A strategy module (data parallel, parameter server, later pipeline and tensor parallel) builds
one `RankGraph` per rank; `simstudy.compiler.chakra_out` turns them into Chakra ET nodes. The
graph knows nothing of protobuf: it holds tasks with dependencies, sizes and durations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum


class TaskKind(StrEnum):
    """What a task does; maps one to one onto a Chakra node type."""

    COMPUTE = "compute"
    #: a wait on the host's CPU (a framework's background thread sleeping): a CPU op, which takes
    #: neither the device nor a core, and whose time no compute variability changes
    WAIT = "wait"
    COLLECTIVE = "collective"
    SEND = "send"
    RECV = "recv"


class Collective(StrEnum):
    """Collectives a strategy can ask for (the ones ASTRA-SIM's system layer simulates)."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"


@dataclass(slots=True)
class Task:
    """One node of a rank's execution graph."""

    id: int
    name: str
    kind: TaskKind
    deps: list[int]
    duration_us: int = 0
    flops: int = 0
    tensor_bytes: int = 0
    collective: Collective | None = None
    size_bytes: int = 0
    group: int = 0
    peer: int = -1
    tag: int = 0
    iteration: int = 0
    op: str = ""
    flow: int | None = None
    chunk: int = 0
    job: int = 0  # the job on a shared cluster (0: the only one); written as `simstudy.job` when set
    #: a collective the switches aggregate: (slots of a switch, chunk bytes); see `attributes.IN_NETWORK_SLOTS`
    in_network: tuple[int, int] | None = None


@dataclass(slots=True)
class RankGraph:
    """The tasks one rank executes, in creation order (ids are 0, 1, 2, ...).

    Ranks that run the same program on other groups and peers share one task list (a template,
    built for another rank) and say how it binds: `groups` maps the template's communicator group
    ids to this rank's, `peers` the template's send/receive peers to this rank's (ids and peers not
    in a map stay as they are). Read a task's group and peer through `group_of` and `peer_of`."""

    rank: int
    tasks: list[Task] = field(default_factory=list)
    groups: dict[int, int] | None = None
    peers: dict[int, int] | None = None

    def group_of(self, task: Task) -> int:
        """The communicator group this rank runs `task` on."""
        return task.group if self.groups is None else self.groups.get(task.group, task.group)

    def peer_of(self, task: Task) -> int:
        """The rank this rank's send or receive `task` goes to or comes from."""
        return task.peer if self.peers is None else self.peers.get(task.peer, task.peer)

    @property
    def bound(self) -> bool:
        return self.groups is not None or self.peers is not None

    def bound_tasks(self) -> list[Task]:
        """The tasks with this rank's groups and peers (the shared list itself when nothing is bound)."""
        if not self.bound:
            return self.tasks
        return [replace(t, group=self.group_of(t), peer=self.peer_of(t))
                if t.kind not in (TaskKind.COMPUTE, TaskKind.WAIT) else t for t in self.tasks]

    def _add(self, task: Task) -> int:
        for dep in task.deps:
            if not 0 <= dep < len(self.tasks):
                raise ValueError(f"rank {self.rank}: task {task.name!r} depends on unknown task {dep}")
        self.tasks.append(task)
        return task.id

    def compute(
        self, name: str, duration_us: int, deps: list[int], *, flops: int = 0, tensor_bytes: int = 0,
        iteration: int = 0,
    ) -> int:
        """Add a compute task of `duration_us` microseconds; returns its id."""
        return self._add(
            Task(
                len(self.tasks),
                name,
                TaskKind.COMPUTE,
                list(deps),
                duration_us=duration_us,
                flops=flops,
                tensor_bytes=tensor_bytes,
                iteration=iteration,
            )
        )

    def wait(self, name: str, duration_us: int, deps: list[int], *, iteration: int = 0) -> int:
        """Add a wait of `duration_us` microseconds on the CPU (beside the device's compute); returns its id."""
        return self._add(Task(len(self.tasks), name, TaskKind.WAIT, list(deps), duration_us=duration_us,
                              iteration=iteration))

    def collective(
        self, name: str, kind: Collective, size_bytes: int, deps: list[int], *, group: int = 0, iteration: int = 0,
    ) -> int:
        """Add a collective over `group` (0: all ranks) of `size_bytes`; returns its id."""
        return self._add(
            Task(
                len(self.tasks),
                name,
                TaskKind.COLLECTIVE,
                list(deps),
                collective=kind,
                size_bytes=size_bytes,
                group=group,
                iteration=iteration,
            )
        )

    def send(
        self, name: str, dst: int, size_bytes: int, tag: int, deps: list[int], *, op: str = "p2p",
        iteration: int = 0, flow: int | None = None, chunk: int = 0,
    ) -> int:
        """Add a point-to-point send to rank `dst`; returns its id. Its transfer belongs to `flow`
        (default: its tag) as slice `chunk`, and is counted as `op` (p2p, push, pull)."""
        return self._add(
            Task(len(self.tasks), name, TaskKind.SEND, list(deps), size_bytes=size_bytes, peer=dst, tag=tag,
                 iteration=iteration, op=op, flow=tag if flow is None else flow, chunk=chunk)
        )

    def recv(
        self, name: str, src: int, size_bytes: int, tag: int, deps: list[int], *, op: str = "p2p",
        iteration: int = 0,
    ) -> int:
        """Add a point-to-point receive from rank `src`; returns its id."""
        return self._add(
            Task(len(self.tasks), name, TaskKind.RECV, list(deps), size_bytes=size_bytes, peer=src, tag=tag,
                 iteration=iteration, op=op)
        )

    def sent_bytes(self) -> int:
        """Bytes this rank sends point to point (collectives excluded)."""
        return sum(t.size_bytes for t in self.tasks if t.kind is TaskKind.SEND)

    def received_bytes(self) -> int:
        """Bytes this rank receives point to point."""
        return sum(t.size_bytes for t in self.tasks if t.kind is TaskKind.RECV)

    def collective_bytes(self, kind: Collective | None = None) -> int:
        """Sum of collective sizes on this rank (optionally of one kind)."""
        return sum(
            t.size_bytes
            for t in self.tasks
            if t.kind is TaskKind.COLLECTIVE and (kind is None or t.collective is kind)
        )


@dataclass(slots=True)
class ExecutionGraph:
    """Every rank's graph plus the communicator groups they use (id -> member ranks)."""

    ranks: list[RankGraph]
    groups: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def npus(self) -> int:
        return len(self.ranks)

    def check(self) -> None:
        """Check that every send has a matching receive (same peers, tag and size)."""
        sends: dict[tuple[int, int, int], int] = {}
        recvs: dict[tuple[int, int, int], int] = {}
        p2p: dict[int, list[Task]] = {}  # each task list's sends and receives (ranks of a stage share one)
        for g in self.ranks:
            found = p2p.get(id(g.tasks))
            if found is None:
                found = p2p[id(g.tasks)] = [t for t in g.tasks if t.kind is TaskKind.SEND or t.kind is TaskKind.RECV]
            for t in found:
                if t.kind is TaskKind.SEND:
                    key = (g.rank, g.peer_of(t), t.tag)
                    if key in sends:
                        raise ValueError(f"duplicate send {key} (src, dst, tag)")
                    sends[key] = t.size_bytes
                elif t.kind is TaskKind.RECV:
                    key = (g.peer_of(t), g.rank, t.tag)
                    if key in recvs:
                        raise ValueError(f"duplicate receive {key} (src, dst, tag)")
                    recvs[key] = t.size_bytes
        if sends != recvs:
            missing = set(sends) ^ set(recvs)
            bad = sorted(missing)[:3] or [k for k in sends if sends[k] != recvs.get(k)][:3]
            raise ValueError(f"unmatched or mis-sized send/recv pairs (src, dst, tag): {bad}")
        for gid, members in self.groups.items():
            if gid == 0 or not members or len(set(members)) != len(members):
                raise ValueError(f"communicator group {gid} is invalid: {members}")
