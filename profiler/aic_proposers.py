"""``--draft`` values of ``profile import-aiconfigurator``: every vLLM proposer method, priced.

Why one module: each of vLLM's methods needs its own pricing from the kernel database, and each
is written here once with the note saying what is modelled rather than looked up:

- a draft model id (``draft_model``): the draft's own passes from the database;
- ``eagle`` (EAGLE-1) and ``eagle3``: a head priced as one Llama decoder layer at the target's
  widths (EAGLE-3 with its 32,000-token draft LM head; EAGLE-1 shares the target's);
- ``mtp``: the target's own multi-token-prediction module, priced as the database prices MTP:
  an iteration with ``k`` MTP tokens costs ``(L + k) / L`` target iterations
  (``aiconfigurator_core.sdk.models.helpers.mtp_scale_factor``), so the draft is ``k / L`` of
  the verification pass;
- ``ngram`` and ``suffix``: host-side lookups (profiler/host_proposers.py).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler import aic_database as db
from profiler.aic_grids import GridBuilder
from profiler.host_proposers import (
    HOST_PROPOSERS,
    host_identity,
    host_memory,
    host_timing,
    lookup_note,
)
from sim.contracts.errors import SpecplanError

EAGLE3_DRAFT_VOCAB = 32000
KEYWORDS = ("eagle", "eagle3", "mtp", "ngram", "suffix", "none")


@dataclass(frozen=True)
class Grids:
    """The axes every proposer grid of one import shares."""

    batch: list[int]
    k_max: int
    context: list[int]
    prefill_tokens: list[int]
    prefill_context: list[int]

    @property
    def ks(self) -> list[int]:
        return list(range(1, self.k_max + 1))


@dataclass(frozen=True)
class ImportedProposer:
    """One proposer's profile entries: identity, ``timing.proposers.<name>``, memory, note."""

    name: str
    identity: dict[str, Any]
    timing: dict[str, Any]
    memory: dict[str, int]
    note: str


@dataclass(frozen=True)
class Context:
    """What every proposer is priced against: the target and the import's settings."""

    target: str
    target_cfg: dict[str, Any]
    target_grid: GridBuilder
    target_memory: dict[str, int]
    """Replica totals: weight_bytes, kv_bytes_per_token of the target."""
    system: str
    backend: str
    version: str
    layout: db.Layout
    """The drafts' layout: the target's TP, no experts, its KV dtype."""
    grids: Grids
    overhead: Callable[[], dict[str, Any]]
    """The draft-pass overhead entries (``overhead`` and ``overhead_provenance``)."""
    assumed: Callable[[str], dict[str, Any]]
    """An ``assumed`` provenance with this note."""
    identity: Callable[[str, dict[str, Any]], dict[str, Any]]
    """A config-only model identity for (id, config)."""
    lookup_s_per_row: float


def build(draft: str, ctx: Context) -> ImportedProposer | None:
    """The proposer one ``--draft`` value names (None for ``none``)."""
    if draft == "none":
        return None
    if draft in HOST_PROPOSERS:
        g = ctx.grids
        timing = host_timing(draft, g.batch, g.ks, g.context, per_row_s=ctx.lookup_s_per_row,
                             provenance=ctx.assumed(lookup_note(draft, ctx.lookup_s_per_row)))
        return ImportedProposer(draft, host_identity(draft), timing, host_memory(),
                                f"{draft}: host-side lookup, no GPU pass (assumed host cost)")
    if draft == "mtp":
        return _mtp(ctx)
    if draft in ("eagle", "eagle3"):
        return _eagle(draft, ctx)
    return _draft_model(draft, ctx)


def _model_grids(gb: GridBuilder, ctx: Context) -> dict[str, Any]:
    g = ctx.grids
    return {"draft": gb.draft_grid(g.batch, g.k_max, g.context), **ctx.overhead(),
            "prefill": gb.prefill_grid(g.prefill_tokens, g.prefill_context)}


def _eagle(kind: str, ctx: Context) -> ImportedProposer:
    t = ctx.target_cfg
    h, heads = int(t["hidden_size"]), int(t["num_attention_heads"])
    kvh = int(t.get("num_key_value_heads") or heads)
    hd = int(t.get("head_dim") or h // heads)
    vocab = EAGLE3_DRAFT_VOCAB if kind == "eagle3" else int(t["vocab_size"])
    inter = int(t.get("intermediate_size") or 4 * h)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
           "num_attention_heads": heads, "num_key_value_heads": kvh, "head_dim": hd, "intermediate_size": inter,
           "num_hidden_layers": 1, "vocab_size": vocab, "tie_word_embeddings": False,
           "max_position_embeddings": int(t.get("max_position_embeddings") or 131072),
           "rms_norm_eps": 1e-5, "hidden_act": "silu", "torch_dtype": "bfloat16"}
    eng = _compile_config(cfg, ctx)
    layer = h * hd * (heads * 2 + kvh * 2) + 3 * h * inter + 2 * h
    fuse = (3 if kind == "eagle3" else 2) * h * h
    own_head = vocab * h if kind == "eagle3" else 0
    label = "EAGLE-3" if kind == "eagle3" else "EAGLE-1"
    note = (f"{kind}: modelled, not a database entry: an {label} head priced as one Llama decoder layer at the "
            f"target's widths (hidden {h}, MLP {inter})"
            + (f" with a {EAGLE3_DRAFT_VOCAB}-token draft LM head (the EAGLE-3 Llama-3.1 heads' draft vocab)"
               if kind == "eagle3" else " and the target's LM head")
            + f", timed from the same database; the {fuse // (h * h)}h->h fusion of target hidden states is "
            "not timed. First pass over every scheduled token (decode rows x (k+1) and prompt tokens), then "
            "k-1 one-token passes")
    kvb = 1 if ctx.layout.kv == "fp8" else 2
    mem = {"weight_bytes": 2 * (layer + fuse + own_head), "kv_bytes_per_token": 2 * kvh * hd * kvb,
           "activation_peak_bytes": 0}
    ident = {"kind": kind, "note": f"{label} head (one decoder layer) reading the target's hidden states",
             "model": ctx.identity(f"{kind}-head-shaped", cfg)}
    return ImportedProposer(kind, ident, _model_grids(GridBuilder(eng), ctx), mem, note)


