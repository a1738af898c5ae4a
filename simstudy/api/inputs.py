"""What the API accepts (a spec as a file or a mapping) and the one error it raises for bad input."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from simstudy.backends.estimate import EstimateError
from simstudy.chakra import ChakraFormatError
from simstudy.compiler import BundleError, CompileError
from simstudy.report.chrome_trace import TraceError
from simstudy.report.dashboard import DashboardError
from simstudy.spec import SpecError
from simstudy.sweeps import SweepError
from simstudy.traffic.counters import CountersError
from simstudy.traffic.meta import MetaError
from simstudy.traffic.pcap import PcapError
from simstudy.traffic.sources import SourceError
from simstudy.validation.fitting import FitError

#: A spec given as a YAML file or as the mapping a YAML file would hold.
SpecSource = str | Path | Mapping[str, Any]


class InputError(ValueError):
    """Bad input: a spec, study, capture or directory that cannot be used.

    The message is the one line the CLI prints (it names the file, the field and what was expected);
    the original error is the exception's ``__cause__``.
    """


def input_error_types() -> tuple[type[BaseException], ...]:
    """The errors of the layers below that mean bad input (`InputError` here, exit code 2 in the CLI).

    Returns:
        The exception types, `InputError` first.
    """
    # traffic.cluster loads scikit-learn, which no other command needs: imported when asked for
    from simstudy.traffic.cluster import ClusterError

    return (InputError, SpecError, CompileError, BundleError, ChakraFormatError, SweepError, PcapError, SourceError,
            MetaError, FileNotFoundError, DashboardError, TraceError, ClusterError, CountersError, EstimateError,
            FitError)


@contextlib.contextmanager
def input_errors() -> Iterator[None]:
    """Turn the bad-input errors of the layers below into one `InputError` with the same message.

    Yields:
        Nothing: the body of the ``with`` block runs inside.

    Raises:
        InputError: The body raised one of `input_error_types()`.
    """
    try:
        yield
    except InputError:
        raise
    except input_error_types() as exc:
        raise InputError(str(exc)) from exc
