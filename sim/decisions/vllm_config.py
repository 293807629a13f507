"""vLLM's ``speculative_config`` for a policy advice: the method per proposer kind, the k, and
what the snippet cannot express.

Why its own module: the method name must be derived robustly (a profile may label an EAGLE-3
head ``draft_model``), and the policy module is about the per-step table, not vLLM's spelling.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_VLLM_BY_WORD = (("eagle3", "eagle3"), ("eagle-3", "eagle3"), ("eagle_3", "eagle3"), ("eagle", "eagle"),
                 ("medusa", "medusa"), ("mtp", "mtp"))
"""Words that name a model-backed method; a prompt-lookup word is no evidence against the kind:
a ``draft_model`` proposer has weights, which n-gram lookup never has."""


@dataclass(frozen=True, slots=True)
class EngineSupport:
    """Whether vLLM can run a speculation policy today, and what to deploy where it cannot."""

    policy: str
    runs: bool
    """True: a ``speculative_config`` expresses it; False: an idealised in-engine policy."""
    how: str
    """How vLLM runs it, or why it cannot."""
    deployable: str | None
    """The deployable form of a load-dependent policy (None where vLLM runs it as it is)."""


_TWO_ROUTES = ("two routes: a speculative pool (fixed k) and a baseline pool behind a router that "
               "sends traffic by load ({signal}); size and price both pools (both pools' GPUs count "
               "in cost) with a [[two_routes]] table in the scenario")
_FIXED_AT_START = "vLLM fixes speculative_config at start-up (no per-step, per-batch or per-load switch)"
_BY_BATCH = ("speculative_config.num_speculative_tokens_per_batch_size = [[start, end, k], ...] "
             "(vLLM PR #32374; not with data parallel > 1)")
_SUPPORT = {
    "off": (True, "no speculative_config", None),
    "fixed": (True, "speculative_config.num_speculative_tokens = k, fixed at start-up", None),
    "off_above_batch": (True, f"{_BY_BATCH} with k = 0 above the cut-off (the removed "
                        "disable_by_batch_size, PR #35060, is never emitted)", None),
    "k_by_batch": (True, _BY_BATCH, None),
    "adaptive": (False, "vLLM picks k from the batch size alone: no hysteresis on the decode batch",
                 _TWO_ROUTES.format(signal="requests in flight on the speculative pool")),
    "kv_fallback": (False, f"{_FIXED_AT_START}: no fallback to plain decoding under KV-cache pressure",
                    _TWO_ROUTES.format(signal="the speculative pool's vllm:kv_cache_usage_perc, "
                                       "vllm:gpu_cache_usage_perc before V1")),
}
"""Checked against vLLM's ``vllm/config/speculative.py`` and its speculative-decoding and
metrics docs (per-engine forms: ``sim/decisions/engine_config.py``)."""


def engine_support(policy: str) -> EngineSupport:
    """Whether vLLM runs ``policy`` (a ``SpeculationPolicy`` name) today; the simulator runs every
    policy, but only ``off``, ``fixed`` and the batch-size schedules are a config vLLM accepts."""
    if policy not in _SUPPORT:
        raise ValueError(f"speculation policy {policy!r} unknown; valid: {', '.join(_SUPPORT)}")
    runs, how, deployable = _SUPPORT[policy]
    return EngineSupport(policy, runs, how, deployable)


def vllm_method(kind: str, name: str = "", model_id: str | None = None, note: str | None = None) -> str | None:
    """vLLM's ``speculative_config.method`` for a proposer: its kind, except that a profile may
    label an EAGLE-3 head (or an EAGLE-1 head, or MTP layers) ``draft_model``; then the proposer's
    name, model id or note says which it is. ``self_draft`` has no vLLM method (None)."""
    if kind == "self_draft":
        return None
    if kind == "draft_model":
        words = " ".join(x.lower() for x in (name, model_id or "", note or ""))
        for word, method in _VLLM_BY_WORD:
            if word in words:
                return method
    return kind


def speculative_config(advice: Any) -> dict[str, Any]:
    """The ``speculative_config`` to paste into vLLM (``--speculative-config`` JSON)."""
    if advice.fixed_k == 0:
        return {}
    p = advice.proposer_identity
    cfg: dict[str, Any] = {}
    method = method_of(advice)
    if method == "ngram":
        cfg["method"] = "ngram"
        cfg["num_speculative_tokens"] = advice.fixed_k
        if p is not None and p.prompt_lookup_min is not None:
            cfg["prompt_lookup_min"] = p.prompt_lookup_min
        if p is not None and p.prompt_lookup_max is not None:
            cfg["prompt_lookup_max"] = p.prompt_lookup_max
    elif method in ("draft_model", "eagle", "eagle3", "medusa", "mtp", "suffix"):
        cfg["method"] = method
        if method != "suffix":
            model = _model_id(advice)
            if model is not None:
                cfg["model"] = model
        cfg["num_speculative_tokens"] = advice.fixed_k
    else:
        cfg["method"] = None  # advice-draft (layer skip) has no vLLM method; see notes
        cfg["num_speculative_tokens"] = advice.fixed_k
    top = advice.batches[-1].batch if advice.batches else 0
    if advice.off_above_batch is not None and advice.off_above_batch < top and cfg.get("method"):
        # never disable_by_batch_size: removed from vLLM (PR #35060); k = 0 above the cut-off instead
        cfg["num_speculative_tokens_per_batch_size"] = [[1, advice.off_above_batch, advice.fixed_k],
                                                         [advice.off_above_batch + 1, top, 0]]
    return cfg


def method_of(advice: Any) -> str | None:
    """vLLM's method name for a ``PolicyAdvice``'s proposer (``vllm_method``)."""
    p = advice.proposer_identity
    model = p.model.id if p is not None and p.model is not None else None
    return vllm_method(advice.proposer_kind, advice.proposer, model, p.note if p is not None else None)


def _model_id(advice: Any) -> str | None:
    """A real checkpoint id for ``speculative_config.model``, or a fill-in placeholder.

    A config-only profile (random weights, e.g. ``llama-3.2-1b-shaped``) names an
    architecture, not a checkpoint vLLM can load: the snippet then says to fill one in.
    """
    p = advice.proposer_identity
    m = p.model if p is not None else None
    if m is None:
        return None if method_of(advice) == "mtp" else f"<FILL IN: the {method_of(advice)} checkpoint id>"
    if m.config_only:
        return f"<FILL IN: a real checkpoint id; this profile only has the architecture {m.id}>"
    return m.id


def notes(advice: Any) -> list[str]:
    """What the snippet can and cannot express, by vLLM version (checked against its docs)."""
    notes = [
        "one k at start-up (num_speculative_tokens); k by batch size goes in "
        "num_speculative_tokens_per_batch_size (vLLM PR #32374; candidates with policy = "
        "\"k_by_batch\" emit it: sim/decisions/engine_config.py).",
    ]
    if "num_speculative_tokens_per_batch_size" in speculative_config(advice):
        notes.append(
            "the cut-off is k = 0 above it in num_speculative_tokens_per_batch_size (vLLM counts "
            "the scheduled batch; no hysteresis; off with data parallel > 1); vLLM removed "
            "disable_by_batch_size (PR #35060): never use it.")
    if method_of(advice) != advice.proposer_kind:
        notes.append(f"method {method_of(advice)!r}: the profile labels {advice.proposer} {advice.proposer_kind!r}, "
                     f"but its name or model says it is {method_of(advice)}")
    if method_of(advice) == "ngram":
        notes.append("vLLM before 0.7 spells the ngram window ngram_prompt_lookup_min/max.")
    model = speculative_config(advice).get("model")
    if isinstance(model, str) and model.startswith("<FILL IN"):
        notes.append("speculative_config.model must name a checkpoint vLLM can load (a Hugging Face id "
                     "or path); replace the <FILL IN ...> value before use.")
    if method_of(advice) == "mtp":
        notes.append("mtp: vLLM uses the target's own MTP layers; model may be omitted (it "
                     "defaults to the target).")
    if advice.proposer_kind == "self_draft":
        notes.append("advice-draft (first layers of the target) has no vLLM method; the numbers "
                     "say what such a proposer would need to deliver.")
    return notes


def snippet(advice: Any) -> str:
    """JSON to paste, followed by the caveats as comment lines."""
    cfg = speculative_config(advice)
    if not cfg:
        return ("# no speculative_config: speculation does not beat the baseline at any batch "
                "size in this profile")
    return json.dumps(cfg, indent=2) + "\n" + "\n".join(f"# {n}" for n in notes(advice))
