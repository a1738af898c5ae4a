"""The frameworks `simstudy capture` can run, one entry each: what must be importable, how to
install it, which worker module runs a rank, and which endpoints carry only control traffic.

* `pytorch`: torch.distributed over gloo (`simstudy.capturing.worker`); the TCP store on rank 0's
  `capture.port` is control traffic.
* `horovod`: Horovod's PyTorch API over Gloo (`simstudy.capturing.hvd_worker`), started as
  `horovodrun --gloo` would (see its entry).
* `tensorflow`: MultiWorkerMirroredStrategy over gRPC (`simstudy.capturing.tf_worker`); every
  worker runs a gRPC server on `capture.port` (loopback: `capture.port + rank`) that carries both
  the collective's data (RecvBuf responses) and its few control calls, so none is control-only.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from simstudy.spec.capture import CaptureSpec


@dataclass(frozen=True)
class Framework:
    name: str
    module: str  # must be importable
    packages: tuple[str, ...]  # its distributions, for the version in meta.json
    install: str  # how to install it
    worker: str  # `python -m <worker> CONFIG.json` runs one rank
    control: Callable[[list[str], int], list[str]]  # (rank IPs, port) -> control-only endpoints

    def installed(self) -> bool:
        try:
            return importlib.util.find_spec(self.module) is not None
        except ModuleNotFoundError:  # a parent package (horovod of horovod.torch) is missing
            return False

    def version(self) -> str | None:
        for package in self.packages:
            try:
                return importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                continue
        return None


FRAMEWORKS: dict[str, Framework] = {
    "pytorch": Framework(
        "pytorch", "torch", ("torch",), "pip install -e '.[capture]' (on CPU-only machines: pip install torch==2.13.0)",
        "simstudy.capturing.worker", lambda ips, port: [f"{ips[0]}:{port}"]),
    "tensorflow": Framework(
        "tensorflow", "tensorflow", ("tensorflow-cpu", "tensorflow"),
        "pip install -e '.[capture-tf]' (TensorFlow's CPU build)",
        "simstudy.capturing.tf_worker", lambda ips, port: []),
    # Horovod 0.28.1 (the last release on PyPI) does not build against torch >= 2.1 as released:
    # its CMakeLists pin C++14 and torch's headers need C++17 (it builds with the two
    # CMAKE_CXX_STANDARD lines set to 17). Where horovod.torch imports, its jobs are captured;
    # Horovod's rendezvous server on rank 0's `capture.port` is control traffic.
    "horovod": Framework(
        "horovod", "horovod.torch", ("horovod",),
        "HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 pip install --no-build-isolation "
        "horovod (0.28.1 pins C++14; torch >= 2.1 needs C++17)",
        "simstudy.capturing.hvd_worker", lambda ips, port: [f"{ips[0]}:{port}"]),
}


def framework_of(spec: CaptureSpec) -> Framework:
    return FRAMEWORKS[spec.framework]


def tf_cluster(ips: list[str], port: int, loopback: bool) -> list[str]:
    """The `cluster.worker` list of TF_CONFIG: one gRPC server address per rank."""
    return [f"{ip}:{port + rank if loopback else port}" for rank, ip in enumerate(ips)]
