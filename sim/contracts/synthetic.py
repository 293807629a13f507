"""Small calibration profiles built in code, for tests and examples.

Every section carries provenance ``assumed``: these numbers are chosen, never measured, and
the simulator prints them as such. Step times are multilinear in the grid axes, so the
simulator's interpolation reproduces the formulas exactly inside (and above) the grid, which
lets tests check step times against closed forms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.contracts.profile import Profile

GIB = 1024**3


def _provenance(notes: str) -> dict[str, Any]:
    return {
        "method": "assumed",
        "device": None,
        "dtype": None,
        "libraries": {},
        "models": {},
        "date": None,
        "command": None,
        "citation": None,
        "notes": notes,
    }


def _architecture(num_layers: int, num_kv_heads: int, head_dim: int) -> dict[str, Any]:
    hidden = num_kv_heads * head_dim * 3
    return {
        "family": "llama",
        "num_layers": num_layers,
        "hidden_size": hidden,
        "intermediate_size": hidden * 3,
        "num_attention_heads": num_kv_heads * 3,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "vocab_size": 32000,
        "num_parameters": num_layers * 12 * hidden * hidden,
    }


def _per_request_rows(rates: Sequence[float], rows: int, drafts: int) -> list[dict[str, Any]]:
    """Deterministic spread: request j scales every survival rate by a factor in [0.5, 1.5]."""
    out = []
    for j in range(rows):
        factor = 0.5 + (j / (rows - 1) if rows > 1 else 0.5)
        counts: list[int] = []
        for s in rates:
            c = min(drafts, round(min(1.0, s * factor) * drafts))
            if counts:
                c = min(c, counts[-1])
            counts.append(c)
        out.append({"num_drafts": drafts, "accepted_per_pos": counts})
    return out


def synthetic_profile_dict(
    *,
    name: str = "synthetic",
    base_step_s: float = 0.010,
    per_seq_s: float = 0.0005,
    per_token_s: float = 0.0002,
    per_context_token_s: float = 1e-7,
    prefill_base_s: float = 0.005,
    prefill_per_token_s: float = 0.0001,
    prefill_per_context_token_s: float = 1e-8,
    draft_base_s: float = 0.0002,
    draft_per_token_s: float = 0.00005,
    overhead_base_s: float = 0.0003,
    overhead_per_seq_s: float = 0.00002,
    device_memory_bytes: int = 16 * GIB,
    target_weight_bytes: int = 2 * GIB,
    target_kv_bytes_per_token: int = 131072,
    activation_peak_bytes: int = 512 * 1024**2,
    acceptance_rates: Sequence[float] | None = (0.7, 0.5, 0.35, 0.25, 0.18),
    k_max: int | None = None,
    segments: Sequence[tuple[str, str, float]] = (("chat", "en", 0.0),),
    per_request_rows: int = 21,
    drafts_per_request: int = 100,
    proposer: str = "ngram",
    proposal_rate: float = 1.0,
    batch_axis: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    context_axis: Sequence[int] = (0, 512, 2048, 8192),
    prefill_tokens_axis: Sequence[int] = (1, 64, 512, 2048),
    max_model_len: int | None = None,
) -> dict[str, Any]:
    """The JSON dict of a synthetic profile (write it to a file to test ``load_profile``).

    Why one function of ~110 lines: it is one literal profile document (every section a
    formula of the arguments), read top to bottom against docs/profile-format.md; only the
    acceptance section, a loop, is its own function.

    Step times (seconds), with ``b`` sequences, ``s`` tokens per sequence, context ``c``:

    - target forward  ``base_step_s + per_seq_s·b + per_token_s·b·s + per_context_token_s·b·c``
    - target prefill  ``prefill_base_s + prefill_per_token_s·n + prefill_per_context_token_s·n·c``
    - draft D(k)      ``draft_base_s + draft_per_token_s·b·k``
    - overhead H(k)   ``overhead_base_s + overhead_per_seq_s·b``

    ``acceptance_rates`` are unconditional survival rates per position for the ``ngram``-kind
    proposer (``None``: no acceptance entry); every segment gets the same rates, with
    ``per_request_rows`` deterministic rows spread around them. ``k_max`` defaults to
    ``len(acceptance_rates)`` (or 5 without acceptance). ``proposal_rate < 1`` adds
    ``num_steps`` (steps with or without a proposal) so that ``num_drafts / num_steps`` is it.
    """
    if k_max is None:
        k_max = len(acceptance_rates) if acceptance_rates is not None else 5
    if acceptance_rates is not None and len(acceptance_rates) != k_max:
        raise ValueError(f"acceptance_rates has {len(acceptance_rates)} positions, k_max is {k_max}")
    batches = [int(b) for b in batch_axis]
    contexts = [int(c) for c in context_axis]
    tps = list(range(1, k_max + 2))
    ks = list(range(1, k_max + 1))
    ptoks = [int(n) for n in prefill_tokens_axis]

    def fwd(b: int, s: int, c: int) -> float:
        return base_step_s + per_seq_s * b + per_token_s * b * s + per_context_token_s * b * c

    def pre(n: int, c: int) -> float:
        return prefill_base_s + prefill_per_token_s * n + prefill_per_context_token_s * n * c

    def draft(b: int, k: int, c: int) -> float:
        return draft_base_s + draft_per_token_s * b * k

    def over(b: int, k: int) -> float:
        return overhead_base_s + overhead_per_seq_s * b

    formula = (
        f"target_forward = {base_step_s:g} + {per_seq_s:g}*b + {per_token_s:g}*b*s + "
        f"{per_context_token_s:g}*b*c s"
    )
    d: dict[str, Any] = {
        "schema": "specplan.profile",
        "schema_version": 1,
        "name": name,
        "description": "synthetic profile built in code (assumed numbers, not a measurement)",
        "target": {
            "id": "synthetic-linear",
            "source": "config-only",
            "path": None,
            "sha256": None,
            "architecture": _architecture(16, 8, 64),
            **({"max_model_len": max_model_len} if max_model_len is not None else {}),
        },
        "proposers": {proposer: {"kind": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}},
        "timing": {
            "provenance": _provenance(f"synthetic linear step times: {formula}"),
            "target_forward": {
                "axes": {"batch": batches, "tokens_per_seq": tps, "context": contexts},
                "median": [[[fwd(b, s, c) for c in contexts] for s in tps] for b in batches],
            },
            "target_prefill": {
                "axes": {"tokens": ptoks, "context": contexts},
                "median": [[pre(n, c) for c in contexts] for n in ptoks],
            },
            "proposers": {
                proposer: {
                    "draft": {
                        "axes": {"batch": batches, "k": ks, "context": contexts},
                        "median": [[[draft(b, k, c) for c in contexts] for k in ks] for b in batches],
                    },
                    "overhead": {
                        "axes": {"batch": batches, "k": ks},
                        "median": [[over(b, k) for k in ks] for b in batches],
                    },
                }
            },
            "limits": [],
        },
        "memory": {
            "provenance": _provenance("synthetic memory numbers"),
            "device_memory_bytes": device_memory_bytes,
            "target_weight_bytes": target_weight_bytes,
            "target_kv_bytes_per_token": target_kv_bytes_per_token,
            "activation_peak_bytes": activation_peak_bytes,
            "proposers": {proposer: {"weight_bytes": 0, "kv_bytes_per_token": 0, "activation_peak_bytes": 0}},
            "kv_capacity": [],
        },
        "acceptance": {},
    }
    if acceptance_rates is not None:
        d["acceptance"][proposer] = _acceptance_entry(acceptance_rates, k_max, segments, per_request_rows,
                                                      drafts_per_request, proposal_rate)
    return d


def _acceptance_entry(acceptance_rates: Sequence[float], k_max: int, segments: Sequence[tuple[str, str, float]],
                      per_request_rows: int, drafts_per_request: int, proposal_rate: float) -> dict[str, Any]:
    """The proposer's acceptance entry: every segment at the same rates, with per-request rows."""
    segs = []
    for task, language, temperature in segments:
        rows = _per_request_rows(acceptance_rates, per_request_rows, drafts_per_request)
        per_pos = [sum(r["accepted_per_pos"][i] for r in rows) for i in range(k_max)]
        drafts = sum(r["num_drafts"] for r in rows)
        if not rows:  # aggregate only
            drafts = drafts_per_request
            per_pos = _per_request_rows(acceptance_rates, 1, drafts)[0]["accepted_per_pos"]
        seg = {
            "segment": {"task": task, "language": language, "temperature": float(temperature)},
            "num_drafts": drafts,
            "num_draft_tokens": drafts * k_max,
            "num_accepted_tokens": sum(per_pos),
            "accepted_per_pos": per_pos,
            "per_request": rows,
        }
        if proposal_rate < 1.0:
            for r in rows:
                r["num_steps"] = round(r["num_drafts"] / proposal_rate)
            seg["num_steps"] = sum(r["num_steps"] for r in rows) if rows else round(drafts / proposal_rate)
        segs.append(seg)
    return {
        "provenance": _provenance("synthetic survival rates " + ", ".join(f"{r:g}" for r in acceptance_rates)),
        "k_max": k_max,
        "segments": segs,
    }


def synthetic_profile(**kwargs: Any) -> Profile:
    """A validated :class:`Profile` from :func:`synthetic_profile_dict` (same keyword arguments)."""
    d = synthetic_profile_dict(**kwargs)
    return Profile.from_dict(d, origin=f"<synthetic profile {d['name']}>")
