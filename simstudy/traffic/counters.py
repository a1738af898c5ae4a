"""Per-port counter series of switches: a traffic source of its own kind.

Operators of GPU clusters (RoCE at 200-400 Gbit/s) have no packet captures; they have the byte
counters of every switch port, read every fraction of a second. A counter series says how many
bytes each port received and sent in each sample interval, nothing about flows or ranks, so it
gets the analyses that make sense at its resolution (`simstudy.traffic.counter_features`).

Two formats are read:

* **Zhejiang Lab's** (github.com/zhejianglab/Zhejiang-Lab-Cluster-Traces, `cluster_2000_A100/`,
  CC-BY 4.0): one CSV per leaf-switch port (`<leaf dir>/Leaf-1_1_1.csv`, ...) with
  `SaveTime, SaveTimeUTC, DeviceName, PortName, InPkts, InOctets, OutPkts, OutOctets, InRatio,
  OutRatio`: the bytes in and out since the previous row, about every 0.5 s. Its topology
  sheet (`cluster_2000_A100.xlsx`, sheet "cluster topology", or the same columns as a CSV,
  `topology.csv`: `accessport, switchname, sysname, ...`) maps server-facing ports to servers.
  Server-facing ports are tier `nic` (the NIC-ToR links of simstudy's leaf-spine topologies),
  400 GbE uplinks tier `spine`, the management port `management`.
* **A generic CSV**: columns `time` (seconds, or a date-time), `device`, `port`, and either
  `rx_bytes, tx_bytes` (bytes since the previous sample of the port) or `rx_bytes_total,
  tx_bytes_total` (cumulative counters: differenced; a counter that goes down was reset and
  counts from 0); optional `capacity_gbps`, `tier`, `peer`. `rx` is what the port received from
  its peer, `tx` what it sent to it. `export_links` puts a simulated run's link table in this
  format (`simstudy counters RUN` writes it: on the packet network, every packet's bytes on the
  wire), `write_counters` writes it.

`load_counters(path)` reads either (a file, or a directory searched for them) into a `Counters`:
one row per (port, sample) with the sample's end time and length. The first sample of every
port (no interval known) is dropped; a sample after a gap keeps its bytes over its whole gap.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd

from simstudy.files import replacing

__all__ = [
    "COLUMNS",
    "Counters",
    "CountersError",
    "counters_from_frame",
    "export_links",
    "find_counter_files",
    "is_counters",
    "load_counters",
    "port_capacity_gbps",
    "write_counters",
]


class CountersError(ValueError):
    """Counter files that cannot be read: one line naming the file, the field and what was expected."""


#: Columns of `Counters.table` and their dtypes.
COLUMNS: Final[dict[str, str]] = {
    "device": "category",
    "port": "category",
    "t_s": "float64",  # end of the sample, seconds from the start of the series
    "interval_s": "float64",  # its length
    "rx_bytes": "float64",
    "tx_bytes": "float64",
    "capacity_gbps": "float64",
    "tier": "category",
    "peer": "category",  # what the port connects to (a server, a switch), "" when unknown
}
#: What each column of `Counters.table` means (the documentation's table reference is built from it).
MEANINGS: Final[dict[str, str]] = {
    "device": "switch name",
    "port": "port name on the switch",
    "t_s": "end of the sample, seconds from the start of the series",
    "interval_s": "length of the sample, seconds",
    "rx_bytes": "bytes the port received during the sample",
    "tx_bytes": "bytes the port sent during the sample",
    "capacity_gbps": "port speed, gigabits per second (from the file, or the port name)",
    "tier": "`nic` (server-facing), `spine` (uplink), `management`, or as given",
    "peer": "what the port connects to (a server, a switch), empty when unknown",
}
ZHEJIANG_HEADER: Final = ("SaveTime", "SaveTimeUTC", "DeviceName", "PortName", "InPkts", "InOctets", "OutPkts",
                          "OutOctets")
_GENERIC_NEED: Final = ("time", "device", "port")
_SPEEDS: Final = (("FourHundredGigE", 400.0), ("TwoHundredGigE", 200.0), ("HundredGigE", 100.0),
                  ("FiftyGigE", 50.0), ("TwentyFiveGigE", 25.0), ("FortyGigE", 40.0), ("TenGigE", 10.0),
                  ("GigabitEthernet", 1.0))
#: The topology file of a Zhejiang-format dataset, searched in the directory and its parents.
TOPOLOGY_FILES: Final = ("topology.csv", "cluster_2000_A100.xlsx")


@dataclass(frozen=True)
class Counters:
    """A counter series: `table` (see `COLUMNS`), where it came from and what was noticed."""

    path: Path
    format: str
    """The name of its entry of `FORMATS` (`zhejiang`, `csv`)."""
    table: pd.DataFrame
    t0_epoch_s: float
    """The start of the series (its first sample's start), seconds since the epoch (0 when the
    times are relative)."""
    files: tuple[Path, ...] = ()
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.path.name

    @property
    def sample_s(self) -> float:
        """The median sample interval."""
        return float(self.table["interval_s"].median()) if len(self.table) else math.nan

    @property
    def ports(self) -> list[tuple[str, str]]:
        keys = self.table[["device", "port"]].drop_duplicates()
        return [(str(d), str(p)) for d, p in keys.itertuples(index=False)]


def port_capacity_gbps(name: str) -> float:
    """A port's speed from its interface name (`TwoHundredGigE1/0/1:1` -> 200), NaN when unknown."""
    for prefix, gbps in _SPEEDS:
        if prefix in name:
            return gbps
    return math.nan


