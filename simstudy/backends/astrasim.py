"""The `astrasim` backend: run the ASTRA-SIM analytical binary on a bundle.

It runs in its own working directory (this ASTRA-SIM commit ignores `--logging-folder` and
always logs to `./log/`, so the working directory is what keeps parallel runs apart), with a
timeout and tracing on; a run
fails unless every rank printed `sys[i] finished` (exit code 0 is not success). The traffic
table comes from ASTRA-SIM's own issue/callback trace: each collective's interval on each rank
is expanded into the transfers of its algorithm (the collective registry), spread evenly over it;
with `traffic: links` those transfers are put on the links of the bundle's topology.json.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
from pathlib import Path

from simstudy import layout
from simstudy.backends.base import BackendError, RankStats, RunResult
from simstudy.backends.locate import describe_search, find_astra_sim
from simstudy.backends.network import Network
from simstudy.backends.traffic_build import (
    TraceEvent,
    WorkloadInfo,
    build_traffic,
    busy_times,
    spans_from_trace,
    spans_table,
)
from simstudy.backends.traffic_out import TrafficOutput, make_sink
from simstudy.compiler import Bundle, BundleError
from simstudy.compiler.aggregation import astra_sim_refusal

_FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles(?:, exposed communication (\d+) cycles)?")
_STAT = re.compile(r"sys\[(\d+)\], (Wall time|Comm time|GPU time|Total compute-communication overlap): (\d+)")
_TRACE = re.compile(
    r"(issue|callback),sys->id=(\d+), tick=(\d+), node->id=(\d+), node->name=(.*?), node->type=(\d+)"
)
LOG_TAIL_LINES = 25


def parse_output(text: str) -> tuple[dict[int, tuple[int, int]], dict[int, dict[str, int]]]:
    """Per-rank (finish, exposed comm) and statistics from ASTRA-SIM's output."""
    finished: dict[int, tuple[int, int]] = {}
    for m in _FINISHED.finditer(text):
        finished[int(m.group(1))] = (int(m.group(2)), int(m.group(3) or 0))
    stats: dict[int, dict[str, int]] = {}
    for m in _STAT.finditer(text):
        stats.setdefault(int(m.group(1)), {})[m.group(2)] = int(m.group(3))
    return finished, stats


def parse_trace(text: str) -> list[TraceEvent]:
    """Issue/callback events from a log written with `trace-enabled`."""
    return [
        TraceEvent(m.group(1) == "issue", int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5))
        for m in _TRACE.finditer(text)
    ]


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no output)"
    return "\n".join(text.splitlines()[-lines:]) or "(no output)"


def _shared_hosts_refusal(bundle: Bundle) -> str | None:
    """ASTRA-SIM gives every rank a device of its own: a bundle whose ranks share their hosts' cores
    (`system.host_cores`) is refused (None: it can run; a bad system.json is the bundle check's)."""
    try:
        shared = bundle.system_config().host_cores is not None
    except BundleError:
        return None
    return ("system.host_cores (shared hosts) is simulated by flowsim only: ASTRA-SIM gives every rank a device "
            "of its own; use backend flowsim or leave host_cores out") if shared else None


def binary_version(binary: Path) -> str:
    """The ASTRA-SIM commit the binary was built from when known, else a hash of the binary."""
    for parent in binary.parents:
        head = parent / ".git"
        if head.exists():
            try:
                out = subprocess.run(
                    ["git", "-C", str(parent), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
                )
            except (OSError, subprocess.SubprocessError):
                break
            if out.returncode == 0:
                return f"{binary.name}@{out.stdout.strip()[:12]}"
            break
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:12]
    return f"{binary.name} sha256:{digest}"


