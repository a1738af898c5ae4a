"""`benchmarks/ns3.py` has the ns3 wheel's name, and Python puts a script's folder first on
`sys.path`: a benchmark that runs the packet network takes this folder off the path (after its own
imports from it) before the wheel loads, which it does when the packet network first runs."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def unshadow_ns3() -> None:
    """Take the benchmarks folder off `sys.path`, so that `ns3` is the wheel."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
