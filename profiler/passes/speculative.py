"""Speculative decoding for one request, exactly as a serving engine would verify it.

Why this exists: acceptance rates are only meaningful if they come from the real verification
rule. Greedy (temperature 0): draft tokens are kept while they equal the target's argmax; the
first mismatch is replaced by the target's argmax; if all are kept the target's next token is a
bonus. Sampling (temperature T > 0): token ``x`` at position ``i`` is kept with probability
``min(1, p_i(x) / q_i(x))``; on the first rejection a token is sampled from
``normalise(max(0, p_i − q_i))``; if all are kept a bonus is sampled from ``p_{k+1}``. Both make
the output distribution equal to the target's own (tests/profiler/test_speculative.py checks this).

Counting (written to the profile, docs/profile-format.md "acceptance entries"): every target
verification step is one **draft** of ``k`` positions. When the proposer returns fewer than ``k``
tokens (n-gram lookup near the end of a match, or no match at all) the missing positions count
as proposed-and-not-accepted, so ``num_draft_tokens == num_drafts · k`` always holds and every
decode step the engine would run is represented. vLLM instead counts a draft only when at least
one token was proposed and counts the tokens actually proposed; ``SpecResult`` keeps the proposed
counts so both views can be computed (``vllm_view``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from profiler.passes.proposers import Proposer, as_id_list, crop_cache, pick_token


@dataclass(frozen=True, slots=True)
class DraftRecord:
    """One verification step of one request."""

    proposed: int
    """Draft tokens the proposer returned (0..k)."""
    accepted: int
    """Of those, how many the target kept (0..proposed); the bonus/correction is not counted."""

    def __post_init__(self) -> None:
        if not 0 <= self.accepted <= self.proposed:
            raise ValueError(
                f"accepted={self.accepted} must be between 0 and proposed={self.proposed}"
            )


@dataclass(frozen=True, slots=True)
class SpecResult:
    """Generated tokens and per-draft acceptance of one speculative request."""

    tokens: tuple[int, ...]
    """Generated tokens (prompt excluded), cut at ``max_new_tokens`` and after EOS."""
    drafts: tuple[DraftRecord, ...]
    """One record per target verification step, in order."""
    k: int
    """Draft length asked of the proposer at every step."""

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k={self.k}: must be at least 1")
        for d in self.drafts:
            if d.proposed > self.k:
                raise ValueError(f"a draft proposed {d.proposed} tokens, more than k={self.k}")

    @property
    def num_drafts(self) -> int:
        return len(self.drafts)

    @property
    def num_draft_tokens(self) -> int:
        """Positions drafted, counted at ``k`` per step (see module docstring)."""
        return self.num_drafts * self.k

    @property
    def num_accepted_tokens(self) -> int:
        return sum(d.accepted for d in self.drafts)

    @property
    def num_empty_drafts(self) -> int:
        """Steps where the proposer had nothing to propose (counted as drafts with 0 accepted)."""
        return sum(1 for d in self.drafts if d.proposed == 0)

    def accepted_per_pos(self) -> list[int]:
        """``a_i``: drafts whose position ``i`` (1-based) was accepted; non-increasing."""
        counts = [0] * self.k
        for d in self.drafts:
            for i in range(d.accepted):
                counts[i] += 1
        return counts

    def vllm_view(self) -> dict[str, int]:
        """The counters vLLM would report: only steps with proposals, actual proposal sizes."""
        real = [d for d in self.drafts if d.proposed > 0]
        return {
            "num_drafts": len(real),
            "num_draft_tokens": sum(d.proposed for d in real),
            "num_accepted_tokens": sum(d.accepted for d in real),
        }


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _forward(model: torch.nn.Module, ids: list[int], cache: DynamicCache) -> torch.Tensor:
    inp = torch.tensor([ids], dtype=torch.long, device=_device(model))
    return model(input_ids=inp, cache=cache, use_cache=True).logits[0].float()


def _check_args(prompt: list[int], max_new_tokens: int, temperature: float) -> None:
    if not prompt:
        raise ValueError("prompt_ids is empty: at least one token is needed")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens}: must be >= 0")
    if temperature < 0:
        raise ValueError(f"temperature={temperature}: must be >= 0")


def _prefill(model: torch.nn.Module, prompt: list[int]) -> DynamicCache:
    """Cache every prompt token but the last: the last is fed with the first draft."""
    cache = DynamicCache(config=model.config)
    if len(prompt) > 1:
        _forward(model, prompt[:-1], cache)
    return cache


def verify(
    draft: Sequence[int],
    q_probs: torch.Tensor | None,
    target_logits: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[int, int]:
    """Apply the acceptance rule to one draft; return (accepted count, next target token).

    ``target_logits`` has ``len(draft) + 1`` rows: row ``i`` is the target's distribution for
    draft position ``i``; the last row gives the bonus token. ``q_probs`` (``[len(draft), V]``)
    is the proposal distribution at ``temperature``; ``None`` means point masses on ``draft``.
    """
    n = len(draft)
    if target_logits.shape[0] != n + 1:
        raise ValueError(f"target_logits has {target_logits.shape[0]} rows, expected {n + 1}")
    if temperature <= 0.0:
        argmax = torch.argmax(target_logits, dim=-1).tolist()
        accepted = 0
        while accepted < n and int(draft[accepted]) == argmax[accepted]:
            accepted += 1
        return accepted, int(argmax[accepted])
    p = torch.softmax(target_logits.double() / temperature, dim=-1).cpu()
    q = q_probs.double().cpu() if q_probs is not None else None
    if q is not None and q.shape[0] < n:
        raise ValueError(f"q_probs has {q.shape[0]} rows for {n} draft tokens")
    for i, x in enumerate(draft):
        x = int(x)
        px = float(p[i, x])
        qx = float(q[i, x]) if q is not None else 1.0
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        if qx > 0.0 and u < min(1.0, px / qx):
            continue
        if q is not None:
            residual = torch.clamp(p[i] - q[i], min=0.0)
        else:
            residual = p[i].clone()
            residual[x] = 0.0
        if float(residual.sum()) <= 0.0:  # p == q: rejection has probability 0; guard rounding
            residual = p[i]
        token = int(torch.multinomial(residual / residual.sum(), 1, generator=generator))
        return i, token
    token = int(torch.multinomial(p[n], 1, generator=generator))
    return n, token


def _finish(tokens: list[int], max_new_tokens: int, eos_token_id: int | Sequence[int] | None):
    """Cut at ``max_new_tokens`` and just after the first EOS; report whether we stopped."""
    eos = set() if eos_token_id is None else (
        {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(e) for e in eos_token_id}
    )
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: min(i + 1, max_new_tokens)], True
    return tokens[:max_new_tokens], len(tokens) >= max_new_tokens


def commit_step(ids: list[int], generated: list[int], records: list[DraftRecord], draft: Sequence[int],
                accepted: int, nxt: int, max_new_tokens: int,
                eos_token_id: int | Sequence[int] | None) -> tuple[int, ...] | None:
    """Record one step's draft, commit its accepted tokens and the target's next one; the
    request's tokens once it stops (``max_new_tokens`` or EOS), else None. Why one home: the
    verifying loop and the n-gram replay must count drafts and stop on the same token, or the
    replay's "same steps, token for token" no longer holds."""
    records.append(DraftRecord(proposed=len(draft), accepted=accepted))
    new = [*draft[:accepted], nxt]
    ids.extend(new)
    generated.extend(new)
    out, stop = _finish(generated, max_new_tokens, eos_token_id)
    return tuple(out) if stop else None


