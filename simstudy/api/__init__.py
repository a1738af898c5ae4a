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

from simstudy.api.inputs import InputError as InputError
from simstudy.api.inputs import SpecSource as SpecSource
from simstudy.api.inputs import input_error_types as input_error_types
from simstudy.api.pages import cluster as cluster
from simstudy.api.pages import dashboard as dashboard
from simstudy.api.pages import trace as trace
from simstudy.api.runs import Run as Run
from simstudy.api.runs import StudyResult as StudyResult
from simstudy.api.runs import estimate as estimate
from simstudy.api.runs import open_run as open_run
from simstudy.api.runs import open_study as open_study
from simstudy.api.runs import run as run
from simstudy.api.runs import sweep as sweep
from simstudy.api.specs import compile as compile
from simstudy.api.specs import load_spec as load_spec
from simstudy.api.specs import load_study as load_study
from simstudy.api.specs import models as models
from simstudy.api.traffic import Verdict as Verdict
from simstudy.api.traffic import analyze as analyze
from simstudy.api.traffic import analyze_counters as analyze_counters
from simstudy.api.traffic import capture as capture
from simstudy.api.traffic import export_counters as export_counters
from simstudy.api.traffic import fit as fit
from simstudy.api.traffic import load_counters as load_counters
from simstudy.api.traffic import load_traffic as load_traffic
from simstudy.api.traffic import validate as validate
from simstudy.api.traffic import validate_counters as validate_counters

# The public names are listed once, in the package's `__all__` (simstudy/__init__.py), which
# exports each of them from here on first use; each is re-exported explicitly above (`x as x`),
# with what the CLI and annotations use besides (`input_error_types`, `SpecSource`).
