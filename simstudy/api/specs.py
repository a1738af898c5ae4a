"""Specs and bundles: load a scenario, cluster or study (from a file or a mapping) and compile it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simstudy.api.inputs import SpecSource, input_errors
from simstudy.compiler import CompileResult, compile_any
from simstudy.spec import Cluster, Scenario, SpecError, Study, load_runnable, resolve_references, validate_as
from simstudy.spec import load_study as load_study_file
from simstudy.spec.load import is_reference
from simstudy.zoo import ZooSummary, list_models


def _anchored(value: Any, base: Path) -> Any:
    """`value` with every file reference made absolute (relative to `base`).

    The spec then means the same wherever it is used from; a reference is labelled by its file's
    stem, so the labels of a sweep stay.
    """
    if is_reference(value):
        return str((base / str(value)).resolve())
    if isinstance(value, Mapping):
        return {k: _anchored(v, base) for k, v in value.items()}
    if isinstance(value, list):
        return [_anchored(v, base) for v in value]
    return value


def load_spec(source: SpecSource, *, base_dir: str | Path | None = None) -> Scenario | Cluster:
    """Load a runnable spec: a scenario, or a cluster of several jobs (``kind: cluster``).

    Args:
        source: A YAML file, or a mapping of the same fields (as ``yaml.safe_load`` gives).
        base_dir: Where file references in a mapping are relative to (default: the current directory).
            References in a file are relative to the file.

    Returns:
        The validated spec, with every referenced file inlined.

    Raises:
        InputError: The spec does not validate or a referenced file is missing; the message names
            the file, the field and what was expected.
    """
    with input_errors():
        if not isinstance(source, Mapping):
            return load_runnable(source)
        root = Path(base_dir or ".").resolve() / "<mapping>"
        try:
            data, origins = resolve_references(dict(source), root)
            cls: type[Scenario] | type[Cluster] = Cluster if data.get("kind") == "cluster" else Scenario
            return validate_as(cls, data, origins=origins)
        except SpecError as exc:  # a problem in the mapping itself names the field, not a file
            if exc.file != str(root):
                raise
            raise SpecError(None, exc.field, exc.message) from None


def load_study(source: SpecSource, *, base_dir: str | Path | None = None) -> Study:
    """Load a study: a base scenario and the axes to sweep.

    File references in the study (``../workloads/lstm_lm.yaml``) are made absolute, so the returned
    study sweeps the same scenarios from any working directory; a swept file is still labelled by its
    stem in the summary.

    Args:
        source: A study YAML file, or a mapping of the same fields.
        base_dir: Where references in a mapping are relative to (default: the current directory).

    Returns:
        The validated study.

    Raises:
        InputError: The study does not validate; the message names the file and the field.
    """
    with input_errors():
        if not isinstance(source, Mapping):
            path = Path(source)
            study = load_study_file(path)
            base = path.resolve().parent
            return study.model_copy(update={"base": _anchored(study.base, base), "axes": _anchored(study.axes, base)})
        base = Path(base_dir or ".").resolve()
        return validate_as(Study, _anchored(dict(source), base))


def runnable(spec: SpecSource | Scenario | Cluster) -> tuple[Scenario | Cluster, str | Path | None]:
    """A spec object and the file it came from (None for objects and mappings)."""
    if isinstance(spec, Scenario | Cluster):
        return spec, None
    return load_spec(spec), None if isinstance(spec, Mapping) else spec


def compile(spec: SpecSource | Scenario | Cluster, out: str | Path | None = None) -> CompileResult:
    """Compile a scenario (or cluster) into a bundle: Chakra ET files and ASTRA-SIM configs.

    Args:
        spec: A spec file, a mapping, or a loaded `Scenario` / `Cluster`.
        out: The bundle directory (default ``results/bundles/<spec file stem or scenario name>``).

    Returns:
        The bundle written, the resolved spec, the ET bytes and the seconds it took.

    Raises:
        InputError: The spec does not validate or does not fit (e.g. the model exceeds memory).
    """
    with input_errors():
        scenario, file = runnable(spec)
        name = Path(file).stem if file else scenario.name
        target = Path(out) if out is not None else Path("results/bundles") / name
        return compile_any(scenario, target, source=file)


def models() -> list[ZooSummary]:
    """The built-in models (what a spec's ``model: NAME`` can name).

    Returns:
        Each model's name, family, parameter count, forward GFLOPs per sample and description.
    """
    return list_models()
