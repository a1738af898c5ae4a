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
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

from simstudy import layout
from simstudy.version import __version__

if TYPE_CHECKING:
    import http.server

    from pydantic import BaseModel

    from simstudy.backends.base import Progress
    from simstudy.sweeps import Expansion

B = TypeVar("B", bound="BaseModel")

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
    from simstudy.spec import BackendSpec, SpecError

    raw = [args.workload, args.network, args.system]
    if args.spec and (any(raw) or args.topology):
        raise SpecError(None, "", "give either a scenario spec or --workload/--network/--system, not both")
    spec = _backend_spec(BackendSpec, name=args.backend, aware=args.aware, congestion=args.congestion,
                         timeout_s=args.timeout, traffic=args.traffic, traffic_bin_s=args.traffic_bin)
    bar = _progress_bar(args.quiet or args.backend == "astrasim")
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
        result = api.run(given, out, backend=spec, astra_sim=args.astra_sim, progress=bar)
    finally:
        bar.close()
    times = result.times
    finish, exposed = times["finish_ns"], times["exposed_comm_ns"]
    print(f"{result.backend} ({result.backend_version}) -> {out}/")
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
          "congestion": "--congestion", "name": "--backend", "aware": "--aware"}


def _backend_spec(cls: type[B], **values: object) -> B:
    """The backend options given as flags; a bad value is a SpecError naming the flag."""
    from pydantic import ValidationError

    from simstudy.spec import spec_error

    try:
        return cls.model_validate(values)
    except ValidationError as exc:
        raise spec_error(exc, values, None, None, cls, fields=_FLAGS) from None


def _print_expansion(expansion: Expansion, *, first: int) -> None:
    import yaml

    keys = expansion.unique_keys
    print(f"{expansion.total} combinations: {len(expansion.points)} scenarios ({len(keys)} distinct runs), "
          f"{len(expansion.skipped)} skipped; backend {expansion.study.backend_spec.key}")
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

    t0 = time.perf_counter()
    study = override(load_study(args.study), args.study, backend=args.backend, aware=True if args.aware else None,
                     congestion=args.congestion, sets=args.set)
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
                     progress=not args.quiet)
    assert done.sweep is not None
    result = done.sweep
    exp = result.expansion
    c = result.counts
    print(f"{study.name}: {exp.total} combinations, {len(exp.points)} scenarios, {len(exp.skipped)} skipped; "
          f"runs: {c['ok']} done, {c['cached']} cached, {c['failed']} failed (backend {study.backend_spec.key})")
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


class _StageBar:
    """A tqdm bar over the stages of a long command: each message is a stage (its description)."""

    def __init__(self, total: int, *, enabled: bool = True) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, disable=not enabled, unit="step", dynamic_ncols=True, leave=True,
                        bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} [{elapsed}]")
        self.first = True

    def __call__(self, text: str) -> None:
        if not self.first:
            self.bar.update(1)
        self.first = False
        self.bar.set_description_str(text[:70])

    def close(self) -> None:
        self.bar.update(self.bar.total - self.bar.n)
        self.bar.close()


def _validate_counters(args: argparse.Namespace) -> int:
    from simstudy import api
    from simstudy.report.counters import render_counter_validation
    from simstudy.spec import BackendSpec, SpecError

    if not args.spec:
        raise SpecError(None, "--spec", "switch counters record no scenario: give the one to simulate with --spec")
    real = Path(args.real)
    out = Path(args.output) if args.output else (real if real.is_dir() else real.parent) / layout.VALIDATION_DIR
    bar = _StageBar(3, enabled=not args.quiet)
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
    from simstudy.spec import BackendSpec
    from simstudy.traffic.counters import is_counters

    if is_counters(args.real):
        return _validate_counters(args)

    out = Path(args.output) if args.output else Path(args.real) / layout.VALIDATION_DIR
    tolerances = _tolerances(args.tolerance)
    try:
        bar = _StageBar(4, enabled=not args.quiet)
        try:
            verdict = api.validate(args.real, args.spec, out,
                                   backend=_backend_spec(BackendSpec, name=args.backend, timeout_s=args.timeout),
                                   astra_sim=args.astra_sim, tolerances=tolerances, skip=args.skip,
                                   count=args.count, ranks=args.ranks, judge_transport=args.judge_transport,
                                   testbed=True if args.testbed else None, progress=bar)
        finally:
            bar.close()
    except ValueError as exc:
        if "tolerance" in str(exc) or "metric" in str(exc):
            from simstudy.spec import SpecError

            raise SpecError(None, "--tolerance/--skip", str(exc)) from None
        raise
    v = verdict.validation
    path = render_validation(v, out)
    print(v.report.to_markdown())
    for w in v.real.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"report {path}")
    return EXIT_OK if v.report.passed else EXIT_FAILED


