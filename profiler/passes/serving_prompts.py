"""Prompts for the real serving loop's requests: real text of each request's segment, fitted to its
prompt length (random ids for a config-only model)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def fit_prompt(text_ids: Sequence[int], length: int) -> tuple[int, ...]:
    """Cut real text to ``length`` tokens, or repeat it until it is that long."""
    if length < 1:
        raise ValueError(f"prompt length must be >= 1, got {length}")
    base = list(text_ids)
    if not base:
        raise ValueError("no prompt text to fit")
    out: list[int] = []
    while len(out) < length:
        out.extend(base)
    return tuple(out[:length])


def segment_prompts(
    specs: Sequence[Any],
    segment_keys: dict[str, tuple[str, str]],
    tokenizer: Any | None,
    vocab_size: int,
    seed: int = 0,
) -> tuple[dict[int, tuple[int, ...]], list[str]]:
    """Prompt token ids of exactly ``spec.prompt_tokens`` for each request, and notes.

    Real text: the built-in prompt set of the request's segment (task, language), several
    prompts of that set joined until long enough (starting at a different one per request),
    rendered with the chat template, the last ``prompt_tokens`` tokens kept (so the
    generation prompt stays at the end). Without a tokenizer (a config-only model) the prompt
    is random ids from ``seed``: timing only, and the notes say so.
    """
    from profiler.prompt_sets import builtin_prompts, by_segment, encode_prompt

    notes: list[str] = []
    out: dict[int, tuple[int, ...]] = {}
    if tokenizer is None:
        rng = torch.Generator().manual_seed(int(seed))
        for sp in specs:
            out[sp.id] = tuple(torch.randint(0, vocab_size, (sp.prompt_tokens,), generator=rng).tolist())
        notes.append("prompts: random token ids (config-only model without a tokenizer)")
        return out, notes
    groups = by_segment(builtin_prompts())
    for name, (task, lang) in segment_keys.items():
        key = (task, lang)
        if key not in groups:
            alt = next((k for k in groups if k[0] == task), None) or next(iter(groups))
            notes.append(f"prompts: no built-in {task}/{lang} prompts for segment {name}; used {alt[0]}/{alt[1]}")
            groups[key] = groups[alt]
    encoded: dict[tuple[tuple[str, str], int, int], list[int]] = {}
    for sp in specs:
        task, lang = segment_keys.get(sp.segment, next(iter(segment_keys.values())))
        group = groups[(task, lang)]
        start = sp.id % len(group)
        count = 1
        while True:
            cache_key = ((task, lang), start, count)
            if cache_key not in encoded:
                texts = [group[(start + j) % len(group)].prompt for j in range(count)]
                encoded[cache_key] = encode_prompt(tokenizer, "\n\n".join(texts))
            ids = encoded[cache_key]
            if len(ids) >= sp.prompt_tokens or count >= 4 * len(group):
                break
            count += 1
        out[sp.id] = fit_prompt(ids[-sp.prompt_tokens:], sp.prompt_tokens)
    notes.append("prompts: built-in prompt sets (profiler/prompts) by segment task/language, chat template, "
                 "cut to the scheduled length keeping the end")
    return out, notes

