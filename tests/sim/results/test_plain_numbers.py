"""Plain wording: rates rounded as a reader says them ("8.67 req/s", never "8.66667 req/s"),
fleets of multi-GPU replicas bracketed ("1 × (8× H200)"), standings that read as English."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.decisions.decision import _PREDICATE, status_words
from sim.decisions.facts import fleet_words
from sim.results.plain_numbers import plain, rate

REPO = Path(__file__).resolve().parents[3]


@settings(max_examples=500, deadline=None)
@given(x=st.floats(1e-6, 1e9, allow_nan=False))
def test_a_rate_has_three_significant_digits_no_exponent_and_stays_close(x):
    text = plain(x)
    assert "e" not in text and "inf" not in text
    digits = re.sub(r"^0\.0*", "", text.replace(",", "").replace(".", "")).lstrip("0") if "." in text else ""
    if "." in text:
        assert len(digits) <= 3, text
    assert abs(float(text.replace(",", "")) - x) <= 0.005 * x + 1e-12 or x >= 1000 and abs(
        float(text.replace(",", "")) - x) <= 0.5 + 1e-9


def test_the_issues_examples_read_plainly():
    assert rate(26 / 3) == "8.67 req/s"
    assert rate(20.0) == "20 req/s" and rate(1e6) == "1,000,000 req/s" and rate(0.5) == "0.5 req/s"
    assert fleet_words(1, "8× H200") == "1 × (8× H200)"
    assert fleet_words(3, "2× H200") == "3 × (2× H200)"
    assert fleet_words(1, "H200") == "1 H200" and fleet_words(2, "H200") == "2 × H200"
    assert fleet_words(2, "replica") == "2 replicas"


def test_every_standing_reads_after_is():
    for status in _PREDICATE:
        said = f"it is {status_words(status)}"
        assert not re.search(r"\bis (cannot|can)\b", said), said


ECHO = {"sim/contracts/vllm_results.py", "sim/contracts/trace_formats/vllm_bench.py", "sim/fidelity/vllm_compare.py"}
"""Files that echo a rate as the user's own file wrote it (a vLLM bench result's request_rate)."""


def test_no_text_template_says_is_cannot_or_a_six_digit_rate():
    """Grep every template of the decision and report code: no "is cannot", no bare status
    after "is", and no rate written with ``:g`` before "req/s" (six significant digits:
    8.66667 req/s)."""
    bad = []
    for folder in ("sim", "dashboard", "cli"):
        for path in (REPO / folder).rglob("*.py"):
            rel = path.relative_to(REPO).as_posix()
            text = path.read_text(encoding="utf-8")
            for n, line in enumerate(text.splitlines(), 1):
                if re.search(r"\b(is|are) cannot\b", line) or re.search(r"\bis \{[^}]*status\}", line) or (
                        rel not in ECHO and re.search(r":g\}\s*req/s", line)):
                    bad.append(f"{rel}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_the_reports_decision_numbers_have_no_exponent():
    from dashboard.html_report import format_numbers

    said = format_numbers({"e2el_ms_p50": 12345.6, "goodput_rps": 26 / 3, "replicas": 3.0})
    assert "e+" not in said and "12,346" in said and "8.67" in said and "replicas 3" in said
