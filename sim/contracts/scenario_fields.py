"""What several scenario tables share: the name pattern, how relative paths resolve, the
context-length bound."""

from __future__ import annotations

import re
from pathlib import Path

from sim.contracts.errors import FieldError

NAME_RE = re.compile(r"^[A-Za-z0-9._+-]+$")
"""Segment and candidate names: they appear in file names, URLs and result columns."""


def resolve_path(raw: str, base_dir: str | None) -> Path:
    """Resolve a scenario path: absolute as is; else the scenario's folder, then the cwd.

    Returns the first candidate that exists, or the scenario-folder candidate when none does
    (so an error message points where the user most likely meant).
    """
    try:
        p = Path(raw).expanduser()
    except RuntimeError:  # ~user of an unknown user: left as written, reported as not found
        p = Path(raw)
    if p.is_absolute():
        return p
    candidates = ([Path(base_dir) / p] if base_dir else []) + [Path.cwd() / p]
    for c in candidates:
        if c.exists():
            return c.resolve()
    return candidates[0].resolve()


def looked_in(raw: str, base_dir: str | None) -> str:
    """Where ``resolve_path`` looked, for a not-found message (an absolute path: only there)."""
    if Path(raw).is_absolute():
        return raw
    places = ([str(Path(base_dir) / raw)] if base_dir else []) + [str(Path.cwd() / raw)]
    return " or ".join(dict.fromkeys(places))


def not_a_file(p: Path) -> str:
    """Why ``p`` cannot be read as a file: missing, a folder or a device (not 'not found' for all)."""
    if p.is_dir():
        return "is a directory, not a file"
    if p.exists():
        return "is not a regular file"
    return "file not found"


MAX_MODEL_LEN = 100_000_000
"""Largest context length a scenario may name (tokens; no model comes near it)."""


def check_max_model_len(value: int | None) -> None:
    """``max_model_len`` of [fleet] or a candidate: whole tokens, at least 2 (a prompt token and
    an output token)."""
    if value is not None and not 2 <= value <= MAX_MODEL_LEN:
        raise FieldError("max_model_len", f"must be in 2..{MAX_MODEL_LEN:,} tokens (the model's context "
                         f"length, vLLM --max-model-len), got {value}")
