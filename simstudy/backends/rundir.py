"""Run directories: the bundle, run.json and traffic.parquet of one simulation."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from simstudy import layout
from simstudy.backends.base import Backend, BackendError, RunResult
from simstudy.compiler import Bundle, BundleError
from simstudy.compiler.atomic import atomic_directory
from simstudy.linktable import empty_links, write_links
from simstudy.table import empty_table, read_table, write_table


def write_run(result: RunResult, out: Path) -> None:
    """Write traffic.parquet (`rows`; moved there when the backend streamed it) or links.parquet
    (`links`), spans.parquet and run.json into `out` (run.json last: it marks completion)."""
    out.mkdir(parents=True, exist_ok=True)
    output = result.output
    if output.mode == "rows":
        target = out / layout.TRAFFIC
        if output.path is not None and output.path.is_file():
            if output.path.resolve() != target.resolve():
                shutil.move(output.path, target)
        else:
            write_table(output.table(), target)
        output.path = target
    elif output.mode == "links":
        write_links(output.links if output.links is not None else empty_links(), out / layout.LINKS)
    if output.pcap_dir is not None and output.pcap_dir.is_dir():
        target = out / layout.PCAP_DIR
        if output.pcap_dir.resolve() != target.resolve():
            shutil.rmtree(target, ignore_errors=True)
            shutil.move(output.pcap_dir, target)
        output.pcap_dir = target
    result.spans.to_parquet(out / layout.SPANS, index=False)
    result.write_json(out / layout.RUN_JSON)


def read_run(out: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """The summary and the traffic table of a run directory (empty when it kept no rows)."""
    summary = json.loads((out / layout.RUN_JSON).read_text(encoding="utf-8"))
    path = out / layout.TRAFFIC
    return summary, read_table(path) if path.is_file() else empty_table()


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


def run_input_set(
    given: Bundle,
    backend: Backend,
    out: Path,
    *,
    timeout_s: float | None = None,
    render: Callable[[RunResult, Path], object] | None = None,
) -> RunResult:
    """`run_to_dir` on an ASTRA-SIM input set from elsewhere: copied into the run directory's
    bundle/, and simulated there. An error about one of the copies names the user's file."""
    copies: dict[str, str] = {}

    def prepare(d: Path) -> Bundle:
        copied = copy_bundle(given, d)
        for r in range(given.npus):
            copies[str(copied.et_path(r))] = str(given.et_path(r))
        for key in ("network", "system", "remote_memory", "comm_group", "scenario", "topology"):
            if getattr(copied, key) is not None:
                copies[str(getattr(copied, key))] = str(getattr(given, key))
        return copied

    try:
        return run_to_dir(prepare, backend, out, timeout_s=timeout_s, render=render)
    except (ValueError, BackendError) as exc:  # the input's errors (ChakraFormatError, BundleError...)
        text = str(exc)
        for copy in sorted((c for c in copies if c in text), key=len, reverse=True):
            text = text.replace(copy, copies[copy])
        if text == str(exc):
            raise
        raise (BackendError if isinstance(exc, BackendError) else BundleError)(text) from None


def run_iterations(out: Path) -> int:
    """Training iterations of the run in `out` (the most of any job of a cluster run), from its
    bundle's scenario.json; 1 when the run has none (an ASTRA-SIM input set)."""
    try:
        scen = json.loads((out / layout.BUNDLE_DIR / layout.SCENARIO).read_text())
    except (OSError, ValueError):
        return 1
    if isinstance(scen, dict) and isinstance(scen.get("training"), dict):
        return int(scen["training"].get("iterations", 1))
    if isinstance(scen, dict) and isinstance(scen.get("jobs"), list) and scen["jobs"]:
        return max(int(j.get("training", {}).get("iterations", 1)) for j in scen["jobs"])
    return 1
