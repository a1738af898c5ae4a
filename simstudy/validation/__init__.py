"""Validate a simulation against real traffic: simulate the job a capture recorded, analyse both
tables with the same pipeline, compare metric by metric, and judge the job.

The scenario comes from `--spec` or from the capture's meta.json (`scenario`, as written by
`simstudy capture`, with the measured compute times). A capture from elsewhere (per-host
tcpdump files, a public dataset's experiment directory) needs only `--spec`: its endpoint roles
and iterations are found from the traffic (or given with `--ranks`). Time origins are aligned:
the capture at its first training iteration (or first training packet), the simulation at the
start of the job (or, when the capture has no iteration marks, at its first transfer). The
verdict is given on the job-level metrics; the transport-level ones are reported beside it
(see `simstudy.traffic.compare`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import ValidationError

from simstudy import layout
from simstudy.backends import RunResult, simulate
from simstudy.backends.registry import REGISTRY, backend_key, entry
from simstudy.linktable import read_links
from simstudy.spec import BackendSpec, Scenario, SpecError, load_scenario, spec_error
from simstudy.spec.capture import Link as CaptureLink
from simstudy.traffic.compare import DEFAULT_TOLERANCES, JOB, ValidationReport, compare
from simstudy.traffic.counter_features import CounterFeatures, analyze_counters, compare_counters
from simstudy.traffic.counters import Counters, counters_from_frame, export_links, load_counters, write_counters
from simstudy.traffic.features import Features, analyze
from simstudy.traffic.meta import CaptureMeta, RankMap
from simstudy.traffic.registry import Level
from simstudy.traffic.roles import Roles, given
from simstudy.traffic.sources import TrafficSource, load_traffic
from simstudy.validation.fitting import Fit, FitError, Simulated, fit_system, scaled_times, with_system


@dataclass(frozen=True)
class Validation:
    """A capture, the simulation of the same job, both analyses and their comparison."""

    real: TrafficSource
    scenario: Scenario
    sim_table: pd.DataFrame
    run: RunResult
    real_features: Features
    sim_features: Features
    report: ValidationReport
    not_measurable: tuple[str, ...]
    fit: Fit | None = None
    """The compute model fitted to the capture (`validate(fit=True)`), which the simulation ran."""


def scenario_for(source: TrafficSource, spec: str | Path | Scenario | None) -> Scenario:
    """The scenario to simulate: `spec` (a file or a scenario), else the `scenario` of the capture's meta.json."""
    if isinstance(spec, Scenario):
        return spec
    if spec is not None:
        return load_scenario(spec)
    meta_path = source.path / layout.META
    data = source.meta.scenario if source.meta else None
    if data is None:
        raise SpecError(meta_path if source.meta else source.path, "scenario",
                        "no scenario recorded with this capture; give one with --spec")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, data, None, meta_path) from None


#: The rate the packet network gives the capture testbed's veths: they move packets at memory speed,
#: and their token buckets set the pace (a bucket's burst leaves at this rate).
VETH_GBPS = 10.0

def capture_bucket_kib(meta: CaptureMeta) -> float | None:
    """The tc tbf bucket at each end of a capture testbed's links, KiB: as meta.json records it,
    else (captures before it did) the one the capture's spec gave or the testbed's default for its
    rate. None: the link had no rate."""
    link = meta.link
    if link is None or link.rate_mbit is None:
        return None
    if link.burst_kib is not None:
        return link.burst_kib
    asked = ((meta.spec or {}).get("capture") or {}).get("link") or {}
    return CaptureLink(rate_mbit=link.rate_mbit, burst_kib=asked.get("burst_kib")).bucket_kib()


