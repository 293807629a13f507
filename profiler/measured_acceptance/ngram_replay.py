"""n-gram acceptance from the target's own continuation: fast, and exact for a point-mass drafter.

Why: an n-gram (prompt-lookup) proposal is a pure function of the tokens so far, and its
draft is a point mass, so exact verification accepts draft token ``x`` with probability
``p(x)`` and on rejection samples from ``p`` without ``x``: the emitted token is a draw from
``p`` and ``x`` is kept iff the draw equals it. Replaying the lookup against a continuation the
target produced on its own (greedy at temperature 0, sampled otherwise) therefore gives the
same steps, proposals and accepted counts (at temperature 0, token for token; above, in
distribution) as ``profiler.passes.speculative.speculative_generate`` — from one batched generation
pass per segment instead of one verification pass per step and request (tests check both).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache

from profiler.passes.speculative import DraftRecord, SpecResult, commit_step

Lookup = Callable[[list[int], int], list[int]]


def replay_steps(
    lookup: Lookup,
    prompt: Sequence[int],
    continuation: Sequence[int],
    k: int,
    max_new_tokens: int,
    eos_token_id: int | Sequence[int] | None = None,
) -> SpecResult:
    """The speculative steps of one request, given the target's continuation of ``prompt``.

    ``continuation`` must hold at least ``max_new_tokens + k`` tokens, generated without
    stopping at EOS (a draft may reach past it). Mirrors ``speculative_generate``'s loop.
    """
    if len(continuation) < max_new_tokens + k:
        raise ValueError(f"continuation has {len(continuation)} tokens; need max_new_tokens + k = {max_new_tokens + k}")
    ids = list(prompt)
    generated: list[int] = []
    records: list[DraftRecord] = []
    while True:
        draft = [int(t) for t in lookup(ids, k)[:k]]
        g = len(generated)
        accepted = 0
        while accepted < len(draft) and draft[accepted] == continuation[g + accepted]:
            accepted += 1
        done = commit_step(ids, generated, records, draft, accepted, int(continuation[g + accepted]),
                           max_new_tokens, eos_token_id)
        if done is not None:
            return SpecResult(tokens=done, drafts=tuple(records), k=k)


@torch.inference_mode()
def target_continuations(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    n_tokens: int,
    temperature: float,
    generators: Sequence[torch.Generator | None] | None = None,
) -> list[list[int]]:
    """``n_tokens`` tokens after each prompt from one left-padded batch (never stops at EOS).

    Greedy at temperature 0; otherwise each row samples from ``softmax(logits / T)`` with its
    own generator (``generators[i]``), as ``profiler.passes.proposers.pick_token`` does.
    """
    b = len(prompts)
    width = max(len(p) for p in prompts)
    dev = next(model.parameters()).device
    ids = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
        mask[i, width - len(p):] = 1
    pos = (mask.cumsum(dim=1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev),
                past_key_values=cache, use_cache=True)
    nxt_pos = pos[:, -1:] + 1
    result: list[list[int]] = [[] for _ in range(b)]
    logits = out.logits[:, -1, :].float()
    for _ in range(n_tokens):
        toks = []
        for i in range(b):
            if temperature <= 0.0:
                t = int(torch.argmax(logits[i]))
            else:
                probs = torch.softmax(logits[i] / temperature, dim=-1).cpu()
                gen = generators[i] if generators is not None else None
                t = int(torch.multinomial(probs, 1, generator=gen))
            toks.append(t)
            result[i].append(t)
        mask = torch.cat([mask, torch.ones((b, 1), dtype=torch.long)], dim=1)
        step = torch.tensor(toks, dtype=torch.long).view(b, 1)
        out = model(input_ids=step.to(dev), attention_mask=mask.to(dev), position_ids=nxt_pos.to(dev),
                    past_key_values=cache, use_cache=True)
        nxt_pos = nxt_pos + 1
        logits = out.logits[:, -1, :].float()
    return result
