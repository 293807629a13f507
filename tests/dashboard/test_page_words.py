"""What a team presents has human words: no internal variable names and no machine paths in the
page, its charts, its tables or the report, on the scenario the page opens on."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from dashboard import layout as ly
from dashboard import state as st
from dashboard.files import (
    Roots,
    list_profiles,
    list_scenarios,
    load_named_scenario,
    opening_scenario,
)
from dashboard.html_report import decision_rows, render_report
from dashboard.view import compute_view, key_numbers, limit_lines, report_content, view_figures

REPO = Path(__file__).resolve().parents[2]
ROOTS = Roots.under(REPO)

SNAKE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
"""An identifier such as ``cutoff_rate`` or ``ttft_p95_excess_peak``."""
PATH = re.compile(r"(?:^|[\s'\"(=])(/(?:[\w.+-]+/)+[\w.+-]*)")
"""An absolute path such as ``/work/main/profiles/x.json``."""
VLLM_SETTINGS = {"max_num_seqs", "max_num_batched_tokens", "num_speculative_tokens", "speculative_config"}
"""vLLM's own setting names: what an engineer types into vLLM and the scenario, so the page uses them."""


def offenders(texts: list[str], *, identifiers: bool = True) -> list[str]:
    bad = []
    for t in texts:
        found = [m.group(1) for m in PATH.finditer(t)]
        if identifiers:
            found += [w for w in SNAKE.findall(t) if w not in VLLM_SETTINGS]
        bad += [f"{w!r} in {t[:120]!r}" for w in found]
    return bad


def component_texts(node: Any) -> Iterator[str]:
    """Every string a component tree shows: children, labels, placeholders, option labels."""
    if node is None:
        return
    if isinstance(node, str):
        yield node
        return
    if isinstance(node, list | tuple):
        for x in node:
            yield from component_texts(x)
        return
    for prop in ("children", "label", "placeholder", "title"):
        yield from component_texts(getattr(node, prop, None))
    for opt in getattr(node, "options", None) or []:
        yield from component_texts(opt.get("label") if isinstance(opt, dict) else opt)


def figure_texts(fig: dict[str, Any]) -> Iterator[str]:
    lay = fig["layout"]
    yield lay["title"]["text"]
    for k, v in lay.items():
        if k.startswith(("xaxis", "yaxis")) and isinstance(v, dict):
            yield (v.get("title") or {}).get("text", "")
    for a in lay.get("annotations", []):
        yield a.get("text", "")
    for tr in fig["data"]:
        yield str(tr.get("name", ""))
        yield str(tr.get("hovertemplate", ""))
        if tr.get("type") == "bar":
            yield from (str(x) for x in tr.get("x", []))


class _Visible(HTMLParser):
    """Text of an HTML document outside <script>, <style> and <pre> (the scenario file as TOML)."""

    def __init__(self) -> None:
        super().__init__()
        self.skip = 0
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.skip += tag in ("script", "style", "pre")

    def handle_endtag(self, tag: str) -> None:
        self.skip -= tag in ("script", "style", "pre")

    def handle_data(self, data: str) -> None:
        if not self.skip and data.strip():
            self.texts.append(data.strip())


@pytest.fixture(scope="module")
def opened():
    """The view the page opens on, shortened (same scenario, profile and candidates)."""
    name = opening_scenario(list_scenarios(ROOTS))
    assert name == "gpu-chat-h200.toml"  # a GPU team's question, on its imported H200 profile
    sc = load_named_scenario(ROOTS, name).with_overrides(
        {"run.duration_s": 40, "run.warmup_s": 8, "run.seeds": [1]})
    from sim.results.runner import resolve_profile

    return sc, compute_view(sc, resolve_profile(sc, None))


def test_the_page_layout_has_no_internal_names_or_paths(opened) -> None:
    sc, _ = opened
    page = ly.page(list_scenarios(ROOTS), list_profiles(ROOTS))
    panel = ly.whatif_panel(st.whatif_fields(sc), st.control_values(sc, {}))
    texts = [t for t in component_texts([page, panel]) if t]
    assert any("policy" in t for t in texts) and any("fixed k" in t for t in texts)  # the panel was read
    assert offenders(texts) == []


def test_charts_tables_and_lines_of_a_view_have_human_words(opened) -> None:
    _, view = opened
    figs = view_figures(view)
    texts = [t for f in figs.values() for t in figure_texts(f)]
    texts += [str(x) for row in key_numbers(view) for kv in row.items() for x in kv]
    texts += [str(v) for row in decision_rows(view.decisions.to_dicts()) for v in row.values()]
    texts += [*view.verdict, *limit_lines(view), *view.notes]
    assert len(limit_lines(view)) == len(view.scenario.candidates)
    assert offenders(texts) == []
    # provenance quotes the profile's own records (which name the imported database's fields),
    # so only paths are ruled out there
    assert offenders(list(view.sources), identifiers=False) == []


def test_the_report_reads_the_same(opened) -> None:
    _, view = opened
    html = render_report(report_content(view, view_figures(view)))
    parser = _Visible()
    parser.feed(html)
    sources = set(view.sources)
    texts = [t for t in parser.texts if t not in sources]
    assert "What limits each candidate's capacity" in texts
    assert offenders(texts) == []
    assert offenders(parser.texts, identifiers=False) == []


def test_the_scan_catches_what_it_is_for() -> None:
    assert offenders(["numbers: cutoff_rate 30 · ttft_p95_excess_peak 0.14"]) != []
    assert offenders(["profile /work/main/profiles/x.json"]) != []
    assert offenders(["max_num_seqs 1024, TTFT p95 96 ms at 20 req/s"]) == []
