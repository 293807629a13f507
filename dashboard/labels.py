"""Human words for the names the library's frames and decision rows use internally.

Why: a decision row carries its numbers under keys such as ``ttft_p95_excess_peak``; a page a
team presents says "TTFT p95 excess at peak". Renderers pass every such key through ``human``.
"""

from __future__ import annotations

WORDS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency", "slo": "SLO", "kv": "KV",
         "usd": "$", "ms": "(ms)", "cutoff": "cut-off", "k": "k", "ci95": "95 % CI", "rps": "req/s",
         "pct": "%", "gpu": "GPU", "gpus": "GPUs"}


def human(key: str) -> str:
    """``ttft_p95_excess_peak`` → ``TTFT p95 excess peak``; a key without underscores as is."""
    if "_" not in key:
        return key
    return " ".join(WORDS.get(w, w) for w in key.split("_") if w)
