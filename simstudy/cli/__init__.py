"""The `simstudy` command: parse arguments, call library functions, print, map errors to exit codes.

Exit codes: 0 success, 1 a check failed (e.g. a regression or validation), 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, get_args

from simstudy import layout
from simstudy.cli.bars import StageBar, progress_bar
from simstudy.spec.study import CONGESTION_CHOICES, BackendName, BackendOptions
from simstudy.version import __version__

if TYPE_CHECKING:
    import http.server

    from simstudy.spec import BackendSpec
    from simstudy.sweeps import Expansion

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _compile(args: argparse.Namespace) -> int:
    from simstudy import api

    out = Path(args.output) if args.output else Path("results/bundles") / Path(args.spec).stem
    result = api.compile(args.spec, out)
    b = result.bundle
    print(
        f"compiled {args.spec} -> {b.directory}/ : {result.scenario.npus} ranks, "
        f"{result.et_bytes / 1e6:.2f} MB of ET ({b.name}.<rank>.et), {result.seconds:.2f} s"
    )
    return EXIT_OK


def _models(args: argparse.Namespace) -> int:
    from simstudy import api

    rows = api.models()
    print(f"{'model':<16} {'family':<12} {'params':>15} {'GFLOPs/sample':>14}  description")
    for r in rows:
        print(f"{r.name:<16} {r.family:<12} {r.params:>15,} {r.gflops:>14.3f}  {r.description}")
    return EXIT_OK


def _schema(args: argparse.Namespace) -> int:
    from simstudy.spec.schema import schema_text

    text = schema_text(args.kind)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from simstudy import api
    from simstudy.compiler import Bundle
    from simstudy.spec import SpecError

    raw = [args.workload, args.network, args.system]
    if args.spec and (any(raw) or args.topology):
        raise SpecError(None, "", "give either a scenario spec or --workload/--network/--system, not both")
    if args.estimate:
        if not args.spec:
            raise SpecError(None, "--estimate", "estimates a scenario spec: give one")
        print(api.estimate(args.spec, traffic=args.traffic))
        return EXIT_OK
    spec = _backend_spec(name=args.backend, congestion="aware" if args.aware else args.congestion,
                         timeout_s=args.timeout, traffic=args.traffic, traffic_bin_s=args.traffic_bin,
                         engine=args.engine, et_files=args.et_files)
    bar = progress_bar(args.quiet or args.backend == "astrasim")
    given: str | Bundle
    if args.spec:
        given = args.spec
        out = Path(args.output) if args.output else Path("results/runs") / Path(args.spec).stem
    else:
        if not all(raw):
            raise SpecError(None, "", "without a spec, --workload, --network and --system are all required")
        given = Bundle(
            workload=Path(args.workload), network=Path(args.network), system=Path(args.system),
            remote_memory=Path(args.remote_memory) if args.remote_memory else None,
            comm_group=Path(args.comm_group) if args.comm_group else None,
            topology=Path(args.topology) if args.topology else None,
        )
        given.check()
        out = Path(args.output) if args.output else Path("results/runs") / given.name
    try:
        result = api.run(given, out, backend=spec, astra_sim=args.astra_sim, progress=bar, force=args.force)
    finally:
        bar.close()
    times = result.times
    finish, exposed = times["finish_ns"], times["exposed_comm_ns"]
    engine = result.details.get("engine")
    print(f"{result.backend} ({result.backend_version}{f', {engine} engine' if engine else ''}) -> {out}/")
    print(f"  ranks {len(finish)}, finish {max(finish) / 1e6:.3f} ms (min {min(finish) / 1e6:.3f}), "
          f"exposed comm max {max(exposed) / 1e6:.3f} ms")
    kept = {"rows": layout.TRAFFIC, "links": layout.LINKS, "none": "counts only"}[result.mode]
    if (out / layout.PCAP_DIR).is_dir():
        kept += f" and {layout.PCAP_DIR}/"
    print(f"  {result.transfers:,} transfers, {result.total_bytes / 1e9:.3f} GB ({kept}), "
          f"wall {result.wall_time_s:.2f} s")
    jobs = result.details.get("jobs")
    if jobs:
        print(f"  {'job':<14} {'NPUs':>5} {'start ms':>9} {'iteration ms':>13} {'alone ms':>10} {'slowdown':>9}")
        for j in jobs:
            alone = "-" if j["alone_iteration_ms"] is None else f"{j['alone_iteration_ms']:.3f}"
            slow = "-" if j["slowdown"] is None else f"{j['slowdown']:.3f}"
            print(f"  {j['name']:<14} {len(j['npus']):>5} {j['start_ms']:>9.3f} {j['iteration_ms']:>13.3f} "
                  f"{alone:>10} {slow:>9}")
    return EXIT_OK


#: The command-line flag of each backend option (what an error about the option names).
_FLAGS = {"timeout_s": "--timeout", "traffic_bin_s": "--traffic-bin", "traffic": "--traffic",
          "congestion": "--congestion", "name": "--backend", "engine": "--engine", "et_files": "--et-files"}


def _backend_spec(**values: object) -> BackendSpec:
    """The backend options given as flags, as the backend takes them (its entry in
    `simstudy.backends.registry`); a bad value is a SpecError naming the flag."""
    from pydantic import ValidationError

    from simstudy.backends.registry import entry
    from simstudy.spec import BackendSpec, SpecError, spec_error

    try:
        spec = BackendSpec.model_validate(values)
        entry(spec)
    except ValidationError as exc:
        raise spec_error(exc, values, None, None, BackendSpec, fields=_FLAGS) from None
    except SpecError as exc:
        raise SpecError(None, _FLAGS.get(exc.field, exc.field), exc.message) from None
    return spec


def _print_expansion(expansion: Expansion, *, first: int) -> None:
    import yaml

    from simstudy.sweeps.expand import backend_id

    keys = expansion.unique_keys
    print(f"{expansion.total} combinations: {len(expansion.points)} scenarios ({len(keys)} distinct runs), "
          f"{len(expansion.skipped)} skipped; backend {backend_id(expansion.study)}")
    for s in expansion.skipped:
        params = ", ".join(f"{k}={v}" for k, v in s.params.items())
        print(f"  skipped [{s.index}] {params}: {s.reason}")
    for p in expansion.points[:first]:
        params = ", ".join(f"{k}={v}" for k, v in p.params.items()) or "(base scenario)"
        print(f"\n# [{p.index}] {params}  (run {p.key})")
        print(yaml.safe_dump(p.scenario.model_dump(mode="json", exclude_defaults=True), sort_keys=False).rstrip())


def _sweep(args: argparse.Namespace) -> int:
    import time

    import pandas as pd

    from simstudy import api
    from simstudy.report import render_study
    from simstudy.spec import load_study
    from simstudy.sweeps import SlurmOptions, compare_baseline, expand, get_executor, override
    from simstudy.sweeps.expand import backend_id

    t0 = time.perf_counter()
    study = override(load_study(args.study), args.study, backend=args.backend, aware=True if args.aware else None,
                     congestion=args.congestion, sets=args.set, engine=args.engine)
    out = Path(args.output) if args.output else Path("results") / study.name
    baseline = None
    if args.baseline:
        if not Path(args.baseline).is_file():
            raise FileNotFoundError(f"{args.baseline}: baseline summary not found")
        baseline = pd.read_parquet(args.baseline)
    if args.dry_run:
        _print_expansion(expand(study, args.study), first=args.show)
        return EXIT_OK
    slurm = SlurmOptions(partition=args.partition, account=args.account, walltime=args.walltime, cores=args.cores,
                         memory=args.mem, jobs=args.jobs)
    executor = get_executor(args.executor, workers=args.workers, scheduler=args.scheduler,
                            connect_timeout_s=args.connect_timeout, workdir=out.resolve() / "slurm", slurm=slurm)
    done = api.sweep(study, out, executor=executor, astra_sim=args.astra_sim, source=args.study,
                     progress=not args.quiet, force=args.force)
    assert done.sweep is not None
    result = done.sweep
    exp = result.expansion
    c = result.counts
    print(f"{study.name}: {exp.total} combinations, {len(exp.points)} scenarios, {len(exp.skipped)} skipped; "
          f"runs: {c['ok']} done, {c['cached']} cached, {c['failed']} failed (backend {backend_id(study)})")
    for s in exp.skipped if not args.quiet else []:
        print(f"  skipped {', '.join(f'{k}={v}' for k, v in s.params.items())}: {s.reason}")
    for key, rec in result.records.items():
        if rec.status != "ok":
            print(f"  FAILED run {key}: {rec.error}", file=sys.stderr)
    report = None
    if baseline is not None:
        report = compare_baseline(result.summary, baseline, study.baseline)
        print("\n".join(report.lines()))
    if not args.no_report:
        path = render_study(result, baseline=report)
        print(f"  summary {result.out / layout.SUMMARY}, report {path}")
    print(f"  wall time {time.perf_counter() - t0:.1f} s (the whole command; the runs computed now took "
          f"{result.backend_s:.1f} s of simulator time)")
    ok = result.all_ok and (report is None or report.passed)
    return EXIT_OK if ok else EXIT_FAILED


def _analyze_counters(args: argparse.Namespace) -> int:
    from simstudy import api
    from simstudy.report.counters import render_counter_analysis

    c = api.load_counters(args.path)
    f = api.analyze_counters(c)
    out = Path(args.output) if args.output else (c.path if c.path.is_dir() else c.path.parent) / layout.ANALYSIS_DIR
    path = render_counter_analysis(f, out, title=c.label, notes=c.warnings)
    print(f"counters {c.path} ({c.format}): {len(f.ports)} ports, {f.duration_s:.1f} s, a sample every "
          f"{f.sample_s:.3g} s (steps of {f.grid_s:.3g} s)")
    for t in f.tiers:
        period = f"period {t.period_s:.3g} s (strength {t.period_strength:.2f})" if t.period_s == t.period_s else (
            f"no period (strength {t.period_strength:.2f})")
        print(f"  tier {t.tier}: {t.ports} ports, {t.bytes / 1e9:,.1f} GB, mean utilisation {t.mean_utilization:.3f}, "
              f"{period}")
    for key in f.hottest[:5]:
        p = f.port(key)
        print(f"  port {key}: mean utilisation {p.mean_utilization:.3f}, peak {p.peak_utilization:.3f}, period "
              f"{p.period_s:.3g} s (strength {p.period_strength:.2f})")
    for w in c.warnings:
        print(f"  warning: {w}", file=sys.stderr)
    print(f"  {out / layout.FEATURES}, {path}")
    return EXIT_OK


def _analyze(args: argparse.Namespace) -> int:
    from simstudy import api
    from simstudy.report.traffic import render_analysis
    from simstudy.traffic.counters import is_counters

    if is_counters(args.path):
        return _analyze_counters(args)

    source = api.load_traffic(args.path, ranks=args.ranks)
    out = Path(args.output) if args.output else source.path / layout.ANALYSIS_DIR
    features = api.analyze(source, count=args.count)
    notes = list(source.warnings)
    if source.experiment:
        notes.append("experiment: " + ", ".join(f"{k}={v}" for k, v in source.experiment.model_dump().items()))
    path = render_analysis(features, out, title=source.label, notes=notes)
    p, b, r = features.period, features.bytes_per_iteration, features.roles
    print(f"{source.kind} {source.path}: {features.rows:,} rows, {features.total_bytes / 1e6:,.3f} MB, "
          f"{len(features.ranks)} ranks, {features.duration_s * 1e3:.3f} ms")
    print(f"  roles ({r.source}): {r.reason}; {len(r.control)} control endpoint(s)")
    print(f"  period {p.period_s * 1e3:.3f} ms ({p.method}), {b.mean / 1e6:.3f} MB per iteration per worker, "
          f"{b.total / 1e6:.3f} MB per iteration in all ({b.iterations} whole iterations, {b.method}), "
          f"duty cycle per iteration {features.duty_iteration:.3f}")
    for w in source.warnings:
        print(f"  warning: {w}", file=sys.stderr)
    print(f"  {out / layout.FEATURES}, {path}")
    return EXIT_OK


def _tolerances(items: Sequence[str]) -> dict[str, float]:
    from simstudy.spec import SpecError

    out: dict[str, float] = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            out[name] = float(value)
        except ValueError:
            raise SpecError(None, "--tolerance", f"expected METRIC=VALUE, got {item!r}") from None
    return out


def _validate_counters(args: argparse.Namespace) -> int:
    from simstudy import api
    from simstudy.report.counters import render_counter_validation
    from simstudy.spec import BackendSpec, SpecError

    if not args.spec:
        raise SpecError(None, "--spec", "switch counters record no scenario: give the one to simulate with --spec")
    real = Path(args.real)
    out = Path(args.output) if args.output else (real if real.is_dir() else real.parent) / layout.VALIDATION_DIR
    bar = StageBar(3, enabled=not args.quiet)
    try:
        v = api.validate_counters(real, args.spec, out, backend=BackendSpec(name=args.backend, timeout_s=args.timeout),
                                  astra_sim=args.astra_sim, tolerances=_tolerances(args.tolerance), progress=bar)
    finally:
        bar.close()
    path = render_counter_validation(v, out)
    print(v.report.to_markdown())
    print(f"report {path}")
    return EXIT_OK if v.report.passed else EXIT_FAILED


def _validate(args: argparse.Namespace) -> int:
    from simstudy import api
    from simstudy.report.traffic import render_validation
    from simstudy.traffic.counters import is_counters

    if is_counters(args.real):
        return _validate_counters(args)

    out = Path(args.output) if args.output else Path(args.real) / layout.VALIDATION_DIR
    tolerances = _tolerances(args.tolerance)
    try:
        bar = StageBar(4, enabled=not args.quiet)
        try:
            verdict = api.validate(args.real, args.spec, out,
                                   backend=_backend_spec(name=args.backend, timeout_s=args.timeout),
                                   astra_sim=args.astra_sim, tolerances=tolerances, skip=args.skip,
                                   count=args.count, ranks=args.ranks, judge_transport=args.judge_transport,
                                   testbed=True if args.testbed else None, fit=args.fit, progress=bar)
        finally:
            bar.close()
    except ValueError as exc:
        if "tolerance" in str(exc) or "metric" in str(exc):
            from simstudy.spec import SpecError

            raise SpecError(None, "--tolerance/--skip", str(exc)) from None
        raise
    v = verdict.validation
    path = render_validation(v, out)
    if v.fit is not None:
        print("\n".join(["Fitted compute:", *(f"  {line}" for line in v.fit.lines()), ""]))
    print(v.report.to_markdown())
    for w in v.real.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"report {path}")
    return EXIT_OK if v.report.passed else EXIT_FAILED


def _fit(args: argparse.Namespace) -> int:
    import yaml

    from simstudy import api

    out = Path(args.output) if args.output else Path(args.capture) / layout.FIT_DIR / "system.yaml"
    result = api.fit(args.capture, args.spec, work=args.work, backend=_backend_spec(name=args.backend,
                     timeout_s=args.timeout), astra_sim=args.astra_sim, ranks=args.ranks,
                     testbed=True if args.testbed else None)
    print("\n".join(result.lines()))
    out.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(result.system.model_dump(mode="json", exclude_none=True), sort_keys=False, width=120,
                          default_flow_style=None)
    out.write_text(f"# system fitted to {args.capture} by simstudy fit: a scenario's `system:` takes it\n{text}",
                   encoding="utf-8")
    print(f"system {out}")
    return EXIT_OK if result.converged else EXIT_FAILED


def _capture(args: argparse.Namespace) -> int:
    from simstudy import api
    from simstudy.spec.capture import CaptureSpec
    from simstudy.spec.load import load_spec

    spec = load_spec(CaptureSpec, args.spec)
    bar = StageBar(5, enabled=not args.quiet)
    try:
        result = api.capture(spec, args.output, force=args.force, source=args.spec, progress=bar)
    finally:
        bar.close()
    meta = result.meta
    its = meta.iteration_durations_s()
    print(f"captured {len(meta.ranks)} ranks, {len(its) // max(len(meta.iterations), 1)} iterations "
          f"(mean {sum(its) / max(len(its), 1) * 1e3:.1f} ms) in {result.wall_s:.1f} s -> {result.out}")
    for name, stats in meta.tcpdump.items():
        dropped = stats.get("packets dropped by kernel", 0)
        if dropped:
            print(f"  warning: tcpdump {name} dropped {dropped} packets", file=sys.stderr)
    print(f"next: simstudy validate --real {result.out}")
    return EXIT_OK


def _cluster(args: argparse.Namespace) -> int:
    from simstudy import api
    from simstudy.report.cluster_plot import plot_clusters

    result = api.cluster(args.paths, k=args.k)
    print("\n".join(result.lines()))
    out = Path(args.output) if args.output else Path("results") / "cluster.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"plot {plot_clusters(result, out)}")
    return EXIT_OK


def _dashboard(args: argparse.Namespace) -> int:
    from simstudy import api
    from simstudy.report.dashboard import detect

    path = Path(args.path)
    out = Path(args.output) if args.output else path / layout.DASHBOARD_HTML
    server = _server(out.parent, args.port) if args.serve else None  # a port in use fails before any work
    try:
        page = api.dashboard(path, out)
        print(f"{detect(path)[0]} dashboard {page} ({page.stat().st_size / 1e6:.1f} MB)")
        if server is not None:
            _serve(server, page)
    finally:
        if server is not None:
            server.server_close()
    return EXIT_OK


def _server(directory: Path, port: int) -> http.server.ThreadingHTTPServer:
    """An HTTP server of `directory` on 127.0.0.1:`port` (0: any free one), bound, not yet serving."""
    import functools
    import http.server

    from simstudy.spec import SpecError

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    try:
        return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except (OSError, OverflowError) as exc:
        raise SpecError(None, "--port", f"cannot serve on 127.0.0.1:{port}: {getattr(exc, 'strerror', None) or exc}; "
                                        "give another port, or --port 0 for any free one") from None


def _serve(server: http.server.ThreadingHTTPServer, page: Path) -> None:
    print(f"serving http://127.0.0.1:{server.server_address[1]}/{page.name} (Ctrl-C stops)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


def _trace(args: argparse.Namespace) -> int:
    from simstudy import api

    run = Path(args.run)
    out = Path(args.output) if args.output else run / "trace.json"
    trace = api.trace(run, out, iterations=args.iterations, ranks=args.ranks, transfers=args.transfers)
    print(f"trace {out}: {trace.counts()} (open in https://ui.perfetto.dev or chrome://tracing)")
    return EXIT_OK


def _counters(args: argparse.Namespace) -> int:
    from simstudy import api

    out = api.export_counters(args.run, args.output, sample_s=args.sample)
    print(f"counters {out}: the run's links as switch port counters, a sample every {args.sample:g} s "
          f"(simstudy analyze {out}; simstudy validate --real {out} --spec SPEC)")
    return EXIT_OK


#: One argument of a command: its flags (or a positional's name) and argparse's keywords.
Arg = tuple[tuple[str, ...], dict[str, Any]]


def _arg(*flags: str, **options: Any) -> Arg:
    return flags, options


def _congestion(default: str | None) -> Arg:
    """`--congestion`: the modes a spec may give, with the spec's description of them."""
    fallback = default or "the study's backend_options, else fluid"
    return _arg("--congestion", choices=list(CONGESTION_CHOICES), default=default,
                help=f"{BackendOptions.model_fields['congestion'].description} (default: {fallback})")


