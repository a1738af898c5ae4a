"""Finding the ASTRA-SIM analytical binary."""

from __future__ import annotations

import os
from pathlib import Path

#: The submodule's build output, relative to the repository root.
SUBMODULE_BIN = Path("astra-sim/build/astra_analytical/build/bin")
BINARIES = {False: "AstraSim_Analytical_Congestion_Unaware", True: "AstraSim_Analytical_Congestion_Aware"}
ENV_VAR = "ASTRA_SIM_BIN"


def repo_root() -> Path:
    """The checkout simstudy is installed from (for the submodule's build output)."""
    return Path(__file__).resolve().parents[2]


def _sibling(path: Path, aware: bool) -> Path:
    """The aware/unaware binary next to a given one."""
    if path.name in BINARIES.values():
        return path.with_name(BINARIES[aware])
    return path


def find_astra_sim(explicit: str | Path | None = None, *, aware: bool = False) -> Path | None:
    """The binary: `explicit`, else $ASTRA_SIM_BIN, else the submodule build; None if absent.

    With `aware`, the congestion-aware binary next to the one found is used.
    """
    candidates: list[Path] = []
    if explicit:
        candidates.append(_sibling(Path(explicit), aware))
    elif os.environ.get(ENV_VAR):
        candidates.append(_sibling(Path(os.environ[ENV_VAR]), aware))
    else:
        candidates.append(repo_root() / SUBMODULE_BIN / BINARIES[aware])
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            # absolute: the binary runs from the run's own working directory, so a path relative
            # to where the user typed it would not be found there
            return c.resolve()
    return None


def describe_search(explicit: str | Path | None = None, *, aware: bool = False) -> str:
    """Where `find_astra_sim` looked, for error and skip messages."""
    if explicit:
        return f"--astra-sim {explicit}"
    if os.environ.get(ENV_VAR):
        return f"{ENV_VAR}={os.environ[ENV_VAR]}"
    return f"{ENV_VAR} unset and no submodule build at {SUBMODULE_BIN / BINARIES[aware]}"
