"""The input errors that reach users as a clean one-line message (exit code 2): SpecplanError,
and FieldError for one field of a frozen dataclass, located as the loader descends."""

from __future__ import annotations

from pathlib import Path


class SpecplanError(Exception):
    """Bad input a user can fix: the message names the file, field or line and what is valid.

    Raise it (never print-and-exit) from library code; the CLI turns it into one line on
    stderr and exit code 2, so nothing already computed is lost by a traceback.
    """


class FieldError(SpecplanError):
    """A validation problem of one field, located relative to the dataclass that raised it.

    The scenario loader prefixes the dotted path of the enclosing tables and the file name, so
    dataclasses stay usable (and their errors readable) when built directly in code.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)

    def under(self, prefix: str) -> FieldError:
        """The same problem located under an enclosing path (``prefix.field``)."""
        if not prefix:
            return self
        if not self.field:
            return FieldError(prefix, self.problem)
        joiner = "" if self.field.startswith("[") else "."
        return FieldError(f"{prefix}{joiner}{self.field}", self.problem)


def where(path: object, field: str | None = None, line: int | None = None) -> str:
    """Format the location prefix of an error message: ``file:line: field``."""
    loc = str(path)
    if line is not None:
        loc += f":{line}"
    if field:
        loc += f": {field}"
    return loc


def join_path(path: str, key: object) -> str:
    """``path.key``, or ``key`` at the top level: the dotted location of a field."""
    return f"{path}.{key}" if path else str(key)


def read_text(path: str | Path, what: str, unreadable: str = "cannot read {what}: {exc}") -> str:
    """The UTF-8 text of a user's file, or a ``SpecplanError``: ``path: <what> file not found``
    or ``path: `` + ``unreadable`` (formatted with ``what`` and the OS/decoding error ``exc``).
    Path form, file kind and size are checked first (sim.contracts.input_limits)."""
    from sim.contracts.input_limits import decode_utf8, read_bytes_limited

    try:
        data = read_bytes_limited(path, what)
    except OSError as exc:
        raise SpecplanError(f"{path}: " + unreadable.format(what=what, exc=exc)) from None
    return decode_utf8(data, path, what)


def clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, cut at a word boundary and marked with "…": a
    message cut mid-word reads as another word (a header ``'Timestamp,Conte'`` looks like the
    file's). One long token (a number of 5,000 digits) has no boundary and is cut where it must."""
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 1)]
    if cut[-1] not in _BOUNDARIES and text[len(cut)] not in _BOUNDARIES:  # inside a word: back off
        edge = max(cut.rfind(c) for c in _BOUNDARIES)
        if edge >= limit // 2:
            cut = cut[:edge]
    return cut.rstrip(" ,;:") + "…"


_BOUNDARIES = " ,;:./[]"
"""Where a word (or a step of a dotted path) ends."""


def echo(value: object, limit: int = 40) -> str:
    """``repr`` of a user's value for a one-line error, cut to about ``limit`` characters (a
    string at a word boundary) with its length stated: an absurdly long number or string must
    not flood (or wrap) the message."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, str):
        return f"{clip(value, max(limit - 2, 1))!r} ({len(value):,} characters)"
    return f"{clip(text, limit)} ({len(text):,} characters)"
