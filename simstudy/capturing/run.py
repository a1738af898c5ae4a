"""`simstudy capture`: run a real torch.distributed training job on a testbed and record its packets.

The capture is written into a temporary directory beside `out` and renamed when complete, so a
failed or interrupted capture never replaces an earlier one. `out` then holds one egress pcap per
rank (`rank<N>.pcap`; with every rank on one host, loopback or one namespace, a single `lo.pcap`),
`meta.json` (see `simstudy.traffic.sources`), `logs/` (each rank's output and result) and, with
`capture.also_any`, `any/`: the same packets recorded at the same time by `tcpdump -i any`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from simstudy import layout
from simstudy.capturing.frameworks import framework_of, tf_cluster
from simstudy.capturing.testbed import CaptureError, Host, Testbed, is_root, require_tools
from simstudy.compiler.atomic import recover_directory, replace_directory, temp_name
from simstudy.compiler.costs import DDP_DEFAULT_BUCKET_BYTES, ddp_buckets, layer_costs
from simstudy.compiler.frameworks import messages
from simstudy.compiler.parameter_server import pieces
from simstudy.compiler.resolve import resolve
from simstudy.spec import ParameterServer, Scenario
from simstudy.spec.capture import CaptureSpec
from simstudy.spec.load import SpecError
from simstudy.sweeps.executors import usable_cores
from simstudy.traffic.meta import CaptureMeta, write_meta
from simstudy.version import __version__

#: IPv4 (20) + TCP with timestamps (32) header bytes of every segment; Ethernet adds 14 on the wire.
IP_TCP_HEADER = 52
ETHERNET_HEADER = 14
PROBE_PORT = 29499


@dataclass(frozen=True)
class CaptureResult:
    out: Path
    meta: CaptureMeta
    wall_s: float


def _say(progress: Callable[[str], None] | None, text: str) -> None:
    if progress is not None:
        progress(text)


def _check_environment(spec: CaptureSpec, source: str | Path | None) -> None:
    fw = framework_of(spec)
    if not fw.installed():
        raise SpecError(source, "framework", f"{spec.framework} needs {fw.module}, which is not installed here: "
                                             f"{fw.install}")
    require_tools(["tcpdump"])
    if not is_root():
        raise CaptureError("capturing packets needs root (tcpdump): run with sudo")


def ps_plan(scenario: Scenario) -> dict[str, Any]:
    """The buckets and server pieces of the compiled parameter-server graph, in elements."""
    p = scenario.parallelism
    agg = p.aggregation
    assert isinstance(agg, ParameterServer)
    model = scenario.resolved_model
    costs = layer_costs(scenario, model)
    buckets = ddp_buckets(costs, p.bucket_size_bytes)
    dtype = scenario.training.dtype_bytes
    hosts = agg.server_hosts(p.dp)
    out_pieces = [{"bucket": pc.bucket, "server": pc.server, "lo": pc.offset_bytes // dtype,
                   "hi": (pc.offset_bytes + pc.size_bytes) // dtype, "host": hosts[pc.server]}
                  for pc in pieces(costs, buckets, agg.servers)]
    return {
        "servers": agg.servers,
        "mode": agg.mode,
        "overlap": p.overlap,
        "pull_with_push": not agg.rendezvous,
        "workers": list(range(p.dp)),
        "server_of": {str(host): s for s, host in enumerate(hosts)},
        "buckets": [{"index": b.index, "layers": [costs[i].name for i in b.layers]} for b in buckets],
        "pieces": out_pieces,
    }


#: an aggregation kind's capture strategy (`AggregationKind.capture_strategy`) -> the plan its
#: workers get in their config (`ps`), None for none
WORKER_PLANS: dict[str, Callable[[Scenario], dict[str, Any] | None]] = {
    "ddp": lambda scenario: None,
    "ps": ps_plan,
}


def _start_tcpdump(host: Host, path: Path, spec: CaptureSpec, one_host: bool, *,
                   interface: str | None = None) -> subprocess.Popen[bytes]:
    """tcpdump on the host's interface (one host: its loopback), or on `interface` ("any")."""
    c = spec.capture
    ifname = interface or ("lo" if one_host else host.ifname)
    argv = ["tcpdump", "-i", ifname, "-n", "-s", str(c.snaplen), "-B", str(c.buffer_kib),
            "--time-stamp-precision=nano", "-w", str(path)]
    if not one_host:
        argv[3:3] = ["-Q", "out"]
    argv.append("tcp")
    proc = subprocess.Popen(host.wrap(argv), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            start_new_session=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 15
    line = b""
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if b"listening on" in line or not line:
            break
    if proc.poll() is not None or b"listening on" not in line:
        rest = proc.stderr.read().decode(errors="replace") if proc.poll() is not None else ""
        proc.kill()
        raise CaptureError(f"tcpdump on {ifname} did not start: {(line.decode(errors='replace') + rest).strip()}")
    return proc


def _settle(files: list[Path], quiet_s: float = 1.5, limit_s: float = 20.0) -> None:
    """Wait until no capture file has grown for `quiet_s`: tcpdump reads the kernel's ring buffer in
    blocks (every second at the latest), and packets still in the ring when it stops are lost."""
    deadline = time.monotonic() + limit_s
    sizes = [f.stat().st_size if f.exists() else 0 for f in files]
    still = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = [f.stat().st_size if f.exists() else 0 for f in files]
        if now != sizes:
            sizes, still = now, time.monotonic()
        elif time.monotonic() - still >= quiet_s:
            return


def _stop_tcpdump(proc: subprocess.Popen[bytes]) -> dict[str, int]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    stats: dict[str, int] = {}
    for line in err.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit():
            stats[" ".join(parts[1:])] = int(parts[0])
    return stats


def _bucket_cap_mb(spec: CaptureSpec) -> float | None:
    """DDP's bucket_cap_mb: None (DDP's default, with its 1 MiB first bucket) for the default
    size, so that the job buckets its gradients as the compiler does (`ddp_buckets`)."""
    p = spec.parallelism
    return None if p.bucket_size_bytes == DDP_DEFAULT_BUCKET_BYTES else p.bucket_size_mib


def _preset_options(spec: CaptureSpec) -> dict[str, dict[str, Any]]:
    """The preset's knobs for the workers, under its captured framework's key ("tensorflow":
    CommunicationOptions, "horovod": Horovod's environment knobs)."""
    preset = spec.parallelism.framework
    options = preset.worker_options(spec.capture.port)
    return {preset.captured_by: options} if options and preset.captured_by else {}


def _start_rendezvous(host: Host, ranks: int, port: int, work: Path) -> subprocess.Popen[bytes]:
    """Horovod's Gloo rendezvous server in rank 0's namespace (horovodrun's job), on `port`."""
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    err: IO[bytes] = (work / "rendezvous.log").open("wb")
    cmd = [sys.executable, "-m", "simstudy.capturing.hvd_rendezvous", str(ranks), str(port)]
    proc = subprocess.Popen(host.wrap(cmd),
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                            start_new_session=True)
    err.close()
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if b"ready" not in line:
        proc.kill()
        raise CaptureError(f"Horovod's rendezvous server did not start: "
                           f"{(work / 'rendezvous.log').read_text(errors='replace').strip()[-500:]}")
    return proc


def _probe(bed: Testbed, seconds: float, work: Path) -> dict[str, float]:
    """RTT and goodput between the first two hosts (one bulk TCP stream)."""
    a, b = bed.hosts[0], bed.hosts[1]
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    log: IO[bytes] = (work / "probe.log").open("wb")
    srv = subprocess.Popen(b.wrap([sys.executable, "-m", "simstudy.capturing.probe", "serve", b.ip, str(PROBE_PORT)]),
                           env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        done = subprocess.run(a.wrap([sys.executable, "-m", "simstudy.capturing.probe", "measure", b.ip,
                                      str(PROBE_PORT), str(seconds)]),
                              env=env, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise CaptureError(f"link probe failed: {done.stderr.strip()[-500:]}")
        result: dict[str, float] = json.loads(done.stdout)
        return result
    finally:
        srv.kill()
        srv.wait()
        log.close()


def _pythonpath() -> str:
    root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def measured_compute(results: list[dict[str, Any]], servers: list[dict[str, Any]], *,
                     synchronous: bool = True) -> dict[str, Any]:
    """`system.measured` from the workers' calibration passes (run in lock-step).

    Synchronous jobs (DDP, sync parameter servers) go at the pace of their slowest worker: of
    every pass, the worker whose forward + backward took longest gives the times, averaged over
    the passes. Asynchronous ones: the mean over workers."""
    cal = [r["calibration"] for r in results if "calibration" in r]
    counts = {len(c.get("passes", ())) for c in cal}
    if synchronous and len(counts) == 1 and 0 not in counts:
        picks = [max((c["passes"][i] for c in cal), key=lambda p: p["forward_us"] + p["backward_us"])
                 for i in range(counts.pop())]
    else:
        picks = cal
    layers = {name: {"forward_us": _mean([c["layers"][name]["forward_us"] for c in picks]),
                     "backward_us": _mean([c["layers"][name]["backward_us"] for c in picks])}
              for name in cal[0]["layers"]}
    if servers:
        opt = _mean([s["server"]["update_us_mean"] for s in servers])
    else:
        opt = _mean([c["optimizer_us"] for c in picks])
    return {"forward_us": _mean([c["forward_us"] for c in picks]),
            "backward_us": _mean([c["backward_us"] for c in picks]),
            "optimizer_us": opt, "layers": layers}


def loaded_compute(measured: dict[str, Any], results: list[dict[str, Any]], *,
                   slowest: bool = False) -> dict[str, Any]:
    """`measured` with its per-layer forward and backward times scaled to the training steps' own:
    the median over steps of the workers' mean, or with `slowest` of the slowest worker's (by
    forward + backward) of each step.

    Where every rank is on one host, their communication (gloo's copies and reductions, the
    kernel moving loopback bytes) runs on the cores that compute, which calibration passes
    without communication do not see: a 4-worker DDP job's backward took 63 ms per training step
    against 43 ms in calibration. The simulated network does not take compute from the ranks,
    so the compute it is given is what the ranks had left. The workers of a DDP job end their
    backward together (its all-reduce runs inside it, the slower ones having waited less): the
    mean. Those of a synchronous parameter server do not wait for each other until their pull
    (`slowest`): on 2 cores shared by 4 workers and a server their pushes of one step came 13 ms
    apart, and the step goes at the pace of the last one, as in calibration
    (`measured_compute`)."""
    steps = [r.get("steps", []) for r in results]
    n = min((len(s) for s in steps), default=0)
    if n == 0 or not measured.get("layers"):
        return measured
    out = dict(measured)
    layers = {k: dict(v) for k, v in measured["layers"].items()}
    if slowest:
        picks = [max((s[i] for s in steps), key=lambda x: x["forward_us"] + x["backward_us"]) for i in range(n)]
    for key in ("forward_us", "backward_us"):
        if slowest:
            per_step = sorted(p[key] for p in picks)
        else:
            per_step = sorted(sum(s[i][key] for s in steps) / len(steps) for i in range(n))
        target = per_step[n // 2] if n % 2 else (per_step[n // 2 - 1] + per_step[n // 2]) / 2
        scale = target / measured[key] if measured[key] > 0 else 1.0
        for v in layers.values():
            v[key] *= scale
        out[key] = target
    out["layers"] = layers
    return out


#: Data packets of one direction of a connection closer than this are one burst (`loaded_goodput`).
BURST_GAP_S = 1e-3


def loaded_goodput(pcap: Path, spans: list[tuple[float, float]], control: list[str]) -> float | None:
    """Payload bits per second the training connections moved while they had data in flight,
    during the recorded iterations: every direction's data packets cut into bursts at gaps of
    `BURST_GAP_S`, and the payload of all bursts (but their first packets) over their summed
    lengths. None with too few bursts.

    Where every rank is on one host, loopback bytes are moved by the cores that also compute, so
    an idle probe overstates the goodput the job had (18 Gbit/s against 1-3 Gbit/s while 4 ranks
    trained on 2 busy cores); this is the rate the job's own transfers got."""
    import numpy as np

    from simstudy.traffic.pcap import read_pcap

    try:
        p = read_pcap(pcap).packets
    except (OSError, ValueError):
        return None
    if not spans or len(p) == 0:
        return None
    t = p["time"].to_numpy()
    keep = (p["payload_bytes"].to_numpy() > 0) & (t >= min(a for a, _ in spans)) & (t <= max(b for _, b in spans))
    ends = {f"{ip}:{port}" for ip, port in (e.rsplit(":", 1) for e in control)}
    src = (p["src_ip"].astype(str) + ":" + p["sport"].astype(str)).to_numpy()
    dst = (p["dst_ip"].astype(str) + ":" + p["dport"].astype(str)).to_numpy()
    keep &= ~np.isin(src, list(ends)) & ~np.isin(dst, list(ends))
    frame = p[keep].assign(flow=np.char.add(np.char.add(src[keep].astype(str), ">"), dst[keep].astype(str)))
    moved = busy = 0.0
    for _, f in frame.groupby("flow", sort=False):
        tt = f["time"].to_numpy()
        b = f["payload_bytes"].to_numpy(np.float64)
        cut = np.flatnonzero(np.diff(tt) > BURST_GAP_S) + 1
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(tt)], strict=True):
            if hi - lo >= 4:
                moved += float(b[lo + 1:hi].sum())
                busy += float(tt[hi - 1] - tt[lo])
    return 8 * moved / busy if busy > 0 and moved > 0 else None


def capture(spec: CaptureSpec, out: str | Path, *, force: bool = False, source: str | Path | None = None,
            progress: Callable[[str], None] | None = None) -> CaptureResult:
    """Run the job of `spec`, record it into `out`; CaptureError when the machine cannot."""
    t_start = time.monotonic()
    out = Path(out)
    c = spec.capture
    where = c.where or ("namespaces" if is_root() else "loopback")
    _check_environment(spec, source)
    recover_directory(out)  # a capture replaced by a killed `--force` run goes back in place
    if out.exists() and any(out.iterdir()) and not force:
        raise CaptureError(f"{out}: already holds a capture; give another -o or --force to replace it")
    scenario = resolve(Scenario.model_validate(spec.scenario_dict(bandwidth_gbps=1.0, latency_ns=0.0)),
                       source=source)
    tmp = out.parent / temp_name(out.name)
    shutil.rmtree(tmp, ignore_errors=True)
    work = tmp / "logs"
    work.mkdir(parents=True)
    procs: list[subprocess.Popen[bytes]] = []
    helpers: list[subprocess.Popen[bytes]] = []  # e.g. Horovod's rendezvous server
    dumps: list[tuple[Host, subprocess.Popen[bytes]]] = []
    anys: list[tuple[Host, subprocess.Popen[bytes]]] = []  # tcpdump -i any beside them (capture.also_any)
    logs: list[IO[bytes]] = []
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with Testbed(spec.ranks, where, c.link, c.mtu, c.offloads, hostnames=spec.framework == "horovod") as bed:
            _say(progress, f"testbed: {spec.ranks} ranks on {where}")
            probe = _probe(bed, 0.5, work) if spec.ranks >= 2 else {"rtt_s": 0.0, "goodput_bps": 0.0}
            _say(progress, f"link: rtt {probe['rtt_s'] * 1e6:.0f} us, goodput {probe['goodput_bps'] / 1e6:.0f} Mbit/s")
            one_host = bed.one_host
            files = _start_dumps(bed, spec, tmp, dumps, anys)
            _start_workers(bed, spec, scenario, work, procs, helpers, logs)
            how = f"{scenario.parallelism.aggregation.noun} ({spec.parallelism.framework.name} preset)"
            _say(progress, f"training: {spec.framework}, {how}, {c.iterations} recorded iterations")
            _wait(procs, work, c.timeout_s)
            _say(progress, "collecting the packets")
            _settle(files)
            stats = {f"rank{h.rank}" if not one_host else "lo": _stop_tcpdump(p) for h, p in dumps}
            stats |= {f"any/rank{h.rank}" if not one_host else "any/lo": _stop_tcpdump(p) for h, p in anys}
            dumps.clear()
            anys.clear()
            shaping = {**bed.shaping(), "qdiscs": bed.qdisc_stats()}
            hosts = list(bed.hosts)
        results = [json.loads((work / f"rank{r}.json").read_text()) for r in range(spec.ranks)]
        meta = _meta(spec, scenario, hosts, results, probe, stats, shaping, where,
                     tmp / layout.LOOPBACK_PCAP if where != "namespaces" else None)
        write_meta(meta, tmp / layout.META)
        _say(progress, f"written: {out}")
        out.parent.mkdir(parents=True, exist_ok=True)
        replace_directory(tmp, out)
        return CaptureResult(out, meta, time.monotonic() - t_start)
    except BaseException:
        if tmp.exists():  # keep the logs of a failed capture for a look, beside (never in) `out`
            failed = out.parent / f".{out.name}.failed"
            shutil.rmtree(failed, ignore_errors=True)
            shutil.move(str(work), str(failed))
            _say(progress, f"logs of the failed capture: {failed}")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        for p in procs + helpers:
            _kill(p)
        for _, d in dumps + anys:
            _kill(d)
        for log in logs:
            log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _start_dumps(bed: Testbed, spec: CaptureSpec, tmp: Path, dumps: list[tuple[Host, subprocess.Popen[bytes]]],
                 anys: list[tuple[Host, subprocess.Popen[bytes]]]) -> list[Path]:
    """Start tcpdump on every rank's interface (once on loopback), and with `capture.also_any` a
    `tcpdump -i any` beside each, appending them to `dumps` and `anys`; the files they write."""
    one_host = bed.one_host
    files: list[Path] = []
    for host in bed.hosts[:1] if one_host else bed.hosts:
        name = layout.LOOPBACK_PCAP if one_host else layout.rank_pcap(host.rank)
        files.append(tmp / name)
        dumps.append((host, _start_tcpdump(host, files[-1], spec, one_host)))
        if spec.capture.also_any:  # the same packets from `tcpdump -i any`, at the same time
            (tmp / layout.ANY_DIR).mkdir(exist_ok=True)
            files.append(tmp / layout.ANY_DIR / name)
            anys.append((host, _start_tcpdump(host, files[-1], spec, one_host, interface="any")))
    return files


def _start_workers(bed: Testbed, spec: CaptureSpec, scenario: Scenario, work: Path,
                   procs: list[subprocess.Popen[bytes]], helpers: list[subprocess.Popen[bytes]],
                   logs: list[IO[bytes]]) -> None:
    """Start every rank's worker (and Horovod's rendezvous server first), appending the processes
    to `procs` and `helpers` and their logs to `logs`."""
    c = spec.capture
    agg = scenario.parallelism.aggregation
    strategy = agg.capture_strategy
    if strategy is None:  # the capture spec refuses such a kind; a worker plan needs a strategy
        raise CaptureError(f"aggregation kind {agg.kind} cannot be captured")
    plan = WORKER_PLANS[strategy](scenario)
    zoo = spec.model.model_dump(mode="json")
    env = {**os.environ, "PYTHONPATH": _pythonpath(), "OMP_NUM_THREADS": str(c.threads)}
    fw = framework_of(spec)
    cluster = tf_cluster([h.ip for h in bed.hosts], c.port, bed.one_host)
    if spec.framework == "horovod":
        helpers.append(_start_rendezvous(bed.hosts[0], spec.ranks, c.port, work))
    for host in bed.hosts:
        cfg = {"rank": host.rank, "world": spec.ranks, "master_addr": bed.hosts[0].ip,
               "cluster": cluster, "tensorflow": {}, "horovod": {}, **_preset_options(spec),
               "master_port": c.port, "ifname": host.ifname, "model": zoo,
               "batch": spec.training.batch_size_per_worker, "seed": c.seed, "strategy": strategy,
               "bucket_cap_mb": _bucket_cap_mb(spec), "ps": plan,
               "iterations": c.iterations, "warmup": c.warmup, "calibration": c.calibration,
               "threads": c.threads, "out": str(work / f"rank{host.rank}.json")}
        cfg_path = work / f"rank{host.rank}.config.json"
        cfg_path.write_text(json.dumps(cfg))
        log: IO[bytes] = (work / f"rank{host.rank}.log").open("wb")
        logs.append(log)
        procs.append(subprocess.Popen(host.wrap([sys.executable, "-m", fw.worker, str(cfg_path)]),
                                      env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _kill(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def _wait(procs: list[subprocess.Popen[bytes]], work: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        failed = [r for r, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            r = failed[0]
            tail = (work / f"rank{r}.log").read_text(errors="replace").strip().splitlines()[-15:]
            raise CaptureError(f"rank {r} failed (exit {codes[r]}):\n" + "\n".join(tail))
        if all(code == 0 for code in codes):
            return
        if time.monotonic() > deadline:
            raise CaptureError(f"the job did not finish in capture.timeout_s = {timeout_s:g} s")
        time.sleep(0.05)


def _meta(spec: CaptureSpec, scenario: Scenario, hosts: list[Host], results: list[dict[str, Any]],
          probe: dict[str, float], stats: dict[str, dict[str, int]], shaping: dict[str, object],
          where: str, one_host_pcap: Path | None = None) -> CaptureMeta:
    c = spec.capture
    workers = [r for r in results if r.get("role") == "worker"]
    servers = [r for r in results if r.get("role") == "server"]
    mss = c.mtu - IP_TCP_HEADER if where == "namespaces" else None
    fw = framework_of(spec)
    control = fw.control([h.ip for h in hosts], c.port)
    loaded = None
    if c.link.rate_mbit is not None and mss is not None:
        goodput = c.link.rate_mbit * 1e6 * mss / (mss + IP_TCP_HEADER + ETHERNET_HEADER)
    else:
        goodput = probe["goodput_bps"]
        if one_host_pcap is not None:  # the cores move the bytes: what the job's own transfers got
            spans = [(float(a), float(b)) for r in workers for a, b in r["iterations"]]
            loaded = loaded_goodput(one_host_pcap, spans, control)
            goodput = loaded or goodput
    if loaded is not None:
        shaping = {**shaping, "goodput_with": "the job's own transfers while in flight (loaded_goodput)"}
    agg = scenario.parallelism.aggregation
    measured = measured_compute(workers, servers, synchronous=agg.synchronous)
    if where != "namespaces":
        measured = loaded_compute(measured, workers, slowest=agg.synchronous and not agg.lockstep_backward)
    sim = spec.scenario_dict(bandwidth_gbps=round(goodput / 1e9, 6), latency_ns=round(probe["rtt_s"] / 2 * 1e9, 1),
                             measured=measured)
    Scenario.model_validate(sim)  # it must be a valid scenario for `validate`
    if where == "namespaces":
        ranks: dict[str, Any] = {str(h.rank): h.ip for h in hosts}
    else:
        ranks = {str(r["rank"]): r["endpoints"] for r in results}

    return CaptureMeta.model_validate({
        "simstudy": __version__,
        "framework": spec.framework,
        "framework_version": fw.version(),
        "torch": fw.version() if spec.framework == "pytorch" else None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "spec": spec.model_dump(mode="json"),
        "scenario": sim,
        "ranks": ranks,
        "control": control,
        "iterations": {r["rank"]: r["iterations"] for r in workers},
        "steps": {r["rank"]: r["steps"] for r in workers},
        "compute": {r["rank"]: r["calibration"] for r in workers},
        "servers": {r["rank"]: r["server"] for r in servers},
        "link": {**shaping, "probe": probe, "goodput_bps": goodput},
        "wire": {"mss": mss, "header_bytes": IP_TCP_HEADER} if mss else None,
        "tcpdump": stats,
        "buckets": None if agg.all_reduce_algorithm is None else [
            b.size_bytes for b in messages(resolve(Scenario.model_validate(sim)))],
        "ddp_buckets": {r["rank"]: r["ddp_buckets"] for r in workers if "ddp_buckets" in r},
        "strategy": "ps" if servers else "ddp",
        "host_cores": usable_cores(),
    })