@torch.inference_mode()
def speculative_generate(
    target_model: torch.nn.Module,
    proposer: Proposer,
    prompt_ids: Sequence[int] | torch.Tensor,
    max_new_tokens: int,
    k: int,
    temperature: float,
    generator: torch.Generator | None,
    eos_token_id: int | Sequence[int] | None = None,
) -> SpecResult:
    """Generate with draft-then-verify; every step asks the proposer for ``k`` tokens.

    The target keeps one KV cache holding every committed token but the last; a verification
    pass feeds ``[last] + draft`` (``≤ k + 1`` tokens), and the cache is cropped back to the
    committed tokens afterwards, so rejected tokens never stay cached.
    """
    if k < 1:
        raise ValueError(f"k={k}: must be at least 1")
    ids = as_id_list(prompt_ids)
    _check_args(ids, max_new_tokens, temperature)
    proposer.reset()
    records: list[DraftRecord] = []
    generated: list[int] = []
    if max_new_tokens == 0:
        return SpecResult(tokens=(), drafts=(), k=k)
    cache = _prefill(target_model, ids)
    while True:
        draft, q = proposer.propose(ids, k, temperature, generator)
        draft = [int(t) for t in draft[:k]]
        cached = cache.get_seq_length()
        logits = _forward(target_model, [ids[-1], *draft], cache)
        accepted, nxt = verify(draft, q, logits, temperature, generator)
        crop_cache(cache, cached + 1 + accepted)
        done = commit_step(ids, generated, records, draft, accepted, nxt, max_new_tokens, eos_token_id)
        if done is not None:
            return SpecResult(tokens=done, drafts=tuple(records), k=k)


@torch.inference_mode()
def target_generate(
    target_model: torch.nn.Module,
    prompt_ids: Sequence[int] | torch.Tensor,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator | None,
    eos_token_id: int | Sequence[int] | None = None,
) -> list[int]:
    """Plain autoregressive decoding with a KV cache: the reference speculation must match."""
    ids = as_id_list(prompt_ids)
    _check_args(ids, max_new_tokens, temperature)
    generated: list[int] = []
    if max_new_tokens == 0:
        return generated
    cache = _prefill(target_model, ids)
    last = ids[-1]
    while True:
        logits = _forward(target_model, [last], cache)[-1]
        if temperature <= 0.0:
            last = int(torch.argmax(logits))
        else:
            probs = torch.softmax(logits.double() / temperature, dim=-1).cpu()
            last = int(torch.multinomial(probs, 1, generator=generator))
        generated.append(last)
        out, stop = _finish(generated, max_new_tokens, eos_token_id)
        if stop:
            return out


__all__ = [
    "DraftRecord",
    "SpecResult",
    "pick_token",
    "speculative_generate",
    "target_generate",
    "verify",
]
