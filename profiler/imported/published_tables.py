"""Published acceptance tables specplan ships as entries (``profiles/acceptance/``), each with
its citation, read from the source's own table (never typed from memory).

Spec-Bench's leaderboard reports ``#Mean Accepted Tokens`` per decoding step only (a mean, no
per-position rates): the entry spreads it over ``k_max = 5`` positions with one per-token rate
α (``s_i = α^i``, solved so that ``1 + Σ s_i`` is the table's number) — that shape and the
spread across requests are assumed, and the notes say so. Counts are nominal (10 000 drafts),
with ``accepted tokens = (τ − 1) · 10 000`` exactly, so the entry's mean acceptance length is the
table's number exactly. Spec-Bench counts every decoding step (a prompt-lookup step without a
match is a step that accepted nothing), so ``num_steps`` is not given: proposal rate 1.
``python -m profiler.imported.published_tables OUT.json`` writes the file.
"""

from __future__ import annotations

import json
import sys
from typing import Any

SPEC_BENCH_A100 = (
    "Spec-Bench leaderboard, 'Leaderboard on A100' / 'Vicuna-7B-v1.3' table, column '#Mean Accepted "
    "Tokens' (single A100 80GB, PyTorch 2.0.1, CUDA 11.4, greedy decoding, FP16, batch size 1, all six "
    "Spec-Bench subtasks): https://github.com/hemingkx/Spec-Bench/blob/main/Leaderboard.md (Xia et al., "
    "'Unlocking Efficiency in Large Language Model Inference: A Comprehensive Survey of Speculative "
    "Decoding', ACL Findings 2024)"
)
K_MAX = 5
NOMINAL = 10_000

TABLE: tuple[dict[str, Any], ...] = (
    # name, vLLM-style kind, the method's own checkpoint (from the leaderboard's links), table value
    {"proposer": "spec-bench-eagle", "kind": "eagle", "model": "yuhuili/EAGLE-Vicuna-7B-v1.3",
     "method": "EAGLE", "mean_accepted_tokens": 3.61},
    {"proposer": "spec-bench-medusa", "kind": "medusa", "model": "FasterDecoding/medusa-vicuna-7b-v1.3",
     "method": "Medusa", "mean_accepted_tokens": 2.32},
    {"proposer": "spec-bench-pld", "kind": "ngram", "model": None,
     "method": "PLD (prompt lookup decoding)", "mean_accepted_tokens": 1.73},
)


def alpha_for(tau: float, k: int = K_MAX) -> float:
    """α with ``1 + α + … + α^k = tau`` (bisection; the sum increases with α)."""
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 1 + sum(mid ** i for i in range(1, k + 1)) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def counts_for(tau: float) -> list[int]:
    """Nominal per-position counts: ``round(α^i · N)``, the rounding residue on position 1 so
    that they sum to ``(tau − 1) · N`` exactly."""
    a = alpha_for(tau)
    per_pos = [round(a ** (i + 1) * NOMINAL) for i in range(K_MAX)]
    per_pos[0] += round((tau - 1) * NOMINAL) - sum(per_pos)
    return per_pos


def library() -> dict[str, Any]:
    """The ``specplan.acceptance`` document for the table above."""
    proposers: dict[str, Any] = {}
    acceptance: dict[str, Any] = {}
    for row in TABLE:
        name, tau = row["proposer"], row["mean_accepted_tokens"]
        ident: dict[str, Any] = {"kind": row["kind"]}
        if row["model"] is not None:  # architecture unknown here: named, not described
            ident["note"] = f"checkpoint {row['model']} ({row['method']} heads for lmsys/vicuna-7b-v1.3)"
        else:
            ident["note"] = "prompt lookup decoding as run by Spec-Bench"
        proposers[name] = ident
        per_pos = counts_for(tau)
        acceptance[name] = {
            "provenance": {
                "method": "published", "device": {"kind": "cuda", "name": "NVIDIA A100 80GB", "count": 1},
                "dtype": "float16", "libraries": {"torch": "2.0.1"},
                "models": {"target": "lmsys/vicuna-7b-v1.3", name: row["method"]},
                "date": None, "command": "python -m profiler.imported.published_tables", "citation": SPEC_BENCH_A100,
                "notes": (f"{row['method']}: #Mean Accepted Tokens {tau:.2f} per decoding step (the table's only "
                          f"acceptance number); per-position shape assumed (one per-token rate alpha="
                          f"{alpha_for(tau):.4f} over k_max={K_MAX}); spread across requests assumed (none); "
                          f"counts nominal ({NOMINAL} drafts); model: the method's public Vicuna-7B-v1.3 "
                          "checkpoint (EAGLE and Medusa READMEs), assumed to be the one the leaderboard ran"),
            },
            "k_max": K_MAX,
            "segments": [{
                "segment": {"task": "spec-bench", "language": "en", "temperature": 0.0},
                "num_drafts": NOMINAL, "num_draft_tokens": NOMINAL * K_MAX,
                "num_accepted_tokens": sum(per_pos), "accepted_per_pos": per_pos, "per_request": [],
            }],
        }
    return {"schema": "specplan.acceptance", "name": "spec-bench-vicuna-7b-a100",
            "target": "lmsys/vicuna-7b-v1.3", "proposers": proposers, "acceptance": acceptance}


if __name__ == "__main__":
    with open(sys.argv[1], "w", encoding="utf-8") as fh:
        json.dump(library(), fh, indent=1)
        fh.write("\n")
