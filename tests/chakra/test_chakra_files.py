"""`<prefix>.<rank>.et` naming and discovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from simstudy import chakra


def touch(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def test_trace_path() -> None:
    assert chakra.trace_path("dir/all_reduce", 3) == Path("dir/all_reduce.3.et")
    assert chakra.trace_path(Path("/x/y.z"), 0) == Path("/x/y.z.0.et")
    for bad in (-1, True, 1.0):
        with pytest.raises(ValueError):
            chakra.trace_path("p", bad)  # type: ignore[arg-type]


def test_find_in_rank_order(tmp_path: Path) -> None:
    expected = [touch(tmp_path / f"job.{rank}.et") for rank in range(12)]
    touch(tmp_path / "job.et")
    touch(tmp_path / "job.x.et")
    touch(tmp_path / "job.01.et")  # not what ASTRA-SIM opens for rank 1
    touch(tmp_path / "job.3.et.gz")
    touch(tmp_path / "job.extra.0.et")
    touch(tmp_path / "jobs.0.et")
    (tmp_path / "job.12.et").mkdir()
    assert chakra.find_trace_files(tmp_path / "job") == expected


def test_gap_is_an_error(tmp_path: Path) -> None:
    for rank in (0, 1, 3):
        touch(tmp_path / f"job.{rank}.et")
    with pytest.raises(FileNotFoundError, match=r"job\.2\.et is missing"):
        chakra.find_trace_files(tmp_path / "job")


def test_rank_zero_is_required(tmp_path: Path) -> None:
    touch(tmp_path / "job.1.et")
    with pytest.raises(FileNotFoundError, match=r"job\.0\.et is missing"):
        chakra.find_trace_files(tmp_path / "job")


def test_nothing_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no trace files"):
        chakra.find_trace_files(tmp_path / "job")
    with pytest.raises(FileNotFoundError):
        chakra.find_trace_files(tmp_path / "missing_dir" / "job")
