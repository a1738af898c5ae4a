"""Shared test fixtures, and CI's rule that a test must not skip under CI (CI installs every part)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ("pytester",)
REPO = Path(__file__).resolve().parents[1]
#: The marker of a test allowed to skip under CI: it needs something `.ci/run` cannot install (a package
#: with no CPU wheel for the pinned torch) or checks the absence of something CI installs.
MAY_SKIP = "ci_may_skip"
_SKIPPED_MODULES: list[str] = []


def under_ci() -> bool:
    """Whether the tests run under CI (`CI=true`, which `.ci/run` sets)."""
    return os.environ.get("CI", "").lower() == "true"


def _reason(longrepr: object) -> str:
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MAY_SKIP}(reason): may skip under CI=true (the reason says why CI "
                                       "cannot provide what it needs)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    """Under CI=true a test that skips fails, unless marked `ci_may_skip`: `.ci/run` installs every part
    the tests use (ASTRA-SIM, ns-3, torch, TensorFlow, Horovod, SLURM, Chromium, tcpdump, tshark)."""
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and under_ci()) or hasattr(report, "wasxfail"):
        return
    if item.get_closest_marker(MAY_SKIP) is not None:
        return
    report.outcome = "failed"
    report.longrepr = (f"CI=true: a test may not skip (.ci/run installs what the tests need; mark it "
                       f"`{MAY_SKIP}` with the reason if CI cannot), but it skipped: {_reason(report.longrepr)}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A whole module that skips at import (`pytest.importorskip`, `allow_module_level`) under CI=true
    fails the session: it is listed at the end."""
    if report.skipped and under_ci():
        _SKIPPED_MODULES.append(f"{report.nodeid}: {_reason(report.longrepr)}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _SKIPPED_MODULES:
        terminalreporter.section("CI=true: modules that skipped (each fails the run)", red=True)
        for line in _SKIPPED_MODULES:
            terminalreporter.line(line)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _SKIPPED_MODULES and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def sigint_default() -> None:
    """`preexec_fn` of a child a test interrupts with SIGINT (Ctrl-C): restores SIGINT's default
    action, which a shell leaves ignored in commands it starts in the background (`pytest &`, nohup),
    where Python would then never raise KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m simstudy ARGS` run in `cwd`, its output captured as text."""
    return subprocess.run([sys.executable, "-m", "simstudy", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def repo() -> Path:
    """The repository root."""
    return REPO


@pytest.fixture
def astra_sim_bin() -> Path:
    """The ASTRA-SIM congestion-unaware binary; skips the test with the reason when absent."""
    from simstudy.backends.locate import describe_search, find_astra_sim

    found = find_astra_sim()
    if found is None:
        pytest.skip(f"no ASTRA-SIM binary: {describe_search()}")
    return found


@pytest.fixture
def aware_bin() -> Path:
    """The ASTRA-SIM congestion-aware binary; skips the test with the reason when absent."""
    from simstudy.backends.locate import describe_search, find_astra_sim

    found = find_astra_sim(aware=True)
    if found is None:
        pytest.skip(f"no ASTRA-SIM congestion-aware binary: {describe_search(aware=True)}")
    return found


def require_ns3() -> None:
    """Skip a test that needs ns-3's Python wheel when it is not installed, with the reason; under
    CI (CI=true), where .ci/run installs it, fail instead."""
    from simstudy.backends.ns3 import available

    if available():
        return
    reason = "ns-3's Python wheel is not installed (pip install '.[ns3]')"
    if under_ci():
        pytest.fail(f"{reason}, but CI installs it")
    pytest.skip(reason)


@pytest.fixture
def ns3() -> None:
    """The packet network's ns-3 wheel (see `require_ns3`)."""
    require_ns3()
