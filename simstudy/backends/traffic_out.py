"""Where a run's transfers go, without holding them all: `traffic: rows | links | none`.

* `rows`: the TrafficTable, written to Parquet in row groups of `ROW_GROUP` rows as the run
  goes (each group sorted by start time, source, destination; a run that fits in one group is
  sorted as a whole and also kept in memory);
* `links`: per-link binned bytes (the link table, `simstudy.linktable`): each transfer's bytes
  spread over its interval on every link of its route, in bins of `bin_s`; memory grows with
  links x bins, not with transfers;
* `none`: only the number of transfers and bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from simstudy.backends.network import Network
from simstudy.compiler.topology_file import NetworkTopology
from simstudy.linktable import empty_links, make_links
from simstudy.table import OPS, OPTIONAL, REQUIRED, TrafficTableError, empty_table, read_table, write_table

TrafficMode = Literal["rows", "links", "none"]
TRAFFIC_MODES: tuple[TrafficMode, ...] = ("rows", "links", "none")
#: Rows per Parquet row group (and the most rows a `rows` sink holds at once).
ROW_GROUP = 1 << 20
_COLS = ("t_start_s", "t_end_s", "src", "dst", "bytes", "flow", "op", "iteration", "chunk", "step")
_OP_DICT = pa.array(list(OPS), type=pa.string())
_ARROW = {"float64": pa.float64(), "int32": pa.int32(), "int64": pa.int64()}
#: The TrafficTable as Arrow writes it (pandas' categorical `op`: int8 codes into OPS).
_SCHEMA = pa.schema([
    pa.field(c, pa.dictionary(pa.int8(), pa.string()) if c == "op" else _ARROW[{**REQUIRED, **OPTIONAL}[c]])
    for c in _COLS
])


def _sorted(t: NDArray[np.float64], src: NDArray[np.int32], dst: NDArray[np.int32]) -> bool:
    """Whether rows are already in (start, src, dst) order."""
    if len(t) < 2:
        return True
    dt = np.diff(t)
    if (dt < 0).any():
        return False
    tie = dt == 0
    if not tie.any():
        return True
    ds = np.diff(src.astype(np.int64))[tie]
    dd = np.diff(dst.astype(np.int64))[tie]
    return bool(((ds > 0) | ((ds == 0) & (dd >= 0))).all())


def _check(data: dict[str, NDArray[Any]]) -> None:
    """The checks of `table.check_table` on a batch of columns (finite times, no row ending before
    it starts, no negative bytes)."""
    a, b = data["t_start_s"], data["t_end_s"]
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise TrafficTableError("traffic rows: non-finite times")
    if (b < a).any():
        raise TrafficTableError("traffic rows: a row ends before it starts")
    if (data["bytes"] < 0).any():
        raise TrafficTableError("traffic rows: negative bytes")


@dataclass
class TrafficOutput:
    """What a run produced: the mode, the table (in memory or in `path`), the link table, counts."""

    mode: TrafficMode
    transfers: int = 0
    total_bytes: int = 0
    path: Path | None = None
    links: pd.DataFrame | None = None
    _table: pd.DataFrame | None = field(default=None, repr=False)
    #: bytes each rank sent (index: rank), whatever the mode
    sent: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    #: the packet network's pcaps (`traffic: pcap`), a directory moved into the run directory
    pcap_dir: Path | None = None

    def table(self) -> pd.DataFrame:
        """The TrafficTable (read from `path` the first time when it was streamed to disk; empty
        unless the mode is `rows`)."""
        if self._table is None:
            self._table = read_table(self.path) if self.path is not None and self.path.is_file() else empty_table()
        return self._table

    def chunks(self) -> Iterator[pd.DataFrame]:
        """The table row group by row group, without loading it whole."""
        if self._table is not None or self.path is None or not self.path.is_file():
            yield self.table()
            return
        f = pq.ParquetFile(self.path)
        for i in range(f.num_row_groups):
            yield f.read_row_group(i).to_pandas()

    @classmethod
    def in_memory(cls, table: pd.DataFrame, ranks: int) -> TrafficOutput:
        sent = np.zeros(ranks)
        if len(table):
            sent = np.bincount(table["src"].to_numpy(), weights=table["bytes"].to_numpy().astype(np.float64),
                               minlength=ranks).astype(np.float64)
        return cls("rows", len(table), int(table["bytes"].sum()) if len(table) else 0, None, None, table, sent)


#: Distinct arrays `TrafficSink.count` holds at most before adding them up
HELD = 1024


class TrafficSink:
    """Takes transfers in batches: `add(op, iteration, t_start_ns, t_end_ns, src, dst, bytes, flow,
    chunk, step)`; op and iteration may be one value for the batch or arrays."""

    mode: TrafficMode = "none"
    #: whether the sink needs every transfer (or only `count`s)
    keeps_rows = False

    def __init__(self, ranks: int) -> None:
        self.transfers = 0
        self.total_bytes = 0
        self._sent = np.zeros(ranks)
        #: `count`s of the same arrays, held until `sent` is read: (ranks, bytes each sent, times)
        #: by the bytes' array (a collective timed alone is counted with its timing's arrays each
        #: time it is found again: once per instance, thousands of times)
        self._held: dict[int, tuple[NDArray[np.int64], NDArray[np.float64], list[int]]] = {}

    @property
    def sent(self) -> NDArray[np.float64]:
        """The bytes each rank sent."""
        self._add_held()
        return self._sent

    @sent.setter
    def sent(self, value: NDArray[np.float64]) -> None:
        self._held.clear()
        self._sent = value

    def _add_held(self) -> None:
        held, self._held = self._held, {}
        if not held:
            return
        ranks = np.concatenate([h[0] for h in held.values()])
        # whole bytes times a whole number: exact, as adding them that many times (and in any order)
        sent = np.concatenate([h[1] * h[2][0] for h in held.values()])
        keep = ranks < len(self._sent)
        self._sent += np.bincount(ranks[keep], weights=sent[keep], minlength=len(self._sent))

    def add(self, op: Any, iteration: Any, t_start_ns: Any, t_end_ns: Any, src: Any, dst: Any, nbytes: Any,
            flow: Any, chunk: Any, step: Any) -> None:
        src = np.atleast_1d(np.asarray(src, dtype=np.int64))
        w = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), src.shape)
        self.transfers += len(src)
        self.total_bytes += int(w.sum())
        self.sent += np.bincount(src, weights=w, minlength=len(self.sent))[: len(self.sent)]

    def count(self, transfers: int, total_bytes: int, ranks: NDArray[np.int64], sent: NDArray[np.float64]) -> None:
        """Transfers known only by their number, bytes and the bytes each of `ranks` sent (ranks
        that sent nothing may be left out: a collective of a few ranks costs nothing per rank)."""
        self.transfers += transfers
        self.total_bytes += total_bytes
        held = self._held.get(id(sent))
        if held is not None and held[0] is ranks:
            held[2][0] += 1
            return
        if len(self._held) >= HELD:
            self._add_held()
        self._held[id(sent)] = (ranks, sent, [1])

    def add_table(self, table: pd.DataFrame) -> None:
        """A TrafficTable's rows (e.g. the astrasim backend's, built from ASTRA-SIM's trace)."""
        if not len(table):
            return
        op = np.asarray(table["op"].cat.codes, dtype=np.int8)
        it = table["iteration"].to_numpy() if "iteration" in table else 0
        zero = np.zeros(len(table), dtype=np.int64)
        self.add(op, it, table["t_start_s"].to_numpy() * 1e9, table["t_end_s"].to_numpy() * 1e9,
                 table["src"].to_numpy(), table["dst"].to_numpy(), table["bytes"].to_numpy(), table["flow"].to_numpy(),
                 table["chunk"].to_numpy() if "chunk" in table else zero,
                 table["step"].to_numpy() if "step" in table else zero)

    def close(self) -> TrafficOutput:
        return TrafficOutput(self.mode, self.transfers, self.total_bytes, sent=self.sent)


