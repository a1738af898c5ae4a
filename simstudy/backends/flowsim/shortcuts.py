"""flowsim's fast paths, each of which can be turned off for the full simulation it stands for.

* `lanes`: a symmetric collective of every rank (every rank does what rank 0 does, mapped by a
  symmetry of an ASTRA-SIM network) is simulated for rank 0 alone, on one queue or one shared
  link per orbit of links (`routes.Lanes`), and its messages copied to every rank;
* `identical_ranks`: when every rank runs the same trace with only such collectives, rank 0 is
  simulated for all of them (`replicas.identical_ranks`);
* `replicas`: in `unaware`, when the data-parallel replicas of a job run alike on a network that is
  the same one replica on, replica 0 is simulated for all of them (`replicas.replica_plan`);
* `isolated`: a collective whose links carry nothing else while it runs is timed once, alone, and
  that timing is reused for every collective with the same plan and paths; one that meets other
  traffic is replayed message by message (`comms.Comms`); not taken by `aware` runs with
  point-to-point sends (`comms._sends_meet_fifo`).

`FULL` turns every one off: every rank's collectives run message by message, every member
simulated, on the one shared network. The property tests (`tests/backends/test_fast_paths.py`)
run random bundles through the full path and through every shortcut and require the same
finish times, spans and traffic rows.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT", "FULL", "Shortcuts"]


@dataclass(frozen=True)
class Shortcuts:
    """Which fast paths flowsim takes (all by default)."""

    lanes: bool = True
    identical_ranks: bool = True
    isolated: bool = True
    replicas: bool = True

    @property
    def names(self) -> tuple[str, ...]:
        """The shortcuts that are on."""
        return tuple(n for n in ("lanes", "identical_ranks", "isolated", "replicas") if getattr(self, n))


DEFAULT = Shortcuts()
FULL = Shortcuts(lanes=False, identical_ranks=False, isolated=False, replicas=False)