# ---------------------------------------------------------------------------------------------
# Finding and recognising counter files


def _header(path: Path) -> list[str]:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            line = f.readline()
    except OSError:
        return []
    return [c.strip().lstrip("\ufeff") for c in line.strip().split(",")]


@dataclass(frozen=True)
class CounterFormat:
    """One format of counter files: its name (`Counters.format`), how a CSV header is recognised,
    how its files are read, and what it expects (for the error when nothing is found)."""

    name: str
    recognise: Callable[[list[str]], bool]
    read: Callable[[Path, list[Path], Path | None], Counters]
    """(the path given, its counter files, the topology file given or None) -> the series"""
    expects: str


def _is_generic(head: list[str]) -> bool:
    return all(c in head for c in _GENERIC_NEED) and (
        {"rx_bytes", "tx_bytes"} <= set(head) or {"rx_bytes_total", "tx_bytes_total"} <= set(head))


def _kind(path: Path) -> str | None:
    head = _header(path)
    return next((f.name for f in FORMATS if f.recognise(head)), None)


def find_counter_files(path: Path) -> tuple[str, list[Path]] | None:
    """The counter CSVs at `path` (a file, or a directory and its subdirectories two levels down)
    and their format, or None when there are none (the first format of `FORMATS` found wins)."""
    if path.is_file():
        kind = _kind(path) if path.suffix.lower() == ".csv" else None
        return (kind, [path]) if kind else None
    if not path.is_dir():
        return None
    found: dict[str, list[Path]] = {f.name: [] for f in FORMATS}
    for pattern in ("*.csv", "*/*.csv", "*/*/*.csv"):
        for p in sorted(path.glob(pattern)):
            k = _kind(p)
            if k is not None:
                found[k].append(p)
        if any(found.values()):
            break
    return next(((f.name, found[f.name]) for f in FORMATS if found[f.name]), None)


def is_counters(path: str | Path) -> bool:
    """Whether `path` is a counter series (and no packet capture or run directory)."""
    path = Path(path)
    if path.is_dir() and any(p.suffix.lower() in (".pcap", ".pcapng", ".cap") for p in path.iterdir()):
        return False
    return find_counter_files(path) is not None


# ---------------------------------------------------------------------------------------------
# Reading


def load_counters(path: str | Path, *, topology: str | Path | None = None) -> Counters:
    """Read a counter series (see the module docstring); CountersError for anything else."""
    path = Path(path)
    if not path.exists():
        raise CountersError(f"{path}: no such file or directory")
    found = find_counter_files(path)
    if found is None:
        raise CountersError(f"{path}: no counter files: expected CSVs " + " or ".join(f.expects for f in FORMATS))
    kind, files = found
    return _FORMATS[kind].read(path, files, Path(topology) if topology else None)


