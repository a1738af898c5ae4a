"""CI's rule: under CI=true a test that needs a part `.ci/run` installs (marker `astrasim`) fails
when it skips, so the agreement with ASTRA-SIM is checked on every commit; elsewhere it skips."""

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

@pytest.mark.astrasim
def test_needs_astrasim_fixture(binary):
    pass

def test_other():
    pytest.skip("not a part CI installs")
"""


def _run(pytester: pytest.Pytester, ci: str | None, monkeypatch: pytest.MonkeyPatch) -> pytest.RunResult:
    pytester.makeconftest((REPO / "tests" / "conftest.py").read_text(encoding="utf-8"))
    pytester.makeini("[pytest]\nmarkers =\n    astrasim: needs ASTRA-SIM\n")
    pytester.makepyfile(test_ci_rule=TESTS)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider")


def test_an_astrasim_test_that_skips_fails_under_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, "true", monkeypatch)
    result.assert_outcomes(failed=1, errors=1, skipped=1)
    result.stdout.fnmatch_lines(["*CI=true: a test marked `astrasim` may not skip*no ASTRA-SIM binary*"])


@pytest.mark.parametrize("ci", [None, "false"])
def test_it_skips_outside_ci(ci: str | None, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(pytester, ci, monkeypatch).assert_outcomes(skipped=3)
