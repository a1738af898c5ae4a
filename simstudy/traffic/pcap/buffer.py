"""The mapped file as bytes, and where each packet's bytes are (strided offsets, scattered offsets, or
records copied together into a compact block)."""

from __future__ import annotations

import contextlib
import mmap
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simstudy.traffic.pcap.base import I64, DType, Rel

# ---------------------------------------------------------------------------------------------
# Reading integers out of the mapped file


class Buf:
    """The mapped file as bytes, with overlapping views that read an unaligned integer at any byte."""

    def __init__(self, data: NDArray[np.uint8], raw: mmap.mmap | bytes) -> None:
        self.u8 = data
        self.raw = raw
        self.n = len(data)
        self._views: dict[np.dtype[Any], NDArray[Any]] = {}

    def view(self, fmt: str | np.dtype[Any]) -> NDArray[Any]:
        """Item k of the view starts at byte k (overlapping items); `fmt` may be a structured dtype."""
        dt = np.dtype(fmt)
        v = self._views.get(dt)
        if v is None:
            size = max(self.n - dt.itemsize + 1, 0)
            v = self.u8 if dt == np.uint8 else np.ndarray((size,), dtype=dt, buffer=self.u8, strides=(1,))
            self._views[dt] = v
        return v

    def gather(self, idx: I64, fmt: str | np.dtype[Any], dtype: DType | None = None) -> NDArray[Any]:
        """Values at byte offsets `idx` (a scratch array: it may be clamped in place; reads past the end are
        clamped, and callers mask them)."""
        v = self.view(fmt)
        if len(v) == 0:
            return np.zeros(len(idx), dtype=dtype or v.dtype.newbyteorder("="))
        if len(idx) and int(idx.max()) >= len(v):
            np.minimum(idx, len(v) - 1, out=idx)
        got = v[idx]
        if dtype is None and got.dtype.isnative:
            return got
        return got.astype(dtype or got.dtype.newbyteorder("="), copy=False)

    def strided_view(self, start: int, stride: int, n: int, fmt: str) -> NDArray[Any] | None:
        """A view of the values at start + k * stride (k < n), or None when they do not all lie in the buffer."""
        if start < 0 or (n and start + (n - 1) * stride + np.dtype(fmt).itemsize > self.n):
            return None
        return np.ndarray((n,), dtype=fmt, buffer=self.u8, offset=start, strides=(stride,))

    def strided(self, start: int, stride: int, n: int, fmt: str, dtype: DType | None = None) -> NDArray[Any] | None:
        """A copy of the values at start + k * stride (k < n), or None when they do not all lie in the buffer."""
        view = self.strided_view(start, stride, n, fmt)
        return None if view is None else view.astype(dtype or native(fmt))

    def release(self) -> None:
        self._views.clear()

    def drop_pages(self, start: int, stop: int) -> None:
        """Unmap the file pages in [start, stop) from this process (they stay in the page cache)."""
        if not isinstance(self.raw, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        a, b = (start // page) * page, (stop // page) * page
        if b > a:
            with contextlib.suppress(OSError):  # best effort
                self.raw.madvise(mmap.MADV_DONTNEED, a, b - a)


def native(fmt: str) -> np.dtype[Any]:
    return np.dtype(fmt).newbyteorder("=")


class Offsets:
    """Byte offsets of n items: `start + k * stride` when `arr` is None, else `arr`."""

    __slots__ = ("_arr", "n", "start", "stride")

    def __init__(self, n: int, start: int = 0, stride: int = 0, arr: I64 | None = None) -> None:
        self.n = n
        self.start = start
        self.stride = stride
        self._arr = arr

    @classmethod
    def of(cls, arr: I64) -> Offsets:
        return cls(len(arr), arr=arr)

    @property
    def strided_form(self) -> bool:
        return self._arr is None

    def array(self) -> I64:
        if self._arr is None:
            self._arr = self.start + self.stride * np.arange(self.n, dtype=np.int64)
        return self._arr

    def slice(self, i0: int, i1: int) -> Offsets:
        if self._arr is None:
            return Offsets(i1 - i0, self.start + i0 * self.stride, self.stride)
        return Offsets.of(self._arr[i0:i1])

    def shift(self, d: int) -> Offsets:
        if self._arr is None:
            return Offsets(self.n, self.start + d, self.stride)
        return Offsets.of(self._arr + d)

    def take(self, rows: NDArray[Any]) -> Offsets:
        return Offsets.of(self.array()[rows])

    def read(self, buf: Buf, rel: Rel, fmt: str, dtype: DType | None = None) -> NDArray[Any]:
        """The `fmt` integer at byte `offset + rel` of every item, as `dtype` (default: native `fmt`), a fresh array."""
        if self._arr is None and isinstance(rel, int):
            got = buf.strided(self.start + rel, self.stride, self.n, fmt, dtype)
            if got is not None:
                return got
        return buf.gather(self.array() + rel, fmt, dtype)

    def read_into(self, buf: Buf, rel: Rel, fmt: str, out: NDArray[Any]) -> None:
        """`read` straight into `out` (one pass, no temporary, when the items are strided)."""
        if self._arr is None and isinstance(rel, int):
            view = buf.strided_view(self.start + rel, self.stride, self.n, fmt)
            if view is not None:
                np.copyto(out, view, casting="unsafe")
                return
        out[...] = buf.gather(self.array() + rel, fmt)


class Rows:
    """Packets copied into a compact block: row k holds `width` bytes of the file from `orig[k]`.

    Reads of fields within the row are strided reads of cache-resident memory (the copy is one 16..144
    byte memcpy per packet); reads past the row fall back to the file. Same interface as Offsets.
    """

    __slots__ = ("_flat", "base", "block", "n", "orig", "width")

    def __init__(self, block: NDArray[np.uint8], width: int, orig: I64, base: int = 0) -> None:
        self.block = block  # n * width bytes
        self.width = width
        self.orig = orig
        self.base = base
        self.n = len(orig)
        self._flat: Buf | None = None

    @classmethod
    def copy(cls, buf: Buf, offsets: I64, width: int) -> Rows | None:
        """Copy `width` bytes from each offset (None when the last would run past the file)."""
        if len(offsets) == 0 or int(offsets[-1]) + width > buf.n:
            return None
        items = buf.view(np.dtype(f"V{width}"))[offsets]
        return cls(items.view(np.uint8), width, offsets)

    def shift(self, d: int) -> Rows:
        return Rows(self.block, self.width, self.orig, self.base + d)

    def take(self, rows: NDArray[Any]) -> Rows:
        block = self.block.reshape(self.n, self.width)[rows].reshape(-1)
        return Rows(block, self.width, self.orig[rows], self.base)

    def array(self) -> I64:
        return self.orig + self.base

    def _inside(self, rel: Rel, width: int) -> bool:
        if isinstance(rel, int):
            return self.base + rel >= 0 and self.base + rel + width <= self.width
        return len(rel) == 0 or (self.base + int(rel.min()) >= 0 and self.base + int(rel.max()) + width <= self.width)

    def read(self, buf: Buf, rel: Rel, fmt: str, dtype: DType | None = None) -> NDArray[Any]:
        width = np.dtype(fmt).itemsize
        if not self._inside(rel, width):
            return buf.gather(self.array() + rel, fmt, dtype)
        if isinstance(rel, int):
            view = np.ndarray((self.n,), dtype=fmt, buffer=self.block, offset=self.base + rel, strides=(self.width,))
            return view.astype(dtype or native(fmt))
        if self._flat is None:
            self._flat = Buf(self.block, b"")
        idx = self.width * np.arange(self.n, dtype=np.int64) + (self.base + rel)
        return self._flat.gather(idx, fmt, dtype)

    def read_into(self, buf: Buf, rel: Rel, fmt: str, out: NDArray[Any]) -> None:
        if isinstance(rel, int) and self._inside(rel, np.dtype(fmt).itemsize):
            view = np.ndarray((self.n,), dtype=fmt, buffer=self.block, offset=self.base + rel, strides=(self.width,))
            np.copyto(out, view, casting="unsafe")
        else:
            out[...] = self.read(buf, rel, fmt)


Where = Offsets | Rows  # where each packet's bytes are



class Mapped:
    """The file memory-mapped read-only (an empty file maps to no bytes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "rb")  # noqa: SIM115 - closed in close()
        size = self._file.seek(0, 2)
        self._file.seek(0)
        raw: mmap.mmap | bytes
        if size == 0:
            raw = b""
        else:
            raw = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
            if hasattr(mmap, "MADV_SEQUENTIAL"):
                raw.madvise(mmap.MADV_SEQUENTIAL)
        self.buf = Buf(np.frombuffer(raw, dtype=np.uint8), raw)

    def close(self) -> None:
        raw = self.buf.raw
        self.buf.release()
        del self.buf
        if isinstance(raw, mmap.mmap):
            with contextlib.suppress(BufferError):  # a view escaped: the map closes when it is collected
                raw.close()
        self._file.close()
