"""Prompt sets for acceptance measurement: built-in (written for specplan) or a user's JSONL.

Acceptance depends on what is asked (a summary copies its source, so n-gram lookup hits; free
writing does not), so prompts carry a ``task`` and ``language`` that become the profile's
acceptance segment keys. One JSON object per line: ``{"id", "task", "language", "prompt"}``
(``id`` optional in user files).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sim.contracts.errors import SpecplanError, read_text, where

BUILTIN_TASKS = ("support", "summarization", "code", "creative", "translation")
"""Tasks shipped in profiler/prompts/<task>.jsonl."""
BUILTIN_LANGUAGES = ("en", "sv", "de")

_FIELDS = ("id", "task", "language", "prompt")
_KEY_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_LANG_RE = re.compile(r"^([a-z]{2}|any)$")


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request's prompt and the acceptance segment it belongs to."""

    id: str
    """Unique within a set; names the per-request row's source in messages."""
    task: str
    """Segment task key, e.g. ``summarization`` (letters, digits, ``.``, ``_``, ``-``)."""
    language: str
    """ISO 639-1 code (``en``, ``sv``, ``de``, …) or ``any``."""
    prompt: str
    """The user message (the chat template is applied at encoding time)."""

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("id: must be a non-empty string")
        if not _KEY_RE.match(self.task):
            raise ValueError(f"task {self.task!r}: use letters, digits, '.', '_' or '-'")
        if not _LANG_RE.match(self.language):
            raise ValueError(
                f"language {self.language!r}: expected a two-letter ISO 639-1 code or 'any'"
            )
        if not self.prompt.strip():
            raise ValueError("prompt: must not be empty")

    @property
    def segment(self) -> tuple[str, str]:
        return (self.task, self.language)


def parse_jsonl(lines: Iterable[str], source: str, *, require_id: bool) -> list[Prompt]:
    """Parse prompt lines; every problem is a SpecplanError ``source:line: field: what``."""
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SpecplanError(f"{where(source, line=number)}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise SpecplanError(
                f"{where(source, line=number)}: expected a JSON object with {', '.join(_FIELDS)}"
            )
        unknown = sorted(set(obj) - set(_FIELDS))
        if unknown:
            raise SpecplanError(
                f"{where(source, unknown[0], number)}: unknown field; valid fields are "
                f"{', '.join(_FIELDS)}"
            )
        needed = _FIELDS if require_id else _FIELDS[1:]
        for name in needed:
            if name not in obj:
                raise SpecplanError(f"{where(source, name, number)}: missing (required)")
            if not isinstance(obj[name], str):
                raise SpecplanError(f"{where(source, name, number)}: expected a string")
        pid = obj.get("id", f"{Path(source).stem}-{number}")
        if not isinstance(pid, str):
            raise SpecplanError(f"{where(source, 'id', number)}: expected a string")
        if pid in seen:
            raise SpecplanError(
                f"{where(source, 'id', number)}: duplicate id {pid!r} (first on line {seen[pid]})"
            )
        seen[pid] = number
        try:
            prompts.append(Prompt(pid, obj["task"], obj["language"], obj["prompt"]))
        except ValueError as exc:
            raise SpecplanError(f"{where(source, line=number)}: {exc}") from None
    if not prompts:
        raise SpecplanError(f"{source}: no prompts (the file is empty); expected JSON lines")
    return prompts


def load_prompts(path: str | Path) -> list[Prompt]:
    """A user's JSONL prompt file: fields task, language, prompt and optional id."""
    p = Path(path)
    text = read_text(p, "prompt", "cannot read prompt file ({exc})")
    return parse_jsonl(text.splitlines(), str(p), require_id=False)


def builtin_prompts(
    tasks: Sequence[str] | None = None, languages: Sequence[str] | None = None
) -> list[Prompt]:
    """The shipped prompt sets, optionally restricted to some tasks and languages."""
    chosen = list(tasks) if tasks else list(BUILTIN_TASKS)
    for task in chosen:
        if task not in BUILTIN_TASKS:
            raise SpecplanError(
                f"task {task!r}: no built-in prompt set; available: {', '.join(BUILTIN_TASKS)}"
            )
    if languages:
        for lang in languages:
            if lang not in BUILTIN_LANGUAGES:
                raise SpecplanError(
                    f"language {lang!r}: no built-in prompts; available: "
                    f"{', '.join(BUILTIN_LANGUAGES)}"
                )
    out: list[Prompt] = []
    folder = resources.files("profiler") / "prompts"
    for task in chosen:
        name = f"prompts/{task}.jsonl"
        text = (folder / f"{task}.jsonl").read_text(encoding="utf-8")
        out.extend(parse_jsonl(text.splitlines(), f"profiler/{name}", require_id=True))
    if languages:
        out = [p for p in out if p.language in set(languages)]
    return out


def by_segment(prompts: Sequence[Prompt]) -> dict[tuple[str, str], list[Prompt]]:
    """Group prompts by (task, language), keeping first-seen order of segments and prompts."""
    groups: dict[tuple[str, str], list[Prompt]] = {}
    for p in prompts:
        groups.setdefault(p.segment, []).append(p)
    return groups


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids the model would see: the chat template (with generation prompt) when present."""
    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(text)["input_ids"]
    return [int(t) for t in ids]