def _topology_file(path: Path) -> Path | None:
    where = path if path.is_dir() else path.parent
    for d in (where, *list(where.parents)[:3]):
        for name in TOPOLOGY_FILES:
            if (d / name).is_file():
                return d / name
    return None


def _topology(path: Path) -> pd.DataFrame:
    """The topology sheet: switch name, port name and the server on it."""
    try:
        if path.suffix.lower() == ".xlsx":
            try:
                frame = pd.read_excel(path, sheet_name="cluster topology")
            except ImportError:
                raise CountersError(f"{path}: reading .xlsx needs openpyxl (pip install openpyxl), or give the "
                                    "sheet as topology.csv") from None
        else:
            frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise CountersError(f"{path}: cannot read the topology: {exc}") from None
    need = {"switchname", "sysname"}
    port_col = "portname" if "portname" in frame.columns else "accessport"
    if not need <= set(frame.columns) or port_col not in frame.columns:
        raise CountersError(f"{path}: topology columns {list(frame.columns)}; expected accessport (or portname), "
                            "switchname, sysname")
    out = frame[["switchname", port_col, "sysname"]].dropna()
    return out.set_axis(["device", "port", "peer"], axis=1).astype(str)


def _frame(rows: dict[str, object]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(rows[c]).astype(d) for c, d in COLUMNS.items()})


def _zhejiang(path: Path, files: list[Path], topology: Path | None) -> Counters:
    topology = topology or _topology_file(path)
    parts = []
    for f in files:
        try:
            d = pd.read_csv(f, usecols=["SaveTimeUTC", "DeviceName", "PortName", "InOctets", "OutOctets"],
                            dtype={"DeviceName": str, "PortName": str})
        except (OSError, ValueError) as exc:
            raise CountersError(f"{f}: not a Zhejiang-format counter file: {exc}") from None
        for col in ("SaveTimeUTC", "InOctets", "OutOctets"):
            if not pd.api.types.is_numeric_dtype(d[col]):
                raise CountersError(f"{f}: column {col} holds non-numbers (first: {d[col].iloc[0]!r}); expected "
                                    "integers")
        parts.append(d)
    data = pd.concat(parts, ignore_index=True)
    problems: list[str] = []
    frame = pd.DataFrame({"device": data["DeviceName"], "port": data["PortName"],
                          "time": data["SaveTimeUTC"].to_numpy(np.float64) / 1e3,
                          "rx": data["InOctets"].to_numpy(np.float64), "tx": data["OutOctets"].to_numpy(np.float64)})
    table, t0 = _intervals(frame, cumulative=False, warnings=problems, source=path)
    names = table["port"].astype(str)
    table["capacity_gbps"] = np.array([port_capacity_gbps(n) for n in names])
    tier = np.where(names.str.startswith("M-") | names.str.contains("Management"), "management",
                    np.where(table["capacity_gbps"] >= 400, "spine", "nic"))
    peer = np.full(len(table), "", dtype=object)
    if topology is not None:
        topo = _topology(topology)
        key = dict(zip(zip(topo["device"], topo["port"], strict=True), topo["peer"], strict=True))
        devices = table["device"].astype(str).to_numpy()
        peer = np.array([key.get((d, p), "") for d, p in zip(devices, names.to_numpy(), strict=True)], dtype=object)
        tier = np.where(peer != "", "nic", tier)
    table["tier"] = tier
    table["peer"] = peer
    return Counters(path, "zhejiang", _frame({c: table[c] for c in COLUMNS}), t0, tuple(files), problems)


def _generic(path: Path, files: list[Path], _topology: Path | None = None) -> Counters:
    parts = []
    for f in files:
        try:
            d = pd.read_csv(f, dtype={"device": str, "port": str})
        except (OSError, ValueError) as exc:
            raise CountersError(f"{f}: cannot read: {exc}") from None
        parts.append(d)
    return counters_from_frame(pd.concat(parts, ignore_index=True), path, files)


