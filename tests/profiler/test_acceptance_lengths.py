"""Acceptance lengths per k ↔ survival rates: the conversion the published library rests on."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.measured_acceptance.acceptance_lengths import (
    entry_lengths,
    headline,
    lengths_from_rates,
    rates_from_lengths,
    round_trip_error,
)
from sim.contracts.errors import SpecplanError

survival_curves = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8).map(lambda xs: sorted(xs, reverse=True))


@settings(max_examples=300, deadline=None)
@given(survival_curves)
def test_rates_to_lengths_and_back_reproduces_the_rates(rates):
    lengths = dict(enumerate(lengths_from_rates(rates), start=1))
    assert rates_from_lengths(lengths) == pytest.approx(rates, abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(survival_curves)
def test_a_table_printed_to_two_decimals_comes_back_within_its_rounding(rates):
    """What InferenceX publishes: AL(k) rounded to 2 decimals from one run per k."""
    table = {k: round(al, 2) for k, al in enumerate(lengths_from_rates(rates), start=1)}
    back = rates_from_lengths(table)
    assert round_trip_error(table, back) <= 0.01 * len(rates) + 1e-9
    if all(a >= b for a, b in zip([1.0, *back], back, strict=False)):  # consistent already: exact
        inc = [table[1] - 1] + [table[k] - table[k - 1] for k in range(2, len(table) + 1)]
        if all(x >= y >= 0 for x, y in zip(inc, inc[1:], strict=False)) and inc[0] >= 0:
            assert round_trip_error(table, back) < 1e-9


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8))
def test_any_valid_table_gives_a_survival_curve(increments):
    """Noisy tables (a later increment above an earlier one, a length that falls) still give
    non-increasing rates in [0, 1], and the lengths at the ends of pooled runs are kept."""
    lengths, total = {}, 1.0
    for k, x in enumerate(increments, start=1):
        total = min(max(total + x - 0.3, 1.0), k + 1.0)  # steps of -0.3..0.7: falls included
        lengths[k] = total
    rates = rates_from_lengths(lengths)
    assert len(rates) == len(lengths)
    assert all(0.0 <= r <= 1.0 for r in rates)
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))


@pytest.mark.parametrize(("lengths", "message"), [
    ({}, "every k from 1"),
    ({1: 1.5, 3: 2.0}, "every k from 1"),
    ({1: 2.5}, r"k=1 is 2.5: must lie in \[1, k \+ 1\]"),
    ({1: 0.9}, "must lie in"),
])
def test_bad_tables_are_one_line(lengths, message):
    with pytest.raises(SpecplanError, match=message):
        rates_from_lengths(lengths)


def test_the_readme_example_of_the_issue():
    """DeepSeek-V4-Pro MTP, thinking on, k = 1..5: 1.79, 2.27, 2.49, 2.54, 2.55 (REFERENCES.md)."""
    rates = rates_from_lengths({1: 1.79, 2: 2.27, 3: 2.49, 4: 2.54, 5: 2.55})
    assert rates == pytest.approx([0.79, 0.48, 0.22, 0.05, 0.01])


# ---------------------------------------------------------------- the profile's headline line

segment_counts = st.tuples(st.integers(0, 500), st.integers(0, 5000), st.integers(0, 6)).map(
    lambda t: {"num_drafts": t[0], "num_steps": t[0] + t[1], "num_accepted_tokens": t[0] * t[2] // 2})


@settings(max_examples=200, deadline=None)
@given(st.lists(segment_counts, min_size=1, max_size=6))
def test_tokens_per_step_counts_every_step_and_never_exceeds_the_length_per_draft(segs):
    per_step, per_draft, share = entry_lengths({"segments": segs})
    steps = sum(s["num_steps"] for s in segs)
    accepted = sum(s["num_accepted_tokens"] for s in segs)
    drafts = sum(s["num_drafts"] for s in segs)
    if steps == 0:
        return
    assert per_step * steps == pytest.approx(steps + accepted)  # each step commits 1 + its accepted
    if drafts:
        assert per_step <= per_draft + 1e-12
        assert (per_step == pytest.approx(per_draft)) == (accepted == 0 or drafts == steps)
        assert share == pytest.approx(drafts / steps)


def test_the_headline_says_per_step_first_and_labels_vllms_per_draft_length():
    # issue 41: a quick n-gram profile printed "acceptance length 4.19" (per draft) where a step
    # commits about 1.25 tokens
    ngram = {"provenance": {"method": "measured"},
             "segments": [{"num_drafts": 100, "num_steps": 1276, "num_accepted_tokens": 319}]}
    line = headline("ngram", ngram)
    assert "acceptance length 1.25 tokens per step; 4.19 per draft (vLLM's mean acceptance length" in line
    assert "8% of steps with a proposal" in line and line.endswith("[measured]")
    model = {"provenance": {"method": "measured"},
             "segments": [{"num_drafts": 100, "num_accepted_tokens": 150}]}  # no num_steps: every step
    assert headline("eagle", model) == ("acceptance eagle: 1 segments, acceptance length 2.50 tokens per step "
                                        "(a proposal on every step) [measured]")
    assert "nothing drafted" in headline("x", {"segments": []})
