"""sim/contracts/input_limits.py: each limit refuses in one line naming the input, and lets valid input by."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.errors import SpecplanError
from sim.contracts.input_limits import (
    MAX_DEPTH,
    check_nesting,
    check_path,
    check_tree,
    read_text_limited,
)
from sim.contracts.work_limits import check_work


@pytest.mark.parametrize(("text", "toml", "line"), [
    ("x = " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), True, 1),
    ("a = 1\n\n" + "[" * 100000, True, 3),
    ('{"a":\n' * 40 + "1" + "}" * 40, False, MAX_DEPTH + 1),
])
def test_deep_nesting_is_refused_with_its_line(text: str, toml: bool, line: int) -> None:
    with pytest.raises(SpecplanError, match=rf"^f\.x:{line}: .* deeper than {MAX_DEPTH} levels$"):
        check_nesting(text, "f.x", "TOML" if toml else "JSON", toml=toml)


_DEEP = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)


@pytest.mark.parametrize(("text", "field"), [
    ("x = " + _DEEP, "x"),
    ('[run]\nseeds = [1]\n\n[fleet]  # the fleet\n"a b" = ' + _DEEP, 'fleet."a b"'),
    ("[run]\nseeds = [\n  1,\n  " + _DEEP + "]", "run.seeds"),
    ("[workload]\ntrace = {path = \"t\", columns = " + "{a = " * 40 + "1" + "}" * 41, "workload.trace"),
    ("[[candidates]]\nname = 'x'\nk = " + _DEEP, "candidates.k"),
    ("a = 1\n" + _DEEP, "table header"),
])
def test_deep_toml_nesting_names_the_field(text: str, field: str) -> None:
    with pytest.raises(SpecplanError) as info:
        check_nesting(text, "s.toml", "scenario", toml=True)
    assert f": {field}: scenario nests arrays/tables deeper than {MAX_DEPTH} levels" in str(info.value)


@pytest.mark.parametrize(("text", "toml"), [
    ('s = "' + "[" * 100 + '"', True),
    ("s = '''\n" + "[" * 100 + "\n'''", True),
    ("# " + "{" * 100, True),
    ('{"a": "' + "[" * 100 + '"}', False),
    ('{"a": "\\"' + "[" * 100 + '"}', False),
    ("x = " + "[" * MAX_DEPTH + "]" * MAX_DEPTH, True),
])
def test_brackets_in_strings_and_comments_do_not_count(text: str, toml: bool) -> None:
    check_nesting(text, "f", "X", toml=toml)


@pytest.mark.parametrize(("value", "expected"), [
    (2**64, "integer 18446744073709551616 out of range"),
    (float("nan"), "must be a finite number"),
    (float("-inf"), "must be a finite number"),
    (1e308, "must be a finite number"),
])
def test_magnitudes_name_the_field(value: object, expected: str) -> None:
    with pytest.raises(SpecplanError, match=rf"^s\.toml: run\.x\[1\]: {expected}"):
        check_tree({"run": {"x": [1, value]}}, "s.toml", "profile")


def test_size_caps_name_the_field() -> None:
    with pytest.raises(SpecplanError, match=r"^s\.toml: fleet\.replicas: 1000000 is over the limit of 10,000$"):
        check_tree({"fleet": {"replicas": 10**6}}, "s.toml", "scenario")
    with pytest.raises(SpecplanError, match=r"run\.seeds: 1,001 entries"):
        check_tree({"run": {"seeds": list(range(1001))}}, "s.toml", "scenario")


@pytest.mark.parametrize(("path", "expected"), [
    ("a\x00b", "NUL byte"), ("x" * 5000, "longer than 4096"), ("d/" + "n" * 300, "longer than 255"), ("", "empty"),
])
def test_path_form(path: str, expected: str) -> None:
    with pytest.raises(SpecplanError, match=expected):
        check_path(path, "scenario")


def test_file_kinds(tmp_path: Path) -> None:
    with pytest.raises(SpecplanError, match="is a directory"):
        read_text_limited(tmp_path, "scenario")
    with pytest.raises(SpecplanError, match="not a regular file"):
        read_text_limited("/dev/zero", "scenario")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SpecplanError, match="not a regular file"):  # would block forever
        read_text_limited(fifo, "scenario")
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * 101)
    with pytest.raises(SpecplanError, match=r"big\.toml: scenario file is 101 bytes, over the limit of 100"):
        read_text_limited(big, "scenario", limit=100)
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"a = 1\n\xff")
    with pytest.raises(SpecplanError, match=r"bad\.toml:2: scenario file is not UTF-8"):
        read_text_limited(bad, "scenario")
    with pytest.raises(SpecplanError, match="not expanded"):
        read_text_limited("~nosuchuser_x/s.toml", "scenario")


def test_work_limit_gives_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPLAN_MAX_REQUEST_STEPS", "1000")
    check_work(10, 50, 2, "s.toml")  # exactly 1000
    with pytest.raises(SpecplanError, match=r"^s\.toml: about 1e\+03 simulated request-steps .* over the limit of 1,000"):
        check_work(10, 50.1, 2, "s.toml")
    with pytest.raises(SpecplanError, match="requests per run"):
        check_work(1e12, 1, 1, "s.toml")


@settings(max_examples=50, deadline=None)
@given(turns=st.integers(1, 1000), user=st.integers(1, 10**7), block=st.sampled_from([1, 16, 512]))
def test_shared_prompt_blocks_count_as_work_only_with_prefix_caching(turns: int, user: int, block: int) -> None:
    """A conversation's mean prompt (first + (turns - 1) / 2 × (answer + user turn)) in blocks is
    added to each request's steps when prompts are hashed, and nothing without caching."""
    from sim.contracts.scenario import Scenario
    from sim.contracts.work_limits import workload_size

    w = {"arrival": "poisson", "rate": 1.0, "segments": [{
        "name": "c", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 40},
        "output_tokens": {"dist": "fixed", "value": 10},
        "conversation": {"turns": turns, "gap_s": 1.0, "user_tokens": user}}]}
    s = Scenario.from_dict({"name": "x", "run": {"duration_s": 10}, "workload": w})
    n0, plain = workload_size(s.workload, s.run)
    n1, hashed = workload_size(s.workload, s.run, None, block)
    assert n0 == n1 and plain == 11.0
    assert hashed - plain == pytest.approx((40 + (turns - 1) / 2 * (10 + user)) / block)
