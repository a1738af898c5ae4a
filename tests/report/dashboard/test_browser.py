"""The dashboard in a real browser: headless Chromium driven by Selenium (Debian's chromium and
chromium-driver; skipped with the reason where absent). Asserts on the rendered DOM and on the
data Plotly holds, not on the HTML text."""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.report.dashboard.conftest import REPO

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install '.[dev]')")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = pytest.mark.skipif(CHROMEDRIVER is None or CHROMIUM is None,
                                reason="no chromium/chromedriver (apt-get install chromium chromium-driver)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000"):
        opts.add_argument(a)
    opts.binary_location = str(CHROMIUM)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    yield drv
    drv.quit()


def _page(dirs: dict[str, Path], kind: str) -> Path:
    out = dirs["root"] / f"{kind}.html"
    if not out.exists():
        proc = run_cli("dashboard", str(dirs[kind]), "-o", str(out), cwd=dirs["root"])
        assert proc.returncode == 0, proc.stderr
    return out


def _open(browser: Any, page: Path) -> None:
    browser.get_log("browser")  # drop what an earlier page logged
    browser.get(page.as_uri())
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def _plots(browser: Any) -> dict[str, int]:
    """Rendered plots: div id -> number of drawn traces (SVG or WebGL layers Plotly made)."""
    return dict(browser.execute_script(
        "const o={};document.querySelectorAll('.js-plotly-plot').forEach(el=>{"
        "o[el.id]=el.querySelectorAll('.main-svg .trace, .main-svg .hm, .main-svg .bars .point').length;});"
        "return o;"))


def _not_blank(browser: Any) -> None:
    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("L"), dtype=np.float64)
    assert img.std() > 10, "the screenshot is blank"


def test_run_page_renders_and_rebins_on_zoom(browser: Any, dirs: dict[str, Path]) -> None:
    _open(browser, _page(dirs, "run"))
    plots = _plots(browser)
    assert set(plots) >= {"throughput", "matrix", "gantt"} and all(n > 0 for n in plots.values()), plots
    coarse = browser.execute_script("const el=document.getElementById('throughput');"
                                    "return [+el.dataset.binMs, el.data[0].x.length];")
    browser.execute_script("const el=document.getElementById('throughput');const x=el.data[0].x;"
                           "Plotly.relayout(el,{'xaxis.range':[x[0], x[0]+60]});")
    fine = browser.execute_script("const el=document.getElementById('throughput');"
                                  "return [+el.dataset.binMs, el.data[0].x.length, el.data[0].x[1]-el.data[0].x[0]];")
    assert fine[0] == 1.0 < coarse[0], (coarse, fine)  # 60 ms shown in 1 ms bins, re-binned, not stretched
    assert fine[2] == pytest.approx(1.0)
    _not_blank(browser)


def test_study_page_selector_changes_the_plotted_data(browser: Any, dirs: dict[str, Path]) -> None:
    _open(browser, _page(dirs, "study"))
    assert _plots(browser)["comparison"] > 0
    failed = browser.execute_script("return document.querySelectorAll('#results tr.failed').length")
    assert failed == 3
    before = browser.execute_script("return document.getElementById('comparison').data[0].x.length")
    browser.execute_script("const s=document.querySelector('select.axis[data-axis=\"topology.bandwidth_gbps\"]');"
                           "s.value=s.options[1].value;s.dispatchEvent(new Event('change'));")
    after = browser.execute_script("return document.getElementById('comparison').data[0].x")
    assert before == 3 and len(after) == 1, (before, after)
    rows = browser.execute_script("return [...document.querySelectorAll('#results tbody tr')]"
                                  ".filter(r=>r.style.display!=='none').length")
    assert rows == 2  # one finished and one failed point at that bandwidth
    tl = browser.execute_script("const t=document.getElementById('timeline').data[0];return [t.y.length, t.name];")
    assert tl[0] > 0 and "topology.bandwidth_gbps=1" in tl[1] and "parallelism.tp=1" in tl[1], tl
    browser.execute_script("document.querySelectorAll('#results th')[2].click()")  # sort: the page stays alive
    assert "Findings" in browser.page_source
    _not_blank(browser)


@pytest.mark.parametrize("kind", ["capture", "validation"])
def test_trace_pages_overlay_iterations(browser: Any, dirs: dict[str, Path], kind: str) -> None:
    _open(browser, _page(dirs, kind))
    plots = _plots(browser)
    assert plots.get("throughput", 0) > 0 and plots.get("per_iteration", 0) > 0, plots
    names = browser.execute_script("return document.getElementById('per_iteration').data.map(t=>t.name)")
    want = {"real (mean over iterations)"} | ({"simulated (mean over iterations)"} if kind == "validation" else set())
    assert want <= set(names)
    if kind == "validation":
        marks = browser.execute_script("return [...document.querySelectorAll('#metrics tbody tr')]"
                                       ".map(r=>r.dataset.status)")
        assert marks and set(marks) <= {"pass", "fail"}
    _not_blank(browser)


def test_switch_counters_page(browser: Any, dirs: dict[str, Path]) -> None:
    """The Zhejiang Lab excerpt (tests/data/zhejiang): tiers and hottest ports over time, and every
    port's utilisation and period in the table."""
    dirs = {**dirs, "counters": REPO / "tests" / "data" / "zhejiang"}
    _open(browser, _page(dirs, "counters"))
    plots = _plots(browser)
    assert plots.get("throughput", 0) >= 2, plots
    names = browser.execute_script("return document.getElementById('throughput').data.map(t=>t.name)")
    assert {"tier nic", "tier spine"} <= set(names)
    rows = browser.execute_script("return [...document.querySelectorAll('#ports tbody tr')]"
                                  ".map(r=>r.cells[0].innerText)")
    assert len(rows) == 6 and any("TwoHundredGigE1/0/15:1" in r for r in rows)
    _not_blank(browser)
