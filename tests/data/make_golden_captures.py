"""Regenerate the tiny golden captures in tests/data/captures/ and their expected features.

    python tests/data/make_golden_captures.py

Each capture is the packets of a small simulated job written as a headers-only nanosecond
pcap, plus `expected.json`, the scalar features simstudy's analysis gives. tests/traffic/test_golden.py checks that
ingesting and analysing the committed files still gives these values. Run this only when a
change is meant to move them, and say why in the commit.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from simstudy.backends import get_backend
from simstudy.compiler import compile_scenario
from simstudy.spec import Scenario
from simstudy.traffic.features import analyze
from simstudy.traffic.pcap_write import write_pcap
from simstudy.traffic.sources import load_traffic

HERE = Path(__file__).resolve().parent / "captures"
JOBS = {
    "ring4_allreduce": {"model": {"zoo": "small_cnn", "options": {"width": 8}},
                        "topology": {"kind": "ring", "npus": 4, "bandwidth_gbps": 10},
                        "system": {"peak_tflops": 0.05, "efficiency": 0.5},
                        "training": {"batch_size_per_worker": 64, "iterations": 4}},
    "switch3_ps": {"model": {"zoo": "small_cnn", "options": {"width": 8}},
                   "parallelism": {"aggregation": {"kind": "parameter_server", "servers": 1}},
                   "topology": {"kind": "switch", "npus": 3, "bandwidth_gbps": 1},
                   "system": {"peak_tflops": 0.05, "efficiency": 0.5},
                   "training": {"batch_size_per_worker": 64, "iterations": 4}},
}


def main() -> None:
    for name, spec in JOBS.items():
        out = HERE / name
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            scenario = Scenario.model_validate({"name": name, **spec})
            bundle = compile_scenario(scenario, Path(tmp) / "b").bundle
            traffic = get_backend("flowsim").run(bundle, Path(tmp) / "w").traffic
        packets = write_pcap(traffic, out / "capture.pcap")
        features = analyze(load_traffic(out).table)
        (out / "expected.json").write_text(json.dumps(features.scalars(), indent=1, sort_keys=True) + "\n")
        print(f"{name}: {packets} packets, {(out / 'capture.pcap').stat().st_size} bytes")


if __name__ == "__main__":
    main()
