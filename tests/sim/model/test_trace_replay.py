"""Acceptance traces: reading, replaying by hand, and what independence overstates (issue 21)."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from sim.contracts.acceptance_trace import (
    TraceRequest,
    entry_from_trace,
    naive_position_survival,
    read_specdecode_bench,
    read_trace,
    write_trace,
)
from sim.contracts.errors import SpecplanError
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile
from sim.model.drivers.engine import Fleet, FleetSpec
from sim.model.speculation import SpeculationPolicy
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import FixedStepTimer
from sim.results.records import requests_frame
from sim.results.simulation import simulate_once
from tests.helpers import write_scenario


def test_positions_replay_by_hand() -> None:
    # acc_len per position: a step at 0 commits 3 (k=3 allows 4), at 3 commits 1, at 4 commits
    # 4 (capped from 6), at 8 commits 2 -> 4 steps, 10 tokens: 2.5 tokens per step
    t = TraceRequest("r", "chat", "en", 0.0, "positions", (3, 2, 1, 1, 6, 5, 4, 3, 2, 1))
    assert t.steps_at(3) == [(True, 2), (True, 0), (True, 3), (True, 1)]
    assert t.tokens_per_step(3) == 2.5


def test_steps_replay_by_hand_with_no_proposal() -> None:
    t = TraceRequest("r", "chat", "en", 0.0, "steps", (2, -1, 0, 3), k=3)
    assert t.steps_at(3) == [(True, 2), (False, 0), (True, 0), (True, 3)]
    assert t.tokens_per_step(2) == pytest.approx(1 + (2 + 0 + 0 + 2) / 4)
    seg = entry_from_trace([t], 3)[0]
    assert (seg["num_drafts"], seg["num_steps"], seg["accepted_per_pos"]) == (3, 4, [2, 2, 1])


def _replay_run(trace: TraceRequest, out: int, k: int = 3):
    req = Request(0, 0, 0.0, 8, out, "chat", None, [-0.0] * k)
    req.replay = trace
    req.proposes = trace.layout == "positions" or trace.values[0] >= 0
    cfg = SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, kv_blocks=100)
    run = Fleet(FleetSpec(cfg, SpeculationPolicy("fixed", k=k), proposer="p"), FixedStepTimer(0.01),
                np.random.default_rng(0)).run([req])
    return requests_frame(run, "c", 0, 0.0).row(0, named=True)


def test_the_simulator_replays_a_trace_exactly() -> None:
    """The bar: a small trace whose tokens per step are known by hand gives the exact mean."""
    t = TraceRequest("r", "chat", "en", 0.0, "positions", (3, 2, 1, 1, 6, 5, 4, 3, 2, 1))
    # prefill emits token 1; decode steps then commit 3, 1, 4, 2 (the trace's 10 tokens): 11 out
    row = _replay_run(t, out=11)
    assert (row["num_spec_steps"], row["accepted_tokens"]) == (4, 6)
    assert 1 + row["accepted_tokens"] / row["num_spec_steps"] == 2.5
    s = TraceRequest("r", "chat", "en", 0.0, "steps", (2, -1, 0, 3), k=3)
    row = _replay_run(s, out=1 + 3 + 1 + 1 + 4)
    assert (row["num_spec_steps"], row["num_drafts"], row["accepted_tokens"]) == (4, 3, 5)


def clustered(n_req: int, rng: np.random.Generator, length: int = 200) -> list[TraceRequest]:
    """Answers alternating copied passages (long accepted runs) and free text (acc_len 1)."""
    out = []
    for j in range(n_req):
        vals: list[int] = []
        while len(vals) < length:
            if rng.random() < 0.3:
                run = int(rng.integers(5, 16))
                vals.extend(range(run, 0, -1))  # a copied run: at position i, run - i remain
            else:
                vals.extend([1] * int(rng.integers(3, 10)))
        out.append(TraceRequest(f"r{j}", "chat", "en", 0.0, "positions", tuple(vals[:length])))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_independent_draws_overstate_tokens_per_step_on_a_clustered_trace(seed) -> None:
    """Property: per-position rates treated as independent overstate, replay does not."""
    k = 4
    rng = np.random.default_rng(seed)
    for t in clustered(3, rng):
        exact = t.tokens_per_step(k)
        naive = 1 + sum(naive_position_survival(t, k))
        assert naive > exact * 1.05
        row = _replay_run(t, out=1 + len(t.values), k=k)
        assert 1 + row["accepted_tokens"] / row["num_spec_steps"] == pytest.approx(exact)


def test_reader_errors_name_file_line_and_field(tmp_path) -> None:
    good = {"request": "a", "task": "chat", "language": "en", "temperature": 0.0, "k": 3, "accepted": [1, None, 3]}
    cases = [
        ("{not json", r":1: not a JSON object"),
        (json.dumps({**good, "accepted": [1, -2]}), r":1: accepted\[1\]: -2 is below 0 \(counts cannot be negative\)"),
        (json.dumps({**good, "accepted": [1, 4]}), r":1: accepted\[1\]: 4 exceeds k=3"),
        (json.dumps({**good, "k": 0}), r":1: k: expected the draft length"),
        (json.dumps({k: v for k, v in good.items() if k != "task"}), r":1: task: missing"),
        (json.dumps({**good, "temperature": -1}), r":1: temperature: expected a number in 0..100"),
        (json.dumps({**good, "temperature": float("nan")}), r":1: temperature: expected a number in 0..100"),
        (json.dumps({**good, "temperature": float("inf")}), r":1: temperature: expected a number in 0..100"),
        (json.dumps({**good, "temperature": 10**400}), r":1: temperature: expected a number in 0..100"),
        # what json.loads refuses with a ValueError or RecursionError rather than a JSONDecodeError
        ("[" * 100_000 + "]" * 100_000, r":1: JSON nested too deeply to parse"),
        (json.dumps(good).replace("0.0", "9" * 5000), r":1: a number with thousands of digits"),
    ]
    for text, match in cases:
        path = tmp_path / "t.jsonl"
        path.write_text(text + "\n")
        with pytest.raises(SpecplanError, match=str(path).replace(".", r"\.") + match):
            read_trace(str(path))
    path = tmp_path / "k.jsonl"
    path.write_text(json.dumps(good) + "\n")
    with pytest.raises(SpecplanError, match=r":1: k: 3 exceeds k_max=2"):
        read_trace(str(path), k_max=2)


def test_write_and_read_round_trip(tmp_path) -> None:
    recs = [TraceRequest("a", "chat", "en", 0.0, "steps", (1, -1, 3), 3),
            TraceRequest("b", "chat", "en", 0.7, "positions", (2, 1, 1))]
    path = tmp_path / "t.jsonl"
    write_trace(str(path), recs)
    assert read_trace(str(path)) == recs


def test_specdecode_bench_layout(tmp_path) -> None:
    """A small file written here in SpecDecode-Bench's combined_*.jsonl layout (never vendored)."""
    lines = [
        {"id": "7", "prompt_token_ids": [1, 2, 3], "generated_token_ids": [4, 5, 6, 7, 8],
         "acc_eagle": {"acc_len": [3, 2, 1, 2, 1]}, "acc_ngram": {"acc_len": [1, 1, 1, 2, 1]}},
    ]
    path = tmp_path / "combined_tiny.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines))
    eagle = read_specdecode_bench(str(path), "eagle", task="chat", language="en")
    assert eagle[0].values == (3, 2, 1, 2, 1) and eagle[0].tokens_per_step(4) == 2.5  # steps at 0 (3 tokens) and 3 (2)
    path.write_text(json.dumps({"id": "1", "acc_eagle": {"acc_len": [0]}}))
    with pytest.raises(SpecplanError, match=r":1: acc_eagle.acc_len\[0\]: 0 is below 1"):
        read_specdecode_bench(str(path), "eagle")
    with pytest.raises(SpecplanError, match=r":1: acc_ngram.acc_len: missing"):
        read_specdecode_bench(str(path), "ngram")


