"""A run's notes say why prefix caching hit nothing when the traffic carries no shared prefix,
and only then (sim/results/run_notes.py); condensed to a terminal line, a note keeps whole words."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario
from sim.results.run_notes import no_shared_prefix_note
from sim.results.runner import run_scenario
from sim.results.summary_table import SHORT, condense_notes
from tests.helpers import BASELINE, scenario_toml, segment, write_scenario

_CACHE = {"name": "cache", "speculation": "off", "prefix_caching": True}
_POISSON = {"arrival": "poisson", "rate": 2.0}
_CLIENTS = {"arrival": "concurrency", "concurrency": 2}
_MOON = {"arrival": "trace", "trace": {"path": "t.jsonl", "format": "mooncake"}}
_TRACE_SEGMENT = {"name": "chat", "share": 1.0, "acceptance": {"task": "chat", "language": "en"}}


def _notes(tmp_path: Path, workload: dict, seg: dict, cache: dict | None, ids: bool = False) -> list[str]:
    rows = [{"timestamp": 1000 * i, "input_length": 600, "output_length": 4} for i in range(4)]
    if ids:
        for r in rows:
            r["hash_ids"] = [1, 2]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    text = scenario_toml("pc", run={"duration_s": 5, "warmup_s": 0, "seeds": [1, 2]}, workload=workload,
                         segments=[seg], fleet={"profile": "profile.json"}, candidates=[BASELINE, cache] if cache else [BASELINE])
    sc = load_scenario(write_scenario(tmp_path, text))
    return [n for n in run_scenario(sc, load_profile(sc.require_profile_path())).notes if "prefix caching" in n]


SHARED = {**segment(prompt=300, output=4), "shared_prefix_tokens": 256}
PLAIN = segment(prompt=300, output=4)


@pytest.mark.parametrize(("workload", "seg", "cache", "ids", "said"), [
    (_POISSON, PLAIN, _CACHE, False, "(no shared_prefix_tokens, documents or conversation on any segment)"),
    (_CLIENTS, PLAIN, _CACHE, False, "(no shared_prefix_tokens, documents or conversation on any segment)"),
    (_MOON, _TRACE_SEGMENT, _CACHE, False, "(no hash_ids in the trace; no shared_prefix_tokens"),
    (_POISSON, SHARED, _CACHE, False, None),  # a system prompt: hits to be had
    (_CLIENTS, SHARED, _CACHE, False, None),
    (_MOON, _TRACE_SEGMENT, _CACHE, True, None),  # hash_ids: hits to be had
    (_POISSON, PLAIN, None, False, None),  # caching off (the baseline alone): nothing to explain
], ids=["poisson", "closed-loop", "trace-without-ids", "system-prompt", "clients-system-prompt",
        "trace-with-ids", "caching-off"])
def test_caching_with_no_shared_prefix_says_why_hits_are_zero(tmp_path: Path, workload: dict, seg: dict,
                                                              cache: dict | None, ids: bool, said: str | None) -> None:
    notes = _notes(tmp_path, workload, seg, cache, ids)
    if said is None:
        assert notes == []
        return
    assert len(notes) == 1, notes  # once for the candidate, not once per seed
    assert notes[0].startswith("cache: prefix caching is on, but 0 % hits by construction: the traffic carries "
                               "no shared prefix (")
    assert said in notes[0] and "0 % hits by construction" in notes[0]


_WORD = st.text("abcdefghij", min_size=1, max_size=9).map(lambda w: "Q" + w)


@given(notes=st.lists(st.lists(_WORD, min_size=1, max_size=40).map(" ".join), min_size=1, max_size=5))
def test_condensed_notes_fit_a_line_and_keep_whole_words(notes: list[str]) -> None:
    words = {w for n in notes for w in n.split()}
    for line in condense_notes(notes, ["cache"]):
        assert len(line) <= SHORT - 2
        assert set(re.findall(r"Q[a-z]*", line)) <= words, line


def test_the_no_shared_prefix_note_keeps_its_point_when_condensed() -> None:
    note = no_shared_prefix_note("cache, cache+eagle3-k3", trace=True)
    assert "prefix caching is on, but 0 % hits by construction" in condense_notes([note], [])[0]


def test_a_segment_whose_prompts_never_drafted_is_one_line_not_nan_plus_minus_inf() -> None:
    """A quick profile's n-gram segment with no match in its one prompt (issue 41): said in one
    line, and a one-prompt segment that drafted says it has no interval."""
    import numpy as np

    from sim.model.acceptance import AcceptanceModel, SegmentAcceptance
    from sim.results.run_notes import acceptance_notes

    def seg(name: str, drafts: int, rates: list[float]) -> SegmentAcceptance:
        rows = np.array([rates])
        return SegmentAcceptance(name, None, np.array(rates), rows, drafts, np.array([float(drafts)]),
                                 0.0 if drafts == 0 else 1.0, np.array([0.0 if drafts == 0 else 1.0]))

    model = AcceptanceModel("ngram", 3, {"a": seg("a", 0, [0.0, 0.0, 0.0]), "b": seg("b", 8, [0.5, 0.25, 0.0])}, "src")
    notes = acceptance_notes(model, ["a", "b"], "ngram-k3", 3)
    text = "\n".join(notes)
    assert "nan" not in text and "± inf" not in text
    assert [n for n in notes if "no draft was proposed" in n] == [
        "ngram-k3: no draft was proposed in the measured prompts of segment(s) a (1 prompt): those requests "
        "are simulated without speculation, and how often another prompt would get one is unknown"]
    assert "b (1 requests: 1.75 no interval from one request)" in text
