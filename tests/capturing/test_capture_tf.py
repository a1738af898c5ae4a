"""A real capture of a real TensorFlow job (marker `capture`): MultiWorkerMirroredStrategy over
gRPC, 2 workers in network namespaces, the zoo's small CNN in Keras, 3 recorded iterations.

Analytical payload bytes per iteration, P = the model's parameters, 4 bytes each (fp32): MWMS
all-reduces the gradients with TensorFlow's RingReduce (AUTO on CPU), in one pack (the default
bytes_per_pack = 0); a ring of N workers makes every worker send 2 (N - 1) / N * 4P, which for
N = 2 is 4P per worker. Each ring step is one RecvBuf RPC whose response carries the chunk: the
gRPC, HTTP/2 and protobuf framing and the requests add well under 0.5%.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from simstudy.spec.capture import CaptureSpec
from simstudy.zoo import registry

pytestmark = pytest.mark.capture

pytest.importorskip("tensorflow", reason="tensorflow is not installed (pip install -e '.[capture-tf]')")

if os.geteuid() != 0 or shutil.which("tcpdump") is None or shutil.which("ethtool") is None:
    pytest.skip("captures need root, tcpdump and ethtool", allow_module_level=True)

from simstudy.capturing.run import capture  # noqa: E402
from simstudy.traffic.sources import load_traffic  # noqa: E402

P = registry.build("small_cnn").params
GRAD = 4 * P


def test_tensorflow_mwms_capture_bytes(tmp_path: Path) -> None:
    spec = CaptureSpec.model_validate({
        "name": "tf2", "framework": "tensorflow", "model": "small_cnn", "parallelism": {"dp": 2},
        "training": {"batch_size_per_worker": 8},
        "capture": {"iterations": 3, "warmup": 1, "calibration": 1, "link": {"rate_mbit": 500}},
    })
    out = tmp_path / "tf"
    result = capture(spec, out)
    meta = result.meta
    assert meta.framework == "tensorflow" and meta.framework_version
    assert sorted(meta.ranks) == [0, 1]
    assert meta.control == []  # the gRPC servers carry the data too
    assert all(len(spans) == 3 for spans in meta.iterations.values())
    assert all(s["packets dropped by kernel"] == 0 for s in meta.tcpdump.values())
    assert meta.scenario is not None and meta.scenario["system"]["measured"]["forward_us"] > 0
    src = load_traffic(out)
    t = src.table[(src.table["op"] != "control") & (src.table["payload_bytes"] > 0)]
    assert t["iteration"].nunique() == 3
    sums = t.groupby(["src", "dst"], observed=True)["payload_bytes"].sum() / 3
    per = {(int(a), int(b)): float(v) for (a, b), v in sums.items() if v > 0.01 * GRAD}
    assert set(per) == {(0, 1), (1, 0)}
    for pair, got in per.items():
        # ring all-reduce, N = 2: 2 (N - 1) / N * 4P = 4P per worker, gRPC framing < 0.5%
        assert GRAD <= got <= GRAD * 1.005, (pair, got, GRAD)
