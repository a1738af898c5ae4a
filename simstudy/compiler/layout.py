"""Where each coordinate of a parallel job runs, and the communicator groups it uses.

A rank's coordinate is its index along each parallelism dimension: tensor t, context c, data d
and pipeline stage s. Ranks are numbered with the tensor-parallel index fastest, then context,
then the data-parallel replica, then the pipeline stage (Megatron-LM's order tp-cp-dp-pp; expert
parallelism splits the data-parallel index, see `simstudy.compiler.dims`):

    rank = t + tp * (c + cp * (d + dp * s))

ASTRA-SIM numbers NPUs with the innermost dimension fastest, so a tensor-parallel group (tp
consecutive ranks) sits inside the innermost dimension whenever tp divides that dimension's
size, context- and data-parallel groups span the next ones, and pipeline stages the outermost.

Groups are the sets of ranks that run one collective together (which ranks make one group of a
dimension is that dimension's entry in `simstudy.compiler.dims`). A group of every rank is group 0
(ASTRA-SIM's default: the whole, possibly multi-dimensional, network); others get ids 1, 2, ... in
the order they are registered, in the comm-group JSON and the `pg_name` of their collectives.
ASTRA-SIM runs a collective on such a group as one ring over its members in the listed order.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Coord:
    """A rank's place: tensor index t, context index c, data-parallel replica d, pipeline stage s."""

    t: int
    d: int
    s: int
    c: int = 0


@dataclass
class Layout:
    """The rank of every coordinate and the communicator groups of a tp x cp x dp x pp job."""

    dp: int
    tp: int
    pp: int
    cp: int = 1
    ep: int = 1
    groups: dict[int, tuple[int, ...]] = field(default_factory=dict)
    _ids: dict[tuple[int, ...], int] = field(default_factory=dict)

    @property
    def npus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def rank(self, t: int, d: int, s: int, c: int = 0) -> int:
        return t + self.tp * (c + self.cp * (d + self.dp * s))

    def at(self, c: Coord) -> int:
        return self.rank(c.t, c.d, c.s, c.c)

    def coord(self, rank: int) -> Coord:
        t, rest = rank % self.tp, rank // self.tp
        c, rest = rest % self.cp, rest // self.cp
        return Coord(t, rest % self.dp, rest // self.dp, c)

    def group_id(self, members: tuple[int, ...]) -> int:
        """The id of the group of `members` (0 when it is every rank); registers new groups."""
        if len(members) == self.npus:
            return 0
        gid = self._ids.get(members)
        if gid is None:
            gid = self._ids[members] = len(self._ids) + 1
            self.groups[gid] = members
        return gid
