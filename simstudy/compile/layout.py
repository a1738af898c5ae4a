"""Where each (data, tensor, pipeline) coordinate runs, and the communicator groups it uses.

Ranks are numbered with the tensor-parallel index fastest, then the data-parallel replica, then
the pipeline stage (Megatron-LM's and DeepSpeed's order):

    rank = t + tp * (d + dp * s)

ASTRA-SIM numbers NPUs with the innermost dimension fastest, so a tensor-parallel group (tp
consecutive ranks) sits inside the innermost dimension whenever tp divides that dimension's
size, data-parallel groups span the next ones, and pipeline stages the outermost.

Groups are the sets of ranks that run one collective together: one tensor-parallel group per
(replica, stage) and one data-parallel group per (tensor index, stage). A group of every rank is
group 0 (ASTRA-SIM's default: the whole, possibly multi-dimensional, network); others get ids
1, 2, ... in the comm-group JSON and the `pg_name` of their collectives. ASTRA-SIM runs a
collective on such a group as one ring over its members in the listed order.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Coord:
    """A rank's place: tensor index t, data-parallel replica d, pipeline stage s."""

    t: int
    d: int
    s: int


@dataclass
class Layout:
    """The rank of every coordinate and the communicator groups of a dp x tp x pp job."""

    dp: int
    tp: int
    pp: int
    groups: dict[int, tuple[int, ...]] = field(default_factory=dict)
    _ids: dict[tuple[int, ...], int] = field(default_factory=dict)

    @property
    def npus(self) -> int:
        return self.dp * self.tp * self.pp

    def rank(self, t: int, d: int, s: int) -> int:
        return t + self.tp * (d + self.dp * s)

    def coord(self, rank: int) -> Coord:
        t, rest = rank % self.tp, rank // self.tp
        return Coord(t, rest % self.dp, rest // self.dp)

    def group_id(self, members: tuple[int, ...]) -> int:
        """The id of the group of `members` (0 when it is every rank); registers new groups."""
        if len(members) == self.npus:
            return 0
        gid = self._ids.get(members)
        if gid is None:
            gid = self._ids[members] = len(self._ids) + 1
            self.groups[gid] = members
        return gid

    def tp_members(self, c: Coord) -> tuple[int, ...]:
        return tuple(self.rank(t, c.d, c.s) for t in range(self.tp))

    def dp_members(self, c: Coord) -> tuple[int, ...]:
        return tuple(self.rank(c.t, d, c.s) for d in range(self.dp))

    def register_all(self, *, tp: bool = True, dp: bool = True) -> None:
        """Give every group in use an id in a fixed order: tensor-parallel groups, then data-parallel
        ones (`tp`/`dp` False: that kind of group runs no collective)."""
        coords = [self.coord(r) for r in range(self.npus)]
        if tp and self.tp > 1:
            for c in coords:
                self.group_id(self.tp_members(c))
        if dp and self.dp > 1:
            for c in coords:
                self.group_id(self.dp_members(c))
