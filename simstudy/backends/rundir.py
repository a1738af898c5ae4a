"""Run directories: the bundle, run.json and traffic.parquet of one simulation."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from simstudy import layout
from simstudy.backends.base import Backend, RunResult
from simstudy.compile import Bundle
from simstudy.compile.atomic import atomic_directory
from simstudy.table import read_table, write_table


def write_run(result: RunResult, out: Path) -> None:
    """Write traffic.parquet, spans.parquet and run.json into `out` (run.json last: it marks completion)."""
    out.mkdir(parents=True, exist_ok=True)
    write_table(result.traffic, out / layout.TRAFFIC)
    result.spans.to_parquet(out / layout.SPANS, index=False)
    result.write_json(out / layout.RUN_JSON)


def read_run(out: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """The summary and the traffic table of a run directory."""
    summary = json.loads((out / layout.RUN_JSON).read_text(encoding="utf-8"))
    return summary, read_table(out / layout.TRAFFIC)


def copy_bundle(bundle: Bundle, out: Path) -> Bundle:
    """Copy an ASTRA-SIM input set into `out` (ET files and configs), keeping its prefix."""
    bundle.check()
    out.mkdir(parents=True, exist_ok=True)
    for r in range(bundle.npus):
        shutil.copyfile(bundle.et_path(r), out / bundle.et_path(r).name)
    names = {"network": layout.NETWORK, "system": layout.SYSTEM, "remote_memory": layout.REMOTE_MEMORY,
             "comm_group": layout.COMM_GROUP, "scenario": layout.SCENARIO, "topology": layout.TOPOLOGY}
    copied: dict[str, Path | None] = {}
    for key, name in names.items():
        src = getattr(bundle, key)
        copied[key] = None
        if src is not None:
            shutil.copyfile(src, out / name)
            copied[key] = out / name
    assert copied["network"] is not None and copied["system"] is not None
    return Bundle(out / bundle.workload.name, copied["network"], copied["system"], copied["remote_memory"],
                  copied["comm_group"], copied["scenario"], copied["topology"])


def run_to_dir(
    prepare: Callable[[Path], Bundle],
    backend: Backend,
    out: Path,
    *,
    timeout_s: float | None = None,
    render: Callable[[RunResult, Path], object] | None = None,
) -> RunResult:
    """Write a whole run directory: bundle/, run.json, traffic.parquet (+ what `render` adds).

    Everything is written to a temporary sibling directory that replaces `out` only when
    complete, so a failed run never leaves a half-written directory or destroys an old one.
    """
    with atomic_directory(out) as tmp:
        bundle = prepare(tmp / layout.BUNDLE_DIR)
        result = backend.run(bundle, tmp / layout.WORK_DIR, timeout_s=timeout_s)
        write_run(result, tmp)
        if render is not None:
            render(result, tmp)
    return result
