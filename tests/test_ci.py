"""CI's rule: under CI=true a test that skips fails (`.ci/run` installs every part the tests use, so the
agreement with ASTRA-SIM, the captures, SLURM, ns-3 and the browser are checked on every commit), unless
it is marked `ci_may_skip` with the reason CI cannot provide what it needs; elsewhere skips are skips."""

from __future__ import annotations

import pytest

from tests.conftest import REPO

TESTS = """
import pytest

@pytest.mark.astrasim
def test_needs_astrasim():
    pytest.skip("no ASTRA-SIM binary")

@pytest.fixture
def binary():
    pytest.skip("no ASTRA-SIM binary (fixture)")

def test_needs_a_fixture_that_skips(binary):
    pass

def test_needs_a_package():
    pytest.importorskip("a_package_nobody_has")

@pytest.mark.ci_may_skip("no wheel on the registry")
def test_allowed_to_skip():
    pytest.skip("not a part CI installs")

def test_passes():
    pass
"""

MODULE_SKIP = """
import pytest

pytest.importorskip("another_package_nobody_has")

def test_never_collected():
    pass
"""


def _run(pytester: pytest.Pytester, ci: str | None, monkeypatch: pytest.MonkeyPatch,
         **files: str) -> pytest.RunResult:
    pytester.makeconftest((REPO / "tests" / "conftest.py").read_text(encoding="utf-8"))
    pytester.makeini("[pytest]\nmarkers =\n    astrasim: needs ASTRA-SIM\n")
    pytester.makepyfile(**files)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider")


def test_a_test_that_skips_fails_under_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, "true", monkeypatch, test_ci_rule=TESTS)
    result.assert_outcomes(passed=1, failed=2, errors=1, skipped=1)
    result.stdout.fnmatch_lines(["*CI=true: a test may not skip*no ASTRA-SIM binary*"])
    result.stdout.fnmatch_lines(["*CI=true: a test may not skip*a_package_nobody_has*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_module_that_skips_fails_the_run_under_ci(pytester: pytest.Pytester,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, "true", monkeypatch, test_module_skip=MODULE_SKIP, test_fine="def test_ok():\n    pass\n")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*modules that skipped*", "*test_module_skip.py*another_package_nobody_has*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.parametrize("ci", [None, "false"])
def test_it_skips_outside_ci(ci: str | None, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, ci, monkeypatch, test_ci_rule=TESTS, test_module_skip=MODULE_SKIP)
    result.assert_outcomes(passed=1, skipped=5)
    assert result.ret == pytest.ExitCode.OK
