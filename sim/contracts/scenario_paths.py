"""Which scenario fields name files, and how a scenario from someone else is kept to allowed folders.

Why a marker on the schema: a path field read from an upload without a check lets the uploader
read (or probe for) any file on the server. Every field that names a file is declared with
``path_field``; ``path_fields`` enumerates them from the dataclasses themselves and
``map_paths`` rewrites each of them in a parsed document, so a check built on these two covers a
field added later without being told about it (tests/sim/contracts/test_scenario_paths.py fails
on a string field that is neither marked nor declared not-a-path).

The CLI reads the user's own paths as written (``scenario_fields.resolve_path``); only a front
end that takes scenarios from others (the dashboard's upload) runs them through
``AllowedFolders.resolve`` first, before the loader looks at any file.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sim.contracts.dataclass_mapping import public_fields, type_hints
from sim.contracts.errors import FieldError, join_path
from sim.contracts.input_limits import path_problem

PathKind = Literal["profile", "data"]
"""What a path field names: a calibration profile (only ``profiles/`` may hold one in an upload)
or a data file (a workload or acceptance trace: ``scenarios/``, ``profiles/`` or a trace folder)."""

_KEY = "path_kind"


def path_field(kind: PathKind, default: Any = dataclasses.MISSING) -> Any:
    """A dataclass field that names a file of ``kind`` (marked in its metadata)."""
    return field(default=default, metadata={_KEY: kind})


def path_kind(f: dataclasses.Field) -> PathKind | None:
    """The kind a field was declared with by ``path_field`` (None: not a path)."""
    return f.metadata.get(_KEY)


@dataclass(frozen=True, slots=True)
class PathField:
    """One path field of a schema, where it sits in a document."""

    where: str
    """Dotted template: ``fleets.*.profile`` (any table name), ``candidates[].acceptance_trace``
    (any array item)."""
    kind: PathKind
    owner: type
    """The dataclass that declares it."""
    name: str


def _inner(hint: Any) -> list[tuple[Any, str]]:
    """(type, template suffix) of what a field's value holds: a table, array items, named tables."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return [x for a in args if a is not type(None) for x in _inner(a)]
    if origin is tuple:
        return [(a, "[]") for a in args if a is not Ellipsis]
    if origin is dict:
        return [(args[1], ".*")]
    return [(hint, "")]


def path_fields(cls: type, prefix: str = "") -> tuple[PathField, ...]:
    """Every ``path_field`` reachable from dataclass ``cls``, found from its type hints."""
    out: list[PathField] = []
    hints = type_hints(cls)
    for f in public_fields(cls):
        where = join_path(prefix, f.name)
        if (kind := path_kind(f)) is not None:
            out.append(PathField(where, kind, cls, f.name))
            continue
        for sub, suffix in _inner(hints[f.name]):
            if dataclasses.is_dataclass(sub):
                out.extend(path_fields(sub, where + suffix))
    return tuple(out)


Resolver = Callable[[str, str, PathKind], str | None]
"""``(raw, where, kind) -> path`` to keep, None to drop the key, or a SpecplanError."""


def map_paths(cls: type, data: Mapping[str, Any], resolve: Resolver) -> dict[str, Any]:
    """A copy of parsed document ``data`` (for dataclass ``cls``) with the string of every path
    field replaced by ``resolve(raw, where, kind)``; ``where`` names the concrete place
    (``fleets.h200.profile``, ``candidates[2].acceptance_trace``). Values of a shape the loader
    refuses (a number for a path, an array for a table) are left for the loader to report."""
    return _map(cls, data, "", resolve)


def _map(hint: Any, value: Any, where: str, resolve: Resolver) -> Any:
    for sub, suffix in _inner(hint):
        if dataclasses.is_dataclass(sub) and suffix == "" and isinstance(value, Mapping):
            return _map_table(sub, value, where, resolve)
        if suffix == "[]" and isinstance(value, list | tuple):
            return [_map(sub, v, f"{where}[{i}]", resolve) for i, v in enumerate(value)]
        if suffix == ".*" and isinstance(value, Mapping):
            return {k: _map(sub, v, join_path(where, str(k)), resolve) for k, v in value.items()}
    return value


def _map_table(cls: type, d: Mapping[str, Any], where: str, resolve: Resolver) -> dict[str, Any]:
    out = dict(d)
    hints = type_hints(cls)
    for f in public_fields(cls):
        if f.name not in d:
            continue
        at = join_path(where, f.name)
        kind = path_kind(f)
        if kind is None:
            out[f.name] = _map(hints[f.name], d[f.name], at, resolve)
        elif isinstance(d[f.name], str):
            kept = resolve(d[f.name], at, kind)
            if kept is None:
                del out[f.name]
            else:
                out[f.name] = kept
    return out


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(frozen=True, slots=True)
class AllowedFolders:
    """The folders a scenario from someone else may name files in, and the one rule for them.

    ``resolve`` decides on the path's text first (joined to ``base`` and normalised, never the
    current directory): a path whose text leaves the allowed folders is refused without touching
    the file system, so nothing outside them is opened, listed or tested for existence. A path
    whose text stays inside is then resolved (symlinks followed) and checked again, so a link
    inside an allowed folder that points out is refused too. The refusal is the same line
    whether or not the file exists."""

    base: Path
    """Folder relative paths resolve against (``scenarios/``)."""
    profiles: tuple[Path, ...]
    """Where a profile may lie (``profiles/``); a bare file name means a file there."""
    data: tuple[Path, ...]
    """Where a data file may lie (``scenarios/``, ``profiles/``, the configured trace folders)."""

    def roots(self, kind: PathKind) -> tuple[Path, ...]:
        """The allowed folders of a path of ``kind``."""
        return self.profiles if kind == "profile" else self.data

    def describe(self, kind: PathKind) -> str:
        """The allowed folders by name (never the server's full paths)."""
        return ", ".join(f"{r.name}/" for r in self.roots(kind)) or "none"

    def resolve(self, raw: str, where: str, kind: PathKind) -> str:
        """The absolute, symlink-free path ``raw`` names, if it lies in an allowed folder of
        ``kind``; else a ``FieldError`` naming ``where`` and the allowed folders."""
        if why := path_problem(raw):
            raise FieldError(where, why)
        if not raw:
            raise FieldError(where, f"empty; name a file in {self.describe(kind)}")
        roots = self.roots(kind)
        if os.path.isabs(raw):
            joined = raw
        elif kind == "profile" and "/" not in raw and self.profiles:
            joined = os.path.join(self.profiles[0], raw)  # a bare name: a file in profiles/
        else:
            joined = os.path.join(self.base, raw)
        text = os.path.normpath(joined)
        lexical = [os.path.normpath(os.path.abspath(r)) for r in roots]
        real_roots = [os.path.realpath(r) for r in roots]
        if any(_within(text, r) for r in lexical + real_roots):
            real = os.path.realpath(text)  # only folders inside the roots (and their links) are read
            if any(_within(real, r) for r in real_roots):
                return real
        hint = (" (a file name in profiles/, or ../profiles/NAME relative to scenarios/)"
                if kind == "profile" else " (relative paths resolve against scenarios/)")
        raise FieldError(where, f"an uploaded scenario may only name files in {self.describe(kind)}"
                                f"{hint}; given {raw[:120]!r}")
