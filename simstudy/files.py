"""Files written whole or not at all (layer 0: imports nothing of simstudy).

Every file simstudy writes goes first to a temporary name beside it (`.NAME.XXXXXXXX.tmp`, unique
per writer, so two processes writing the same file never share one) and replaces the file only
when it is complete. A failure, an encoding error or an interrupt while writing leaves the old file
as it was and no temporary one behind. Directories are written the same way by
`simstudy.compiler.atomic.atomic_directory`.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["replacing", "write_bytes", "write_json", "write_text"]


@contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path to write `path`'s new content to; it becomes `path` when the block ends
    without an exception, and is removed when one is raised."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` atomically."""
    with replacing(path) as tmp, open(tmp, "xb") as out:
        out.write(data)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike[str], data: Any, *, indent: int | None = 1, default: Any = None) -> Path:
    """Write `data` as JSON with a trailing newline to `path` atomically."""
    return write_text(path, json.dumps(data, indent=indent, default=default) + "\n")
