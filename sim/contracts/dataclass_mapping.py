"""Plain mappings (parsed TOML) ↔ frozen dataclasses: one place for unknown keys, types and
locations.

The scenario tables are declared as dataclasses with type hints; ``from_mapping`` reads a
mapping into one (unknown keys and wrong types are a ``FieldError`` naming the dotted path),
``to_plain`` writes it back. Fields made with ``internal_field()`` are set by the loader (file
origin, base folder) and never read from or written to TOML.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
import typing
from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal

import numpy as np

from sim.contracts.errors import FieldError, clip, echo, join_path

_INTERNAL = {"internal": True}


def internal_field() -> Any:
    """A field set by the loader (file origin, base folder), never read from or written to TOML."""
    return field(default=None, compare=False, repr=False, metadata=_INTERNAL)


_HINTS: dict[type, dict[str, Any]] = {}


def type_hints(cls: type) -> dict[str, Any]:
    """The resolved type hints of a dataclass (cached: every load walks them)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def public_fields(cls: type) -> list[dataclasses.Field]:
    """The fields a TOML table may set (loader-internal ones left out)."""
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {echo(value, 60)}"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list | tuple):
        return "an array"
    return f"{type(value).__name__} {echo(value, 60)}"


def _convert(hint: Any, value: Any, path: str, ctx: dict[str, Any]) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, path, ctx)
    if origin is Literal:
        if not isinstance(value, str) or value not in args:
            raise FieldError(path, f"must be one of {', '.join(map(repr, args))}; got {_describe(value)}")
        return value
    if hint is bool:
        if not isinstance(value, bool | np.bool_):
            raise FieldError(path, f"expected true or false, got {_describe(value)}")
        return bool(value)
    if hint is int:
        if isinstance(value, numbers.Real) and not isinstance(value, bool | numbers.Integral):
            if math.isfinite(float(value)) and float(value).is_integer():
                return int(value)  # 2.0 from a numeric sweep grid means 2
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise FieldError(path, f"expected an integer, got {_describe(value)}")
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise FieldError(path, f"expected a number, got {_describe(value)}")
        v = float(value)
        if not math.isfinite(v):
            raise FieldError(path, f"must be a finite number, got {v}")
        return v
    if hint is str:
        if not isinstance(value, str):
            raise FieldError(path, f"expected a string, got {_describe(value)}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise FieldError(path, f"expected an array, got {_describe(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{path}[{i}]", ctx) for i, v in enumerate(value))
        if len(value) != len(args):
            raise FieldError(path, f"expected an array of {len(args)} values, got {len(value)}")
        return tuple(_convert(a, v, f"{path}[{i}]", ctx) for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise FieldError(path, f"expected a table, got {_describe(value)}")
        return from_mapping(hint, value, path, ctx)
    if origin is dict:  # a table of named tables ([fleets.NAME])
        if not isinstance(value, Mapping):
            raise FieldError(path, f"expected a table, got {_describe(value)}")
        return {str(k): _convert(args[1], v, join_path(path, clip(str(k), 60)), ctx) for k, v in value.items()}
    raise TypeError(f"unsupported field type {hint!r} at {path}")  # a programming error


def from_mapping(cls: type, d: Mapping[str, Any], path: str, ctx: dict[str, Any]) -> Any:
    """Build ``cls`` from ``d``; errors name ``path``; ``ctx`` fills the internal fields."""
    fields = public_fields(cls)
    names = [f.name for f in fields]
    for key in d:
        if key not in names:
            raise FieldError(join_path(path, clip(str(key), 60)), f"unknown key; valid: {', '.join(names)}")
    hints = type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields:
        if f.name in d:
            kwargs[f.name] = _convert(hints[f.name], d[f.name], join_path(path, f.name), ctx)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            where = join_path(path, f.name)
            hint = hints[f.name]
            elem = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else None
            if dataclasses.is_dataclass(hint):
                how = f"add a [{where}] table"
            elif elem is not None and dataclasses.is_dataclass(elem):
                how = f"add at least one [[{where}]] table"
            else:
                how = f"add {f.name} = …"
            raise FieldError(where, f"required; {how}")
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal") and f.name in ctx:
            kwargs[f.name] = ctx[f.name]
    try:
        return cls(**kwargs)
    except FieldError as exc:
        raise exc.under(path) from None


def to_plain(obj: Any) -> Any:
    """A dataclass as nested dicts and lists (None and internal fields omitted)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in public_fields(type(obj)):
            v = getattr(obj, f.name)
            if v is None:
                continue
            out[f.name] = to_plain(v)
        return out
    if isinstance(obj, tuple | list):
        return [to_plain(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj
