"""Switch counters as a traffic source: Zhejiang Lab's per-port series (an excerpt of the real
data, tests/data/zhejiang/, CC-BY 4.0) and the generic CSV; the analyses at their resolution;
and validation against a simulated run's link table read as counters at the same sampling."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simstudy.backends import simulate
from simstudy.linktable import read_links
from simstudy.spec import BackendSpec, load_scenario
from simstudy.traffic.counter_features import analyze_counters
from simstudy.traffic.counters import CountersError, export_links, is_counters, load_counters, port_capacity_gbps
from simstudy.validation import validate_counters

ZHEJIANG = Path(__file__).resolve().parents[1] / "data" / "zhejiang"
LEAF1 = "NH-DC-NM129-B03-ROCE-Leaf-1.GPU.S9825"

JOB = """
name: {name}
model: {{zoo: small_cnn}}
parallelism: {{dp: 4}}
topology: {{kind: switch, npus: 4, bandwidth_gbps: {gbps}, latency_ns: 1000}}
system: {{peak_tflops: 0.05, efficiency: 0.5}}
training: {{batch_size_per_worker: 16, iterations: 30}}
"""


def test_zhejiang_excerpt_reads_with_tiers_servers_and_speeds() -> None:
    c = load_counters(ZHEJIANG)
    assert c.format == "zhejiang" and len(c.ports) == 6 and not c.warnings
    assert 0.5 < c.sample_s < 0.65  # about every 0.58 s
    t = c.table
    assert set(t["tier"]) == {"nic", "spine"}
    server = t[t["port"] == "TwoHundredGigE1/0/15:1"]
    assert set(server["peer"]) == {"NH-DC-NM129-A10-20U-GPU-29"} and set(server["capacity_gbps"]) == {200.0}
    assert set(t[t["port"] == "FourHundredGigE1/0/42"]["capacity_gbps"]) == {400.0}
    # the bytes are the files' own (every row but each port's first)
    raw = pd.read_csv(ZHEJIANG / "2024052400" / "NH-DC-NM129-B03-ROCE-Leaf-1_GPU_S9825" / "Leaf-1_15_1.csv")
    assert server["rx_bytes"].sum() == raw["InOctets"].iloc[1:].sum()
    assert port_capacity_gbps("M-GigabitEthernet0/0/0") == 1.0 and math.isnan(port_capacity_gbps("eth0"))


def test_zhejiang_analyses_per_port_and_tier() -> None:
    f = analyze_counters(load_counters(ZHEJIANG))
    busiest = f.port(f"{LEAF1}:TwoHundredGigE1/0/15:1")
    assert f.hottest[0] in (busiest.key, f"{LEAF1}:TwoHundredGigE1/0/7:1")
    assert 0.25 < busiest.mean_utilization < 0.4 < busiest.peak_utilization <= 1.0
    assert math.isfinite(busiest.period_s) and 2 * f.grid_s <= busiest.period_s and busiest.period_strength >= 0.2
    assert busiest.bytes_per_period == pytest.approx(
        (busiest.rx_bytes + busiest.tx_bytes) / f.duration_s * busiest.period_s, rel=0.01)
    nic = next(t for t in f.tiers if t.tier == "nic")
    assert nic.ports == 4 and nic.utilization.count == 2 * 4 * len(f.times_s)
    assert {"tier nic", "tier spine"} <= set(f.timelines)


def test_analyze_and_dashboard_commands_on_the_excerpt(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "simstudy", "analyze", str(ZHEJIANG), "-o", str(tmp_path / "a")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "6 ports" in proc.stdout and "tier nic: 4 ports" in proc.stdout and "period" in proc.stdout
    text = (tmp_path / "a" / "analysis.md").read_text()
    assert "TwoHundredGigE1/0/15:1" in text and "## Tiers" in text
    proc = subprocess.run([sys.executable, "-m", "simstudy", "dashboard", str(ZHEJIANG), "-o",
                           str(tmp_path / "d.html")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_generic_csv_cumulative_and_per_interval(tmp_path: Path) -> None:
    t = np.arange(0, 10.5, 0.5)
    per = np.where((np.arange(len(t)) % 4) == 1, 4e9, 1e8)  # a burst every 2 s
    per[0] = 0
    rows = pd.DataFrame({"time": t, "device": "leaf1", "port": "eth1", "rx_bytes": per, "tx_bytes": per / 2,
                         "capacity_gbps": 100.0, "tier": "nic"})
    rows.to_csv(tmp_path / "per.csv", index=False)
    cum = rows.assign(rx_bytes_total=np.cumsum(per) + 7e12, tx_bytes_total=np.cumsum(per / 2)).drop(
        columns=["rx_bytes", "tx_bytes"])
    cum.loc[12:, "tx_bytes_total"] -= cum["tx_bytes_total"].iloc[11]  # a counter reset: counts from 0
    cum.to_csv(tmp_path / "cum.csv", index=False)
    a, b = load_counters(tmp_path / "per.csv"), load_counters(tmp_path / "cum.csv")
    assert is_counters(tmp_path / "per.csv") and is_counters(tmp_path)
    assert a.table["rx_bytes"].sum() == b.table["rx_bytes"].sum() == per[1:].sum()
    assert any("reset" in w for w in b.warnings)
    f = analyze_counters(a)
    assert f.ports[0].period_s == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize("bad", ["time,device,port,rx_bytes,tx_bytes\n1,a,b,x,1\n2,a,b,1,1\n",
                                 "time,device,port,rx_bytes,tx_bytes\n1,a,b,5,5\n",
                                 "time,device,port,rx_bytes,tx_bytes\nnoon,a,b,1,1\n1,a,b,1,1\n"])
def test_bad_counter_files_are_one_clear_error(tmp_path: Path, bad: str) -> None:
    (tmp_path / "c.csv").write_text(bad)
    with pytest.raises(CountersError, match=r"c\.csv"):
        load_counters(tmp_path / "c.csv")
    proc = subprocess.run([sys.executable, "-m", "simstudy", "analyze", str(tmp_path / "c.csv")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Scenario A simulated with its link table, read as counters every 5 ms (its iteration is 45 ms)."""
    root = tmp_path_factory.mktemp("counters")
    for name, gbps in (("a", 1), ("b", 4)):
        (root / f"{name}.yaml").write_text(JOB.format(name=f"counters_{name}", gbps=gbps))
    simulate(load_scenario(root / "a.yaml"), root / "run_a", BackendSpec(traffic="links", traffic_bin_s=1e-4))
    export_links(read_links(root / "run_a" / "links.parquet"), 0.005).to_csv(root / "a.csv", index=False)
    return root, root / "a.csv"


