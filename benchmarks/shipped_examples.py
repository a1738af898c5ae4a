"""flowsim on ASTRA-SIM's own shipped examples, tried as a new user would.

ASTRA-SIM's source tree ships microbenchmark workloads (1 MB all-reduce, all-gather,
reduce-scatter and all-to-all on 4, 8 and 16 NPUs), analytical network configs (rings of 4, 8
and 16 NPUs, and the 8-NPU switch of its HGX-H100-validated example) and native-collective
system configs (Ring_4chunks: 4 chunks, 1 active; HGX-H100-validated: 4 chunks, 2 active,
localBWAware). Every workload runs on every network of its NPU count with every system config:
32 cases. Each runs on both ASTRA-SIM binaries and on flowsim in each congestion mode; the table
prints the finish times and flowsim's relative difference from the binary its mode models
(`unaware` -> unaware binary, `aware` -> aware binary, `fluid` -> the nearer of the two).

Usage: ASTRA_SIM_BIN=... python benchmarks/shipped_examples.py [--examples DIR] [--modes fluid,unaware,aware]
(DIR defaults to the `examples/` directory of the ASTRA-SIM tree the binary was built in.)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from simstudy.backends import AstraSimBackend, FlowsimBackend
from simstudy.backends.locate import find_astra_sim
from simstudy.compiler import Bundle

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
SYSTEMS = ("Ring_4chunks", "HGX-H100-validated")


def examples_dir(binary: Path) -> Path | None:
    """The `examples/` directory of the ASTRA-SIM tree a binary was built in."""
    for parent in binary.parents:
        if (parent / "examples" / "workload" / "microbenchmarks").is_dir():
            return parent / "examples"
    return None


def networks(examples: Path) -> dict[int, list[Path]]:
    """NPU count -> the shipped analytical network configs of that size."""
    out: dict[int, list[Path]] = {}
    for path in sorted((examples / "network" / "analytical").glob("*.yml")):
        counts = [line for line in path.read_text().splitlines() if line.startswith("npus_count")]
        n = int(counts[0].split("[")[1].split("]")[0]) if counts else 0
        out.setdefault(n, []).append(path)
    return out


def cases(examples: Path) -> list[tuple[str, Bundle]]:
    """Every (workload, network, system) combination of matching NPU count."""
    memory = examples / "remote_memory" / "analytical" / "no_memory_expansion.json"
    out: list[tuple[str, Bundle]] = []
    nets = networks(examples)
    for coll in COLLECTIVES:
        for wl in sorted((examples / "workload" / "microbenchmarks" / coll).glob("*npus_1MB"),
                         key=lambda p: int(p.name.split("npus")[0])):
            n = int(wl.name.split("npus")[0])
            for net in nets.get(n, []):
                for system in SYSTEMS:
                    sys_path = examples / "system" / "native_collectives" / f"{system}.json"
                    name = f"{coll} {n} {net.stem} / {system}"
                    out.append((name, Bundle(wl / coll, net, sys_path, memory)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--examples", type=Path, help="ASTRA-SIM's examples/ directory")
    parser.add_argument("--modes", default="fluid,unaware,aware", help="flowsim congestion modes to run")
    args = parser.parse_args()
    unaware = find_astra_sim()
    aware = find_astra_sim(aware=True)
    if unaware is None or aware is None:
        sys.exit("no ASTRA-SIM binaries: set ASTRA_SIM_BIN to the unaware one (the aware one beside it)")
    examples = args.examples or examples_dir(unaware)
    if examples is None or not examples.is_dir():
        sys.exit("cannot find ASTRA-SIM's examples/ directory: give --examples DIR")
    modes = [m for m in args.modes.split(",") if m]
    rows: list[tuple[str, int, int, dict[str, int]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i, (name, bundle) in enumerate(cases(examples)):
            u = AstraSimBackend(unaware).run(bundle, root / f"{i}u", timeout_s=600).finish_ns
            a = AstraSimBackend(aware, aware=True).run(bundle, root / f"{i}a", timeout_s=600).finish_ns
            f = {m: FlowsimBackend(congestion=m).run(bundle, root / f"{i}f{m}", timeout_s=600).finish_ns for m in modes}
            rows.append((name, u, a, f))
    print(f"ASTRA-SIM examples: {examples}")
    head = f"{'case':<58} {'unaware ns':>11} {'aware ns':>11}"
    for m in modes:
        head += f" {m + ' ns':>11} {'diff':>8}"
    print(head)
    within = dict.fromkeys(modes, 0)
    worst = dict.fromkeys(modes, 0.0)
    for name, u, a, f in rows:
        line = f"{name:<58} {u:>11,} {a:>11,}"
        for m in modes:
            refs = {"unaware": [u], "aware": [a]}.get(m, [u, a])
            diff = min(((f[m] - r) / r for r in refs), key=abs)
            within[m] += abs(diff) <= 0.01
            worst[m] = max(worst[m], abs(diff))
            line += f" {f[m]:>11,} {diff:>+8.2%}"
        print(line)
    for m in modes:
        ref = {"unaware": "the unaware binary", "aware": "the aware binary"}.get(m, "the nearer binary")
        print(f"flowsim {m}: within 1% of {ref} in {within[m]} of {len(rows)} cases; worst {worst[m]:.2%}")


if __name__ == "__main__":
    main()
