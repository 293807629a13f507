"""The KV-pressure fallback (``policy = "kv_fallback"``): speculation off above a KV-use threshold,
back on below a lower one, never two switches within the minimum observation window.

The rule's one home is ``policy_kernels.kv_fallback_k`` (compiled); ``hysteresis`` below writes it
a second time, readably, as its oracle: a property test compares the two over random KV-use
traces, and a simulated scenario whose load rises and falls is replayed from its steps frame
step by step (k of each step against the KV use the replica reported for its previous step).
"""

from __future__ import annotations

from array import array

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.candidate import Candidate, KvFallbackConfig
from sim.contracts.errors import FieldError
from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario
from sim.model.kernels import kernel_state as ks
from sim.model.kernels.policy_kernels import kv_fallback_k, policy_array
from sim.model.scheduler import Scheduler
from sim.model.speculation import PolicyState, SpeculationPolicy, policy_from_candidate
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_protocol import StepCycle
from sim.results.simulation import simulate_once
from tests.helpers import BASELINE, scenario_toml, segment, write_scenario

K = 3
HI, LO, WINDOW = 0.6, 0.5, 3.0
KVF = {"name": "ngram-kvf", "proposer": "ngram", "k": K, "policy": "kv_fallback",
       "kv_fallback": {"off_above": HI, "on_below": LO, "window_s": WINDOW}}


def hysteresis(trace, k: int, off_above: float, on_below: float, window_s: float) -> list[int]:
    """The ORACLE: ``k`` per decision for ``trace`` of (time, KV use share), readably. On at the
    start; off when use > off_above, on when use < on_below; no switch within ``window_s`` of
    the last switch or of the first decision."""
    on, since, out = True, None, []
    for t, use in trace:
        if since is None:
            since = t
        if t - since >= window_s:
            if on and use > off_above:
                on, since = False, t
            elif not on and use < on_below:
                on, since = True, t
        out.append(k if on else 0)
    return out


def _policy(k: int, hi: float, lo: float, w: float) -> SpeculationPolicy:
    return SpeculationPolicy("kv_fallback", k=k, kv_off_above=hi, kv_on_below=lo, window_s=w)


