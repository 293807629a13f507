"""Limits every input crosses before it is parsed or simulated, so hostile or mistaken input
ends in one ``SpecplanError`` line (exit 2) instead of a traceback, a hang or MemoryError.

What is checked, and why (the numbers are documented in docs/scenario-format.md):

- **Path form** (``check_path``): no NUL byte, at most ``MAX_PATH_CHARS`` characters and
  ``MAX_NAME_CHARS`` per component (the OS refuses longer ones with errors that do not name the
  file), ``~`` is not expanded (say so rather than "not found").
- **File kind and size** (``read_text_limited``): a regular file (a directory, ``/dev/zero`` or
  a FIFO would fail late, read forever or block), at most the kind's byte limit, UTF-8.
- **Nesting depth** (``check_nesting``): ``tomllib`` and ``json`` recurse per bracket and hit
  Python's recursion limit near depth 1,000; no contract needs more than a few levels.
- **Magnitudes** (``check_tree``): integers within ±2**53 (exact in a float, and far beyond any
  count a scenario or profile holds), finite floats within ±1e15; per-field caps on sizes that
  allocate memory (replicas, seeds, candidates, batch and block sizes).
- **Work** (``check_work``): a run whose expected simulated request-steps exceed
  ``max_request_steps()`` is refused up front with the estimate.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sim.contracts.errors import SpecplanError, clip, echo

MAX_PATH_CHARS = 4096
MAX_NAME_CHARS = 255
MAX_DEPTH = 32
MAX_INT = 2**53
MAX_FLOAT = 1e15

MIB = 1024**2
FILE_LIMITS = {
    "scenario": 4 * MIB,
    "profile": 256 * MIB,
    "trace": 4096 * MIB,
    "vLLM results": 2048 * MIB,
    "acceptance": 256 * MIB,
}

# sizes that allocate memory or multiply work: dotted field (list items as [] ) -> largest value
SCENARIO_CAPS: dict[str, int] = {
    "fleet.replicas": 10_000,
    "fleet.engine.max_num_seqs": 100_000,
    "fleet.engine.max_num_batched_tokens": 10_000_000,
    "fleet.engine.block_size": 65_536,
    "fleet.admission.queue_limit": 10_000_000,
}
SCENARIO_LIST_CAPS: dict[str, int] = {
    "run.seeds": 1_000,
    "candidates": 1_000,
    "workload.segments": 1_000,
}

DEFAULT_MAX_REQUEST_STEPS = 1_000_000_000
MAX_SWEEP_CELLS = 100_000
MAX_REQUESTS_PER_RUN = 5_000_000


def path_problem(text: str) -> str | None:
    """What is wrong with the form of a path written in a file (None: nothing)."""
    if "\x00" in text:
        return "path contains a NUL byte"
    if len(text) > MAX_PATH_CHARS:
        return f"path longer than {MAX_PATH_CHARS} characters"
    if max((len(part.encode("utf-8", "surrogateescape")) for part in text.split("/")), default=0) > MAX_NAME_CHARS:
        return f"path has a name longer than {MAX_NAME_CHARS} bytes"
    return None


def check_path(path: object, what: str) -> Path:
    """``path`` as a Path, or a SpecplanError saying what is wrong with its form."""
    text = os.fspath(path) if isinstance(path, str | os.PathLike) else None
    if not isinstance(text, str):
        raise SpecplanError(f"{what} path: expected a file path, got {type(path).__name__}")
    shown = text if len(text) <= 80 else f"{clip(text, 60)} ({len(text):,} characters)"  # cut at a / or .
    if not text:
        raise SpecplanError(f"{what} path is empty; give a file path")
    if "\x00" in text:
        raise SpecplanError(f"{shown!r}: {what} path contains a NUL byte")
    if len(text) > MAX_PATH_CHARS:
        raise SpecplanError(f"{shown}: {what} path longer than {MAX_PATH_CHARS} characters")
    longest = max((len(part.encode("utf-8", "surrogateescape")) for part in text.split("/")), default=0)
    if longest > MAX_NAME_CHARS:
        raise SpecplanError(f"{shown}: {what} path has a name longer than {MAX_NAME_CHARS} bytes")
    return Path(text)


def _tilde_hint(p: Path) -> str:
    return " (a leading ~ is not expanded here; write the full path)" if str(p).startswith("~") else ""


def _a(what: str) -> str:
    """``a profile``, ``an acceptance trace``."""
    return f"{'an' if what[:1].lower() in 'aeiou' else 'a'} {what}"


def check_file(path: object, what: str, limit: int | None = None) -> tuple[Path, int]:
    """(path, limit) of a regular file of at most ``limit`` bytes (``FILE_LIMITS[what]``)."""
    p = check_path(path, what)
    limit = FILE_LIMITS.get(what, 256 * MIB) if limit is None else limit
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise SpecplanError(f"{p}: {what} file not found{_tilde_hint(p)}") from None
    except (OSError, ValueError) as exc:
        raise SpecplanError(f"{p}: cannot read {what} file: {_os_reason(exc)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise SpecplanError(f"{p}: is a directory; expected {_a(what)} file")
    if not stat.S_ISREG(st.st_mode):
        raise SpecplanError(f"{p}: not a regular file; expected {_a(what)} file")
    if st.st_size > limit:
        raise SpecplanError(
            f"{p}: {what} file is {st.st_size:,} bytes, over the limit of {limit:,} bytes"
        )
    return p, limit


def read_bytes_limited(path: object, what: str, limit: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (``FILE_LIMITS[what]``)."""
    p, limit = check_file(path, what, limit)
    try:
        with open(p, "rb") as fh:
            data = fh.read(limit + 1)
    except (OSError, ValueError) as exc:
        raise SpecplanError(f"{p}: cannot read {what} file: {_os_reason(exc)}") from None
    if len(data) > limit:
        raise SpecplanError(f"{p}: {what} file is over the limit of {limit:,} bytes")
    return data


