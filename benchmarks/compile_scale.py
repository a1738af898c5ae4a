"""Compile ResNet-50 data parallel at 8, 64 and 1024 ranks: bundle size and compile time.

Prints each time as a ratio to the 8-rank compile in the same process (machines are noisy).
Usage: python benchmarks/compile_scale.py [RANKS ...]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from simstudy.compile import compile_scenario
from simstudy.spec import Scenario


def main(ranks: list[int]) -> None:
    print(f"{'ranks':>6} {'ET files MB':>12} {'bundle MB':>10} {'compile s':>10} {'x 8-rank':>9}")
    ref: float | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for n in ranks:
            s = Scenario.model_validate(
                {"name": "resnet50", "model": "resnet50", "parallelism": {"dp": n},
                 "topology": {"kind": "ring", "npus": n}, "training": {"iterations": 2}}
            )
            out = Path(tmp) / f"r{n}"
            res = compile_scenario(s, out)
            size = sum(p.stat().st_size for p in out.iterdir())
            ref = ref or res.seconds
            ratio = res.seconds / ref
            print(f"{n:>6} {res.et_bytes / 1e6:>12.2f} {size / 1e6:>10.2f} {res.seconds:>10.3f} {ratio:>9.2f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [8, 64, 1024])