def _capture(args: argparse.Namespace) -> int:
    from simstudy import api
    from simstudy.spec.capture import CaptureSpec
    from simstudy.spec.load import load_spec

    spec = load_spec(CaptureSpec, args.spec)
    bar = _StageBar(5, enabled=not args.quiet)
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


def _field_help(name: str) -> str:
    from simstudy.spec import BackendOptions

    return BackendOptions.model_fields[name].description or name


class _Bar:
    """A tqdm bar fed with a run's `Progress` (nothing when quiet): the fraction of its transfers
    done, the simulated time reached and how fast it goes (simulated time and transfers per
    second), and the ETA tqdm makes of the fraction."""

    def __init__(self, quiet: bool) -> None:
        self.bar: object | None = None
        self.quiet = quiet

    def __call__(self, progress: Progress) -> None:
        if self.quiet:
            return
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=1000, desc="simulating", file=sys.stderr,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining},{postfix}")
        bar = self.bar
        assert isinstance(bar, tqdm)
        bar.set_postfix_str(_rates(progress), refresh=False)
        bar.update(max(0, int(progress.fraction * 1000) - bar.n))

    def close(self) -> None:
        bar = self.bar
        if bar is not None:
            bar.refresh()  # type: ignore[attr-defined]
            bar.close()  # type: ignore[attr-defined]


def _rates(p: Progress) -> str:
    """' sim 12.345 ms at 0.41 ms/s, 1.2 M transfers at 35.1 k/s'"""

    def si(x: float) -> str:
        for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if x >= div:
                return f"{x / div:.1f} {unit}"
        return f"{x:.0f}"

    return (f" sim {p.sim_ns / 1e6:.3f} ms at {p.sim_ns_per_s / 1e6:.3g} ms/s, "
            f"{si(p.transfers)} transfers at {si(p.transfers_per_s)}/s")


def _progress_bar(quiet: bool) -> _Bar:
    return _Bar(quiet)