class AstraSimBackend:
    """Runs ASTRA-SIM's analytical (congestion-unaware or -aware) binary."""

    name = "astrasim"

    def __init__(self, binary: str | Path | None = None, *, aware: bool = False, traffic: str = "rows",
                 traffic_bin_s: float = 1e-3) -> None:
        self.binary_option = binary
        self.aware = aware
        self.traffic = traffic
        self.traffic_bin_s = traffic_bin_s

    def binary(self) -> Path:
        found = find_astra_sim(self.binary_option, aware=self.aware)
        if found is None:
            raise BackendError(
                f"astrasim: no ASTRA-SIM binary found ({describe_search(self.binary_option, aware=self.aware)}); "
                "build the astra-sim submodule or set ASTRA_SIM_BIN / --astra-sim"
            )
        return found

    def command(self, binary: Path, bundle: Bundle, workdir: Path) -> list[str]:
        cmd = [
            str(binary),
            f"--workload-configuration={bundle.workload.resolve()}",
            f"--system-configuration={(workdir / layout.SYSTEM).resolve()}",
            f"--network-configuration={bundle.network.resolve()}",
            f"--remote-memory-configuration={self._memory(bundle, workdir).resolve()}",
            f"--logging-folder={(workdir / 'log').resolve()}",
        ]
        if bundle.comm_group is not None:
            cmd.append(f"--comm-group-configuration={bundle.comm_group.resolve()}")
        return cmd

    @staticmethod
    def _memory(bundle: Bundle, workdir: Path) -> Path:
        if bundle.remote_memory is not None:
            return bundle.remote_memory
        path = workdir / layout.REMOTE_MEMORY
        path.write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}) + "\n")
        return path

    def run(self, bundle: Bundle, workdir: Path, *, timeout_s: float | None = None) -> RunResult:
        refusal = astra_sim_refusal(bundle) or _shared_hosts_refusal(bundle)
        if refusal is not None:
            raise BackendError(f"astrasim: {refusal}")
        if (bundle.directory / layout.SHARING).is_file():
            raise BackendError(f"astrasim: {bundle.directory / layout.SHARING}: the cluster's network (sharing policy, "
                               "path selection) is modelled by flowsim's fluid mode only")
        binary = self.binary()
        bundle.check()
        npus = bundle.npus
        workdir.mkdir(parents=True, exist_ok=True)
        info = WorkloadInfo.from_bundle(bundle)
        system = dict(info.system)
        system["trace-enabled"] = 1
        (workdir / layout.SYSTEM).write_text(json.dumps(system, indent=2) + "\n")
        (workdir / "log").mkdir(exist_ok=True)
        out_path = workdir / "astra-sim.out"
        cmd = self.command(binary, bundle, workdir)
        (workdir / "command.txt").write_text(" ".join(cmd) + "\n")
        t0 = time.perf_counter()
        try:
            with out_path.open("wb") as out:
                proc = subprocess.run(cmd, cwd=workdir, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise BackendError(
                f"astrasim: timed out after {timeout_s} s on {bundle.workload}\n{_tail(out_path)}"
            ) from None
        except OSError as exc:
            raise BackendError(f"astrasim: cannot run {binary}: {exc}") from None
        wall = time.perf_counter() - t0
        text = out_path.read_text(encoding="utf-8", errors="replace")
        finished, stats = parse_output(text)
        missing = [r for r in range(npus) if r not in finished]
        if missing:
            why = f"exit code {proc.returncode}" if proc.returncode else "exit code 0"
            raise BackendError(
                f"astrasim: {len(missing)} of {npus} ranks did not finish (first: rank {missing[0]}; {why}) "
                f"on {bundle.workload}\n{_tail(out_path)}"
            )
        log_file = workdir / "log" / "log.log"
        trace = parse_trace(log_file.read_text(encoding="utf-8", errors="replace")) if log_file.is_file() else []
        spans = spans_from_trace(trace)
        busy = busy_times(info, spans)
        if self.traffic == "rows":
            output = TrafficOutput.in_memory(build_traffic(info, spans), npus)
        else:
            sink = make_sink(self.traffic, path=workdir / layout.TRAFFIC, net=Network.from_topology(info.topology),
                             bin_s=self.traffic_bin_s)
            sink.add_table(build_traffic(info, spans))
            output = sink.close()
        ranks = [
            RankStats(
                rank=r,
                finish_ns=finished[r][0],
                compute_ns=stats.get(r, {}).get("GPU time", busy[r][0]),
                comm_ns=stats.get(r, {}).get("Comm time", busy[r][1]),
                exposed_comm_ns=finished[r][1],
            )
            for r in range(npus)
        ]
        return RunResult(
            backend=self.name,
            backend_version=binary_version(binary),
            ranks=ranks,
            output=output,
            wall_time_s=wall,
            details={"binary": binary.name, "aware": self.aware, "trace_events": len(trace)},
            spans=spans_table(info, spans),
        )