def _op_codes(op: Any, n: int) -> NDArray[np.int8]:
    if isinstance(op, str):
        return np.full(n, OPS.index(op), dtype=np.int8)
    return np.asarray(op, dtype=np.int8)


class RowsSink(TrafficSink):
    """The TrafficTable, streamed to Parquet in row groups."""

    mode: TrafficMode = "rows"
    keeps_rows = True

    def __init__(self, path: Path, ranks: int, *, group_rows: int | None = None) -> None:
        super().__init__(ranks)
        self.path = path
        self.group_rows = ROW_GROUP if group_rows is None else group_rows
        self.buf: list[dict[str, NDArray[Any]]] = []
        self.buffered = 0
        self.writer: pq.ParquetWriter | None = None
        self.first: pa.Table | None = None

    def add(self, op: Any, iteration: Any, t_start_ns: Any, t_end_ns: Any, src: Any, dst: Any, nbytes: Any,
            flow: Any, chunk: Any, step: Any) -> None:
        n = len(src)
        if not n:
            return
        super().add(op, iteration, t_start_ns, t_end_ns, src, dst, nbytes, flow, chunk, step)

        def col(v: Any, dtype: Any) -> NDArray[Any]:
            return np.asarray(v, dtype=dtype) if np.ndim(v) else np.full(n, v, dtype=dtype)

        self.buf.append({
            "t_start_s": col(t_start_ns, np.float64) * 1e-9, "t_end_s": col(t_end_ns, np.float64) * 1e-9,
            "src": col(src, np.int32), "dst": col(dst, np.int32), "bytes": col(nbytes, np.int64),
            "flow": col(flow, np.int64), "op": _op_codes(op, n), "iteration": col(iteration, np.int32),
            "chunk": col(chunk, np.int32), "step": col(step, np.int32),
        })
        self.buffered += n
        if self.buffered >= self.group_rows:
            self._flush()

    def _flush(self) -> None:
        if not self.buf:
            return
        data = {k: np.concatenate([b[k] for b in self.buf]) if len(self.buf) > 1 else self.buf[0][k] for k in _COLS}
        self.buf, self.buffered = [], 0
        if not _sorted(data["t_start_s"], data["src"], data["dst"]):
            order = np.lexsort((data["dst"], data["src"], data["t_start_s"]))
            data = {k: v[order] for k, v in data.items()}
        _check(data)
        arrow = pa.Table.from_arrays(
            [pa.DictionaryArray.from_arrays(pa.array(data[k]), _OP_DICT) if k == "op" else pa.array(data[k])
             for k in _COLS], schema=_SCHEMA)
        if self.writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(self.path, _SCHEMA)
            self.first = arrow
        else:
            self.first = None
        self.writer.write_table(arrow, row_group_size=max(arrow.num_rows, 1))

    def close(self) -> TrafficOutput:
        self._flush()
        table = None
        if self.writer is None:
            table = empty_table()
            write_table(table, self.path)
        else:
            self.writer.close()
            if self.first is not None:  # one row group: keep it in memory too
                table = self.first.to_pandas()
        return TrafficOutput("rows", self.transfers, self.total_bytes, self.path, None, table, self.sent)


