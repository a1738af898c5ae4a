"""The Python API of simstudy: what the `simstudy` command does, as functions returning typed results.

Every command of the CLI is a thin layer over one function here, so a notebook and the shell run the
same code and write the same directories::

    import simstudy as s

    study = s.load_study("specs/cnn_vs_rnn.yaml")
    result = s.sweep(study)                      # results/cnn_vs_rnn/, as `simstudy sweep` writes it
    result.summary                               # one row per scenario (pandas DataFrame)
    run = result.run(result.summary["key"][0])   # a finished run: times, spans, traffic, links

Bad input (a spec that does not validate, a file that is missing, a capture that cannot be read)
raises `InputError`, the errors the CLI reports with exit code 2. A simulation that does not complete
raises `simstudy.backends.BackendError` (exit code 1 in the CLI).

The functions live in modules by theme: `inputs` (the accepted spec sources and `InputError`),
`specs` (load and compile), `runs` (run, sweep and read back), `traffic` (analyse, validate,
capture) and `pages` (dashboard, trace, clusters); this package exports them all.
"""

from __future__ import annotations

from simstudy.api.inputs import InputError, SpecSource, input_error_types
from simstudy.api.pages import cluster, dashboard, trace
from simstudy.api.runs import Run, StudyResult, open_run, open_study, run, sweep
from simstudy.api.specs import compile, load_spec, load_study, models
from simstudy.api.traffic import (
    Verdict,
    analyze,
    analyze_counters,
    capture,
    load_counters,
    load_traffic,
    validate,
    validate_counters,
)

# The public names are listed in the package's `__all__` (simstudy/__init__.py), which exports each
# of them from here on first use; this list adds what the CLI and annotations use.
__all__ = [
    "InputError",
    "Run",
    "SpecSource",
    "StudyResult",
    "Verdict",
    "analyze",
    "analyze_counters",
    "capture",
    "cluster",
    "compile",
    "dashboard",
    "input_error_types",
    "load_counters",
    "load_spec",
    "load_study",
    "load_traffic",
    "models",
    "open_run",
    "open_study",
    "run",
    "sweep",
    "trace",
    "validate",
    "validate_counters",
]
