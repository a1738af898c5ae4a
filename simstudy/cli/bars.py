"""The command's progress bars: a long command's stages (`StageBar`) and a run's phases and
rates (`RunBar`), on stderr (tqdm)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simstudy.backends.base import Progress

class StageBar:
    """A tqdm bar over the stages of a long command: each message is a stage (its description)."""

    def __init__(self, total: int, *, enabled: bool = True) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, disable=not enabled, unit="step", dynamic_ncols=True, leave=True,
                        bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} [{elapsed}]")
        self.first = True

    def __call__(self, text: str) -> None:
        if not self.first:
            self.bar.update(1)
        self.first = False
        self.bar.set_description_str(text[:70])

    def close(self) -> None:
        self.bar.update(self.bar.total - self.bar.n)
        self.bar.close()


#: Seconds a run's compiling and routing go on before the bar shows them.
_QUIET_S = 1.0
#: How the bar names each phase of a run (`simstudy.backends.base.PHASES`).
_PHASE_WORDS = {"compile": "compiling", "route": "routing", "simulate": "simulating", "write": "writing"}


class RunBar:
    """A tqdm bar fed with a run's `Progress` (nothing when quiet): the phase (compiling, routing,
    simulating, writing), the fraction of its transfers done, the simulated time reached and how
    fast it goes (simulated time and transfers per second), and the ETA tqdm makes of the fraction."""

    def __init__(self, quiet: bool) -> None:
        self.bar: object | None = None
        self.quiet = quiet
        self.phase = ""
        self.shown = False

    def __call__(self, progress: Progress) -> None:
        if self.quiet:
            return
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=1000, desc=_PHASE_WORDS.get(progress.phase, progress.phase), file=sys.stderr,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}",
                            delay=_QUIET_S)
        bar = self.bar
        assert isinstance(bar, tqdm)
        bar.set_description_str(_PHASE_WORDS.get(progress.phase, progress.phase), refresh=False)
        bar.set_postfix_str(_rates(progress) if progress.phase in ("simulate", "write") else "", refresh=False)
        bar.update(max(0, int(progress.fraction * 1000) - bar.n))
        if progress.phase != self.phase:
            # a new phase shows its name at once: the simulation's always, compiling and routing
            # once the run has lasted `_QUIET_S` (a run refused while it reads its input prints its
            # error alone)
            if progress.phase in ("simulate", "write") or bar.format_dict["elapsed"] >= _QUIET_S:
                bar.refresh()
                self.shown = True
            self.phase = progress.phase

    def close(self) -> None:
        bar = self.bar
        if bar is not None:
            if self.shown:
                bar.refresh()  # type: ignore[attr-defined]
            bar.close()  # type: ignore[attr-defined]


def _rates(p: Progress) -> str:
    """'sim 12.345 ms at 0.41 ms/s, 1.2 M transfers at 35.1 k/s'"""

    def si(x: float) -> str:
        for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if x >= div:
                return f"{x / div:.1f} {unit}"
        return f"{x:.0f}"

    return (f"sim {p.sim_ns / 1e6:.3f} ms at {p.sim_ns_per_s / 1e6:.3g} ms/s, "
            f"{si(p.transfers)} transfers at {si(p.transfers_per_s)}/s")


def progress_bar(quiet: bool) -> RunBar:
    return RunBar(quiet)