def testbed_scenario(scenario: Scenario, meta: CaptureMeta | None, *, packets: bool) -> Scenario:
    """The recorded job on the capture testbed's network: a star of veths to a bridge (each link a
    quarter of the measured round trip, plus the netem delay), packets lost as hosts receive them
    (the testbed drops them at each receiver's input) and the recorded MSS. For the packet network
    (`packets`) the veths run at `VETH_GBPS` behind a token bucket on both ends (tc tbf: the rate,
    the bucket `simstudy capture` gave it, 100 ms of queue); for flowsim the links run at the goodput
    the recording assumed (in the fluid mode behind the bucket: `bucket_scenario`). Captures without
    namespaces' shaping keep their recorded scenario."""
    link = meta.link if meta is not None else None
    if meta is None or link is None or link.where != "namespaces" or link.rate_mbit is None:
        return scenario
    rtt_s = float(link.probe.get("rtt_s", 0.0))
    latency_ns = rtt_s * 1e9 / 4 + link.delay_ms * 1e6 / 2
    topo: dict[str, object] = {"kind": "star", "npus": scenario.npus, "latency_ns": round(latency_ns, 1),
                               "loss": link.loss, "loss_at": "hosts"}
    if meta.wire is not None:
        topo["transport"] = {"mss_bytes": meta.wire.mss}
    if packets:
        burst = capture_bucket_kib(meta)
        topo.update(bandwidth_gbps=VETH_GBPS,
                    token_bucket={"rate_gbps": link.rate_mbit / 1e3, "burst_kib": burst, "latency_ms": 100.0})
    else:
        topo["bandwidth_gbps"] = scenario.topology.bandwidth_gbps if hasattr(scenario.topology, "bandwidth_gbps") \
            else (link.goodput_bps or link.rate_mbit * 1e6) / 1e9
    data = scenario.model_dump(mode="json")
    data["topology"] = topo
    return Scenario.model_validate(data)


def bucket_scenario(scenario: Scenario, meta: CaptureMeta | None) -> Scenario:
    """The recorded job on links that pass a burst as the testbed's did: where tc tbf shaped the
    capture's links (in network namespaces; `capture_bucket_kib`), the topology's links run at
    `VETH_GBPS` behind a token bucket (`topology.token_bucket`) at the goodput the recording
    assumed (its bandwidth) holding the recorded bucket's payload (tbf counts frames, the goodput
    their payload). After each pause a full bucket leaves at once: the testbed's link was busy for
    bucket / rate less of each iteration than a link of its rate (10 ms at 200 Mbit/s). Other
    captures, and topologies with a bucket of their own, are returned as they are."""
    link = meta.link if meta is not None else None
    burst = capture_bucket_kib(meta) if meta is not None else None
    topo = scenario.topology
    if (link is None or burst is None or link.rate_mbit is None or link.where != "namespaces"
            or not hasattr(topo, "token_bucket") or topo.token_bucket is not None):
        return scenario
    goodput = float(topo.bandwidth_gbps)  # type: ignore[union-attr]  # every topology with a bucket has one
    data = scenario.model_dump(mode="json")
    data["topology"].update(bandwidth_gbps=VETH_GBPS, token_bucket={
        "rate_gbps": goodput, "burst_kib": burst * min(1.0, goodput * 1e3 / link.rate_mbit)})
    return Scenario.model_validate(data)


def capture_hosts(meta: CaptureMeta, ranks: int) -> tuple[int, ...] | None:
    """The host of every rank of a capture: ranks with the same address in meta.json are one host
    (a one-host capture, on loopback or in one namespace, puts them all on one), numbered in rank
    order; None when meta.json does not give every rank an address."""
    first: dict[str, int] = {}
    hosts = []
    for r in range(ranks):
        ends = meta.ranks.get(r)
        if not ends:
            return None
        hosts.append(first.setdefault(ends[0].ip, len(first)))
    return tuple(hosts)