def counters_from_frame(data: pd.DataFrame, path: Path, files: list[Path] | None = None) -> Counters:
    """A generic counter table (the CSV's columns, see the module docstring) as `Counters`."""
    files = files or [path]
    missing = [c for c in _GENERIC_NEED if c not in data.columns]
    if missing:
        raise CountersError(f"{files[0]}: missing column(s) {', '.join(missing)}")
    cumulative = "rx_bytes" not in data.columns
    rx, tx = ("rx_bytes_total", "tx_bytes_total") if cumulative else ("rx_bytes", "tx_bytes")
    for col in (rx, tx):
        if not pd.api.types.is_numeric_dtype(data[col]) or bool((data[col] < 0).any()):
            raise CountersError(f"{files[0]}: column {col}: expected byte counts (numbers >= 0)")
    if pd.api.types.is_numeric_dtype(data["time"]):
        time = data["time"].to_numpy(np.float64)
    else:
        with warnings.catch_warnings():  # pandas warns when it has to guess the format of each value
            warnings.simplefilter("ignore", UserWarning)
            stamps = pd.to_datetime(data["time"], errors="coerce", utc=True)
        if stamps.isna().any():
            bad = data["time"][stamps.isna()].iloc[0]
            raise CountersError(f"{files[0]}: column time: {bad!r} is neither seconds nor a date-time")
        time = (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(np.float64)
    frame = pd.DataFrame({"device": data["device"].astype(str), "port": data["port"].astype(str), "time": time,
                          "rx": data[rx].to_numpy(np.float64), "tx": data[tx].to_numpy(np.float64)})
    for extra in ("capacity_gbps", "tier", "peer"):
        if extra in data.columns:
            frame[extra] = data[extra].to_numpy()
    problems: list[str] = []
    table, t0 = _intervals(frame, cumulative=cumulative, warnings=problems, source=path)
    if "capacity_gbps" not in table.columns:
        table["capacity_gbps"] = np.array([port_capacity_gbps(n) for n in table["port"].astype(str)])
    table["capacity_gbps"] = pd.to_numeric(table["capacity_gbps"], errors="coerce")
    table["tier"] = table["tier"].fillna("").astype(str) if "tier" in table.columns else ""
    table["peer"] = table["peer"].fillna("").astype(str) if "peer" in table.columns else ""
    return Counters(path, "csv", _frame({c: table[c] for c in COLUMNS}), t0, tuple(files), problems)


def _intervals(frame: pd.DataFrame, *, cumulative: bool, warnings: list[str],
               source: Path) -> tuple[pd.DataFrame, float]:
    """Per port, in time order: each sample's interval since the previous one (the first sample of a
    port is dropped: it only marks where its first interval starts); cumulative counters
    differenced (a counter that goes down was reset, and counts from 0). Returns the samples with
    times relative to the series' start, and that start (epoch seconds)."""
    if len(frame) == 0:
        raise CountersError(f"{source}: the counter files hold no samples")
    if not np.isfinite(frame["time"].to_numpy()).all():
        raise CountersError(f"{source}: column time holds missing or infinite values")
    frame = frame.sort_values(["device", "port", "time"], kind="stable").reset_index(drop=True)
    key = frame["device"] + "\x00" + frame["port"]
    first = (key != key.shift()).to_numpy()
    t = frame["time"].to_numpy()
    dt = np.diff(t, prepend=np.nan)
    same = ~first & (dt <= 0)
    if same.any():
        warnings.append(f"{source}: {int(same.sum())} sample(s) repeat a time of their port and were left out")
    if cumulative:
        for col in ("rx", "tx"):
            v = frame[col].to_numpy()
            d = np.diff(v, prepend=np.nan)
            reset = ~first & (d < 0)
            if reset.any():
                warnings.append(f"{source}: {int(reset.sum())} {col} counter reset(s): counted from 0")
            frame[col] = np.where(reset, v, d)
    keep = ~first & ~same
    if not keep.any():
        raise CountersError(f"{source}: every port has a single sample: no interval to count bytes over")
    t0 = float(t[first].min())
    out = frame[keep].copy()
    out["interval_s"] = dt[keep]
    out["t_s"] = out["time"] - t0
    out["rx_bytes"] = out["rx"]
    out["tx_bytes"] = out["tx"]
    return out.drop(columns=["time", "rx", "tx"]), t0


# ---------------------------------------------------------------------------------------------
# A simulated run's links as counters


def _sampled(t_start: np.ndarray, width: np.ndarray, nbytes: np.ndarray, sample_s: float, n: int) -> np.ndarray:
    """Bytes per sample of [k s, (k+1) s), each bin's bytes spread evenly over its [start, start + width)."""
    out = np.zeros(n)
    lo, hi = t_start, t_start + width
    k0 = np.clip(np.floor(lo / sample_s).astype(np.int64), 0, n - 1)
    k1 = np.clip(np.floor(np.nextafter(hi, -np.inf) / sample_s).astype(np.int64), 0, n - 1)
    one = k0 == k1
    np.add.at(out, k0[one], nbytes[one])
    for i in np.flatnonzero(~one).tolist():
        for k in range(int(k0[i]), int(k1[i]) + 1):
            overlap = min(hi[i], (k + 1) * sample_s) - max(lo[i], k * sample_s)
            out[k] += nbytes[i] * max(overlap, 0.0) / width[i]
    return out


def export_links(links: pd.DataFrame, sample_s: float, *, duration_s: float | None = None) -> pd.DataFrame:
    """A simulated run's link table (`simstudy.linktable`) as a generic counter CSV sampled every
    `sample_s`, as a switch would count it: link `a->b` is port `a` of device `b` (its bytes are
    that port's rx; the link `b->a`, when there is one, its tx). One row per port and sample, idle
    samples included, from a first row at time 0 (where the counting starts) to `duration_s`
    (default: the end of the last bin)."""
    if sample_s <= 0:
        raise ValueError("sample_s must be positive")
    if duration_s is None:
        duration_s = float((links["t_start_s"] + links["bin_s"]).max()) if len(links) else sample_s
    n = max(1, math.ceil(duration_s / sample_s - 1e-9))
    series: dict[tuple[str, str], np.ndarray] = {}
    meta: dict[tuple[str, str], tuple[float, str]] = {}
    for name, rows in links.groupby("name", observed=True, sort=True):
        a, _, z = str(name).partition("->")
        series[(a, z)] = _sampled(rows["t_start_s"].to_numpy(), rows["bin_s"].to_numpy(),
                                  rows["bytes"].to_numpy(), sample_s, n)
        meta[(a, z)] = (float(rows["capacity_gbps"].iloc[0]), str(rows["tier"].iloc[0]))
    times = np.arange(n + 1) * sample_s
    frames = []
    for (a, z), rx in series.items():
        tx = series.get((z, a), np.zeros(n))
        cap, tier = meta[(a, z)]
        frames.append(pd.DataFrame({"time": times, "device": z, "port": a, "rx_bytes": np.r_[0.0, rx],
                                    "tx_bytes": np.r_[0.0, tx], "capacity_gbps": cap, "tier": tier, "peer": a}))
    columns = ["time", "device", "port", "rx_bytes", "tx_bytes", "capacity_gbps", "tier", "peer"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def write_counters(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write a generic counter table (`export_links`'s) as its CSV, whole or not at all."""
    with replacing(path) as tmp:
        frame.to_csv(tmp, index=False)
    return Path(path)


#: Every counter format, in the order they are tried. A new format is one entry here (plus its reader).
FORMATS: Final[tuple[CounterFormat, ...]] = (
    CounterFormat("zhejiang", lambda head: tuple(head[: len(ZHEJIANG_HEADER)]) == ZHEJIANG_HEADER, _zhejiang,
                  f"with the header {','.join(ZHEJIANG_HEADER)},... (Zhejiang Lab's per-port series)"),
    CounterFormat("csv", _is_generic, _generic,
                  "with columns time, device, port, rx_bytes, tx_bytes (or rx_bytes_total, tx_bytes_total)"),
)
_FORMATS: Final[dict[str, CounterFormat]] = {f.name: f for f in FORMATS}
