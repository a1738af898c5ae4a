"""Cut the Zhejiang Lab switch-counter excerpt in tests/data/zhejiang/ from a clone of
github.com/zhejianglab/Zhejiang-Lab-Cluster-Traces (CC-BY 4.0; see tests/data/zhejiang/README.md).

    python tests/data/make_zhejiang_excerpt.py PATH/TO/Zhejiang-Lab-Cluster-Traces/cluster_2000_A100

Keeps six ports of leaf switch Leaf-1 (four server-facing ports of different loads and two
400 GbE uplinks to the spines) for five minutes of the hour 2024-05-24 00:00 (rows as they are,
unchanged), and the rows of the topology sheet (cluster_2000_A100.xlsx, "cluster topology") for
Leaf-1 as topology.csv. Needs openpyxl to read the sheet.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

HOUR = "2024052400"
LEAF = "NH-DC-NM129-B03-ROCE-Leaf-1_GPU_S9825"
PORTS = ("Leaf-1_15_1", "Leaf-1_7_1", "Leaf-1_20_2", "Leaf-1_2_2", "Leaf-1_42", "Leaf-1_62")
START_MS, END_MS = 1716480300000, 1716480600000  # 00:05:00 to 00:10:00 (UTC+8), five minutes
OUT = Path(__file__).resolve().parent / "zhejiang"


def main(source: Path) -> None:
    out = OUT / HOUR / LEAF
    out.mkdir(parents=True, exist_ok=True)
    for port in PORTS:
        lines = (source / "trafficinfo" / HOUR / LEAF / f"{port}.csv").read_text(encoding="utf-8").splitlines()
        keep = [lines[0]] + [ln for ln in lines[1:] if START_MS <= int(ln.split(",")[1]) < END_MS]
        (out / f"{port}.csv").write_text("\n".join(keep) + "\n", encoding="utf-8")
    topo = pd.read_excel(source / "cluster_2000_A100.xlsx", sheet_name="cluster topology")
    topo = topo[topo["switchname"].astype(str).str.contains(r"-Leaf-1\.GPU", regex=True)]
    topo.to_csv(OUT / "topology.csv", index=False)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"{OUT}: {len(PORTS)} ports, {len(topo)} topology rows, {total:,} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
