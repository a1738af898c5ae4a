"""Finding record boundaries (the only sequential part of reading a capture): constant strides, lanes of
speculative walkers stitched along the true chain, and a plain sequential walk."""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

import numpy as np
from numpy.typing import NDArray

from simstudy.traffic.pcap.base import I64, Mask
from simstudy.traffic.pcap.buffer import Buf, Offsets

# ---------------------------------------------------------------------------------------------
# Finding record boundaries


@dataclass(frozen=True)
class WalkSpec:
    """How records follow each other: next = start + hdr + length, length read at start + len_off."""

    len_off: int
    hdr: int
    fmt: str  # "<u4" or ">u4"
    min_len: int
    max_len: int
    align: int
    # For the lanes: (buf, positions, a known record start) -> (lengths, looks like a record header).
    probe: Callable[[Buf, I64, int], tuple[I64, Mask]]

    def valid(self, length: int) -> bool:
        return self.min_len <= length <= self.max_len and length % self.align == 0

    def valid_v(self, length: I64) -> Mask:
        ok = (length >= self.min_len) & (length <= self.max_len)
        if self.align > 1:
            ok &= length % self.align == 0
        return ok


@dataclass(frozen=True)
class Walk:
    """Records found in [pos, stop): `offsets`, where the next chunk starts, and why the walk ended."""

    offsets: Offsets
    next: int
    reason: str  # "end" (reached stop), "partial" (record at `next` does not fit), "corrupt", "more" (go on)
    need: int = 0  # partial: the byte the record at `next` ends at
    length: int = 0  # corrupt: the invalid length read at `next`
    check: int = -1  # a lazy constant-stride run: every record's length should be this; the reader checks


_LANE_RECORDS: Final = 256
_MAX_LANES: Final = 16384
_MAX_SLIDE: Final = 4096
_SAMPLE: Final = 512
_SEQUENTIAL_RECORD_BYTES: Final = 600
_LANE_WINDOW: Final = 32 << 20


def walk(buf: Buf, pos: int, stop: int, spec: WalkSpec, *, lazy: bool = False) -> Walk:
    """All records that start at or after `pos` and end by `stop`, exactly as a sequential walk finds them.

    With `lazy`, a run whose first 64 records have one length is assumed to go on to `stop` with that
    length (`check` says so): the reader verifies each length as it decodes, saving a pass over memory.
    """
    if lazy:
        assumed = _lazy_run(buf, pos, stop, spec)
        if assumed is not None:
            return assumed
    pieces: list[Offsets] = []
    short_runs = 0
    while short_runs < 4:
        run, pos = _fixed_run(buf, pos, stop, spec)
        pieces.append(run)
        if run.n >= 64:
            short_runs = 0
            continue
        short_runs += 1
        few = walk_seq(buf, pos, stop, spec, limit=64)  # step over the odd records, then try a stride again
        pieces.append(few.offsets)
        if few.reason != "limit":
            return _join(pieces, few)
        pos = few.next
    while True:  # lanes, in windows small enough for their scattered reads to stay in cache
        window = min(stop, pos + _LANE_WINDOW)
        rest = _lanes(buf, pos, window, spec)
        if rest.reason == "partial" and rest.offsets.n == 0 and window < stop:
            rest = _lanes(buf, pos, min(stop, rest.need), spec)  # a record larger than the window
        pieces.append(rest.offsets)
        pos = rest.next
        if window >= stop or rest.reason not in ("end", "partial") or rest.need > stop:
            return _join(pieces, rest)


def _lazy_run(buf: Buf, pos: int, stop: int, spec: WalkSpec) -> Walk | None:
    if pos + spec.len_off + 4 > stop:
        return None
    length = int(buf.view(spec.fmt)[pos + spec.len_off])
    stride = spec.hdr + length
    if not spec.valid(length) or stride <= 0 or (stop - pos) // stride < 1024:
        return None
    fit = (stop - pos) // stride
    lens = buf.strided(pos + spec.len_off, stride, 64, spec.fmt)
    if lens is None or bool((lens != length).any()):
        return None
    return Walk(Offsets(fit, pos, stride), pos + fit * stride, "more", check=length)