def _field_help(name: str) -> str:
    return BackendOptions.model_fields[name].description or name


@dataclass(frozen=True)
class _Command:
    """A subcommand: its name, its line in `simstudy --help`, what runs it and its arguments."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    args: tuple[Arg, ...] = ()


#: The backends' names (`simstudy.backends.registry` checks that they are its entries).
_BACKENDS = list(get_args(BackendName))
_RANKS_HELP = ("YAML: `ranks` (rank -> ip or ip:port), optional `servers` (ranks) and `control` (endpoints); "
               "replaces the roles found from the traffic or meta.json")

#: Every command with its arguments, in the order `simstudy --help` lists them.
COMMANDS = (
    _Command("compile", "compile a scenario into Chakra ET files and ASTRA-SIM configs", _compile, (
        _arg("spec", help="scenario YAML file"),
        _arg("-o", "--output", help="bundle directory (default results/bundles/<spec name>)"),
    )),
    _Command("run", "simulate a scenario (or an ASTRA-SIM input set) and write its traffic", _run, (
        _arg("spec", nargs="?", help="scenario YAML file (or give --workload/--network/--system)"),
        _arg("-o", "--output", help="run directory (default results/runs/<name>)"),
        _arg("--backend", default="flowsim", choices=_BACKENDS,
             help="simulator (default flowsim; ns3: the packet network, needs the ns3 wheel)"),
        _arg("--astra-sim", metavar="PATH", help="ASTRA-SIM binary (default $ASTRA_SIM_BIN or the submodule build)"),
        _arg("--aware", action="store_true",
             help="astrasim: use the congestion-aware binary (the same as --congestion aware)"),
        _congestion("fluid"),
        _arg("--timeout", type=float, default=3600.0, help="seconds before a run is abandoned"),
        _arg("--traffic", choices=list(get_args(BackendOptions.model_fields["traffic"].annotation)), default="rows",
             help=_field_help("traffic") + " (default: rows)"),
        _arg("--traffic-bin", type=float, default=1e-3, metavar="SECONDS",
             help=_field_help("traffic_bin_s") + " (default: 0.001)"),
        _arg("--engine", choices=list(get_args(BackendOptions.model_fields["engine"].annotation)), default="auto",
             help=_field_help("engine") + " (default: auto)"),
        _arg("--et-files", action="store_true", help=_field_help("et_files")),
        _arg("--quiet", action="store_true", help="no progress bar"),
        _arg("--estimate", action="store_true",
             help="print ranks, distinct graphs, messages, flows at peak and each backend's memory and wall time, "
                  "estimated without simulating; run nothing"),
        _arg("--force", action="store_true",
             help="run even when the memory estimate exceeds the memory this machine has available"),
        _arg("--workload", help="ET prefix: <prefix>.<rank>.et (an existing ASTRA-SIM input set)"),
        _arg("--network", help="ASTRA-SIM network.yml"),
        _arg("--system", help="ASTRA-SIM system.json"),
        _arg("--remote-memory", help="ASTRA-SIM remote memory JSON"),
        _arg("--comm-group", help="ASTRA-SIM communicator group JSON"),
        _arg("--topology", help="simstudy's network as links (topology.json, as `compile` writes it); "
                                "default: the network of network.yml"),
    )),
    _Command("sweep", "run every scenario of a study (resumable) and summarise them", _sweep, (
        _arg("study", help="study YAML file (base scenario + axes)"),
        _arg("-o", "--output", help="results directory (default results/<study name>)"),
        _arg("--executor", default="local", choices=["local", "dask", "slurm"],
             help="where runs execute: local processes, a Dask scheduler, or SLURM (one sbatch job array)"),
        _arg("--backend", choices=_BACKENDS, help="override the study's backend"),
        _arg("--aware", action="store_true", help="astrasim: the congestion-aware binary"),
        _arg("--set", action="append", default=[], metavar="PATH=VALUE",
             help="override a base scenario value, e.g. topology.bandwidth_gbps=100 (VALUE is YAML; repeatable)"),
        _arg("--workers", type=int, help="local: processes (default: one per core)"),
        _arg("--scheduler", help="dask: scheduler address, e.g. tcp://127.0.0.1:8786"),
        _arg("--connect-timeout", type=float, default=30.0, help="dask: seconds to wait for the scheduler"),
        _arg("--partition", help="slurm: partition (default: the cluster's default)"),
        _arg("--account", help="slurm: account to charge"),
        _arg("--walltime", default="01:00:00", help="slurm: time limit of each run (default 01:00:00)"),
        _arg("--cores", type=int, default=1, help="slurm: CPUs per run (default 1; flowsim uses one)"),
        _arg("--mem", default="4G", help="slurm: memory per run (default 4G)"),
        _arg("--jobs", type=int, help="slurm: at most this many runs at once (default: no limit)"),
        _arg("--astra-sim", metavar="PATH", help="ASTRA-SIM binary for studies with backend astrasim"),
        _arg("--baseline", metavar="FILE", help="summary.parquet to compare with; exit 1 if a metric moved"),
        _arg("--dry-run", action="store_true", help="print the scenarios and what is skipped; run nothing"),
        _arg("--show", type=int, default=3, help="dry run: how many resolved scenarios to print"),
        _arg("--quiet", action="store_true", help="no progress bar, no skipped list"),
        _arg("--no-report", action="store_true", help="skip report.md and plots"),
        _arg("--force", action="store_true",
             help="local: also run scenarios whose memory estimate exceeds the memory this machine has available "
                  "(skipped by default, with the reason in skipped.json)"),
        _congestion(None),
        _arg("--engine", choices=list(get_args(BackendOptions.model_fields["engine"].annotation)),
             help=_field_help("engine") + " (default: the study's backend_options.engine)"),
    )),
    _Command("analyze", "analyse a capture directory (pcaps), a run directory or switch counters", _analyze, (
        _arg("path", help="capture directory (pcap/pcapng files, meta.json), run directory, or switch counters "
                          "(Zhejiang Lab's per-port CSVs, or a CSV of time, device, port, rx_bytes, tx_bytes)"),
        _arg("-o", "--output", help="where features.json, plots and analysis.md go (default PATH/analysis)"),
        _arg("--ranks", metavar="MAP.yaml", help=_RANKS_HELP),
        _arg("--count", default="payload", choices=["payload", "ip"],
             help="capture bytes to analyse: TCP/UDP payload (default; what the application sent, and "
                  "what the period is found from without ACKs between bursts) or IP bytes as captured"),
    )),
    _Command("validate", "simulate a captured job and compare, metric by metric", _validate, (
        _arg("--real", required=True, help="capture directory of the real job, or its switch counters "
                                           "(compared with the simulation's link table; needs --spec)"),
        _arg("--spec", help="scenario YAML (default: the scenario in the capture's meta.json)"),
        _arg("-o", "--output", help="output directory (default REAL/validation)"),
        _arg("--backend", default="flowsim", choices=_BACKENDS, help="simulator"),
        _arg("--testbed", action="store_true",
             help="simulate the capture testbed's network (veths to a bridge, tbf on both ends, losses at "
                  "receivers) instead of the recorded switch; the default with --backend ns3"),
        _arg("--astra-sim", metavar="PATH", help="ASTRA-SIM binary"),
        _arg("--tolerance", action="append", default=[], metavar="METRIC=VALUE",
             help="override a tolerance, e.g. period_s=0.05 (repeatable)"),
        _arg("--skip", action="append", default=[], metavar="METRIC", help="leave a metric out (repeatable)"),
        _arg("--timeout", type=float, default=3600.0, help="seconds before the simulation is abandoned"),
        _arg("--quiet", action="store_true", help="no progress bar"),
        _arg("--count", default="payload", choices=["payload", "ip"],
             help="capture bytes to compare: TCP/UDP payload (default; what the simulator models) or "
                  "IP bytes as captured (headers and ACKs included)"),
        _arg("--ranks", metavar="MAP.yaml", help=_RANKS_HELP),
        _arg("--judge-transport", action="store_true",
             help="let transport-level metrics (sub-iteration bursts, 1 ms throughput) decide the verdict too"),
        _arg("--fit", action="store_true",
             help="simulate with the compute fitted to the capture's logged iterations (see `simstudy fit`); the "
                  "table marks the metrics the fit determines (the period)"),
    )),
    _Command("fit", "fit the compute model (pace, jitter, stragglers) to a captured job; write it as a system",
             _fit, (
        _arg("capture", help="capture directory with meta.json (as simstudy capture writes it)"),
        _arg("-o", "--output", help="system YAML to write (default CAPTURE/fit/system.yaml)"),
        _arg("--spec", help="scenario YAML to start from (default: the scenario in the capture's meta.json)"),
        _arg("--backend", default="flowsim", choices=_BACKENDS, help="simulator of the fit's runs"),
        _arg("--work", metavar="DIR", help="keep the fit's simulations here (default: a temporary directory)"),
        _arg("--testbed", action="store_true", help="start from the capture testbed's network (see validate)"),
        _arg("--astra-sim", metavar="PATH", help="ASTRA-SIM binary"),
        _arg("--timeout", type=float, default=3600.0, help="seconds before a simulation is abandoned"),
        _arg("--ranks", metavar="MAP.yaml", help=_RANKS_HELP),
    )),
    _Command("capture", "run a real torch.distributed training job and record its packets (root)", _capture, (
        _arg("spec", help="capture spec YAML (a scenario without topology, plus a capture section)"),
        _arg("-o", "--output", help="capture directory (default captures/<name>)"),
        _arg("--force", action="store_true", help="replace an existing capture in the output directory"),
        _arg("--quiet", action="store_true", help="print only the summary"),
    )),
    _Command("cluster", "group runs and captures by traffic pattern (k-means on their features)", _cluster, (
        _arg("paths", nargs="+", help="sweep directories, run directories, analysed capture directories"),
        _arg("-k", type=int, help="number of clusters (default: best silhouette)"),
        _arg("-o", "--output", help="plot file (default results/cluster.png)"),
    )),
    _Command("dashboard", "one self-contained HTML page for a study, run, capture or validation", _dashboard, (
        _arg("path", help="a study results directory, a run directory, a capture directory or a validation "
                          "directory"),
        _arg("-o", "--output", help="HTML file (default PATH/dashboard.html)"),
        _arg("--serve", action="store_true", help="also serve it on 127.0.0.1 and print the URL"),
        _arg("--port", type=int, default=0, help="--serve: port (default: any free one)"),
    )),
    _Command("trace", "export a run's per-rank timeline as a Chrome trace (Perfetto, chrome://tracing)", _trace, (
        _arg("run", help="run directory (spans.parquet, traffic.parquet)"),
        _arg("-o", "--output", help="JSON file (default RUN/trace.json)"),
        _arg("--iterations", type=int, default=2,
             help="the first N iterations' time slots (finish / iterations each; default 2; 0: all)"),
        _arg("--ranks", type=int, default=64, help="at most this many ranks, the first ones (default 64; 0: all)"),
        _arg("--transfers", type=int, default=20_000,
             help="at most this many transfers drawn as flow arrows (default 20000; 0: none)"),
    )),
    _Command("counters", "export a run's link table as switch port counters (a generic counter CSV)", _counters, (
        _arg("run", help="run directory kept with --traffic links (on --backend ns3: every packet's bytes)"),
        _arg("-o", "--output", help="CSV file (default RUN/counters.csv)"),
        _arg("--sample", type=float, default=0.5, help="sample interval, seconds (default 0.5, as Zhejiang Lab's)"),
    )),
    _Command("models", "list the built-in models with parameter counts and GFLOPs", _models),
    _Command("schema", "the JSON Schema of a spec file, for editors (schemas/KIND.json)", _schema, (
        _arg("kind", nargs="?", default="scenario", choices=["scenario", "study", "cluster", "capture"],
             help="which spec: scenario (default), study, cluster or capture"),
        _arg("-o", "--output", help="write to this file instead of stdout"),
    )),
)


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (the usage is one `--help` away)."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {text} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `simstudy` parser: a subcommand per entry of `COMMANDS`."""
    parser = _Parser(prog="simstudy", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"simstudy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help)
        for flags, options in command.args:
            p.add_argument(*flags, **options)
        p.set_defaults(func=command.run)
    return parser


def _bad_input_types() -> tuple[type[BaseException], ...]:
    from simstudy.api import input_error_types

    return input_error_types()


def _failure_types() -> tuple[type[BaseException], ...]:
    from simstudy.backends import BackendError
    from simstudy.capturing.testbed import CaptureError

    return (BackendError, CaptureError)


def _say_error(text: str) -> None:
    """The one line of a failed command, whatever the message holds."""
    line = " ".join(text.split())
    print(f"simstudy: error: {line}", file=sys.stderr)


def _inputs(args: argparse.Namespace) -> list[str]:
    """The files and directories a command was given (what an error without a file name is about)."""
    names = ("spec", "study", "path", "real", "capture", "run", "workload", "network", "system", "topology", "paths")
    given: list[str] = []
    for name in names:
        value = getattr(args, name, None)
        given += [str(v) for v in value] if isinstance(value, list) else [str(value)] if value else []
    return given or [args.command]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    from pydantic import ValidationError

    try:
        with warnings.catch_warnings():
            from simstudy.traffic.pcap import PcapWarning

            warnings.simplefilter("ignore", PcapWarning)  # the commands print them as "warning:" lines
            return func(args)
    except _bad_input_types() as exc:
        _say_error(str(exc))
        return EXIT_BAD_INPUT
    except _failure_types() as exc:
        _say_error(str(exc))
        return EXIT_FAILED
    except ValidationError as exc:  # a spec built from inputs elsewhere than a file
        from simstudy.spec import spec_error

        if os.environ.get("SIMSTUDY_TRACEBACK"):
            raise
        _say_error(f"{', '.join(_inputs(args))}: {spec_error(exc, None, None, None)}")
        return EXIT_BAD_INPUT
    except (ValueError, OSError) as exc:  # from the inputs, in a place that does not name them
        if os.environ.get("SIMSTUDY_TRACEBACK"):
            raise
        filename = getattr(exc, "filename", None)
        if filename:
            _say_error(f"{filename}: {getattr(exc, 'strerror', None) or exc}")
        else:  # a message that names its input stays as it is
            text = str(exc)
            named = any(given in text for given in _inputs(args))
            _say_error(text if named else f"{', '.join(_inputs(args))}: {text}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("simstudy: interrupted; finished runs are kept, run the same command again to resume",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
