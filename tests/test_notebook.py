"""docs/tutorial.ipynb runs from top to bottom in a real Jupyter kernel, so it cannot rot."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from tests.conftest import under_ci

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "tutorial.ipynb"


def _missing() -> str | None:
    """Why the notebook cannot run here (None when it can)."""
    for module in ("nbclient", "nbformat", "ipykernel"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[dev]')"
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        return "no python3 Jupyter kernel (python -m ipykernel install --user)"
    return None


def test_the_notebook_is_committed_without_outputs() -> None:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)


def test_the_tutorial_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reason = _missing()
    if reason is not None:
        if under_ci():
            pytest.fail(f"CI=true: .ci/run installs what the notebook needs, but {reason}")
        pytest.skip(reason)
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("SIMSTUDY_TUTORIAL_OUT", str(tmp_path))  # the kernel inherits the environment
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                     if o.get("output_type") == "stream")
    assert re.search(r"^\(15, \d+\)$", text, re.M)  # the sweep's summary: 15 scenarios
    assert "PASS" in text and "FAIL" in text  # the capture validated, and the slower ring rejected
    assert "topolgy" in text  # the misspelled field named by InputError
    assert (tmp_path / "cnn_vs_rnn" / "dashboard.html").stat().st_size > 100_000
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2  # the exposed-communication bars and the two families' traffic
