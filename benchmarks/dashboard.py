"""The dashboard of a large run stays usable: page size and time to open in a browser.

Runs ResNet-50 data parallel (2 iterations, ring, flowsim, traffic rows) at 8 NPUs (the
reference) and at 1024 NPUs (20,951,040 transfers), builds each run's dashboard and opens it in
headless Chromium (Selenium), timing until every plot is drawn. Prints sizes, build and load
times and the 1024-NPU page's ratios to the reference. Targets: page under 20 MB, load under 5 s.

Usage: python benchmarks/dashboard.py [--npus 1024]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

DRAWN = ("return [...document.querySelectorAll('.js-plotly-plot')].length >= arguments[0] && "
         "[...document.querySelectorAll('.js-plotly-plot')].every(e => e.querySelector('.main-svg'))")


def make_run(root: Path, npus: int) -> Path:
    spec = {"name": f"r50_{npus}", "model": "resnet50", "parallelism": {"dp": npus},
            "topology": {"kind": "ring", "npus": npus, "bandwidth_gbps": 100, "latency_ns": 500},
            "training": {"iterations": 2}}
    (root / f"{npus}.yaml").write_text(yaml.safe_dump(spec))
    out = root / f"run{npus}"
    subprocess.run([sys.executable, "-m", "simstudy", "run", str(root / f"{npus}.yaml"), "-o", str(out), "--quiet"],
                   check=True, capture_output=True)
    return out


def build(run: Path) -> tuple[Path, float]:
    t0 = time.perf_counter()
    page = run / "dashboard.html"
    subprocess.run([sys.executable, "-m", "simstudy", "dashboard", str(run), "-o", str(page)], check=True,
                   capture_output=True)
    return page, time.perf_counter() - t0


def load_time(page: Path, plots: int, repeat: int = 3) -> float:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)
    try:
        best = float("inf")
        for _ in range(repeat):
            drv.get("about:blank")
            t0 = time.perf_counter()
            drv.get(page.as_uri())
            WebDriverWait(drv, 60).until(lambda d: d.execute_script(DRAWN, plots))
            best = min(best, time.perf_counter() - t0)
        return best
    finally:
        drv.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--npus", type=int, default=1024)
    args = parser.parse_args()
    if not shutil.which("chromedriver"):
        sys.exit("no chromedriver: apt-get install chromium chromium-driver")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = []
        for n in (8, args.npus):
            run = make_run(root, n)
            page, build_s = build(run)
            rows.append((n, page.stat().st_size / 1e6, build_s, load_time(page, 3)))
        print(f"{'NPUs':>5} {'page MB':>8} {'build s':>8} {'load s':>7}")
        for n, mb, b, lo in rows:
            print(f"{n:>5} {mb:>8.2f} {b:>8.2f} {lo:>7.2f}")
        (_, mb0, _, l0), (n, mb, _, lo) = rows
        print(f"{n} NPUs / 8 NPUs: page size {mb / mb0:.2f}x, load time {lo / l0:.2f}x; "
              f"targets: {mb:.2f} MB {'<' if mb < 20 else '>='} 20 MB, {lo:.2f} s {'<' if lo < 5 else '>='} 5 s")


if __name__ == "__main__":
    main()