def _os_reason(exc: BaseException) -> str:
    reason = getattr(exc, "strerror", None) or str(exc)
    return " ".join(str(reason).split())


def decode_utf8(data: bytes, origin: object, what: str) -> str:
    """UTF-8 text (a BOM allowed), or a one-line error giving the offset of the first bad byte."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecplanError(
            f"{origin}:{line}: {what} file is not UTF-8 text (byte 0x{data[exc.start]:02x} at "
            f"offset {exc.start})"
        ) from None
    return text


def read_text_limited(path: object, what: str, limit: int | None = None) -> str:
    """``read_bytes_limited`` then ``decode_utf8``."""
    data = read_bytes_limited(path, what, limit)
    return decode_utf8(data, path, what)


_TOML_SKIP = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*'
)
_JSON_SKIP = re.compile(r'"(?:[^"\\]|\\.)*"')


def check_nesting(text: str, origin: object, what: str, *, toml: bool, limit: int = MAX_DEPTH) -> None:
    """Refuse brackets nested deeper than ``limit`` (outside strings and comments) before a
    recursive parser sees them; the error gives the line. Strings are blanked by one regex
    and the depth is a cumulative sum, so a 100 MB file takes a fraction of a second."""
    if text.count("[") + text.count("{") <= limit:
        return
    skip = _TOML_SKIP if toml else _JSON_SKIP
    bare = skip.sub(lambda m: "\n" * m.group().count("\n"), text).encode("utf-8", "surrogateescape")
    b = np.frombuffer(bare, dtype=np.uint8)
    step = np.isin(b, _OPEN).astype(np.int32) - np.isin(b, _CLOSE).astype(np.int32)
    depth = np.cumsum(step)  # an unbalanced close only lowers it: the parser reports that
    over = np.flatnonzero(depth > limit)
    if over.size:
        line = int(np.count_nonzero(b[: over[0]] == 10)) + 1
        field = _toml_field(text, b, depth, int(over[0])) if toml else None
        at = f" {field}:" if field else ""
        raise SpecplanError(f"{origin}:{line}:{at} {what} nests arrays/tables deeper than {limit} levels")


_TOML_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]*?)\s*\]\]?\s*(#.*)?$")
_TOML_KEY = re.compile(r"^\s*([^=\[\]{}#]+?)\s*=")


def _toml_field(text: str, bare: np.ndarray, depth: np.ndarray, at: int) -> str | None:
    """The dotted key whose value holds the over-deep nesting at byte ``at`` of the blanked
    text (``table.key``, or ``table header`` when the brackets open a header line)."""
    top = np.flatnonzero(depth[:at] == 0)
    start = int(top[-1]) + 1 if top.size else 0  # the outermost bracket of the deep value
    line_no = int(np.count_nonzero(bare[:start] == 10))
    lines = text.split("\n")
    if line_no >= len(lines):
        return None
    newlines = np.flatnonzero(bare == 10)
    key = _TOML_KEY.match(lines[line_no])
    if key is None:
        return "table header"
    table = ""
    for k in range(line_no - 1, -1, -1):  # the last header line that starts at depth 0
        at_depth = int(depth[newlines[k - 1]]) if k else 0
        header = _TOML_HEADER.match(lines[k]) if at_depth == 0 else None
        if header:
            table = header.group(1).replace(" ", "")
            break
    name = key.group(1).strip()
    return f"{table}.{name}" if table else name


_OPEN = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSE = np.frombuffer(b"]}", dtype=np.uint8)


def check_tree(data: Any, origin: object, what: str, path: str = "", *, floats: bool = True) -> None:
    """Every number in a parsed document within the magnitude limits (one line naming the
    field otherwise); for a scenario also the per-field size caps. ``floats=False`` checks
    integers only (vLLM's result files may hold NaN statistics; their fields check them)."""
    stack: list[tuple[str, Any]] = [(path, data)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, bool) or v is None or isinstance(v, str):
            continue
        if isinstance(v, int):
            if abs(v) > MAX_INT:
                raise SpecplanError(
                    f"{_loc(origin, where)}: integer {_short(v)} out of range; "
                    "valid: within ±2**53"
                )
            continue
        if isinstance(v, float):
            if floats and (not math.isfinite(v) or abs(v) > MAX_FLOAT):
                raise SpecplanError(
                    f"{_loc(origin, where)}: must be a finite number within "
                    f"±{MAX_FLOAT:g}, got {echo(v, 60)}"
                )
            continue
        if isinstance(v, Mapping):
            for k, x in v.items():
                stack.append((f"{where}.{k}" if where else str(k), x))
        elif isinstance(v, list | tuple):
            for j, x in enumerate(v):
                stack.append((f"{where}[{j}]", x))
    if what == "scenario" and isinstance(data, Mapping):
        _check_caps(data, origin)


def _loc(origin: object, where: str) -> str:
    return f"{origin}: {where}" if where else str(origin)


def _short(v: int) -> str:
    s = str(v) if v.bit_length() < 200 else f"~2**{v.bit_length()}"
    return s if len(s) <= 40 else s[:20] + f"…({len(s)} digits)"


def _get(data: Mapping, dotted: str) -> Any:
    cur: Any = data
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _check_caps(data: Mapping, origin: object) -> None:
    for dotted, cap in SCENARIO_CAPS.items():
        v = _get(data, dotted)
        if isinstance(v, int | float) and not isinstance(v, bool) and v > cap:
            raise SpecplanError(f"{origin}: {dotted}: {_short(int(v))} is over the limit of {cap:,}")
    for dotted, cap in SCENARIO_LIST_CAPS.items():
        v = _get(data, dotted)
        if isinstance(v, list) and len(v) > cap:
            raise SpecplanError(f"{origin}: {dotted}: {len(v):,} entries, over the limit of {cap:,}")


def env_limit(name: str, what: str = "an integer") -> int | None:
    """A limit set by environment variable ``name``: a whole number >= 1, or None when unset."""
    raw = os.environ.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise SpecplanError(f"{name}: expected {what}, got {echo(raw, 60)}") from None
    if value < 1:
        raise SpecplanError(f"{name}: must be >= 1, got {value}")
    return value
