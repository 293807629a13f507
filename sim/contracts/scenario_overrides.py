"""Dotted-path overrides of a scenario's plain dict, for what-ifs and sweeps.

``workload.rate``, ``candidates[ngram-k3].k``, ``workload.segments[support-en].share``,
``fleets.h200.replicas``: each step is checked against the dataclass fields, so a typo names the
valid keys.
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
from sim.contracts.errors import SpecplanError, echo, join_path

_SEG_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[([^\]]+)\])?")


def _parse_path(path: str) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    pos = 0
    while pos < len(path):
        m = _SEG_RE.match(path, pos)
        if not m:
            raise SpecplanError(f"override {echo(path, 80)}: cannot parse at {echo(path[pos:], 40)}; "
                                "use dotted fields like workload.segments[NAME].share")
        out.append((m.group(1), m.group(2)))
        pos = m.end()
        if pos < len(path):
            if path[pos] != ".":
                raise SpecplanError(f"override {echo(path, 80)}: expected '.' at {echo(path[pos:], 40)}")
            pos += 1
            if pos == len(path):
                raise SpecplanError(f"override {echo(path, 80)}: ends with '.'")
    if not out:
        raise SpecplanError("override: empty path")
    return out


def plain_value(value: object) -> object:
    """Overrides may carry numpy scalars/arrays or tuples; TOML-like plain values go in."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | list):
        return [plain_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain_value(v) for k, v in value.items()}
    return value


def apply_override(
    root: type, data: dict[str, Any], path: str, value: object, origin: str | None
) -> None:
    """Set the dotted ``path`` (list items by name or index, named tables such as
    ``fleets.NAME`` or ``fleets[NAME]`` by name) in ``data``, the plain dict of a ``root``
    dataclass, checking every step against the dataclass fields. Errors name the path as given
    (cut at a word boundary) and the TOML keys that are valid there."""
    parts = _parse_path(path)
    src = origin or "scenario"
    shown = echo(path, 80)
    cls: Any = root
    node: Any = data
    done = ""
    i = 0
    while i < len(parts):
        key, sel = parts[i]
        fields = {f.name: f for f in public_fields(cls)}
        if key not in fields:
            raise SpecplanError(
                f"{src}: override {shown}: unknown field {echo(join_path(done, key), 80)}; "
                f"valid: {', '.join(fields)}"
            )
        hint = type_hints(cls)[key]
        done = join_path(done, key)
        # strip Optional
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if typing.get_origin(hint) is dict and (sel is not None or i + 1 < len(parts)):
            if sel is None:  # fleets.NAME.field: the next step names the table
                i += 1
                sel, extra = parts[i]
                if extra is not None:
                    raise SpecplanError(f"{src}: override {shown}: {done}.{sel} is a table, not a list")
            tables = node.get(key)
            if not isinstance(tables, dict) or sel not in tables:
                names = ", ".join(tables) if isinstance(tables, dict) and tables else "none"
                raise SpecplanError(f"{src}: override {shown}: no table {echo(sel, 40)} in {done}; "
                                    f"valid: {names}")
            done = f"{done}.{sel}"
            if i == len(parts) - 1:
                tables[sel] = plain_value(value)
                return
            node, cls = tables[sel], typing.get_args(hint)[1]
            i += 1
            continue
        last = i == len(parts) - 1
        if sel is not None:
            items = node.get(key)
            elem = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else None
            if not isinstance(items, list) or not dataclasses.is_dataclass(elem):
                raise SpecplanError(f"{src}: override {shown}: {done} is not a list of tables")
            idx = next((j for j, it in enumerate(items) if it.get("name") == sel), None)
            if idx is None and sel.lstrip("-").isdigit() and -len(items) <= int(sel) < len(items):
                idx = int(sel) % len(items)
            if idx is None:
                names = [str(it.get("name", j)) for j, it in enumerate(items)]
                raise SpecplanError(
                    f"{src}: override {shown}: no item {echo(sel, 40)} in {done}; valid: "
                    f"{', '.join(names) or f'none ({done} is empty)'}"
                )
            done = f"{done}[{sel}]"
            if last:
                items[idx] = plain_value(value)
                return
            node, cls = items[idx], elem
            i += 1
            continue
        if last:
            if value is None:
                node.pop(key, None)
            else:
                node[key] = plain_value(value)
            return
        if not dataclasses.is_dataclass(hint):
            raise SpecplanError(f"{src}: override {shown}: {done} is a value, not a table")
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        node, cls = child, hint
        i += 1
