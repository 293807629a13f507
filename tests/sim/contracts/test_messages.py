"""Error messages speak the user's TOML and are never cut mid-word: a property over generated bad
overrides of every field of a shipped scenario, and over the cutting helper itself
(sim/contracts/errors.py ``clip``/``echo``, sim/contracts/scenario_overrides.py)."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.dataclass_mapping import public_fields, type_hints
from sim.contracts.errors import SpecplanError, clip, echo
from sim.contracts.scenario import Scenario, load_scenario

REPO = Path(__file__).resolve().parents[3]
INTERNAL = ("base_dir", "origin", "internal_field", "resolved_path", "trace_path", "profile_path",
            "plain_value", "NoneType", "FieldError", "SpecplanError", "Traceback", "<class", "{'", "True",
            "False", "None")
"""Names of the code, not of the scenario file: loader-internal fields, properties, Python reprs."""

_WORD = st.text("abcdefghij", min_size=1, max_size=9).map(lambda w: "Q" + w)
_SENTENCE = st.lists(_WORD, min_size=1, max_size=60).map(" ".join)


def _leaf_paths(node: Any, at: str = "") -> list[str]:
    """Every settable dotted path of a scenario's plain dict, list items by name."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _leaf_paths(v, f"{at}.{k}" if at else k)]
    if isinstance(node, list) and node and all(isinstance(x, dict) for x in node):
        return [p for i, x in enumerate(node) for p in _leaf_paths(x, f"{at}[{x.get('name', i)}]")]
    return [at]


def _schema_paths(cls: type, at: str = "", depth: int = 0) -> list[str]:
    """Every field path the scenario schema declares (list items as ``[0]``, named tables as
    ``.h200``), set or not in the file: a field the shipped scenario leaves out is tried too."""
    out = []
    for f in public_fields(cls):
        path = f"{at}.{f.name}" if at else f.name
        out.append(path)
        hint = type_hints(cls)[f.name]
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
        inner = next(a for a in typing.get_args(hint) if a is not type(None)) if optional else hint
        if typing.get_origin(inner) is tuple and typing.get_args(inner):
            inner, path = typing.get_args(inner)[0], f"{path}[0]"
        elif typing.get_origin(inner) is dict:
            inner, path = typing.get_args(inner)[1], f"{path}.h200"
        if dataclasses.is_dataclass(inner) and depth < 4:
            out += _schema_paths(inner, path, depth + 1)
    return out


@pytest.fixture(scope="module")
def shipped() -> Scenario:
    return load_scenario(REPO / "scenarios" / "llama70b-h100-vs-h200.toml")  # named fleets too


def _bad_values() -> st.SearchStrategy[Any]:
    return st.one_of(_SENTENCE, st.integers(-10**6, -1), st.floats(-1e9, -1e-9), st.booleans(),
                     st.lists(_SENTENCE, max_size=3), st.dictionaries(_WORD, _SENTENCE, max_size=3))


def _assert_user_facing(msg: str, words: set[str]) -> None:
    assert "\n" not in msg, msg
    for name in INTERNAL:
        assert not re.search(rf"(?<![A-Za-z_]){re.escape(name)}(?![A-Za-z_])", msg), (name, msg)
    # a generated word shows whole or not at all (the checkout's own path may hold a capital Q)
    for token in re.findall(r"Q[a-z]*", msg.replace(str(REPO), "")):
        assert token in words, (token, msg)
    assert len(msg) < 600, msg
    assert not msg.rstrip().endswith(("valid:", "valid: ")), msg  # an empty list of what is valid


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_bad_override_names_the_toml_path_and_cuts_values_at_word_boundaries(shipped: Scenario,
                                                                               data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(sorted({*_leaf_paths(shipped.to_dict()), *_schema_paths(Scenario)})))
    value = data.draw(_bad_values())
    words = set(re.findall(r"Q[a-z]*", repr(value)))
    try:
        shipped.with_overrides({path: value})
    except SpecplanError as exc:
        _assert_user_facing(str(exc), words)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(_WORD, min_size=1, max_size=40), sep=st.sampled_from([".", " ", "[", "..", "]."]),
       tail=st.sampled_from(["", ".k", ".replicas", "[x].share"]))
def test_a_bad_override_path_is_echoed_in_whole_words(shipped: Scenario, words: list[str], sep: str,
                                                      tail: str) -> None:
    path = sep.join(words) + tail
    with pytest.raises(SpecplanError) as exc:
        shipped.with_overrides({path: 1})
    _assert_user_facing(str(exc.value), set(words))


def test_a_named_fleet_is_overridden_by_its_toml_path(shipped: Scenario) -> None:
    name = next(iter(shipped.fleets))
    for path in (f"fleets.{name}.tensor_parallel_size", f"fleets[{name}].tensor_parallel_size"):
        assert shipped.with_overrides({path: 4}).fleets[name].tensor_parallel_size == 4
    with pytest.raises(SpecplanError, match=rf"override 'fleets.nope.profile': no table 'nope' in fleets; valid: {name}$"):
        shipped.with_overrides({"fleets.nope.profile": "x.json"})


def test_the_overrides_a_message_quotes_are_written_as_toml(shipped: Scenario) -> None:
    with pytest.raises(SpecplanError) as exc:
        shipped.with_overrides({"run.drain": True, "workload.rate": -1.0})
    assert str(exc.value).endswith("(after overrides run.drain = true, workload.rate = -1.0)")


@given(text=st.text(st.sampled_from("ab ,"), max_size=300), limit=st.integers(2, 120))
def test_clip_cuts_at_a_word_boundary_with_an_ellipsis(text: str, limit: int) -> None:
    out = clip(text, limit)
    assert len(out) <= limit
    if len(text) <= limit:
        assert out == text
        return
    assert out.endswith("…")
    kept = out[:-1]
    assert text.startswith(kept)
    room = text[: limit - 1]
    if max(room.rfind(" "), room.rfind(",")) >= limit // 2:  # a boundary to cut at: no half word
        assert text[len(kept):][:1] in (" ", ",")


@given(value=_SENTENCE)
def test_echo_of_a_long_string_keeps_whole_words_and_states_the_length(value: str) -> None:
    out = echo(value, 40)
    if len(repr(value)) <= 40:
        assert out == repr(value)
        return
    assert out.endswith(f" ({len(value):,} characters)")
    assert set(re.findall(r"Q[a-z]*", out)) <= set(value.split())


_LONG = " ".join(f"Q{'abcdefghij'[i % 10] * (1 + i % 7)}" for i in range(60))  # 300-odd characters


def test_every_field_set_to_a_long_sentence_echoes_it_in_whole_words(shipped: Scenario) -> None:
    """Each field of the schema in turn (set or not in the file): the one-line error, if any,
    holds the sentence cut at a word boundary, never the whole of it."""
    words = set(_LONG.split())
    for path in sorted({*_leaf_paths(shipped.to_dict()), *_schema_paths(Scenario)}):
        try:
            shipped.with_overrides({path: _LONG})
        except SpecplanError as exc:
            _assert_user_facing(str(exc), words)
            assert _LONG not in str(exc), (path, str(exc))
