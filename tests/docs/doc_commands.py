"""The commands the documentation shows: every fenced block of README.md and docs/*.md, each
command that calls ``specplan`` (or ``.venv/bin/specplan``, ``python -m cli``) or ``make``, with
its continuation lines joined, its comment dropped and its optional ``[...]`` arguments left out
(the example as a reader first types it)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC_FILES = ("README.md", "docs/*.md")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
PROGRAMS = {"specplan": ["specplan"], ".venv/bin/specplan": ["specplan"], "make": ["make"]}


@dataclass(frozen=True)
class DocCommand:
    """One command of a fenced block: where it is and its words, ready to run."""

    file: str
    line: int
    text: str
    """As written (continuations joined, comment kept)."""
    argv: tuple[str, ...]
    """``("specplan", …)`` or ``("make", …)``, optional ``[...]`` groups left out."""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def shown(self) -> str:
        return " ".join(shlex.quote(a) for a in self.argv)


STARTS = re.compile(r"(specplan|\.venv/bin/specplan|python -m cli|make)(\s|$)")


def _argv(text: str) -> tuple[str, ...] | None:
    if not STARTS.match(text):
        return None
    words = shlex.split(text, comments=True)
    if words[:3] == ["python", "-m", "cli"]:
        words = ["specplan", *words[3:]]
    if not words or words[0] not in PROGRAMS:
        return None
    out, depth = [], 0
    for w in words:
        if depth == 0 and w.startswith("["):
            depth = 1
        if depth == 0:
            out.append(w)
        elif w.endswith("]") and w.count("]") >= w.count("["):
            depth = 0
    return tuple(PROGRAMS[out[0]] + out[1:])


def doc_commands(repo: Path = REPO) -> list[DocCommand]:
    """Every documented command, in document order."""
    found = []
    for pattern in DOC_FILES:
        for path in sorted(repo.glob(pattern)):
            text = path.read_text(encoding="utf-8")
            for block in FENCE.finditer(text):
                first = text.count("\n", 0, block.start(1)) + 1
                lines = block.group(1).splitlines()
                i = 0
                while i < len(lines):
                    start, joined = i, lines[i]
                    while joined.rstrip().endswith("\\") and i + 1 < len(lines):
                        i += 1
                        joined = joined.rstrip()[:-1] + " " + lines[i].strip()
                    i += 1
                    argv = _argv(joined.strip()) if joined.strip() else None
                    if argv is not None:
                        found.append(DocCommand(str(path.relative_to(repo)), first + start, joined.strip(), argv))
    return found