def shared_hosts_scenario(scenario: Scenario, meta: CaptureMeta | None) -> Scenario:
    """The recorded job with its ranks sharing their hosts' cores as in the capture: `host_cores`
    the cores meta.json recorded over the threads of a rank (`capture.threads`), `rank_hosts` from
    the ranks' addresses (`capture_hosts`). The measured compute times were taken with the workers
    of a host computing together, so at min(1, C/k) of their speed (k: the most workers on one
    host): they are scaled by that factor back to a rank's time alone, which the simulation then
    shares again. Unchanged when the capture recorded no cores (captures before simstudy recorded
    them), the scenario sets its own, or meta.json does not give every rank an address."""
    if meta is None or meta.host_cores is None or scenario.system.host_cores is not None:
        return scenario
    hosts = capture_hosts(meta, scenario.npus)
    if hosts is None:
        return scenario
    threads = int(((meta.spec or {}).get("capture") or {}).get("threads") or 1)
    cores = max(1, meta.host_cores // threads)
    workers = [hosts[r] for r in meta.compute if 0 <= r < len(hosts)]
    together = max((workers.count(h) for h in set(workers)), default=1)
    data = scenario.model_dump(mode="json")
    system = data["system"]
    system.update(host_cores=cores, rank_hosts=list(hosts))
    if system.get("measured") and together > cores:
        system["measured"] = scaled_times(system["measured"], cores / together)
    return Scenario.model_validate(data)


def packet_sim_table(run_dir: Path, real: TrafficSource) -> tuple[pd.DataFrame, TrafficSource]:
    """A packet-network run's traffic as its pcaps hold it, read as a capture (its meta.json names
    the ranks and the iterations): payload bytes of every packet. When the real capture marks no
    iterations, neither does this table (both get their period from the same estimator)."""
    src = load_traffic(run_dir / layout.PCAP_DIR)
    table = payload_view(src.table)
    if not real.boundaries and "iteration" in table.columns:
        table = table.drop(columns=["iteration"])
    return table, src


def comparable_sim(sim: pd.DataFrame, real: TrafficSource, *, grpc_pull: bool = False) -> pd.DataFrame:
    """The simulated table as a capture would see it, so that both go through the same analysis:

    - time origin: the job's start when the capture marks iterations, else the first transfer;
    - flows: one per (src, dst) pair, as gloo and NCCL keep one TCP connection per peer pair
      (a simulated flow is one collective chunk, which a packet capture cannot see);
    - `grpc_pull` (TensorFlow's collectives over gRPC): the receiver pulls every chunk with a
      RecvBuf request on its own connection to the sender, and the chunk comes back as the
      response. A capture sees each direction of a connection as a flow, so a sender's payload
      to a peer travels on two flows when it also pulls from that peer (its requests) and on one
      otherwise. Each transfer gains its request, from receiver to sender on the same connection,
      as a row of 0 bytes (the simulation does not count the requests' bytes, about 0.1% of the
      chunks');
    - no `iteration` column unless the capture marks iterations, so that both tables get their
      period and bytes per iteration from the same estimator.
    """
    out = sim.copy()
    if not real.boundaries and len(out):
        training = out[out["op"] != "control"]
        t0 = float(training["t_start_s"].min()) if len(training) else 0.0
        out["t_start_s"] -= t0
        out["t_end_s"] -= t0
        if "iteration" in out.columns:
            out = out.drop(columns=["iteration"])
    src, dst = out["src"].astype("int64"), out["dst"].astype("int64")
    if grpc_pull and len(out):
        # flow = a direction of a connection: (client, server, sender); the receiver is the client
        requests = out.assign(src=out["dst"], dst=out["src"], bytes=0)
        requests["t_end_s"] = requests["t_start_s"]
        out = pd.concat([out, requests], ignore_index=True)
        client = pd.concat([dst, src], ignore_index=True)
        server = pd.concat([src, dst], ignore_index=True)
        key = (client * 1_000_003 + server) * 2 + np.r_[np.zeros(len(src), np.int64), np.ones(len(src), np.int64)]
        out["flow"] = pd.factorize(key)[0].astype("int64")
        return out.sort_values("t_start_s", kind="stable").reset_index(drop=True)
    out["flow"] = pd.factorize(src * 1_000_003 + dst)[0].astype("int64")
    return out


def payload_view(table: pd.DataFrame) -> pd.DataFrame:
    """A captured table in the simulator's terms: bytes are TCP/UDP payload (what the application
    sent), and packets without payload (pure ACKs, SYN, FIN) are left out. A simulated transfer is
    application bytes; the IP and TCP headers (52 bytes per segment with timestamps) and the ACKs
    are framing the simulator does not model. Tables without `payload_bytes` are returned as they are."""
    if "payload_bytes" not in table.columns:
        return table
    out = table[table["payload_bytes"].to_numpy() > 0].copy()
    out["bytes"] = out["payload_bytes"].astype("int64")
    return out.reset_index(drop=True)


def scenario_roles(scenario: Scenario, table: pd.DataFrame) -> Roles:
    """The roles the scenario gives its ranks: dedicated parameter servers after the workers."""
    agg = scenario.parallelism.aggregation
    dp = scenario.parallelism.dp
    servers = [r for r in agg.server_hosts(dp) if r >= dp]  # ranks that only serve
    return given("the scenario", {r: [] for r in range(scenario.npus)}, servers, [], table)


def _unmeasurable(real: Features, sim: Features) -> tuple[str, ...]:
    """Scalar metrics that neither trace can measure (e.g. a Hurst exponent of a short trace)."""
    r, s = real.scalars(), sim.scalars()
    return tuple(m for m in DEFAULT_TOLERANCES
                 if m in r and m in s and math.isnan(r[m]) and math.isnan(s[m]))


def validate(
    real_path: str | Path,
    out: str | Path,
    *,
    spec: str | Path | Scenario | None = None,
    backend: BackendSpec | None = None,
    astra_sim: str | Path | None = None,
    tolerances: Mapping[str, float] | None = None,
    skip: Collection[str] = (),
    count: str = "payload",
    rank_map: RankMap | None = None,
    judge: Collection[Level] = (JOB,),
    progress: Callable[[str], None] | None = None,
    testbed: bool | None = None,
    fit: bool = False,
) -> Validation:
    """Simulate the job of the capture at `real_path` into `out/sim` on `backend` (default flowsim),
    analyse and compare.

    `count`: "payload" compares the capture's TCP/UDP payload bytes with the simulated bytes (what
    the application sends; see `payload_view`); "ip" compares IP bytes as captured (for captures
    written from simulated transfers, whose IP lengths are the transfer bytes). `rank_map`: the
    capture's ranks and roles (`--ranks`), instead of meta.json or the traffic. `judge`: the
    metric levels that decide the verdict. `testbed`: simulate the capture testbed's network
    (`testbed_scenario`) instead of the recorded switch; default: with the packet network (ns3),
    whose run is then read from its pcaps like the capture. A scenario from the capture's meta.json
    gets the testbed's token buckets in flowsim's fluid mode (`bucket_scenario`) and the capture's
    shared hosts on backends that run them (`shared_hosts_scenario`). `fit`: simulate with the
    compute fitted to the capture's logged iterations (`simstudy.fit`; its simulations in
    `out/fit`), and mark the metrics the fit determines."""
    if count not in ("payload", "ip"):
        raise ValueError(f"count must be payload or ip, not {count!r}")
    say = progress or (lambda _text: None)
    say(f"reading the capture {real_path}")
    real = load_traffic(real_path, rank_map=rank_map)
    scenario, backend, packets = _prepared(real, spec, backend, testbed)
    source = None if isinstance(spec, Scenario) else spec
    fitted = None
    if fit:
        say(f"fitting {scenario.name}'s compute to the logged iterations")
        fitted = fit_capture(real, scenario, Path(out) / layout.FIT_DIR, backend=backend, packets=packets,
                             astra_sim=astra_sim)
        scenario = with_system(scenario, fitted.system)
    say(f"simulating {scenario.name} ({scenario.npus} ranks) on {backend_key(backend)}")
    result, sim_table = _simulated(scenario, real, Path(out) / layout.SIM_DIR, backend, packets, astra_sim, source)
    real_table = payload_view(real.table) if count == "payload" else real.table
    say("analysing the real and the simulated traffic")
    real_features = analyze(real_table, boundaries=real.boundaries, roles=real.roles)
    sim_features = analyze(sim_table, roles=scenario_roles(scenario, sim_table))
    unmeasurable = tuple(m for m in _unmeasurable(real_features, sim_features) if m not in skip)
    report = compare(real_features, sim_features, tolerances=tolerances, skip=(*skip, *unmeasurable), judge=judge)
    if fitted is not None:
        report = report.with_fit(fitted.determines)
    say("compared")
    return Validation(real, scenario, sim_table, result, real_features, sim_features, report, unmeasurable, fitted)


def _prepared(real: TrafficSource, spec: str | Path | Scenario | None, backend: BackendSpec | None,
              testbed: bool | None) -> tuple[Scenario, BackendSpec, bool]:
    """The scenario to simulate for a capture (see `validate`), the backend's options, and whether
    it is the packet network (read from its pcaps like the capture)."""
    scenario = scenario_for(real, spec)
    backend = backend or BackendSpec()
    packets = "pcap" in REGISTRY[backend.name].traffic  # the packet network: compared on its pcaps
    if packets and backend.traffic != "pcap":
        backend = backend.model_copy(update={"traffic": "pcap"})
    if (packets if testbed is None else testbed) and spec is None:
        scenario = testbed_scenario(scenario, real.meta, packets=packets)
    if spec is None and not packets and entry(backend).mode(backend).fluid:
        scenario = bucket_scenario(scenario, real.meta)
    if spec is None and REGISTRY[backend.name].shared_hosts:
        scenario = shared_hosts_scenario(scenario, real.meta)
    return scenario, backend, packets


def _simulated(scenario: Scenario, real: TrafficSource, out: Path, backend: BackendSpec, packets: bool,
               astra_sim: str | Path | None, source: str | Path | None) -> tuple[RunResult, pd.DataFrame]:
    """Simulate `scenario` into `out` and return its run and its table as a capture would see it."""
    result = simulate(scenario, out, backend, astra_sim=astra_sim, source=source)
    if packets:
        sim_table, _ = packet_sim_table(out, real)
    else:
        sim_table = comparable_sim(result.traffic, real, grpc_pull=scenario.parallelism.framework.pull_requests)
    return result, sim_table


def fit_capture(real: TrafficSource, scenario: Scenario, out: Path, *, backend: BackendSpec, packets: bool = False,
                astra_sim: str | Path | None = None) -> Fit:
    """Fit `scenario`'s compute to the iterations the capture `real` logged (`simstudy.fit`): each
    of the fit's simulations runs in `out/run<k>` and is analysed as `validate` analyses its one."""
    meta_path = real.path / layout.META
    if real.meta is None:
        raise FitError(f"{meta_path}: no meta.json: the fit needs the iterations and steps a capture logged "
                       "(simstudy capture writes them)")

    def run(s: Scenario, k: int) -> Simulated:
        result, table = _simulated(s, real, out / f"run{k}", backend, packets, astra_sim, None)
        period = float(analyze(table, roles=scenario_roles(s, table)).scalars()["period_s"])
        compute = max(r.compute_ns for r in result.ranks) / 1e9 / s.training.iterations
        return Simulated(period, compute)

    return fit_system(real.meta, scenario, run, source=str(meta_path))


def fit_compute(
    real_path: str | Path,
    out: str | Path,
    *,
    spec: str | Path | Scenario | None = None,
    backend: BackendSpec | None = None,
    astra_sim: str | Path | None = None,
    rank_map: RankMap | None = None,
    testbed: bool | None = None,
) -> Fit:
    """The compute model of the capture at `real_path`, fitted to its logged iterations, starting
    from the scenario `validate` would simulate; the fit's simulations run in `out`."""
    real = load_traffic(real_path, rank_map=rank_map)
    scenario, backend, packets = _prepared(real, spec, backend, testbed)
    return fit_capture(real, scenario, Path(out), backend=backend, packets=packets, astra_sim=astra_sim)


# ---------------------------------------------------------------------------------------------
# switch counters


@dataclass(frozen=True)
class CounterValidation:
    """A counter series, the simulation of a scenario with its link table, and both analyses."""

    real: Counters
    scenario: Scenario
    run: RunResult
    sim: Counters
    real_features: CounterFeatures
    sim_features: CounterFeatures
    report: ValidationReport


def validate_counters(
    real_path: str | Path,
    out: str | Path,
    *,
    spec: str | Path,
    backend: BackendSpec | None = None,
    astra_sim: str | Path | None = None,
    tolerances: Mapping[str, float] | None = None,
    by: str = "auto",
    progress: Callable[[str], None] | None = None,
) -> CounterValidation:
    """Simulate `spec` into `out/sim` keeping its link table (flowsim `traffic: links`, bins a tenth
    of the counters' sample interval; on the packet network every packet's bytes on the wire), read
    the table as a switch would count it at the counters' own sample interval (`export_links`,
    written to `out/sim/counters.csv`), and compare both series port by port (when the simulated
    links carry the counters' port names) or tier by tier (`compare_counters`)."""
    say = progress or (lambda _text: None)
    say(f"reading the counters {real_path}")
    real = load_counters(real_path)
    scenario = load_scenario(spec)
    sample = real.sample_s
    base = backend or BackendSpec()
    run_spec = base.model_copy(update={"traffic": "links", "traffic_bin_s": min(sample / 10, base.traffic_bin_s)})
    say(f"simulating {scenario.name} ({scenario.npus} ranks) on {backend_key(run_spec)}, its links binned at "
        f"{run_spec.traffic_bin_s:g} s")
    result = simulate(scenario, Path(out) / layout.SIM_DIR, run_spec, astra_sim=astra_sim, source=spec)
    links = read_links(Path(out) / layout.SIM_DIR / layout.LINKS)
    frame = export_links(links, sample)
    write_counters(frame, Path(out) / layout.SIM_DIR / layout.COUNTERS_CSV)  # what was compared, to read again
    sim = counters_from_frame(frame, Path(out) / layout.SIM_DIR)
    say("analysing both counter series")
    real_f = analyze_counters(real)
    sim_f = analyze_counters(sim, merge=max(1, round(real_f.grid_s / real_f.sample_s)))  # on the same grid
    report = compare_counters(real_f, sim_f, by=by, tolerances=tolerances)
    return CounterValidation(real, scenario, result, sim, real_f, sim_f, report)
