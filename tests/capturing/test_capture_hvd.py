"""A real capture of a real Horovod job (marker `capture`): Horovod's PyTorch API over Gloo, 2
workers in network namespaces, the zoo's small CNN, 3 recorded iterations. Skipped where
horovod.torch does not import: Horovod 0.28.1, the last release, does not build against
torch >= 2.1 as released (see simstudy.capturing.frameworks); with its CMAKE_CXX_STANDARD set to
17 it builds, and this test runs under that Python.

Analytical payload bytes per iteration, P = the model's parameters, 4 bytes each (fp32): Horovod
all-reduces every gradient once (in fused buffers) with Gloo's ring, so each of N workers sends
2 (N - 1) / N * 4P, which for N = 2 is 4P; Horovod's per-cycle coordination adds small packets
(under 1% of it at load average 7: it grows with an iteration's wall time).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from simstudy.spec.capture import CaptureSpec
from simstudy.zoo import registry

pytestmark = pytest.mark.capture


def _horovod() -> bool:
    try:
        return importlib.util.find_spec("horovod.torch") is not None
    except ModuleNotFoundError:
        return False


if not _horovod():
    pytest.skip("horovod.torch does not import here (Horovod 0.28.1 needs C++17 to build against torch >= 2.1)",
                allow_module_level=True)
if os.geteuid() != 0 or shutil.which("tcpdump") is None or shutil.which("ethtool") is None:
    pytest.skip("captures need root, tcpdump and ethtool", allow_module_level=True)

from simstudy.capturing.run import capture  # noqa: E402
from simstudy.traffic.sources import load_traffic  # noqa: E402

GRAD = 4 * registry.build("small_cnn").params


def test_horovod_capture_bytes(tmp_path: Path) -> None:
    spec = CaptureSpec.model_validate({
        "name": "hvd2", "framework": "horovod", "model": "small_cnn", "parallelism": {"dp": 2},
        "training": {"batch_size_per_worker": 8},
        "capture": {"iterations": 3, "warmup": 1, "calibration": 1, "link": {"rate_mbit": 500}},
    })
    meta = capture(spec, tmp_path / "hvd").meta
    assert meta.framework == "horovod" and meta.framework_version
    assert meta.scenario is not None and meta.scenario["parallelism"]["framework"]["name"] == "horovod"
    assert sum(meta.buckets or []) == GRAD  # the preset's fused buffers hold every gradient byte once
    src = load_traffic(tmp_path / "hvd")
    t = src.table[(src.table["op"] != "control") & (src.table["payload_bytes"] > 0)]
    assert t["iteration"].nunique() == 3
    # Horovod's background thread coordinates every cycle (a few ms) in packets of tens of bytes, so
    # their bytes grow with an iteration's wall time (1% of the gradient at load average 7); the
    # gradient's segments fill packets. Split at 512 bytes: what is left of the gradient below it is
    # the tail of a fused buffer (a few hundred bytes an iteration).
    small = t[t["payload_bytes"] < 512]
    sums = (t.groupby(["src", "dst"], observed=True)["payload_bytes"].sum() / 3).to_dict()
    coord = (small.groupby(["src", "dst"], observed=True)["payload_bytes"].sum() / 3).to_dict()
    per = {(int(a), int(b)): float(v) for (a, b), v in sums.items() if v > 0.01 * GRAD}
    assert set(per) == {(0, 1), (1, 0)}
    for pair, got in per.items():
        # ring all-reduce, N = 2: 2 (N - 1) / N * 4P = 4P per worker, plus Horovod's coordination
        data = got - float(coord.get(pair, 0.0))
        assert abs(data - GRAD) <= 0.001 * GRAD, (pair, got, data, GRAD)
        assert 0 < got - data < 0.05 * GRAD, (pair, got, data, GRAD)