def _mtp(ctx: Context) -> ImportedProposer:
    t = ctx.target_cfg
    n = int(t.get("num_nextn_predict_layers") or 0)
    if n < 1:
        raise SpecplanError(
            f"--draft mtp: {ctx.target} has no MTP (next-n) modules (num_nextn_predict_layers is {n} in its "
            f"config.json; valid for it: eagle, eagle3, ngram, suffix, a draft model id, none)"
        )
    from aiconfigurator_core.sdk.models.helpers import mtp_scale_factor

    layers = int(t["num_hidden_layers"])
    g, tb = ctx.grids, ctx.target_grid

    def extra(k: int) -> float:
        return mtp_scale_factor(k, layers) - 1.0

    draft = {"axes": {"batch": g.batch, "k": g.ks, "context": g.context}, "repeats": 1,
             "median": [[[extra(k) * tb.forward(b, k + 1, c) * 1e-3 for c in g.context] for k in g.ks]
                        for b in g.batch]}
    prefill = {"axes": {"tokens": g.prefill_tokens, "context": g.prefill_context}, "repeats": 1,
               "median": [[tb.prefill(m, c) / layers * 1e-3 for c in g.prefill_context] for m in g.prefill_tokens]}
    note = (f"mtp: priced as the database prices MTP (nextn): an iteration drafting k tokens costs (L+k)/L of the "
            f"target's pass over k+1 tokens per row (aiconfigurator_core mtp_scale_factor, L = {layers}), so "
            f"D(b, k, c) = k/L x T(b, k+1, c); the MTP module also runs over prompt tokens at 1/L of P(n, c); "
            f"the target has {n} MTP module(s), chained k times as vLLM does; memory: one layer's weights and KV")
    mem = {"weight_bytes": ctx.target_memory["weight_bytes"] // layers,
           "kv_bytes_per_token": ctx.target_memory["kv_bytes_per_token"] // layers, "activation_peak_bytes": 0}
    ident = {"kind": "mtp", "note": f"the target's own MTP module ({n} in its config.json), chained k times"}
    return ImportedProposer("mtp", ident, {"draft": draft, **ctx.overhead(), "prefill": prefill}, mem, note)


def _draft_model(draft: str, ctx: Context) -> ImportedProposer:
    try:
        cfg = db.model_config(draft)
    except SpecplanError:
        raise SpecplanError(
            f"--draft {draft}: not a keyword ({', '.join(KEYWORDS)}) nor a model the database has a config for "
            "(`--target list` prints the model ids; or a local folder holding config.json)"
        ) from None
    if int(cfg.get("vocab_size", 0)) != int(ctx.target_cfg.get("vocab_size", 0)):
        from profiler.estimate_inputs import VOCAB_PADDING

        gap = abs(int(cfg.get("vocab_size", 0)) - int(ctx.target_cfg.get("vocab_size", 0)))
        if cfg.get("model_type") != ctx.target_cfg.get("model_type") or gap > VOCAB_PADDING:
            raise SpecplanError(
                f"--draft {draft}: vocabulary {cfg.get('vocab_size')} ({cfg.get('model_type')}) differs from "
                f"{ctx.target}'s {ctx.target_cfg.get('vocab_size')} ({ctx.target_cfg.get('model_type')}); a draft "
                "model must share the target's tokenizer (valid: a model of the target's family, or eagle, eagle3, "
                "ngram, suffix)")
    if db.num_experts(cfg):
        raise SpecplanError(f"--draft {draft}: a mixture-of-experts draft is not covered (valid: a dense draft "
                            f"model, eagle, eagle3, mtp, ngram, suffix)")
    eng = db.compile_engine(draft, ctx.system, ctx.backend, ctx.version, ctx.layout)
    mid = db.ALIASES.get(draft, draft)
    name = mid.split("/")[-1].lower()
    note = (f"{name}: the draft model's own passes from the same database: first pass over every scheduled token "
            "(decode rows x (k+1), and prompt tokens via timing.proposers.<p>.prefill), then k-1 one-token passes")
    est = db.memory_estimate(draft, ctx.system, ctx.backend, ctx.version, ctx.layout, 0.9, 8192, 1024)
    br = est["memory_breakdown"] or {}
    tp = ctx.layout.tp
    mem = {"weight_bytes": int(br.get("weights_bytes", 0)) * tp,
           "kv_bytes_per_token": int(est["kv_size_per_token_bytes"]) * tp,
           "activation_peak_bytes": int(br.get("activations_bytes", 0)) * tp}
    ident = {"kind": "draft_model", "model": ctx.identity(mid, cfg)}
    return ImportedProposer(name, ident, _model_grids(GridBuilder(eng), ctx), mem, note)


def _compile_config(cfg: dict[str, Any], ctx: Context) -> db.Engine:
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "config.json").write_text(json.dumps(cfg))
        return db.compile_engine(tmp, ctx.system, ctx.backend, ctx.version, ctx.layout)