def test_a_simulation_read_as_counters_validates_against_itself_and_not_another(
        exported: tuple[Path, Path]) -> None:
    root, csv = exported
    own = validate_counters(csv, root / "va", spec=root / "a.yaml")
    assert own.report.passed, own.report.to_markdown()
    assert any("period_s" in r.metric for r in own.report.rows)  # per port: periods and utilisation
    iteration_s = own.run.finish_ns * 1e-9 / own.scenario.training.iterations  # 45 ms
    assert own.real_features.ports[0].period_s == pytest.approx(iteration_s, rel=0.05)
    other = validate_counters(csv, root / "vb", spec=root / "b.yaml")  # links 4x faster
    assert not other.report.passed
    assert all(not r.passed for r in other.report.rows if "utilization" in r.metric)


def test_counters_without_matching_names_compare_by_tier(exported: tuple[Path, Path]) -> None:
    root, csv = exported
    renamed = pd.read_csv(csv)
    renamed["device"] = "leaf-" + renamed["device"]
    renamed["port"] = "TwentyFiveGigE1/0/" + renamed["port"]
    renamed.to_csv(root / "renamed.csv", index=False)
    v = validate_counters(root / "renamed.csv", root / "vr", spec=root / "a.yaml")
    assert v.report.passed and all(r.metric.startswith("tier switch") for r in v.report.rows), \
        v.report.to_markdown()
    proc = subprocess.run([sys.executable, "-m", "simstudy", "validate", "--real", str(root / "renamed.csv"),
                           "--spec", str(root / "b.yaml"), "-o", str(root / "vcli"), "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "FAIL" in proc.stdout, proc.stderr


def test_the_topology_sheet_as_the_dataset_ships_it(tmp_path: Path) -> None:
    """cluster_2000_A100.xlsx (sheet "cluster topology"), found above the hour's directory."""
    pytest.importorskip("openpyxl", reason="openpyxl is not installed (pip install '.[counters]')")
    import shutil

    root = tmp_path / "cluster_2000_A100"
    shutil.copytree(ZHEJIANG / "2024052400", root / "trafficinfo" / "2024052400")
    with pd.ExcelWriter(root / "cluster_2000_A100.xlsx") as xl:
        pd.read_csv(ZHEJIANG / "topology.csv").to_excel(xl, sheet_name="cluster topology", index=False)
    c = load_counters(root / "trafficinfo" / "2024052400")
    assert set(c.table[c.table["port"] == "TwoHundredGigE1/0/7:1"]["peer"]) == {"NH-DC-NM129-A05-20U-GPU-14"}


def test_simstudy_counters_exports_a_runs_links_as_the_counters_it_is_compared_with(
        exported: tuple[Path, Path], tmp_path: Path) -> None:
    """`simstudy counters RUN --sample S` writes the run's link table as the generic counter CSV
    (what `validate --real` compares against counters, kept in the validation's sim/), and it
    reads back with the bytes of the link table; a run without links is one error line, exit 2."""
    root, csv = exported
    out = tmp_path / "c.csv"
    proc = subprocess.run([sys.executable, "-m", "simstudy", "counters", str(root / "run_a"), "--sample", "0.005",
                           "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(csv))
    back = load_counters(out)
    links = read_links(root / "run_a" / "links.parquet")
    assert back.table["rx_bytes"].sum() == pytest.approx(links["bytes"].sum())
    own = validate_counters(csv, tmp_path / "v", spec=root / "a.yaml")
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "v" / "sim" / "counters.csv"), pd.read_csv(csv))
    assert own.report.passed
    (tmp_path / "norun").mkdir()
    proc = subprocess.run([sys.executable, "-m", "simstudy", "counters", str(tmp_path / "norun")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--traffic links" in proc.stderr, proc.stderr
