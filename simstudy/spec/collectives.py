"""The collective algorithms: one registry entry each, with its names, constraints and properties.

An entry is everything simstudy knows about an algorithm as data: its spec name
(`aggregation.algorithm`), the name ASTRA-SIM's system.json gives it (and the variants that run
the same transfers), the collectives it implements and configures, the ranks it needs, and the
properties the engine branches on. The spec validates with it, the compiler writes system.json
from it, and `simstudy.compiler.collectives` gives every entry its transfers and reduction steps
(registered under the entry's name; a missing one fails at import). No other module names an
algorithm: code asks an entry for a property instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simstudy.spec.base import listed

#: The collectives ASTRA-SIM's system layer simulates, by simstudy's kind name.
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
_ALL = frozenset(KINDS)
_ALL_BUT_ALL_TO_ALL = frozenset({"all_reduce", "all_gather", "reduce_scatter"})


@dataclass(frozen=True)
class PowerOfTwo:
    """A constraint: the algorithm runs over a power-of-two number of ranks.

    `scope` says which scenarios it binds: `data_parallel`, every scenario that picks the
    algorithm (its dp must be 2^k); `every_rank`, those whose all-reduce spans every rank
    (tp = pp = 1; a smaller group runs as a ring). `reason` ends the spec's error text.
    `dimensions`: a bundle's system.json may configure it only on network dimensions of 2^k NPUs.
    """

    scope: Literal["data_parallel", "every_rank"]
    reason: str = ""
    dimensions: bool = False

    def scenario_error(self, name: str, dp: int, every_rank: bool) -> str | None:
        """What is wrong with `dp` data-parallel ranks for algorithm `name` (`every_rank`: the
        all-reduce spans every rank), or None."""
        if not dp & (dp - 1):
            return None
        if self.scope == "data_parallel":
            return f"{name} all-reduce needs a power-of-two number of data-parallel ranks{self.reason}, not dp = {dp}"
        if every_rank:
            return f"{name} all-reduce over every rank needs a power-of-two number of ranks{self.reason}, not dp = {dp}"
        return None


@dataclass(frozen=True)
class CollectiveAlgorithm:
    """One collective algorithm.

    `name` is the spec name, `astra` the system.json name, `variants` other system.json names
    that run the same transfers (ASTRA-SIM's one-dimension `oneRing`...). `kinds` are the
    collectives it implements; `configured` the ones the compiler configures it for in
    system.json when a scenario picks it (the others run their `default_for` algorithm).
    `symmetry` says how ranks map onto each other in its transfers: `rotate` (rank r does what
    rank 0 does, shifted by r) or `xor` (shifted by XOR with r); None when ranks differ.

    Properties the rest of simstudy branches on, instead of on names:

    * `power_of_two`: the ranks it needs (None: any number).
    * `default_for`: the collectives that run it when the scenario's algorithm does not configure
      them, and when a bundle's system.json leaves their field out. One entry per collective.
    * `fallback`: what runs whatever is left unsaid: the spec's default; system.json's algorithm
      when a scenario has no all-reduce (parameter servers) or a cluster's jobs pick different
      ones; a collective flowsim finds no algorithm for in system.json; and a communicator
      group's collectives (ASTRA-SIM runs a group as one ring in the group file's order).
      Exactly one entry has it.
    * `alternates`: its chunks take two patterns in turn (variant 0, 1, 0...), so the engine
      plans odd chunks apart.
    * `gated`: the collectives whose second (and last) step the engine releases one message at a
      time, as each message of the first step is reduced (ASTRA-SIM's `AllToAll` all-reduce).
    """

    name: str
    astra: str
    variants: tuple[str, ...] = ()
    kinds: frozenset[str] = _ALL
    configured: frozenset[str] = _ALL_BUT_ALL_TO_ALL
    symmetry: Literal["rotate", "xor"] | None = None
    power_of_two: PowerOfTwo | None = None
    default_for: frozenset[str] = frozenset()
    fallback: bool = False
    alternates: bool = False
    gated: frozenset[str] = frozenset()

    def scenario_error(self, dp: int, every_rank: bool) -> str | None:
        """Why a scenario with `dp` data-parallel ranks cannot run this all-reduce (`every_rank`: it
        spans every rank), or None."""
        return self.power_of_two.scenario_error(self.name, dp, every_rank) if self.power_of_two else None

    def fits_dimension(self, npus: int) -> bool:
        """Whether system.json may configure it on a network dimension of `npus` NPUs."""
        return not (self.power_of_two and self.power_of_two.dimensions and npus & (npus - 1))


#: Every collective algorithm, in the order the spec lists them.
ALGORITHMS: dict[str, CollectiveAlgorithm] = {a.name: a for a in (
    CollectiveAlgorithm("ring", "ring", ("oneRing",), symmetry="rotate", default_for=_ALL_BUT_ALL_TO_ALL,
                        fallback=True),
    # ASTRA-SIM's ring all-to-all relays every block around the ring; all-to-all runs this one.
    CollectiveAlgorithm("direct", "direct", ("oneDirect",), symmetry="rotate",
                        default_for=frozenset({"all_to_all"}), gated=frozenset({"all_reduce"})),
    # ASTRA-SIM runs no all-to-all with halving-doubling (its ranks never finish).
    CollectiveAlgorithm("halving_doubling", "halvingDoubling", ("oneHalvingDoubling",), kinds=_ALL_BUT_ALL_TO_ALL,
                        configured=frozenset({"all_reduce"}), symmetry="xor",
                        power_of_two=PowerOfTwo("data_parallel")),
    # Two trees used in turn, chunk after chunk (variant = the chunk's turn). ASTRA-SIM runs an
    # all-to-all configured with it as the same tree all-reduce (`DoubleBinaryTreeAllReduce`).
    CollectiveAlgorithm("double_binary_tree", "doubleBinaryTree", kinds=frozenset({"all_reduce", "all_to_all"}),
                        configured=frozenset({"all_reduce"}), alternates=True,
                        power_of_two=PowerOfTwo("every_rank", " (ASTRA-SIM's two trees span 2^k ranks)",
                                                dimensions=True)),
)}
#: The spec names, in order.
NAMES: tuple[str, ...] = tuple(ALGORITHMS)
_BY_ASTRA: dict[str, CollectiveAlgorithm] = {n: a for a in ALGORITHMS.values() for n in (a.astra, *a.variants)}


def _only(found: list[CollectiveAlgorithm], what: str) -> CollectiveAlgorithm:
    if len(found) != 1:
        raise RuntimeError(f"the collective registry needs exactly one {what}, has {[a.name for a in found]}")
    return found[0]


#: What runs whatever is left unsaid (see `CollectiveAlgorithm.fallback`).
FALLBACK: CollectiveAlgorithm = _only([a for a in ALGORITHMS.values() if a.fallback], "fallback")
#: Kind -> the algorithm it runs when the scenario's algorithm does not configure it.
DEFAULT_FOR: dict[str, CollectiveAlgorithm] = {
    kind: _only([a for a in ALGORITHMS.values() if kind in a.default_for], f"default for {kind}") for kind in KINDS}


def collective_algorithm(name: str) -> CollectiveAlgorithm:
    """An algorithm by its spec name (`ring`, `halving_doubling`...) or its ASTRA-SIM name."""
    found = ALGORITHMS.get(name) or _BY_ASTRA.get(name)
    if found is None:
        raise ValueError(f"unknown collective algorithm {name!r}; known: "
                         + ", ".join(sorted({*ALGORITHMS, *_BY_ASTRA})))
    return found


def system_implementations(name: str) -> dict[str, str]:
    """The ASTRA-SIM algorithm of every collective when a scenario picks algorithm `name`."""
    chosen = collective_algorithm(name)
    return {kind: (chosen if kind in chosen.configured else DEFAULT_FOR[kind]).astra for kind in KINDS}


def names_text() -> str:
    """The spec names as a sentence lists them: `a, b or c`."""
    return listed(NAMES)
