"""The per-step view under the verdict: tokens per step against the step-time ratio."""

from __future__ import annotations

import polars as pl

from sim.results import metric_names as mn


def test_why_compares_tokens_per_step_with_the_step_time_ratio_at_the_same_batch():
    from sim.results.step_view import why_lines

    rows = []
    for cand, k, dur, acc in (("baseline", 0, 0.10, 0), ("ngram-k3", 3, 0.15, 4)):
        for batch in (2, 2):  # two decode steps at batch 2; prefill steps are left out
            rows.append({mn.CANDIDATE: cand, "duration_s": dur, "decode_seqs": batch, "prefill_tokens": 0,
                         "accepted_tokens": acc, "k": k})
        rows.append({mn.CANDIDATE: cand, "duration_s": 9.0, "decode_seqs": 2, "prefill_tokens": 100,
                     "accepted_tokens": 0, "k": k})
    lines = why_lines(pl.DataFrame(rows), "baseline")
    # 8 accepted over 4 request-steps: 1 + 2 = 3.00 tokens per request per step, at 1.5x the time
    assert lines == ["  per step, ngram-k3: 3.00 tokens/request/step at 1.50× the baseline's step time "
                     "(faster per token)"]
    assert "pays" not in lines[0]  # a per-step view never answers the question


def test_why_lines_follow_the_candidate_order_every_time() -> None:
    """group_by returns groups in any order; the lines must not (same output on every run)."""
    import polars as pl

    from sim.results.step_view import why_lines

    names = ["baseline", "zeta-k3", "alpha-k2", "mid-k4"]
    rows = []
    for i, name in enumerate(names):
        for b in (1, 2, 4, 8):
            rows.append({"candidate": name, "duration_s": 0.01 * b * (1 + i / 10), "decode_seqs": b,
                         "prefill_tokens": 0, "accepted_tokens": b * i, "k": 0 if i == 0 else 3})
    steps = pl.DataFrame(rows)
    for _ in range(20):
        lines = why_lines(steps, "baseline")
        assert [ln.split(":")[0].split()[-1] for ln in lines] == names[1:]
