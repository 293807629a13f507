"""Reading a parsed JSON tree with one-line errors that name the file and the JSON path.

``JsonReader`` holds the primitives (objects with known keys, strings, integers, numbers,
choices); the profile's section readers (profile_identity, profile_timing, profile_memory,
profile_acceptance) build on it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from sim.contracts.errors import SpecplanError, echo, join_path, where


def decode_failure(exc: Exception, origin: object, line: int, numbers: str) -> SpecplanError:
    """One line for JSON text that would not decode at ``origin:line``: a syntax error (with its
    column), nesting deeper than Python recurses, or an integer of over 4,300 digits, which
    Python refuses (``numbers`` says what is valid instead). One home for the three readers of
    JSON files: profiles, vLLM results and JSON Lines traces."""
    if isinstance(exc, RecursionError):
        return SpecplanError(f"{origin}:{line}: JSON nested too deeply to parse")
    if isinstance(exc, json.JSONDecodeError):
        return SpecplanError(f"{origin}:{exc.lineno if line <= 0 else line}: invalid JSON at column "
                             f"{exc.colno}: {exc.msg}")
    return SpecplanError(f"{origin}:{line}: a number with thousands of digits; valid: {numbers}")


class JsonReader:
    """Walks the JSON tree, raising one-line errors with the JSON path of the bad field."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, path: str, message: str) -> SpecplanError:
        return SpecplanError(f"{where(self.origin, path)}: {message}")

    # -- primitives
    def obj(self, v: Any, path: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
        if not isinstance(v, dict):
            raise self.fail(path, f"expected an object, got {json_type(v)}")
        allowed = set(required) | set(optional)
        for key in v:
            if key not in allowed and not (isinstance(key, str) and key.startswith("x-")):
                valid = ", ".join(sorted(allowed))
                raise self.fail(join_path(path, key), f"unknown key (valid: {valid}; or x-* for extensions)")
        for key in required:
            if key not in v:
                raise self.fail(join_path(path, key), "missing (required)")
        return v

    def str_(self, v: Any, path: str, *, nullable: bool = False, pattern: re.Pattern | None = None) -> Any:
        if v is None and nullable:
            return None
        if not isinstance(v, str):
            raise self.fail(path, f"expected a string{' or null' if nullable else ''}, got {json_type(v)}")
        if pattern is not None and not pattern.match(v):
            raise self.fail(path, f"{echo(v, 60)} does not match {pattern.pattern}")
        return v

    def int_(self, v: Any, path: str, *, minimum: int | None = 0, nullable: bool = False) -> Any:
        if v is None and nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(path, f"expected an integer, got {json_type(v)}")
        if minimum is not None and v < minimum:
            raise self.fail(path, f"must be >= {minimum}, got {v}")
        return v

    def num(self, v: Any, path: str, *, minimum: float | None = None, nullable: bool = False) -> Any:
        if v is None and nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.fail(path, f"expected a finite number, got {json_type(v)}")
        if minimum is not None and v < minimum:
            raise self.fail(path, f"must be >= {minimum}, got {v}")
        return float(v)

    def choice(self, v: Any, path: str, valid: tuple[str, ...]) -> str:
        if v not in valid:
            raise self.fail(path, f"expected one of {', '.join(valid)}, got {echo(v, 60)}")
        return v

    def str_map(self, v: Any, path: str) -> dict[str, str]:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise self.fail(path, f"expected an object of strings, got {json_type(v)}")
        for key, val in v.items():
            self.str_(val, join_path(path, key))
        return dict(v)

    # -- top level


def index_suffix(idx: tuple[int, ...]) -> str:
    """``[i][j]`` for an array cell."""
    return "".join(f"[{i}]" for i in idx)


def names_or_none(m: Mapping[str, Any]) -> str:
    """The keys, comma-separated, or ``none``: the valid names in an error."""
    return ", ".join(m) or "none"


def json_type(v: Any) -> str:
    """What a JSON value is, for "expected X, got Y" messages."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean {str(v).lower()}"
    if isinstance(v, int | float):
        return f"number {v}"
    if isinstance(v, str):
        return f"string {echo(v, 40)}"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__
