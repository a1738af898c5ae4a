"""flowsim's speed against ASTRA-SIM on the same bundle: ResNet-50 data parallel at 8, 64, 256 NPUs.

Each backend runs in its own child process (so peak memory is its own); prints flowsim wall time
over ASTRA-SIM wall time, the transfers flowsim simulated and wrote per second, and peak memory.
Wall times are the backends' own (`RunResult.wall_time_s`: flowsim includes reading the ET files
and building the traffic table; ASTRA-SIM is the binary's run, plus parsing its trace).

Usage: ASTRA_SIM_BIN=... python benchmarks/speed.py [NPUS ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from simstudy.backends.locate import find_astra_sim
from simstudy.compile import compile_scenario
from simstudy.spec import Scenario

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from simstudy.backends import get_backend
from simstudy.compile import Bundle
backend = get_backend(sys.argv[1])
r = backend.run(Bundle.from_dir(sys.argv[2]), Path(sys.argv[3]), timeout_s=7200)
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"wall": r.wall_time_s, "finish": r.finish_ns, "rows": len(r.traffic),
                  "rss_mb": own / 1024, "child_rss_mb": kids / 1024}))
"""


def run(backend: str, bundle: Path, work: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, backend, str(bundle), str(work)],
                         capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(sizes: list[int]) -> None:
    if find_astra_sim() is None:
        sys.exit("no ASTRA-SIM binary: set ASTRA_SIM_BIN")
    print(f"{'NPUs':>5} {'flowsim s':>10} {'astra-sim s':>12} {'flowsim/astra':>14} {'transfers':>11} "
          f"{'transfers/s':>12} {'flowsim MB':>11} {'astra MB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            spec = {"name": f"r50_dp{n}", "model": "resnet50", "parallelism": {"dp": n},
                    "topology": {"kind": "ring", "npus": n}, "training": {"iterations": 2}}
            bundle = compile_scenario(Scenario.model_validate(spec), Path(tmp) / f"b{n}").bundle.directory
            f = run("flowsim", bundle, Path(tmp) / f"f{n}")
            a = run("astrasim", bundle, Path(tmp) / f"a{n}")
            assert f["finish"] == a["finish"], (f["finish"], a["finish"])
            print(f"{n:>5} {f['wall']:>10.3f} {a['wall']:>12.3f} {f['wall'] / a['wall']:>14.3f} {int(f['rows']):>11,} "
                  f"{f['rows'] / f['wall']:>12,.0f} {f['rss_mb']:>11.0f} {a['child_rss_mb']:>9.0f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [8, 64, 256])