SCENARIO = """
name = "trace"
[run]
duration_s = 300
warmup_s = 0
seeds = [1]
[workload]
arrival = "poisson"
rate = 0.3
[[workload.segments]]
name = "chat"
share = 1.0
prompt_tokens = {dist = "fixed", value = 64}
output_tokens = {dist = "fixed", value = 201}
acceptance = {task = "chat", language = "en"}
[fleet]
profile = "profile.json"
[[candidates]]
name = "replay"
proposer = "ngram"
k = 4
acceptance_trace = "trace.jsonl"
[[candidates]]
name = "independent"
proposer = "ngram"
k = 4
acceptance_trace = "trace.jsonl"
trace_replay = false
"""


def test_scenario_replays_a_trace_and_prints_both_mean_lengths(tmp_path) -> None:
    recs = clustered(4, np.random.default_rng(1))
    write_trace(str(tmp_path / "trace.jsonl"), recs)
    sc = load_scenario(write_scenario(tmp_path, SCENARIO))
    prof = synthetic_profile()
    rep = simulate_once(sc, prof, "replay", 1)
    ind = simulate_once(sc, prof, "independent", 1)
    exact = np.mean([r.tokens_per_step(4) for r in recs])
    got = rep.summary.filter(pl.col("segment") == "all").row(0, named=True)["mean_acceptance_length_per_step"]
    assert got == pytest.approx(exact, rel=0.08)  # requests draw traces with replacement
    assert any("replayed per request" in s for s in rep.sources)
    # independent draws at each traced request's replayed rates keep the mean (no overstatement
    # there: the rows count real steps); the overstatement is the naive per-position estimate
    ind_mean = ind.summary.filter(pl.col("segment") == "all").row(0, named=True)["mean_acceptance_length_per_step"]
    assert ind_mean == pytest.approx(exact, rel=0.08)


