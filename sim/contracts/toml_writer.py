"""A minimal TOML writer (tomllib only reads): enough for scenarios and reports."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_str(v: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in v:
        if ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_str(k)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_toml_key(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def inline_value(v: Any) -> str:
    """``v`` as TOML writes it inline, for a message quoting what a user set (``true``, not
    Python's ``True``); ``repr`` for what TOML cannot hold."""
    try:
        return _toml_value(v)
    except TypeError:
        return repr(v)


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, Mapping) for x in v)


def dumps_toml(doc: Mapping[str, Any]) -> str:
    """Write a nested dict as TOML: tables as [sections], lists of tables as [[arrays]],
    tables inside array items inline. Enough for scenarios and reports."""
    lines: list[str] = []

    def body(table: Mapping[str, Any], prefix: str) -> None:
        for k, v in table.items():
            if not isinstance(v, Mapping) and not _is_table_array(v):
                lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in table.items():
            name = f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k)
            if isinstance(v, Mapping):
                lines.append("")
                lines.append(f"[{name}]")
                body(v, name)
            elif _is_table_array(v):
                for item in v:
                    lines.append("")
                    lines.append(f"[[{name}]]")
                    for ik, iv in item.items():
                        lines.append(f"{_toml_key(ik)} = {_toml_value(iv)}")

    body(doc, "")
    return "\n".join(lines).lstrip("\n") + "\n"