def _join(pieces: list[Offsets], last: Walk) -> Walk:
    pieces = [p for p in pieces if p.n]
    if not pieces:
        offsets = Offsets(0)
    elif len(pieces) == 1:
        offsets = pieces[0]
    else:
        offsets = Offsets.of(np.concatenate([p.array() for p in pieces]))
    return replace(last, offsets=offsets)


def _fixed_run(buf: Buf, pos: int, stop: int, spec: WalkSpec) -> tuple[Offsets, int]:
    """The longest run of equal-length records from `pos` (proved with one strided read)."""
    if pos + spec.len_off + 4 > stop:
        return Offsets(0), pos
    length = int(buf.view(spec.fmt)[pos + spec.len_off])
    if not spec.valid(length):
        return Offsets(0), pos
    stride = spec.hdr + length
    if stride <= 0:
        return Offsets(0), pos
    fit = (stop - pos) // stride
    if fit == 0:
        return Offsets(0), pos
    head = min(fit, 64)
    for count in (head, fit):
        lens = buf.strided(pos + spec.len_off, stride, count, spec.fmt)
        assert lens is not None
        bad = lens != length
        if bad.any():
            k = int(bad.argmax())
            return Offsets(k, pos, stride), pos + k * stride
        if count == fit:
            break
    return Offsets(fit, pos, stride), pos + fit * stride


def walk_seq(
    buf: Buf,
    pos: int,
    stop: int,
    spec: WalkSpec,
    *,
    limit: int | None = None,
    until: int | None = None,
    join: Mapping[int, int] | None = None,
) -> Walk:
    """The sequential walk (the definition of where records are). Stops after `limit` records
    (reason "limit"), at or past `until` ("until"), or on a position in `join` ("join")."""
    unpack = struct.Struct(spec.fmt.replace("u4", "I")).unpack_from
    raw = buf.raw
    out: list[int] = []
    hdr, len_off = spec.hdr, spec.len_off
    reason, need, bad_len = "end", 0, 0
    while True:
        if limit is not None and len(out) >= limit:
            reason = "limit"
            break
        if until is not None and pos >= until:
            reason = "until"
            break
        if join is not None and pos in join:
            reason = "join"
            break
        if pos >= stop:
            break
        if pos + max(len_off + 4, hdr) > stop:
            reason, need = "partial", pos + max(len_off + 4, hdr)
            break
        length = unpack(raw, pos + len_off)[0]
        if not spec.valid(length):
            reason, bad_len = "corrupt", length
            break
        nxt = pos + hdr + length
        if nxt > stop:
            reason, need = "partial", nxt
            break
        out.append(pos)
        pos = nxt
    return Walk(Offsets.of(np.array(out, dtype=np.int64)), pos, reason, need, bad_len)


