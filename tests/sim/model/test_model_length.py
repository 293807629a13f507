"""The model's context length (``max_model_len``): a request whose prompt plus output cannot fit
is rejected on arrival as vLLM rejects it (HTTP 400), never served as if it fit, and counted
apart from timeouts; the length comes from the profile (the model's config) unless [fleet] or
the candidate sets one."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario
from sim.model.engine_defaults import model_length
from sim.model.scheduler import Scheduler
from sim.model.step_plan import Request, SchedulerConfig
from sim.results import metric_names as mn
from sim.results.simulation import simulate_once
from tests.helpers import BASELINE, scenario_toml, segment, write_scenario

GIB = 1024**3
LONG = 400_000
"""A 400k-token prompt: over a 128k model's context, while the replica's KV could hold it."""


@settings(max_examples=200, deadline=None)
@given(prompt=st.integers(1, 5000), output=st.integers(1, 5000), limit=st.one_of(st.none(), st.integers(2, 8000)))
def test_refused_exactly_when_prompt_plus_output_exceeds_max_model_len(prompt: int, output: int,
                                                                     limit: int | None) -> None:
    """vLLM's rule: HTTP 400 when prompt + max_tokens > max_model_len (a prompt of max_model_len
    tokens or more never fits: one output token at least); with room in the KV cache, nothing
    else refuses the request."""
    sched = Scheduler(SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=256, block_size=16,
                                      kv_blocks=1000, max_model_len=limit))
    req = Request(0, 0, 0.0, prompt, output)
    admitted = sched.add_request(req, 0.0)
    too_long = limit is not None and prompt + output > limit
    assert admitted is not too_long
    assert req.too_long is too_long
    if too_long:
        assert req.outcome == "rejected" and req.finish_s == 0.0 and req.generated == 0


def _scenario(tmp: Path, fleet_extra: dict | None = None, cand_extra: dict | None = None,
              model_len: int | None = 131_072):
    text = scenario_toml(
        "long", run={"duration_s": 40, "warmup_s": 2, "seeds": [1]},
        workload={"arrival": "poisson", "rate": 1.0, "client_timeout_s": 600},
        segments=[segment("chat", 0.85, {"dist": "uniform", "min": 50, "max": 400}, 40),
                  segment("long", 0.15, LONG, 50)],
        fleet={"profile": "profile.json", **(fleet_extra or {})},
        engine={"max_num_seqs": 16, "max_num_batched_tokens": 2048},
        slo={"ttft_ms": 60_000}, candidates=[{**BASELINE, **(cand_extra or {})}])
    sc = load_scenario(write_scenario(tmp, text, device_memory_bytes=400 * GIB, target_kv_bytes_per_token=1024,
                                      max_model_len=model_len))
    return sc, load_profile(sc.profile_path)


def test_a_400k_prompt_on_a_128k_model_is_not_served(tmp_path: Path) -> None:
    """The issue's case: the replica's KV holds a 400k-token prompt, the model's context (131,072,
    from its config via the profile) does not; every such request is rejected at arrival with no
    token generated, counted in ``rejected`` and ``rejected_too_long``, not as a timeout, and the
    notes say so."""
    sc, prof = _scenario(tmp_path)
    res = simulate_once(sc, prof, "baseline", 1)
    rq = res.requests
    long = rq.filter(pl.col("segment") == "long")
    chat = rq.filter(pl.col("segment") == "chat")
    assert long.height >= 3 and chat.height > 20
    assert (long["outcome"] == "rejected").all() and long["too_long"].all()
    assert (long["generated_tokens"] == 0).all() and long["first_token_s"].is_null().all()
    assert (long["finish_s"] == long["arrival_s"]).all()  # the 400 comes at once
    assert not chat["too_long"].any() and (chat["outcome"] == "completed").all()
    row = res.summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS).row(0, named=True)
    measured = long.filter(pl.col("in_window")).height
    assert row[mn.REJECTED_TOO_LONG] == row[mn.REJECTED] == measured > 0 and row[mn.TIMED_OUT] == 0
    assert any("over max_model_len 131,072" in n and "HTTP 400" in n for n in res.notes), res.notes
    assert any("max_model_len 131,072 tokens: the model's config" in s for s in res.sources)


def test_without_a_known_length_the_long_prompt_is_served(tmp_path: Path) -> None:
    """The same run on a profile that records no context length (and no override) admits and
    prefills the long prompts (they then outlast the client's timeout): the rule above is what
    refuses them, not the KV cache."""
    sc, prof = _scenario(tmp_path, model_len=None)
    long = simulate_once(sc, prof, "baseline", 1).requests.filter(pl.col("segment") == "long")
    assert long.height >= 3 and long["scheduled_s"].is_not_null().all()
    assert (long["outcome"] != "rejected").all() and not long["too_long"].any()


def test_fleet_and_candidate_override_the_models_length(tmp_path: Path) -> None:
    """The candidate's max_model_len wins over [fleet]'s, which wins over the profile's; a length
    past the model's own is said in the notes (vLLM refuses to start so by default)."""
    sc, prof = _scenario(tmp_path, fleet_extra={"max_model_len": 500_000})
    assert model_length(sc, prof, sc.candidates[0]).tokens == 500_000
    long = simulate_once(sc, prof, "baseline", 1)
    assert long.requests.filter(pl.col("segment") == "long")["scheduled_s"].is_not_null().all()
    assert any("exceeds the model's context length 131,072" in n for n in long.notes)
    sc2, prof2 = _scenario(tmp_path, fleet_extra={"max_model_len": 500_000}, cand_extra={"max_model_len": 300})
    got = model_length(sc2, prof2, sc2.candidates[0])
    assert got.tokens == 300 and "candidate 'baseline' max_model_len" in got.source
    rq = simulate_once(sc2, prof2, "baseline", 1).requests
    assert (rq["too_long"] == (rq["prompt_tokens"] + rq["output_tokens"] > 300)).all()


def test_the_engine_table_names_the_same_setting(tmp_path: Path) -> None:
    """``[fleet.engine] max_model_len`` (where vLLM's other engine arguments live) is the same
    setting as [fleet]'s; both at once is one line."""
    text = scenario_toml("e", run={"duration_s": 10, "seeds": [1]}, workload={"arrival": "poisson", "rate": 1.0},
                         segments=[segment()], fleet={"profile": "profile.json"},
                         engine={"max_model_len": 4096}, candidates=[BASELINE])
    sc = load_scenario(write_scenario(tmp_path, text))
    got = model_length(sc, load_profile(sc.profile_path), sc.candidates[0])
    assert got.tokens == 4096 and "fleet.engine.max_model_len" in got.source
    both = text.replace("[fleet]\n", "[fleet]\nmax_model_len = 4096\n")
    with pytest.raises(SpecplanError, match="fleet.max_model_len: given twice"):
        load_scenario(write_scenario(tmp_path, both))


@pytest.mark.parametrize("where", ["fleet", "candidate"])
def test_a_bad_length_is_one_line(tmp_path: Path, where: str) -> None:
    with pytest.raises(SpecplanError, match=r"max_model_len: must be in 2\.\.100,000,000 tokens") as e:
        _scenario(tmp_path, **({"fleet_extra": {"max_model_len": 1}} if where == "fleet"
                               else {"cand_extra": {"max_model_len": 0}}))
    assert "\n" not in str(e.value)


def test_a_named_fleet_may_serve_a_shorter_context(tmp_path: Path) -> None:
    """``[fleets.NAME] max_model_len``: hardware with less memory may have to serve a shorter
    context; its candidates use it, the others keep [fleet]'s."""
    text = scenario_toml("nf", run={"duration_s": 10, "seeds": [1]}, workload={"arrival": "poisson", "rate": 1.0},
                         segments=[segment()], fleet={"profile": "profile.json"},
                         engine={"max_model_len": 4096},
                         candidates=[BASELINE, {"name": "small-base", "speculation": "off", "fleet": "small"}])
    text += '[fleets.small]\nprofile = "profile.json"\nmax_model_len = 300\n'
    sc = load_scenario(write_scenario(tmp_path, text))
    prof = load_profile(sc.profile_path)
    small = model_length(sc, prof, sc.candidate("small-base"))
    assert small.tokens == 300 and "fleets.small.max_model_len" in small.source
    assert model_length(sc, prof, sc.candidate("baseline")).tokens == 4096


def test_too_long_requests_do_not_count_against_the_fleet(tmp_path: Path) -> None:
    """No fleet size serves a request longer than the model's context, so the carry rule's loss
    share leaves them out (in the summary row and in the decision's per-window rows alike); the
    summary and notes still count them."""
    from sim.decisions.facts import window_rows
    from sim.decisions.sustain import loss_fraction

    sc, prof = _scenario(tmp_path)
    res = simulate_once(sc, prof, "baseline", 1)
    row = res.summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS).row(0, named=True)
    assert row[mn.REJECTED_TOO_LONG] > 0 and loss_fraction(row) == 0.0
    facts_row = window_rows(res.requests, sc.slo.limits, sc.run.warmup_s, sc.run.duration_s)[("baseline", 1)]
    assert facts_row[mn.REJECTED_TOO_LONG] == facts_row[mn.REJECTED] > 0 and loss_fraction(facts_row) == 0.0
    assert loss_fraction({**row, mn.REJECTED_TOO_LONG: 0}) > 0.05  # counted as lost they would sink it
