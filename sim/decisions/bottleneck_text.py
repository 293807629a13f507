"""Words for a ``Bottleneck``: the terminal, the report and the dashboard render the same line.

Kept apart from ``sim.decisions.bottleneck`` so the rule never formats and a renderer never
re-decides: these functions only read the fields the rule filled in.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.decisions.bottleneck import Bottleneck

SLO_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "end-to-end latency", "pause": "stream pause",
             "loss": "lost requests"}


def limit_label(b: Bottleneck) -> str:
    """The resource in a planner's words."""
    if b.limit == "max_num_seqs":
        return f"running-request limit (max_num_seqs {b.max_num_seqs})"
    if b.limit == "token_budget":
        return f"token budget per step (max_num_batched_tokens {b.max_num_batched_tokens})"
    if b.limit == "kv":
        return "KV-cache capacity"
    if b.limit == "compute":
        slo = SLO_NAMES.get(b.slo or "", "the SLO")
        return f"compute per step against the {slo} SLO"
    return "not saturated"


def evidence(b: Bottleneck) -> str:
    """The measures behind the named limit (or the headroom)."""
    held = ", ".join(f"{_LIMIT_SHORT[k]} {v:.0%}" for k, v in b.blocked.items() if v >= 0.005)
    held_text = f"requests held back by: {held} of busy time" if held else "no request held back by an engine limit"
    slo = (f"{SLO_NAMES.get(b.slo or '', b.slo)} at {b.slo_margin:.0%} of its limit"
           if b.slo is not None and b.slo_margin == b.slo_margin else "no SLO set")
    batch = f"mean decode batch {b.mean_batch:.1f}"
    if b.limit == "kv":
        extra = f"KV peak {b.kv_peak:.0%}, {b.preemptions_per_100:.1f} preemptions per 100 requests"
        return f"{held_text}; {extra}; {slo}"
    if b.limit == "compute":
        spec = f", drafting and overhead {b.spec_share_of_step:.0%} of step time" if b.spec_share_of_step > 0 else ""
        at = f" at {b.load_fraction:.0%} of capacity" if b.load_fraction is not None else ""
        return f"{slo}{at} with {held_text.lower()}; {batch}{spec}"
    if b.limit == "none":
        where = (f"at {b.load_fraction:.0%} of its capacity" if b.load_fraction is not None
                 else "SLOs well within their limits")
        return f"{where}: {slo}, {batch}"
    return f"{held_text}; {batch}; {slo}"


def describe(b: Bottleneck) -> str:
    """One line: candidate, load, the limit, the evidence."""
    at = "" if b.rate is None else f" at {b.rate:.3g} req/s per replica"
    return f"{b.candidate}{at}: {limit_label(b)} — {evidence(b)}"


def format_bottlenecks(items: Sequence[Bottleneck]) -> list[str]:
    """Terminal lines, one per candidate × load."""
    return [describe(b) for b in items]


_LIMIT_SHORT = {"kv": "KV cache", "token_budget": "token budget", "max_num_seqs": "max_num_seqs"}
