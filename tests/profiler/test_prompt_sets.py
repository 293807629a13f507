"""Prompt sets: the shipped ones are complete and well-formed; user files fail line by line."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from profiler.prompt_sets import (
    BUILTIN_LANGUAGES,
    BUILTIN_TASKS,
    Prompt,
    builtin_prompts,
    by_segment,
    encode_prompt,
    load_prompts,
)
from sim.contracts.errors import SpecplanError


def test_builtin_sets_cover_every_task_and_language():
    prompts = builtin_prompts()
    counts = Counter(p.segment for p in prompts)
    for task in BUILTIN_TASKS:
        for lang in BUILTIN_LANGUAGES:
            assert counts[(task, lang)] >= 20, (task, lang)
    assert len({p.id for p in prompts}) == len(prompts)
    assert len({p.prompt for p in prompts}) == len(prompts)


def test_summarization_prompts_carry_their_source_text():
    for p in builtin_prompts(["summarization"]):
        body = p.prompt.split("\n\n", 1)
        assert len(body) == 2, p.id
        assert 80 <= len(body[1].split()) <= 200, p.id


def test_builtin_filters():
    sv_code = builtin_prompts(["code"], ["sv"])
    assert sv_code and all(p.task == "code" and p.language == "sv" for p in sv_code)
    with pytest.raises(SpecplanError, match="available: support"):
        builtin_prompts(["poetry"])
    with pytest.raises(SpecplanError, match="no built-in prompts"):
        builtin_prompts(None, ["fr"])


def test_by_segment_keeps_order():
    ps = [Prompt("a", "t1", "en", "x"), Prompt("b", "t2", "sv", "y"), Prompt("c", "t1", "en", "z")]
    groups = by_segment(ps)
    assert list(groups) == [("t1", "en"), ("t2", "sv")]
    assert [p.id for p in groups[("t1", "en")]] == ["a", "c"]


def _write(tmp_path, lines):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_user_file_ok_and_default_ids(tmp_path):
    path = _write(
        tmp_path,
        [
            json.dumps({"task": "support", "language": "en", "prompt": "Where is my parcel?"}),
            "",
            json.dumps({"id": "q2", "task": "legal", "language": "any", "prompt": "Explain GDPR."}),
        ],
    )
    ps = load_prompts(path)
    assert [p.id for p in ps] == ["mine-1", "q2"]
    assert ps[1].segment == ("legal", "any")


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([], "mine.jsonl: no prompts"),
        (["{not json"], "mine.jsonl:1: not valid JSON"),
        (['{"task": "a", "language": "en", "prompt": "p"}', "[1, 2]"], "mine.jsonl:2: expected a JSON object"),
        (['{"language": "en", "prompt": "p"}'], "mine.jsonl:1: task: missing"),
        (['{"task": "a", "prompt": "p"}'], "mine.jsonl:1: language: missing"),
        (['{"task": "a", "language": "en"}'], "mine.jsonl:1: prompt: missing"),
        (['{"task": "a", "language": "en", "prompt": 3}'], "mine.jsonl:1: prompt: expected a string"),
        (['{"task": "a", "language": "english", "prompt": "p"}'], "mine.jsonl:1: language 'english'"),
        (['{"task": "a b", "language": "en", "prompt": "p"}'], "mine.jsonl:1: task 'a b'"),
        (['{"task": "a", "language": "en", "prompt": "  "}'], "mine.jsonl:1: prompt: must not be empty"),
        (['{"task": "a", "language": "en", "prompt": "p", "temp": 1}'], "mine.jsonl:1: temp: unknown field"),
        (
            ['{"id": "x", "task": "a", "language": "en", "prompt": "p"}',
             '{"id": "x", "task": "a", "language": "en", "prompt": "q"}'],
            "mine.jsonl:2: id: duplicate id 'x' (first on line 1)",
        ),
    ],
)
def test_user_file_errors(tmp_path, lines, message):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(SpecplanError) as err:
        load_prompts(path)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(SpecplanError, match="not found"):
        load_prompts(tmp_path / "nope.jsonl")


class _CharTokenizer:
    chat_template = None

    def __call__(self, text, add_special_tokens=True):
        ids = [ord(c) % 50 for c in text]
        return {"input_ids": ([1] if add_special_tokens else []) + ids}


class _ChatTokenizer(_CharTokenizer):
    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return f"<user>{messages[0]['content']}</user><assistant>"


def test_encode_prompt_uses_chat_template_when_present():
    plain = encode_prompt(_CharTokenizer(), "hi")
    chat = encode_prompt(_ChatTokenizer(), "hi")
    assert plain == [1, ord("h") % 50, ord("i") % 50]
    assert chat == [ord(c) % 50 for c in "<user>hi</user><assistant>"]
