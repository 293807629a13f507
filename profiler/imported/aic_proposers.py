"""``--draft`` values of ``profile import-aiconfigurator``: every vLLM proposer method, priced.

Why one module: each of vLLM's methods needs its own pricing from the kernel database, and each
is written here once with the note saying what is modelled rather than looked up:

- a draft model id (``draft_model``): the draft's own passes from the database;
- ``eagle`` (EAGLE-1) and ``eagle3``: a head shaped as vLLM builds it for the target
  (profiler/imported/aic_heads.py: one Llama decoder layer at the target's widths, or one DeepSeek layer
  with the target's MLA), EAGLE-3 with its 32,000-token draft LM head, EAGLE-1 the target's;
- ``mtp``: the target's own multi-token-prediction module (``MTP_KEYS``), priced as the database prices MTP:
  an iteration with ``k`` MTP tokens costs ``(L + k) / L`` target iterations
  (``aiconfigurator_core.sdk.models.helpers.mtp_scale_factor``), so the draft is ``k / L`` of
  the verification pass;
- ``ngram`` and ``suffix``: host-side lookups (profiler/host_proposers.py).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from profiler.host_proposers import (
    HOST_PROPOSERS,
    host_identity,
    host_memory,
    host_timing,
    lookup_note,
)
from profiler.imported import aic_database as db
from profiler.imported import aic_heads
from profiler.imported.aic_grids import GridBuilder
from profiler.imported.aic_step_terms import fa3_pack_gqa_group
from sim.contracts.errors import SpecplanError

KEYWORDS = ("eagle", "eagle3", "mtp", "ngram", "suffix", "none")
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
"""Where a config counts its MTP modules: DeepSeek, GLM, MiMo, Nemotron-H, Step; Qwen3-Next/3.5."""


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
    """The drafts' layout: the target's TP and expert split, its KV dtype."""
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
    """An EAGLE-1 or EAGLE-3 head shaped as vLLM builds it for this target (profiler/imported/aic_heads.py)."""
    label = "EAGLE-3" if kind == "eagle3" else "EAGLE-1"
    name = f"the {kind} head of {ctx.target}"
    shape = aic_heads.head_shape(kind, ctx.target_cfg, ctx.layout)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            eng = _compile_head(shape.config, Path(tmp, "head"), shape.layout, name, ctx)
            if shape.mlp_config is not None:
                mlp = _compile_head(shape.mlp_config, Path(tmp, "mlp"), replace(shape.layout, moe_tp=shape.layout.tp,
                                                                                 moe_ep=1), f"{name} (its MLP)", ctx)
                eng = aic_heads.DenseMlpSplice(eng, mlp)
            grids = _model_grids(GridBuilder(eng, fa3_pack_gqa_group(ctx.backend, ctx.system, shape.config)), ctx)
        except SpecplanError as exc:
            raise SpecplanError(_head_refusal(kind, ctx, shape, str(exc).replace(tmp, name))) from None
    fuse = 3 if kind == "eagle3" else 2
    note = (f"{kind}: modelled, not a database entry: an {label} head priced as {shape.what}, timed from the same "
            f"database; the {fuse}h->h fusion of target hidden states is not timed. First pass over every scheduled "
            "token (decode rows x (k+1) and prompt tokens), its LM head on each row's last position only (vLLM "
            "eagle.py propose), then k-1 one-token passes")
    model = ctx.identity(f"{kind}-head-shaped", shape.identity_config)
    ident = {"kind": kind, "note": f"{label} head (one decoder layer) reading the target's hidden states",
             "model": model}
    return ImportedProposer(kind, ident, grids, _head_memory(kind, model["architecture"], ctx), note)


def _compile_head(cfg: dict[str, Any], folder: Path, layout: db.Layout, name: str, ctx: Context) -> db.Engine:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return db.compile_engine(str(folder), ctx.system, ctx.backend, ctx.version, layout, label=name)


def _head_memory(kind: str, arch: dict[str, Any], ctx: Context) -> dict[str, int]:
    """Replica totals in bf16: the layer's parameters (profiler/model_shape.py, experts included
    for an EAGLE-1 MLA head), the fusion GEMM, EAGLE-3's own LM head; KV per token at the KV dtype
    (MLA's latent kept on every TP rank, as the target's)."""
    from profiler.model_shape import body_params, kv_values_per_token_layer

    tp, h = ctx.layout.tp, arch["hidden_size"]
    fuse = (3 if kind == "eagle3" else 2) * h * h
    own_head = arch["vocab_size"] * h if kind == "eagle3" else 0
    kvb = 1 if ctx.layout.kv == "fp8" else 2
    return {"weight_bytes": 2 * (body_params(arch) + fuse + own_head),
            "kv_bytes_per_token": kv_values_per_token_layer(arch, tp) * tp * kvb, "activation_peak_bytes": 0}


def _head_refusal(kind: str, ctx: Context, shape: aic_heads.HeadShape, why: str) -> str:
    """One line: the draft, the part the database lacks, and drafts that do import for this target."""
    part = why.split(": ", 1)[-1].split(" (valid:", 1)[0]
    mtp = "mtp, " if _mtp_modules(ctx.target_cfg) else ""
    return (f"--draft {kind}: {ctx.target}'s {kind} head ({shape.what.split(' (')[0]}) cannot be priced on "
            f"{ctx.system}/{ctx.backend} {ctx.version} tp={ctx.layout.tp}: {part} (valid for this target: "
            f"--draft {mtp}ngram, suffix or a draft model id; or another --system / --backend-version)")


def _mtp_modules(cfg: dict[str, Any]) -> int:
    t = aic_heads.text_config(cfg)
    return max(int(t.get(key) or 0) for key in MTP_KEYS)


def _mtp(ctx: Context) -> ImportedProposer:
    t = aic_heads.text_config(ctx.target_cfg)
    n = _mtp_modules(ctx.target_cfg)
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
        from profiler.estimates.estimate_inputs import VOCAB_PADDING

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
    layout = replace(ctx.layout, moe_tp=ctx.layout.tp, moe_ep=1)  # a dense draft: no expert split
    eng = db.compile_engine(draft, ctx.system, ctx.backend, ctx.version, layout)
    mid = db.ALIASES.get(draft, draft)
    name = mid.split("/")[-1].lower()
    note = (f"{name}: the draft model's own passes from the same database: first pass over every scheduled token "
            "(decode rows x (k+1), and prompt tokens via timing.proposers.<p>.prefill), its LM head on each row's last "
            "position only (vLLM eagle.py propose), then k-1 one-token passes")
    est = db.memory_estimate(draft, ctx.system, ctx.backend, ctx.version, layout, 0.9, 8192, 1024)
    br = est["memory_breakdown"] or {}
    tp = ctx.layout.tp
    mem = {"weight_bytes": int(br.get("weights_bytes", 0)) * tp,
           "kv_bytes_per_token": int(est["kv_size_per_token_bytes"]) * tp,
           "activation_peak_bytes": int(br.get("activations_bytes", 0)) * tp}
    ident = {"kind": "draft_model", "model": ctx.identity(mid, cfg)}
    gb = GridBuilder(eng, fa3_pack_gqa_group(ctx.backend, ctx.system, cfg))
    return ImportedProposer(name, ident, _model_grids(gb, ctx), mem, note)