def test_traces_that_cover_the_answer_are_replayed_not_a_short_one_looped(tmp_path) -> None:
    """Issue 31 item 4: a short trace of one long copied run (every draft accepted) beside long
    free-text traces (acc_len 1). Answers of 201 tokens replay only traces that cover them, so
    tokens per step is the long traces' (1.0), not pulled up by looping the short one; an
    answer the short trace covers may still replay it."""
    long = clustered(3, np.random.default_rng(2), length=260)
    long = [TraceRequest(t.request, t.task, t.language, t.temperature, t.layout, (1,) * 260) for t in long]
    short = TraceRequest("short", "chat", "en", 0.0, "positions", tuple(range(40, 0, -1)))
    write_trace(str(tmp_path / "trace.jsonl"), [short, *long])
    sc = load_scenario(write_scenario(tmp_path, SCENARIO))
    rep = simulate_once(sc, synthetic_profile(), "replay", 1)
    got = rep.summary.filter(pl.col("segment") == "all").row(0, named=True)["mean_acceptance_length_per_step"]
    assert got == pytest.approx(1.0)  # looping the 40-token run would give ~2.5 tokens per step
    from sim.model.trace_acceptance import draw_trace_request, trace_acceptance, trace_tokens

    assert trace_tokens(short) == 40 and trace_tokens(long[0]) == 260
    model, chosen = trace_acceptance([short, *long], 4, None, proposer="ngram", source="t")
    rng = np.random.default_rng(0)
    picked = {draw_trace_request(model, chosen, "chat", rng, 30)[2].request for _ in range(200)}
    assert "short" in picked and len(picked) == 4  # every trace covers 30 tokens
    picked = {draw_trace_request(model, chosen, "chat", rng, 300)[2].request for _ in range(50)}
    assert "short" not in picked  # none covers 300: the longest are drawn


@pytest.mark.parametrize("what", ["missing", "a directory"])
def test_an_acceptance_trace_that_is_no_file_names_the_field_pointing_at_it(tmp_path, what) -> None:
    """The reader's "not found" or "is a directory" line alone would not say which scenario
    field asked for that file."""
    if what == "a directory":
        (tmp_path / "trace.jsonl").mkdir()
    sc = load_scenario(write_scenario(tmp_path, SCENARIO))
    with pytest.raises(SpecplanError) as info:
        simulate_once(sc, synthetic_profile(), "replay", 1)
    msg = str(info.value)
    assert "candidates[replay].acceptance_trace: " in msg and "trace.jsonl" in msg and "\n" not in msg
