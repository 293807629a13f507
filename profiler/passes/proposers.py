"""Draft-token proposers: n-gram prompt lookup, a separate draft model, an early-exit self-draft.

Every proposer answers the same question — "given this context, what are the next ``k`` tokens
and with which probabilities did you pick them?" — so the verifier in ``profiler/passes/speculative.py``
can apply one exact rejection rule to all of them. A deterministic proposer (n-gram) returns
``q_probs=None``: its proposal is a point mass, so the rule accepts a token ``x`` with
probability ``p(x)``.

Model proposers keep their own KV cache across calls for one sequence. The cache is keyed by the
token ids it holds: on each call the longest common prefix with the new context is kept and the
rest is cropped and recomputed, so rejected draft tokens can never leak into the next proposal.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import torch
from transformers import DynamicCache

from sim.contracts.errors import SpecplanError

ProposerKind = Literal["ngram", "draft_model", "self_draft"]

_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")


@runtime_checkable
class Proposer(Protocol):
    """What the verifier and the profiler need from a proposer."""

    name: str
    kind: ProposerKind

    def identity(self) -> dict[str, Any]:
        """Proposer identity as in docs/profile-format.md ("Proposer identity")."""
        ...

    def reset(self) -> None:
        """Forget per-sequence state (KV cache) before a new request."""
        ...

    def propose(
        self,
        context_ids: Sequence[int] | torch.Tensor,
        k: int,
        temperature: float,
        generator: torch.Generator | None,
    ) -> tuple[list[int], torch.Tensor | None]:
        """Return up to ``k`` draft tokens and their proposal distributions ``[len, vocab]``.

        ``None`` instead of the distributions means a deterministic proposal (a point mass on
        each token), and is also allowed at temperature 0 where verification is greedy.
        """
        ...


def as_id_list(context_ids: Sequence[int] | torch.Tensor) -> list[int]:
    """Token ids as a flat Python list (accepts a list, a 1-d tensor or a ``[1, n]`` tensor)."""
    if isinstance(context_ids, torch.Tensor):
        return [int(t) for t in context_ids.reshape(-1).tolist()]
    return [int(t) for t in context_ids]


def _check_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise SpecplanError(f"proposer name {name!r}: use only letters, digits, '.', '_' and '-'")
    return name


# ---------------------------------------------------------------------------------------------
# n-gram prompt lookup
# ---------------------------------------------------------------------------------------------


class NgramProposer:
    """vLLM's prompt lookup: match the context's suffix n-gram earlier in the context.

    Tries the longest suffix first (``max_n`` down to ``min_n``); among earlier occurrences of
    that n-gram the earliest one wins (as in vLLM's ``NgramProposer``), and the tokens that
    followed it are proposed — fewer than ``k`` when the match is close to the end, none when
    nothing matches. Deterministic: ``q_probs`` is always ``None``.
    """

    kind: ProposerKind = "ngram"

    def __init__(self, min_n: int = 2, max_n: int = 4, *, name: str = "ngram") -> None:
        if min_n < 1:
            raise SpecplanError(f"ngram prompt_lookup_min={min_n}: must be at least 1")
        if max_n < min_n:
            raise SpecplanError(
                f"ngram prompt_lookup_max={max_n}: must be at least prompt_lookup_min={min_n}"
            )
        self.min_n = min_n
        self.max_n = max_n
        self.name = _check_name(name)

    def identity(self) -> dict[str, Any]:
        return {"kind": "ngram", "prompt_lookup_min": self.min_n, "prompt_lookup_max": self.max_n}

    def reset(self) -> None:
        """Stateless: nothing to forget."""

    def propose(
        self,
        context_ids: Sequence[int] | torch.Tensor,
        k: int,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> tuple[list[int], torch.Tensor | None]:
        return self.lookup(as_id_list(context_ids), k), None

    def lookup(self, ids: list[int], k: int) -> list[int]:
        """The proposal itself (pure function of the ids), exposed for tests and timing."""
        total = len(ids)
        if k <= 0 or total < self.min_n + 1:
            return []
        arr = np.asarray(ids, dtype=np.int64)
        # Candidate windows end before the last token, so a match is never the suffix itself.
        head = arr[:-1]
        for n in range(min(self.max_n, total - 1), self.min_n - 1, -1):
            suffix = arr[total - n :]
            windows = np.lib.stride_tricks.sliding_window_view(head, n)
            hits = np.flatnonzero((windows == suffix).all(axis=1))
            if hits.size:
                start = int(hits[0]) + n
                return [int(t) for t in arr[start : start + k]]
        return []


# ---------------------------------------------------------------------------------------------
# model-based proposers
# ---------------------------------------------------------------------------------------------


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Crop a DynamicCache to ``length`` tokens (transformers 5 takes a negative token count)."""
    current = cache.get_seq_length()
    if current <= length:
        return
    params = inspect.signature(cache.crop).parameters
    if "tokens_to_remove" in params:
        cache.crop(-(current - length))
    else:  # transformers 4.x: crop(max_length)
        cache.crop(length)


def _model_forward(model: torch.nn.Module, ids: list[int], cache: DynamicCache) -> torch.Tensor:
    """Feed ``ids`` on top of ``cache``; return float logits ``[len(ids), vocab]``."""
    device = next(model.parameters()).device
    inp = torch.tensor([ids], dtype=torch.long, device=device)
    out = model(input_ids=inp, cache=cache, use_cache=True)
    return out.logits[0].float()


def pick_token(
    logits: torch.Tensor, temperature: float, generator: torch.Generator | None
) -> tuple[int, torch.Tensor | None]:
    """Greedy at temperature 0, else sample from softmax(logits / T); returns (token, probs)."""
    if temperature <= 0.0:
        return int(torch.argmax(logits)), None
    probs = torch.softmax(logits / temperature, dim=-1)
    token = int(torch.multinomial(probs.cpu(), 1, generator=generator))
    return token, probs


class _CachedDrafter:
    """Autoregressive drafting with a KV cache reused across calls for one sequence."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self._cache: DynamicCache | None = None
        self._cached_ids: list[int] = []
        max_pos = getattr(model.config, "max_position_embeddings", None)
        self._max_pos = int(max_pos) if max_pos else None

    def reset(self) -> None:
        self._cache = None
        self._cached_ids = []

    @torch.inference_mode()
    def draft(
        self, ids: list[int], k: int, temperature: float, generator: torch.Generator | None
    ) -> tuple[list[int], torch.Tensor | None]:
        if not ids:
            raise ValueError("cannot draft from an empty context")
        if self._max_pos is not None:
            k = min(k, self._max_pos - len(ids))
        if k <= 0:
            return [], None
        if self._cache is None:
            self._cache = DynamicCache(config=self.model.config)
            self._cached_ids = []
        # Keep the longest common prefix, but always feed at least one token to get logits.
        common = 0
        limit = min(len(self._cached_ids), len(ids) - 1)
        while common < limit and self._cached_ids[common] == ids[common]:
            common += 1
        crop_cache(self._cache, common)
        self._cached_ids = ids[:common]
        logits = _model_forward(self.model, ids[common:], self._cache)[-1]
        self._cached_ids = list(ids)
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(k):
            token, probs = pick_token(logits, temperature, generator)
            tokens.append(token)
            if probs is not None:
                rows.append(probs)
            if i < k - 1:
                logits = _model_forward(self.model, [token], self._cache)[-1]
                self._cached_ids.append(token)
        q = torch.stack(rows) if rows else None
        return tokens, q


def _unwrap(model_or_loaded: Any) -> tuple[torch.nn.Module, dict[str, Any] | None]:
    """Accept a LoadedModel (``.model``, ``.identity``) or a bare causal-LM module."""
    if isinstance(model_or_loaded, torch.nn.Module):
        return model_or_loaded, None
    model = getattr(model_or_loaded, "model", None)
    if not isinstance(model, torch.nn.Module):
        raise TypeError("expected a LoadedModel or a torch causal-LM module")
    ident = getattr(model_or_loaded, "identity", None)
    if callable(ident):
        ident = ident()
    if ident is not None and not isinstance(ident, dict):
        to_dict = getattr(ident, "to_dict", None)
        ident = to_dict() if callable(to_dict) else dict(vars(ident))
    return model, ident


def _default_draft_name(ident: dict[str, Any] | None, model: torch.nn.Module) -> str:
    raw = (ident or {}).get("id") or type(model).__name__
    tail = str(raw).rstrip("/").split("/")[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", tail).strip("-") or "draft"


class _ModelProposer:
    """A proposer whose draft comes from a causal LM: subclasses set ``self.model`` and
    ``self._drafter = _CachedDrafter(self.model)``; reset and propose go through the drafter."""

    _drafter: _CachedDrafter

    def reset(self) -> None:
        self._drafter.reset()

    def propose(
        self,
        context_ids: Sequence[int] | torch.Tensor,
        k: int,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> tuple[list[int], torch.Tensor | None]:
        return self._drafter.draft(as_id_list(context_ids), k, temperature, generator)


class DraftModelProposer(_ModelProposer):
    """A separate (smaller) model drafts autoregressively: greedy at T=0, samples from q at T>0."""

    kind: ProposerKind = "draft_model"

    def __init__(self, draft: Any, *, name: str | None = None) -> None:
        model, ident = _unwrap(draft)
        self.model = model.eval()
        self.model_identity = ident or {
            "id": type(model).__name__,
            "source": "local",
            "path": None,
            "sha256": None,
        }
        self.name = _check_name(name or _default_draft_name(ident, model))
        self._drafter = _CachedDrafter(self.model)

    def identity(self) -> dict[str, Any]:
        return {"kind": "draft_model", "model": self.model_identity}


def _decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise SpecplanError(
            f"self-draft: {type(model).__name__} has no `model.layers` decoder stack; "
            "self-draft supports Llama-style causal LMs"
        )
    return layers


def early_exit_model(target: torch.nn.Module, layers: int) -> torch.nn.Module:
    """A causal LM that shares the target's embeddings, first ``layers`` blocks, norm and head.

    No weights are copied: the returned module holds references to the target's submodules, and
    its config says ``num_hidden_layers = layers`` so its own KV cache has that many layers.
    """
    stack = _decoder_layers(target)
    if not 1 <= layers <= len(stack):
        raise SpecplanError(
            f"self-draft layers={layers}: must be between 1 and {len(stack)} (target's layers)"
        )
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = layers
    if isinstance(getattr(cfg, "layer_types", None), list):
        cfg.layer_types = cfg.layer_types[:layers]
    with torch.device("meta"):
        shallow = type(target)(cfg)
    inner, src = shallow.model, target.model
    for child_name, _ in list(inner.named_children()):
        if child_name == "layers":
            inner.layers = torch.nn.ModuleList(list(stack[:layers]))
        else:
            setattr(inner, child_name, getattr(src, child_name))
    for child_name, _ in list(shallow.named_children()):
        if child_name != "model":
            setattr(shallow, child_name, getattr(target, child_name))
    leftover = [n for n, p in shallow.named_parameters() if p.is_meta]
    leftover += [n for n, b in shallow.named_buffers() if b.is_meta]
    if leftover:
        raise SpecplanError(f"self-draft: could not share target weights for {leftover[:3]}")
    return shallow.eval()


class SelfDraftProposer(_ModelProposer):
    """Early exit: the target's first L decoder layers, then its final norm and LM head.

    The target was not trained for early exit, so acceptance is usually low; the profile shows
    whatever it measures.
    """

    kind: ProposerKind = "self_draft"

    def __init__(self, target: Any, layers: int, *, name: str | None = None) -> None:
        model, _ = _unwrap(target)
        self.num_target_layers = len(_decoder_layers(model))
        self.layers = layers
        self.model = early_exit_model(model, layers)
        self.name = _check_name(name or f"selfdraft-l{layers}")
        self._drafter = _CachedDrafter(self.model)

    def identity(self) -> dict[str, Any]:
        return {
            "kind": "self_draft",
            "layers": list(range(self.layers)),
            "note": (
                f"first {self.layers} of {self.num_target_layers} target layers "
                "+ target final norm and LM head (early exit)"
            ),
        }