def _lanes(buf: Buf, pos: int, stop: int, spec: WalkSpec) -> Walk:
    """Walk [pos, stop) with many speculative walkers at once, keeping only what the true chain proves."""
    sample = walk_seq(buf, pos, stop, spec, limit=_SAMPLE)
    if sample.reason != "limit":
        return sample
    mean = (sample.next - pos) / _SAMPLE
    start = sample.next
    expected = (stop - start) / max(mean, 1.0)
    if mean > _SEQUENTIAL_RECORD_BYTES or expected < 16 * _LANE_RECORDS:
        rest = walk_seq(buf, start, stop, spec)
        return _join([sample.offsets, rest.offsets], rest)
    lanes = int(min(_MAX_LANES, max(2, expected // _LANE_RECORDS)))
    rest = _stitch(buf, start, stop, spec, _run_lanes(buf, start, stop, spec, lanes, expected / lanes))
    return _join([sample.offsets, rest.offsets], rest)


_IDLE: Final = np.iinfo(np.int64).max  # a lane's position once it has stopped


@dataclass
class _LaneRun:
    """What the lockstep walkers saw: positions[row, lane] (_IDLE once stopped), step[row, lane] (a record
    step, not a one-byte slide), and per lane the last row that slid."""

    seg_end: I64
    positions: I64
    step: Mask
    last_slide: I64
    exit: I64  # where each lane stopped (its first position at or past its segment end, or a partial record)
    state: NDArray[np.int8]  # 1 reached its segment end, 2 stopped at a partial record, 3 abandoned
    need: I64  # state 2: where the partial record ends


def _run_lanes(buf: Buf, pos: int, stop: int, spec: WalkSpec, lanes: int, per_lane: float) -> _LaneRun:
    """Step all lanes together; arrays named *_l hold the lanes still walking (`live`)."""
    seg = (stop - pos) // lanes
    seg_end = np.append(pos + seg * np.arange(1, lanes, dtype=np.int64), stop)
    live = np.arange(lanes)
    cur = pos + seg * live.astype(np.int64)
    end_l = seg_end.copy()
    slides = np.zeros(lanes, dtype=np.int64)
    last_slide = np.full(lanes, -1, dtype=np.int64)
    exit_ = np.full(lanes, -1, dtype=np.int64)
    need = np.zeros(lanes, dtype=np.int64)
    state = np.full(lanes, 3, dtype=np.int8)  # abandoned unless it ends otherwise
    positions = np.empty((int(per_lane * 1.5) + 64, lanes), dtype=np.int64)
    steps = np.empty(positions.shape, dtype=np.bool_)
    max_rows = int(4 * per_lane) + 2 * _MAX_SLIDE
    head = max(spec.len_off + 4, spec.hdr)
    row = 0
    while row < max_rows and len(live):
        if row == len(positions):
            positions = np.concatenate([positions, np.empty_like(positions)])
            steps = np.concatenate([steps, np.empty_like(steps)])
        length, plausible = spec.probe(buf, cur, pos)
        nxt = cur + spec.hdr + length
        header_cut = cur + head > stop
        ok = ~header_cut & spec.valid_v(length) & plausible
        partial = header_cut | (ok & (nxt > stop))
        step = ok & ~partial
        positions[row] = _IDLE
        positions[row, live] = np.where(partial, _IDLE, cur)
        steps[row] = False
        steps[row, live] = step
        last_slide[live[~partial & ~step]] = row
        ended = live[partial]
        exit_[ended], need[ended], state[ended] = cur[partial], np.where(header_cut, cur + head, nxt)[partial], 2
        cur = np.where(step, nxt, cur + 1)
        slides = np.where(step, 0, slides + 1)
        done = ~partial & (cur >= end_l)
        exit_[live[done]], state[live[done]] = cur[done], 1
        going = ~partial & ~done & (slides <= _MAX_SLIDE)
        if not going.all():
            live, cur, end_l, slides = live[going], cur[going], end_l[going], slides[going]
        row += 1
    return _LaneRun(seg_end, positions[:row], steps[:row], last_slide, exit_, state, need)


def _stitch(buf: Buf, pos: int, stop: int, spec: WalkSpec, run: _LaneRun) -> Walk:
    """Follow the true chain from `pos` through the lanes; walk sequentially wherever a lane cannot prove it."""
    rows, lanes = run.positions.shape
    usable = (run.state == 1) | (run.state == 2)
    entry = np.append(pos, run.exit[:-1])
    # Each lane's positions increase down its column, so the row holding `entry` is the count of smaller ones.
    first = np.count_nonzero(run.positions < entry[None, :], axis=0).astype(np.int64)
    at = np.minimum(first, max(rows - 1, 0))
    lane_ix = np.arange(lanes)
    found = (first < rows) & (run.positions[at, lane_ix] == entry) & run.step[at, lane_ix] if rows else usable & False
    good = usable & found & (first > run.last_slide)
    bad_lanes = np.flatnonzero(~good)

    pieces: list[Offsets] = []
    accepted_from = np.full(lanes, rows, dtype=np.int64)  # per lane: first accepted row (rows = none)
    lane, here = 0, pos
    while lane < lanes:
        if good[lane] and here == entry[lane]:
            later = bad_lanes[bad_lanes > lane]
            upto = int(later[0]) if len(later) else lanes
            partial = np.flatnonzero(run.state[lane:upto] == 2)
            if len(partial):
                upto = lane + int(partial[0]) + 1
            accepted_from[lane:upto] = first[lane:upto]
            pieces.append(_lane_rows(run, accepted_from, lane, upto))
            here, lane = int(run.exit[upto - 1]), upto
            if run.state[upto - 1] == 2:
                return _join(pieces, Walk(Offsets(0), here, "partial", int(run.need[upto - 1])))
            continue
        join: dict[int, int] = {}
        if usable[lane]:
            col = run.positions[:, lane]
            ok_rows = np.flatnonzero((np.arange(rows) > run.last_slide[lane]) & run.step[:, lane])
            join = dict(zip(col[ok_rows].tolist(), ok_rows.tolist(), strict=True))
        seq = walk_seq(buf, here, stop, spec, until=int(run.seg_end[lane]), join=join)
        pieces.append(seq.offsets)
        if seq.reason == "join":
            accepted_from[lane] = join[seq.next]
            pieces.append(_lane_rows(run, accepted_from, lane, lane + 1))
            here = int(run.exit[lane])
            if run.state[lane] == 2:
                return _join(pieces, Walk(Offsets(0), here, "partial", int(run.need[lane])))
        elif seq.reason == "until":
            here = seq.next
        else:
            return _join(pieces, seq)
        lane += 1
    return _join(pieces, Walk(Offsets(0), here, "end"))


def _lane_rows(run: _LaneRun, accepted_from: I64, lo: int, hi: int) -> Offsets:
    """The accepted positions of lanes lo..hi-1, lane after lane (each lane's rows are increasing).

    Read 64 lanes at a time, so that the column-wise reads stay in cache."""
    rows = np.arange(run.positions.shape[0], dtype=np.int64)[:, None]
    parts = []
    for a in range(lo, hi, 64):
        b = min(hi, a + 64)
        pos = run.positions[:, a:b]
        keep = run.step[:, a:b] & (rows >= accepted_from[None, a:b])
        parts.append(pos.T[keep.T])
    return Offsets.of(np.concatenate(parts) if parts else np.empty(0, dtype=np.int64))



def walk_chunk(buf: Buf, pos: int, spec: WalkSpec, chunk_bytes: int, *, lazy: bool = False) -> Walk:
    """Walk one chunk from `pos`; a chunk grows until it holds at least one record."""
    stop = min(buf.n, pos + chunk_bytes)
    while True:
        w = walk(buf, pos, stop, spec, lazy=lazy)
        if w.offsets.n or w.reason != "partial" or stop == buf.n or w.need > buf.n:
            return w
        stop = min(buf.n, max(w.need, stop + chunk_bytes))


def ended(path: Path, w: Walk, size: int, records: int, problems: list[str]) -> bool:
    """Whether the read ends after this walk; adds a warning for a truncated or corrupt record."""
    if w.reason == "corrupt":
        problems.append(f"{path}: corrupt record header at byte {w.next}: length {w.length} is impossible; "
                        f"read {records} records and stopped there")
        return True
    if w.reason == "partial" and w.need > size:
        problems.append(f"{path}: the last record (at byte {w.next}) is truncated: it needs {w.need - w.next} "
                        f"bytes but the file has {size - w.next}; read {records} records")
        return True
    return w.next >= size
