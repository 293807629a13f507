"""Human words for the names the library's frames and decision rows use internally.

Why: a decision row carries its numbers under keys such as ``ttft_p95_excess_peak``; a page a
team presents says "TTFT p95 excess at peak". Renderers pass every such key through ``human``.
"""

from __future__ import annotations

import re

WORDS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency", "slo": "SLO", "kv": "KV",
         "usd": "$", "ms": "(ms)", "cutoff": "cut-off", "k": "k", "ci95": "95 % CI", "rps": "req/s",
         "pct": "%", "gpu": "GPU", "gpus": "GPUs"}


def human(key: str) -> str:
    """``ttft_p95_excess_peak`` → ``TTFT p95 excess peak``; a key without underscores as is."""
    if "_" not in key:
        return key
    return " ".join(WORDS.get(w, w) for w in key.split("_") if w)


GRID_WORDS = {"target_forward": "the target's decode/verify pass", "target_prefill": "the target's prefill pass",
              "fused.dense": "the fused dense part", "fused.logits": "the fused LM head",
              "fused.decode_attention": "the fused decode attention",
              "fused.prefill_attention": "the fused prefill attention"}
"""A profile's timing grids (their JSON paths, as the CLI's notes quote them) in a page's words."""
_GRID = re.compile(r"\btiming\.(proposers\.(?P<p>[\w.-]+?)\.(?P<part>draft|prefill|overhead)|[\w.]+)")



def profile_words(text: str) -> str:
    """A note that quotes a profile's grid paths (``timing.fused.dense``, ``timing.proposers.x.draft``)
    and axis names (``tokens_per_seq``) with those in words: the page says what a team reads."""
    def grid(m: re.Match[str]) -> str:
        if m["p"]:
            return f"{m['p']}'s {dict(draft='drafting', prefill='prefill pass', overhead='overhead')[m['part']]}"
        return GRID_WORDS.get(m.group(1), m.group(0))

    text = _GRID.sub(grid, text)
    return re.sub(r"\btokens_per_seq\b", "tokens per row", text)
