"""The `simstudy` command: parse arguments, call library functions, print, map errors to exit codes.

Exit codes: 0 success, 1 a check failed (e.g. a regression or validation), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from simstudy import __version__

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _compile(args: argparse.Namespace) -> int:
    from simstudy.compile import compile_scenario
    from simstudy.spec import load_scenario

    scenario = load_scenario(args.spec)
    out = Path(args.output) if args.output else Path("results/bundles") / Path(args.spec).stem
    result = compile_scenario(scenario, out, source=args.spec)
    b = result.bundle
    print(
        f"compiled {args.spec} -> {b.directory}/ : {result.scenario.npus} ranks, "
        f"{result.et_bytes / 1e6:.2f} MB of ET ({b.name}.<rank>.et), {result.seconds:.2f} s"
    )
    return EXIT_OK


def _models(args: argparse.Namespace) -> int:
    from simstudy import zoo

    rows = zoo.list_models()
    print(f"{'model':<16} {'family':<12} {'params':>15} {'GFLOPs/sample':>14}  description")
    for r in rows:
        print(f"{r.name:<16} {r.family:<12} {r.params:>15,} {r.gflops:>14.3f}  {r.description}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="simstudy", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"simstudy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("compile", help="compile a scenario into Chakra ET files and ASTRA-SIM configs")
    p.add_argument("spec", help="scenario YAML file")
    p.add_argument("-o", "--output", help="bundle directory (default results/bundles/<spec name>)")
    p.set_defaults(func=_compile)

    p = sub.add_parser("models", help="list the built-in models with parameter counts and GFLOPs")
    p.set_defaults(func=_models)
    return parser


def _bad_input_types() -> tuple[type[BaseException], ...]:
    from simstudy.compile import BundleError, CompileError
    from simstudy.spec import SpecError

    return (SpecError, CompileError, BundleError, FileNotFoundError)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return func(args)
    except _bad_input_types() as exc:
        print(f"simstudy: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("simstudy: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
