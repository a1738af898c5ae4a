"""simstudy.files: every file written whole or not at all."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from simstudy.files import replacing, write_json, write_text
from simstudy.table import TrafficTableError, read_table, write_table


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = write_text(tmp_path / "a.txt", "old\n")
    with pytest.raises(RuntimeError), replacing(path) as tmp:
        tmp.write_text("half of the ne")
        raise RuntimeError("the disk is full")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_two_writers_of_one_file_never_share_a_temporary(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    with replacing(path) as first, replacing(path) as second:
        assert first != second and first.parent == second.parent == tmp_path
        first.write_text("1")
        second.write_text("2")
    # the outer block ends last: its content is the file's
    assert path.read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_json_and_tables_go_through_it(tmp_path: Path) -> None:
    write_json(tmp_path / "x.json", {"when": Path("/a")}, default=str)
    assert json.loads((tmp_path / "x.json").read_text()) == {"when": "/a"}
    bad = pd.DataFrame({"t_start_s": [0.0]})
    write_text(tmp_path / "traffic.parquet", "kept")
    with pytest.raises(TrafficTableError):
        write_table(bad, tmp_path / "traffic.parquet")  # refused before anything is written
    assert (tmp_path / "traffic.parquet").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traffic.parquet", "x.json"]
    with pytest.raises(Exception):  # noqa: B017 -- pyarrow's own error for a file that is not Parquet
        read_table(tmp_path / "traffic.parquet")