@st.composite
def traces(draw):
    """KV-use traces: a random walk of used blocks (hovering near the thresholds is likely) at
    random step durations, with thresholds and a window from the same draw."""
    total = draw(st.integers(1, 400))
    lo = draw(st.integers(1, total)) / total
    hi = draw(st.integers(1, total)) / total
    lo, hi = min(lo, hi), max(lo, hi)
    if lo == hi:
        lo = hi / 2
    n = draw(st.integers(1, 200))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    used = np.clip(np.cumsum(rng.integers(-total // 8 - 1, total // 8 + 2, n)) + rng.integers(0, total + 1),
                   0, total)
    t = float(draw(st.floats(0, 100))) + np.cumsum(rng.exponential(draw(st.floats(0.001, 2.0)), n))
    window = draw(st.floats(0.001, 10.0))
    return total, [(float(a), int(b)) for a, b in zip(t, used, strict=True)], hi, lo, window


@settings(max_examples=300, deadline=None)
@given(traces(), st.integers(1, 6))
def test_the_compiled_rule_is_its_oracle_on_any_trace(case, k) -> None:
    total, trace, hi, lo, window = case
    pol = policy_array(_policy(k, hi, lo, window))
    got = [kv_fallback_k(pol, used, total, t) for t, used in trace]
    want = hysteresis([(t, used / total) for t, used in trace], k, hi, lo, window)
    assert got == want
    switches = [trace[i][0] for i in range(1, len(got)) if got[i] != got[i - 1]]
    assert all(b - a >= window for a, b in zip([trace[0][0], *switches], switches, strict=False)), (
        "two switches (or one after the start) within the window")
    for i in range(1, len(got)):  # a switch only on the side of its threshold
        use = trace[i][1] / total
        if got[i] < got[i - 1]:
            assert use > hi
        if got[i] > got[i - 1]:
            assert use < lo


def test_a_crossing_switches_off_then_on_and_not_inside_the_window() -> None:
    """A hand trace: above the high threshold early (inside the window: stays on), off after it,
    below the low one 1 s later (inside the window: stays off), on once the window has passed."""
    pol = policy_array(_policy(4, 0.8, 0.5, 2.0))
    trace = [(0.0, 10), (1.0, 95), (2.0, 95), (3.0, 10), (3.9, 10), (4.0, 10), (4.5, 95)]
    assert [kv_fallback_k(pol, u, 100, t) for t, u in trace] == [4, 4, 0, 0, 0, 4, 4]


def test_each_replica_and_each_start_has_its_own_state() -> None:
    p = _policy(2, 0.8, 0.5, 1.0)
    a, b = policy_array(p), policy_array(p)
    assert kv_fallback_k(a, 0, 10, 0.0) == 2 and kv_fallback_k(a, 10, 10, 5.0) == 0
    assert kv_fallback_k(b, 10, 10, 0.0) == 2, "a second replica's array shares the first's state"


def _kv_scenario(tmp_path, replicas: int):
    """Load that rises (KV fills) and falls (it drains) on a replica with a small KV cache."""
    text = scenario_toml(
        "kv-fallback",
        run={"duration_s": 90, "warmup_s": 0, "seeds": [3]},
        workload={"arrival": "piecewise",
                  "piecewise": {"shape": "step", "points": [[0, 0.5], [15, 3.0 * replicas], [45, 0.3]]}},
        segments=[segment(prompt={"dist": "lognormal", "median": 300, "sigma": 0.6, "min": 8, "max": 1200},
                          output={"dist": "lognormal", "median": 120, "sigma": 0.6, "min": 1, "max": 600})],
        fleet={"profile": "profile.json", "replicas": replicas, "routing": "round_robin",
               "price_per_gpu_hour": 1.0},
        engine={"max_num_seqs": 24, "max_num_batched_tokens": 1024, "chunked_prefill": True},
        candidates=[BASELINE, KVF],
    )
    return load_scenario(write_scenario(tmp_path, text, device_memory_bytes=int(3.34 * 2**30)))


def _replayed(steps: pl.DataFrame) -> tuple[list[int], list[int], int]:
    """k per decoding step as logged, and as the oracle gives it from the frame, and how many
    decoding steps the window held (a threshold crossed, no switch yet): the KV use a
    step's choice reads is the replica's previous step's ``kv_used_blocks`` (0 after an idle
    moment: the plan that found nothing to run saw no block in use); the window counts from
    the replica's start (t = 0)."""
    got, want, held = [], [], 0
    for (_,), rows in steps.sort("replica", "t_start_s").group_by(["replica"], maintain_order=True):
        trace, dec = [(0.0, 0.0)], []
        end = 0.0
        prev_use = 0.0
        for r in rows.iter_rows(named=True):
            idle = r["t_start_s"] > end
            trace.append((r["t_start_s"], 0.0 if idle else prev_use))
            dec.append(r["decode_seqs"] > 0)
            got.append(r["k"]) if r["decode_seqs"] > 0 else None
            prev_use = r["kv_used_blocks"] / r["kv_total_blocks"]
            end = r["t_start_s"] + r["duration_s"]
        ks_ = hysteresis(trace, K, HI, LO, WINDOW)[1:]
        want += [k for k, d in zip(ks_, dec, strict=True) if d]
        for (_, use), k, before, d in zip(trace[1:], ks_, [K, *ks_], dec, strict=False):
            held += d and k == before and ((k and use > HI) or (not k and use < LO))
    return got, want, held


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_scenario_crossing_both_thresholds_goes_off_then_on_without_flapping(tmp_path, replicas) -> None:
    sc = _kv_scenario(tmp_path, replicas)
    steps = simulate_once(sc, load_profile(sc.require_profile_path()), "ngram-kvf", 3).steps
    got, want, held = _replayed(steps)
    assert got == want, "k per step differs from the hysteresis rule on the logged KV use"
    assert held > 0, "the window never held a switch back: the scenario does not test it"
    for (_,), rows in steps.sort("replica", "t_start_s").group_by(["replica"], maintain_order=True):
        dec = rows.filter(pl.col("decode_seqs") > 0)
        k = dec["k"].to_list()
        t = dec["t_start_s"].to_list()
        use = (dec["kv_used_blocks"] / dec["kv_total_blocks"]).to_list()
        first_off = next(i for i, x in enumerate(k) if x == 0)
        back_on = next(i for i in range(first_off, len(k)) if k[i] == K)
        assert max(use[:first_off]) > HI, "it went off without crossing the high threshold"
        assert back_on > first_off and t[back_on] - t[first_off] >= WINDOW
        switches = [t[i] for i in range(1, len(k)) if k[i] != k[i - 1]]
        assert len(switches) >= 2
        assert all(b - a >= WINDOW for a, b in zip([0.0, *switches], switches, strict=False)), (
            f"replica switched twice within {WINDOW}s: {switches}")
        assert k[-1] == K, "speculation is not back on after the load fell"


def test_the_real_serving_loop_runs_the_same_rule() -> None:
    """``StepCycle`` (the wall-clock driver) calls the compiled rule on its replica's KV use."""
    cfg = SchedulerConfig.of(max_num_seqs=8, max_num_batched_tokens=256, block_size=4, kv_blocks=40)
    cycle = StepCycle(0, Scheduler(cfg), _policy(2, 0.5, 0.2, 0.05), "ngram", array("d"))
    for i in range(6):
        cycle.scheduler.add_request(Request(i, i, 0.0, 40, 30), 0.0, 2)
    t, trace, got, decodes = 0.0, [], [], []
    gaps = (array("q"), array("d"))
    for _ in range(400):
        trace.append((t, cycle.scheduler.rp.meta[ks.M_KVNOTE] / 40))  # what the rule reads
        plan = cycle.plan(t)
        if plan.empty:
            break
        got.append(plan.k)
        decodes.append(bool(plan.decode))
        cycle.shape(plan, t)
        cycle.finish(plan, [0] * len(plan.decode), t, 0.01, t + 0.01, *gaps)
        t += 0.01
    want = hysteresis(trace[: len(got)], 2, 0.5, 0.2, 0.05)
    assert [g for g, d in zip(got, decodes, strict=True) if d] == [
        w for w, d in zip(want, decodes, strict=True) if d]
    assert 0 in [g for g, d in zip(got, decodes, strict=True) if d], "KV use never turned it off"
    assert max(u for _, u in trace) > 0.5


@pytest.mark.parametrize(("table", "field"), [
    ({"off_above": 0.4, "on_below": 0.6}, "on_below"),
    ({"off_above": 1.2, "on_below": 0.6}, "off_above"),
    ({"off_above": 0.8, "on_below": 0.0}, "on_below"),
    ({"off_above": 0.8, "on_below": 0.5, "window_s": 0}, "window_s"),
])
def test_bad_thresholds_are_refused_naming_the_field(table, field) -> None:
    with pytest.raises(FieldError) as e:
        Candidate("c", proposer="ngram", policy="kv_fallback", k=2, kv_fallback=_kvcfg(table))
    assert field in str(e.value)


def _kvcfg(table):
    return KvFallbackConfig(**table)


def test_the_candidate_builds_its_policy_and_needs_its_table() -> None:
    c = Candidate("c", proposer="ngram", policy="kv_fallback", k=2,
                  kv_fallback=_kvcfg({"off_above": 0.9, "on_below": 0.6, "window_s": 2.0}))
    p = policy_from_candidate(c)
    assert (p.name, p.k, p.kv_off_above, p.kv_on_below, p.window_s) == ("kv_fallback", 2, 0.9, 0.6, 2.0)
    with pytest.raises(FieldError, match="kv_fallback"):
        Candidate("c", proposer="ngram", policy="kv_fallback", k=2)
    with pytest.raises(ValueError, match="kv_on_below"):
        SpeculationPolicy("kv_fallback", k=2, kv_off_above=0.5, kv_on_below=0.5, window_s=1.0)
    with pytest.raises(ValueError, match="policy_k"):
        p.k_for(PolicyState(), 1)