class LinksSink(TrafficSink):
    """Bytes per link per bin of `bin_s` seconds."""

    mode: TrafficMode = "links"
    keeps_rows = True

    def __init__(self, net: Network, bin_s: float) -> None:
        super().__init__(net.hosts)
        if not bin_s > 0:
            raise ValueError(f"traffic_bin_s must be > 0, got {bin_s}")
        self.net = net
        self.bin_ns = bin_s * 1e9
        self.nlinks = len(net.capacity)
        self.acc = np.zeros((64, self.nlinks))   # bytes added straight into a bin
        self.diff = np.zeros((65, self.nlinks))  # bytes per bin of the bins a transfer covers whole

    def _grow(self, bins: int) -> None:
        if bins <= len(self.acc):
            return
        size = max(bins, 2 * len(self.acc))
        acc = np.zeros((size, self.nlinks))
        acc[: len(self.acc)] = self.acc
        diff = np.zeros((size + 1, self.nlinks))
        diff[: len(self.diff)] = self.diff
        self.acc, self.diff = acc, diff

    def _route_table(self, src: NDArray[np.int64], dst: NDArray[np.int64],
                     flow: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """For each transfer, the links of its route (the flow's path when ECMP hashes flows):
        (transfer index, link id) pairs."""
        if self.net.per_flow:
            uniq_rows, inv = np.unique(np.stack([src, dst, flow], axis=1), axis=0, return_inverse=True)
            keys = [tuple(row) for row in uniq_rows.tolist()]
        else:
            codes, uniq = pd.factorize(src * (1 << 32) + dst)
            inv = np.asarray(codes)
            keys = [(k >> 32, k & 0xFFFFFFFF, 0) for k in uniq.tolist()]
        inv = np.asarray(inv).reshape(-1)
        lens = np.empty(len(keys), dtype=np.int64)
        flat: list[int] = []
        route = self.net.route  # the network keeps each pair's paths
        for i, key in enumerate(keys):
            path = route(*key)
            lens[i] = len(path)
            flat.extend(path)
        starts = np.concatenate([[0], np.cumsum(lens)])
        links = np.asarray(flat, dtype=np.int64)
        per = lens[inv]
        idx = np.repeat(np.arange(len(src)), per)
        offs = np.arange(len(idx)) - np.repeat(np.cumsum(per) - per, per)
        return idx, links[starts[inv][idx] + offs]

    def add(self, op: Any, iteration: Any, t_start_ns: Any, t_end_ns: Any, src: Any, dst: Any, nbytes: Any,
            flow: Any, chunk: Any, step: Any) -> None:
        src = np.atleast_1d(np.asarray(src, dtype=np.int64))
        if not len(src):
            return
        super().add(op, iteration, t_start_ns, t_end_ns, src, dst, nbytes, flow, chunk, step)
        n = len(src)
        dst = np.atleast_1d(np.asarray(dst, dtype=np.int64))
        start = np.broadcast_to(np.asarray(t_start_ns, dtype=np.float64), (n,)) / self.bin_ns
        end = np.broadcast_to(np.asarray(t_end_ns, dtype=np.float64), (n,)) / self.bin_ns
        w = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), (n,))
        flows = np.broadcast_to(np.asarray(flow, dtype=np.int64), (n,))
        idx, link = self._route_table(src, dst, flows)
        a, b, w = start[idx], end[idx], w[idx]
        self._grow(int(np.floor(b.max())) + 2)
        ia = np.floor(a).astype(np.int64)
        ib = np.floor(b).astype(np.int64)
        same = (ib == ia) | (b - a < 1e-12)
        part = ~same
        rate = w[part] / (b[part] - a[part])
        pa_, pb, pl = ia[part], ib[part], link[part]
        k = self.nlinks
        # Bytes straight into bins: whole transfers inside one bin, the partial first and last bins.
        idx = np.concatenate([ia[same] * k + link[same], pa_ * k + pl, pb * k + pl])
        wts = np.concatenate([w[same], rate * (pa_ + 1 - a[part]), rate * (b[part] - pb)])
        self.acc += np.bincount(idx, weights=wts, minlength=self.acc.size).reshape(self.acc.shape)
        # The bins in between, as a difference along time (summed at the end).
        idx = np.concatenate([(pa_ + 1) * k + pl, pb * k + pl])
        self.diff += np.bincount(idx, weights=np.concatenate([rate, -rate]),
                                 minlength=self.diff.size).reshape(self.diff.shape)

    def close(self) -> TrafficOutput:
        total = self.acc + np.cumsum(self.diff, axis=0)[: len(self.acc)]
        b, k = np.nonzero(total > 0)
        table = links_table(self.net.topology, k, b, total[b, k], self.bin_ns * 1e-9)
        return TrafficOutput("links", self.transfers, self.total_bytes, None, table, sent=self.sent)


