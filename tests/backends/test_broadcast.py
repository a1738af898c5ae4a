"""Broadcast collectives carry their bytes: ASTRA-SIM c459ab6 does not simulate a broadcast (it
waits the node's duration), and both backends keep that timing, but the table now holds the
broadcast's messages (a chain from the root through the members in ring order), spread over that
time, so its bytes reach every analysis. They used to vanish: flowsim made it a delay with no
rows, and the astrasim table skipped it."""

from __future__ import annotations

from pathlib import Path

import pytest

from simstudy import chakra
from simstudy.backends import AstraSimBackend, FlowsimBackend, RunResult
from simstudy.backends.flowsim import FULL
from simstudy.backends.locate import find_astra_sim
from simstudy.compiler import Bundle
from tests.backends.bundles import collective_node, write_bundle
from tests.backends.fastpaths import MODES, assert_same, run_paths

SIZE = 3 << 20


def bundle(tmp: Path, *, root: int | None = None, groups: bool = False) -> Bundle:
    """8 ranks on a switch: a broadcast of SIZE bytes taking 40 us, then a 1 MiB all-reduce; with
    `groups`, each half of the ranks broadcasts in its own group."""
    traces = []
    for r in range(8):
        group = ("1" if r < 4 else "2") if groups else None
        bcast = collective_node(0, "broadcast", SIZE, group=group)
        bcast.duration_micros = 40
        if root is not None:
            bcast.attrs.append(chakra.comm_src(root))
        traces.append([bcast, collective_node(1, "all_reduce", 1 << 20, deps=(0,), group=group)])
    return write_bundle(tmp, [("Switch", 8, 50.0, 500.0)], traces,
                        groups={"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]} if groups else None)


def broadcast_rows(result: RunResult) -> list[tuple[int, int, int]]:
    t = result.traffic
    b = t[t["op"].astype(str) == "broadcast"]
    return sorted(zip(b["src"].tolist(), b["dst"].tolist(), b["bytes"].tolist(), strict=True))


@pytest.mark.parametrize("mode", MODES)
def test_flowsim_writes_the_broadcast(mode: str, tmp_path: Path) -> None:
    b = bundle(tmp_path / "b")
    result = FlowsimBackend(congestion=mode).run(b, tmp_path / "f")
    assert broadcast_rows(result) == [(r, r + 1, SIZE) for r in range(7)]
    t = result.traffic
    rows = t[t["op"].astype(str) == "broadcast"]
    assert rows["t_start_s"].min() == 0.0 and rows["t_end_s"].max() == pytest.approx(40e-6)
    assert result.output.total_bytes == int(t["bytes"].sum()) > 7 * SIZE
    assert all(r.finish_ns > 40_000 for r in result.ranks)
    assert_same(run_paths(b, tmp_path / "p", mode))  # rank 0 standing for all writes every rank's part


def test_the_root_and_the_groups(tmp_path: Path) -> None:
    result = FlowsimBackend(shortcuts=FULL).run(bundle(tmp_path / "b", root=5, groups=True), tmp_path / "f")
    # group 1 from its first member, group 2 from rank 5 (comm_src): 5 -> 6 -> 7 -> 4
    assert broadcast_rows(result) == sorted([(0, 1, SIZE), (1, 2, SIZE), (2, 3, SIZE),
                                             (5, 6, SIZE), (6, 7, SIZE), (7, 4, SIZE)])


@pytest.mark.astrasim
@pytest.mark.parametrize("groups", [False, True])
def test_both_backends_write_the_same_broadcast(groups: bool, tmp_path: Path) -> None:
    binary = find_astra_sim()
    if binary is None:
        pytest.skip("no ASTRA-SIM binary (set ASTRA_SIM_BIN)")
    b = bundle(tmp_path / "b", groups=groups)
    a = AstraSimBackend(binary).run(b, tmp_path / "a", timeout_s=120)
    f = FlowsimBackend(congestion="unaware").run(b, tmp_path / "f")
    assert [r.finish_ns for r in f.ranks] == [r.finish_ns for r in a.ranks]
    assert broadcast_rows(a) == broadcast_rows(f) and len(broadcast_rows(a)) == (6 if groups else 7)
    cols = ["src", "dst", "bytes", "t_start_s", "t_end_s"]
    fa = a.traffic[a.traffic["op"].astype(str) == "broadcast"][cols].sort_values(cols).reset_index(drop=True)
    ff = f.traffic[f.traffic["op"].astype(str) == "broadcast"][cols].sort_values(cols).reset_index(drop=True)
    assert ((fa - ff).abs().max() < 1e-12).all()
