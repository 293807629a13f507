"""Cold start, measured: the load and the process's first request after it, against a warm one."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from profiler.passes.cold_start import PROMPT_TOKENS, cold_start_s, measure_cold_start
from profiler.passes.models import load_model


def test_the_first_request_after_a_load_is_recorded_beside_a_warm_one():
    target = dataclasses.replace(load_model("config:tiny-llama", dtype="float32", device="cpu"), load_s=0.25)
    got = measure_cold_start(target, [], seed=0)
    sec = got["section"]
    assert sec["load_s"] == 0.25 and sec["prompt_tokens"] == PROMPT_TOKENS
    for part in ("first_request", "warm_request"):
        assert sec[part]["ttft_s"] > 0 and sec[part]["first_step_s"] > 0
    first, warm = sec["first_request"], sec["warm_request"]
    assert sec["cold_start_s"] == cold_start_s(0.25, (first["ttft_s"], first["first_step_s"]),
                                               (warm["ttft_s"], warm["first_step_s"]))
    assert any(n.startswith("load_s:") for n in got["notes"])
    assert any("cold_start_s = load_s" in n for n in got["notes"])


def test_draft_models_loads_add_to_the_load():
    target = dataclasses.replace(load_model("config:tiny-llama", dtype="float32", device="cpu"), load_s=0.25)
    draft = dataclasses.replace(target, load_s=0.5)
    assert measure_cold_start(target, [draft])["section"]["load_s"] == 0.75


@given(load=st.floats(0, 100), first=st.tuples(st.floats(0, 10), st.floats(0, 10)),
       warm=st.tuples(st.floats(0, 10), st.floats(0, 10)))
def test_cold_start_is_the_load_plus_what_the_first_request_takes_beyond_a_warm_one(load, first, warm):
    got = cold_start_s(load, first, warm)
    assert got >= load  # a first request faster than the warm median adds nothing
    assert abs(got - (load + max(0, first[0] - warm[0]) + max(0, first[1] - warm[1]))) < 1e-9