def links_table(topo: NetworkTopology, link: NDArray[np.int64], bin_index: NDArray[np.int64],
                nbytes: NDArray[np.float64], bin_s: float) -> pd.DataFrame:
    """The link table (`simstudy.linktable`) of `nbytes` carried by the topology's links `link` in
    bins `bin_index` of `bin_s` seconds (bins with no bytes left out), by link, then time."""
    keep = nbytes > 0
    link, bin_index, nbytes = link[keep], bin_index[keep], nbytes[keep]
    if not len(link):
        return empty_links()
    order = np.lexsort((bin_index, link))
    b, k, nbytes = bin_index[order], link[order], nbytes[order]
    cap = np.asarray([x.gbps for x in topo.links])
    return make_links({
        "link": k.astype(np.int32),
        "name": pd.Categorical.from_codes(k, categories=[x.name for x in topo.links]),
        "tier": np.asarray([x.tier for x in topo.links], dtype=object)[k],
        "dim": np.asarray([x.dim for x in topo.links], dtype=np.int16)[k],
        "capacity_gbps": cap[k],
        "t_start_s": b * bin_s,
        "bin_s": np.full(len(b), bin_s),
        "bytes": nbytes,
        "utilization": nbytes * 8 / (cap[k] * 1e9 * bin_s),
    })


def make_sink(mode: str, *, path: Path, net: Network, bin_s: float) -> TrafficSink:
    if mode == "rows":
        return RowsSink(path, net.hosts)
    if mode == "links":
        return LinksSink(net, bin_s)
    if mode == "none":
        return TrafficSink(net.hosts)
    raise ValueError(f"unknown traffic mode {mode!r}; expected one of {', '.join(TRAFFIC_MODES)}")
