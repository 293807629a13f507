"""Dotted-path overrides of a scenario's plain dict, for what-ifs and sweeps.

``workload.rate``, ``candidates[ngram-k3].k``, ``workload.segments[support-en].share``: each
step is checked against the dataclass fields, so a typo names the valid keys.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

import numpy as np

from sim.contracts.dataclass_mapping import public_fields, type_hints
from sim.contracts.errors import SpecplanError, join_path

_SEG_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[([^\]]+)\])?")


def _parse_path(path: str) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    pos = 0
    while pos < len(path):
        m = _SEG_RE.match(path, pos)
        if not m:
            raise SpecplanError(f"override {path!r}: cannot parse at {path[pos:]!r}; "
                                "use dotted fields like workload.segments[NAME].share")
        out.append((m.group(1), m.group(2)))
        pos = m.end()
        if pos < len(path):
            if path[pos] != ".":
                raise SpecplanError(f"override {path!r}: expected '.' at {path[pos:]!r}")
            pos += 1
            if pos == len(path):
                raise SpecplanError(f"override {path!r}: ends with '.'")
    if not out:
        raise SpecplanError("override: empty path")
    return out


def _plain_value(value: object) -> object:
    """Overrides may carry numpy scalars/arrays or tuples; TOML-like plain values go in."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | list):
        return [_plain_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain_value(v) for k, v in value.items()}
    return value


def apply_override(
    root: type, data: dict[str, Any], path: str, value: object, origin: str | None
) -> None:
    """Set the dotted ``path`` (list items by name or index) in ``data``, the plain dict of a
    ``root`` dataclass, checking every step against the dataclass fields."""
    parts = _parse_path(path)
    src = origin or "scenario"
    cls: Any = root
    node: Any = data
    done = ""
    for n, (key, sel) in enumerate(parts):
        last = n == len(parts) - 1
        fields = {f.name: f for f in public_fields(cls)}
        if key not in fields:
            raise SpecplanError(
                f"{src}: override {path!r}: unknown field {join_path(done, key)!r}; "
                f"valid: {', '.join(fields)}"
            )
        hint = type_hints(cls)[key]
        done = join_path(done, key)
        # strip Optional
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if sel is not None:
            items = node.get(key)
            elem = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else None
            if not isinstance(items, list) or not dataclasses.is_dataclass(elem):
                raise SpecplanError(f"{src}: override {path!r}: {done} is not a list of tables")
            idx = next((i for i, it in enumerate(items) if it.get("name") == sel), None)
            if idx is None and sel.lstrip("-").isdigit() and -len(items) <= int(sel) < len(items):
                idx = int(sel) % len(items)
            if idx is None:
                names = [str(it.get("name", i)) for i, it in enumerate(items)]
                raise SpecplanError(
                    f"{src}: override {path!r}: no item {sel!r} in {done}; valid: {', '.join(names)}"
                )
            done = f"{done}[{sel}]"
            if last:
                items[idx] = _plain_value(value)
                return
            node, cls = items[idx], elem
            continue
        if last:
            if value is None:
                node.pop(key, None)
            else:
                node[key] = _plain_value(value)
            return
        if not dataclasses.is_dataclass(hint):
            raise SpecplanError(f"{src}: override {path!r}: {done} is a value, not a table")
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        node, cls = child, hint