def _congestion_option(p: argparse.ArgumentParser, default: str | None) -> None:
    from simstudy.spec import BackendOptions

    field = BackendOptions.model_fields["congestion"]
    fallback = default or "the study's backend_options, else fluid"
    p.add_argument("--congestion", choices=["fluid", "unaware", "aware"], default=default,
                   help=f"{field.description} (default: {fallback})")


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (the usage is one `--help` away)."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {text} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="simstudy", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"simstudy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("compile", help="compile a scenario into Chakra ET files and ASTRA-SIM configs")
    p.add_argument("spec", help="scenario YAML file")
    p.add_argument("-o", "--output", help="bundle directory (default results/bundles/<spec name>)")
    p.set_defaults(func=_compile)

    p = sub.add_parser("run", help="simulate a scenario (or an ASTRA-SIM input set) and write its traffic")
    p.add_argument("spec", nargs="?", help="scenario YAML file (or give --workload/--network/--system)")
    p.add_argument("-o", "--output", help="run directory (default results/runs/<name>)")
    p.add_argument("--backend", default="flowsim", choices=["flowsim", "astrasim", "ns3"],
                   help="simulator (default flowsim; ns3: the packet network, needs the ns3 wheel)")
    p.add_argument("--astra-sim", metavar="PATH",
                   help="ASTRA-SIM binary (default $ASTRA_SIM_BIN or the submodule build)")
    p.add_argument("--aware", action="store_true",
                   help="astrasim: use the congestion-aware binary (the same as --congestion aware)")
    _congestion_option(p, "fluid")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds before a run is abandoned")
    p.add_argument("--traffic", choices=["rows", "links", "none", "pcap"], default="rows",
                   help=_field_help("traffic") + " (default: rows)")
    p.add_argument("--traffic-bin", type=float, default=1e-3, metavar="SECONDS",
                   help=_field_help("traffic_bin_s") + " (default: 0.001)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--workload", help="ET prefix: <prefix>.<rank>.et (an existing ASTRA-SIM input set)")
    p.add_argument("--network", help="ASTRA-SIM network.yml")
    p.add_argument("--system", help="ASTRA-SIM system.json")
    p.add_argument("--remote-memory", help="ASTRA-SIM remote memory JSON")
    p.add_argument("--comm-group", help="ASTRA-SIM communicator group JSON")
    p.add_argument("--topology", help="simstudy's network as links (topology.json, as `compile` writes it); "
                                      "default: the network of network.yml")
    p.set_defaults(func=_run)

    p = sub.add_parser("sweep", help="run every scenario of a study (resumable) and summarise them")
    p.add_argument("study", help="study YAML file (base scenario + axes)")
    p.add_argument("-o", "--output", help="results directory (default results/<study name>)")
    p.add_argument("--executor", default="local", choices=["local", "dask", "slurm"],
                   help="where runs execute: local processes, a Dask scheduler, or SLURM (one sbatch job array)")
    p.add_argument("--backend", choices=["flowsim", "astrasim", "ns3"], help="override the study's backend")
    p.add_argument("--aware", action="store_true", help="astrasim: the congestion-aware binary")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   help="override a base scenario value, e.g. topology.bandwidth_gbps=100 (VALUE is YAML; repeatable)")
    p.add_argument("--workers", type=int, help="local: processes (default: one per core)")
    p.add_argument("--scheduler", help="dask: scheduler address, e.g. tcp://127.0.0.1:8786")
    p.add_argument("--connect-timeout", type=float, default=30.0, help="dask: seconds to wait for the scheduler")
    p.add_argument("--partition", help="slurm: partition (default: the cluster's default)")
    p.add_argument("--account", help="slurm: account to charge")
    p.add_argument("--walltime", default="01:00:00", help="slurm: time limit of each run (default 01:00:00)")
    p.add_argument("--cores", type=int, default=1, help="slurm: CPUs per run (default 1; flowsim uses one)")
    p.add_argument("--mem", default="4G", help="slurm: memory per run (default 4G)")
    p.add_argument("--jobs", type=int, help="slurm: at most this many runs at once (default: no limit)")
    p.add_argument("--astra-sim", metavar="PATH", help="ASTRA-SIM binary for studies with backend astrasim")
    p.add_argument("--baseline", metavar="FILE", help="summary.parquet to compare with; exit 1 if a metric moved")
    p.add_argument("--dry-run", action="store_true", help="print the scenarios and what is skipped; run nothing")
    p.add_argument("--show", type=int, default=3, help="dry run: how many resolved scenarios to print")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no skipped list")
    p.add_argument("--no-report", action="store_true", help="skip report.md and plots")
    _congestion_option(p, None)
    p.set_defaults(func=_sweep)

    ranks_help = ("YAML: `ranks` (rank -> ip or ip:port), optional `servers` (ranks) and `control` (endpoints); "
                  "replaces the roles found from the traffic or meta.json")
    p = sub.add_parser("analyze", help="analyse a capture directory (pcaps), a run directory or switch counters")
    p.add_argument("path", help="capture directory (pcap/pcapng files, meta.json), run directory, or switch counters "
                                "(Zhejiang Lab's per-port CSVs, or a CSV of time, device, port, rx_bytes, tx_bytes)")
    p.add_argument("-o", "--output", help="where features.json, plots and analysis.md go (default PATH/analysis)")
    p.add_argument("--ranks", metavar="MAP.yaml", help=ranks_help)
    p.add_argument("--count", default="payload", choices=["payload", "ip"],
                   help="capture bytes to analyse: TCP/UDP payload (default; what the application sent, and "
                        "what the period is found from without ACKs between bursts) or IP bytes as captured")
    p.set_defaults(func=_analyze)

    p = sub.add_parser("validate", help="simulate a captured job and compare, metric by metric")
    p.add_argument("--real", required=True, help="capture directory of the real job, or its switch counters "
                                                  "(compared with the simulation's link table; needs --spec)")
    p.add_argument("--spec", help="scenario YAML (default: the scenario in the capture's meta.json)")
    p.add_argument("-o", "--output", help="output directory (default REAL/validation)")
    p.add_argument("--backend", default="flowsim", choices=["flowsim", "astrasim", "ns3"], help="simulator")
    p.add_argument("--testbed", action="store_true",
                   help="simulate the capture testbed's network (veths to a bridge, tbf on both ends, losses at "
                        "receivers) instead of the recorded switch; the default with --backend ns3")
    p.add_argument("--astra-sim", metavar="PATH", help="ASTRA-SIM binary")
    p.add_argument("--tolerance", action="append", default=[], metavar="METRIC=VALUE",
                   help="override a tolerance, e.g. period_s=0.05 (repeatable)")
    p.add_argument("--skip", action="append", default=[], metavar="METRIC", help="leave a metric out (repeatable)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds before the simulation is abandoned")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--count", default="payload", choices=["payload", "ip"],
                   help="capture bytes to compare: TCP/UDP payload (default; what the simulator models) or "
                        "IP bytes as captured (headers and ACKs included)")
    p.add_argument("--ranks", metavar="MAP.yaml", help=ranks_help)
    p.add_argument("--judge-transport", action="store_true",
                   help="let transport-level metrics (sub-iteration bursts, 1 ms throughput) decide the verdict too")
    p.set_defaults(func=_validate)

    p = sub.add_parser("capture", help="run a real torch.distributed training job and record its packets (root)")
    p.add_argument("spec", help="capture spec YAML (a scenario without topology, plus a capture section)")
    p.add_argument("-o", "--output", help="capture directory (default captures/<name>)")
    p.add_argument("--force", action="store_true", help="replace an existing capture in the output directory")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.set_defaults(func=_capture)

    p = sub.add_parser("cluster", help="group runs and captures by traffic pattern (k-means on their features)")
    p.add_argument("paths", nargs="+", help="sweep directories, run directories, analysed capture directories")
    p.add_argument("-k", type=int, help="number of clusters (default: best silhouette)")
    p.add_argument("-o", "--output", help="plot file (default results/cluster.png)")
    p.set_defaults(func=_cluster)

    p = sub.add_parser("dashboard", help="one self-contained HTML page for a study, run, capture or validation")
    p.add_argument("path", help="a study results directory, a run directory, a capture directory or a validation "
                                "directory")
    p.add_argument("-o", "--output", help="HTML file (default PATH/dashboard.html)")
    p.add_argument("--serve", action="store_true", help="also serve it on 127.0.0.1 and print the URL")
    p.add_argument("--port", type=int, default=0, help="--serve: port (default: any free one)")
    p.set_defaults(func=_dashboard)

    p = sub.add_parser("trace", help="export a run's per-rank timeline as a Chrome trace (Perfetto, chrome://tracing)")
    p.add_argument("run", help="run directory (spans.parquet, traffic.parquet)")
    p.add_argument("-o", "--output", help="JSON file (default RUN/trace.json)")
    p.add_argument("--iterations", type=int, default=2,
                   help="the first N iterations' time slots (finish / iterations each; default 2; 0: all)")
    p.add_argument("--ranks", type=int, default=64, help="at most this many ranks, the first ones (default 64; 0: all)")
    p.add_argument("--transfers", type=int, default=20_000,
                   help="at most this many transfers drawn as flow arrows (default 20000; 0: none)")
    p.set_defaults(func=_trace)

    p = sub.add_parser("models", help="list the built-in models with parameter counts and GFLOPs")
    p.set_defaults(func=_models)

    p = sub.add_parser("schema", help="the JSON Schema of a spec file, for editors (schemas/KIND.json)")
    p.add_argument("kind", nargs="?", default="scenario", choices=["scenario", "study", "cluster", "capture"],
                   help="which spec: scenario (default), study, cluster or capture")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.set_defaults(func=_schema)
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
    names = ("spec", "study", "path", "real", "run", "workload", "network", "system", "topology", "paths")
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
