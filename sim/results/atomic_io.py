"""Writing result files so an interrupted run (Ctrl-C, kill -9, a full disk) never leaves a
half-written one: each file is written to a temporary name in the same folder, flushed, then
renamed over the target with ``os.replace`` (atomic on POSIX and Windows). A reader sees the
old file or the new one, never a torn mix. OS errors become one ``SpecplanError`` line naming
the path.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.contracts.errors import SpecplanError


def ensure_dir(path: str | Path, what: str = "output folder") -> Path:
    """``path`` created (with parents) or a one-line error saying why it cannot be."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as exc:
        raise SpecplanError(f"{p}: cannot create {what} ({getattr(exc, 'strerror', None) or exc})") from None
    return p


def write_atomic(path: str | Path, write: Callable[[str], Any]) -> Path:
    """Call ``write(tmp_path)`` then rename the temporary file over ``path``."""
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except (OSError, ValueError) as exc:
        raise SpecplanError(f"{p}: cannot write ({getattr(exc, 'strerror', None) or exc})") from None
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:  # the bytes are on disk before the name points at them
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise SpecplanError(f"{p}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_parquet_atomic(frame: Any, path: str | Path, **kwargs: Any) -> Path:
    return write_atomic(path, lambda tmp: frame.write_parquet(tmp, **kwargs))


def write_csv_atomic(frame: Any, path: str | Path) -> Path:
    return write_atomic(path, lambda tmp: frame.write_csv(tmp))
