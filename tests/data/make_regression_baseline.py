"""Regenerate tests/data/regression_small.parquet, the baseline of specs/regression_small.yaml.

    python tests/data/make_regression_baseline.py

Run it only when a change is meant to move the regression results, and say why in the commit.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from simstudy.spec import load_study
from simstudy.sweeps import LocalExecutor, run_study

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    study_file = REPO / "specs" / "regression_small.yaml"
    out = Path(tempfile.mkdtemp(prefix="regression-small-"))
    try:
        result = run_study(load_study(study_file), study_file, out, executor=LocalExecutor(), progress=False)
        if not result.all_ok:
            raise SystemExit(f"a regression scenario failed: {[r.error for r in result.records.values() if r.error]}")
        target = REPO / "tests" / "data" / "regression_small.parquet"
        result.summary.to_parquet(target, index=False)
        print(f"wrote {target.relative_to(REPO)}: {len(result.summary)} scenarios")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
