"""The README's two quick-start commands are what a new user types, and CI runs the second one
verbatim: this test keeps the README and .ci/run from drifting apart."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start() -> list[str]:
    """The command lines of the README's quick-start block (the first sh block after '## Quick start')."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "README.md: no ```sh block under '## Quick start'"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_installs_then_runs_the_main_study_and_the_tests() -> None:
    first, second = quick_start()
    assert first.startswith("pip install -e . && simstudy sweep specs/")
    assert (ROOT / first.rsplit(" ", 1)[1]).is_file()
    # the test command installs what the tests import (a fresh venv has no pytest) before running them
    assert second == "pip install -e '.[dev]' && python -m pytest"


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    _, second = quick_start()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [line.strip() for line in ci if line.strip() and not line.strip().startswith("#")]
    assert second in commands, f".ci/run does not run the README's test command {second!r}"
    pytest_lines = [c for c in commands if "pytest" in c and not c.startswith(("echo", "#"))]
    assert pytest_lines == [second], f".ci/run runs pytest otherwise too: {pytest_lines}"


def test_dev_extra_has_what_the_tests_import() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    dev = pyproject.split("dev = [", 1)[1].split("]", 1)[0]
    for package in ("pytest", "hypothesis", "ruff", "mypy", "dask"):
        assert f'"{package}' in dev, f"the dev extra lacks {package}"
