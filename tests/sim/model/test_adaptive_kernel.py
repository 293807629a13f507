"""The adaptive policy compiled (``policy_kernels.observe``/``policy_k``, its window in its policy
row) against its Python form (``PolicyState``, the SimPy driver's and the serving loop's): the
same sums to the bit, the same switches, its ring grown from Python without losing a step; and
whole fleets run in the fleet kernel equal to SimPy's one event per step, switching on and off."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.fleet_config import RestartConfig
from sim.contracts.synthetic import synthetic_profile
from sim.model import fleet_arrays, timer_packing
from sim.model.drivers import engine, routed_fleet
from sim.model.drivers.engine import Fleet, FleetSpec
from sim.model.kernels import policy_kernels as pk
from sim.model.speculation import PolicyState, SpeculationPolicy
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import ProfileStepTimer
from sim.results.records import itl_frame, requests_frame, steps_frame

steps_st = st.lists(st.tuples(st.floats(0.0, 0.5), st.floats(1e-4, 0.3), st.integers(0, 12)),
                    min_size=1, max_size=400)
"""Finished steps: (idle gap before it, duration, decode batch)."""


def _policy(on_below: float, off_above: float, window_s: float) -> SpeculationPolicy:
    return SpeculationPolicy("adaptive", k=3, on_below_batch=on_below, off_above_batch=off_above,
                             window_s=window_s)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps_st, st.floats(0.0, 6.0), st.floats(0.1, 6.0), st.sampled_from([0.05, 0.5, 2.0, 30.0]))
def test_compiled_window_matches_policy_state_step_by_step(steps, on_below, gap, window_s) -> None:
    """After every step: the same window sums (bit for bit: added and taken away in the same
    order), the same steps in the window, the same on/off and ``k``; a full ring doubled by
    ``grown`` keeps every step in order."""
    policy = _policy(on_below, on_below + gap, window_s)
    state = PolicyState()
    pol = pk.policy_array(policy)[None, :]
    t = 0.0
    grew = 0
    for idle, d, b in steps:
        if not pk.has_room(pol[0]):
            pol = pk.grown(pol)
            grew += 1
        t = t + idle + d
        policy.observe(state, t, d, b)
        pk.observe(pol[0], t, d, b)
        row = pol[0]
        assert (row[pk.P_AD_WSUM], row[pk.P_AD_DSUM]) == (state.weighted_sum, state.duration_sum)
        assert int(row[pk.P_AD_N]) == len(state.window)
        assert (row[pk.P_AD_ON] != 0.0) == state.on
    cap = (pol.shape[1] - pk.P_AD_RING) // 3
    assert cap == pk.RING << grew
    ring = pol[0, pk.P_AD_RING:].reshape(cap, 3)
    head, n = int(pol[0, pk.P_AD_HEAD]), int(pol[0, pk.P_AD_N])
    window = [tuple(ring[(head + i) % cap]) for i in range(n)]
    assert window == [(e, d, float(b)) for e, d, b in state.window]


def test_no_switch_before_one_full_window() -> None:
    """A busy first window leaves speculation on until ``window_s`` has passed since the first
    step started, then turns it off (the minimum observation window)."""
    pol = pk.policy_array(_policy(1.0, 2.0, 1.0))
    t = 0.0
    while t + 0.1 < 0.95:
        t += 0.1
        pk.observe(pol, t, 0.1, 8)
        assert pol[pk.P_AD_ON] == 1.0
    pk.observe(pol, 1.0, 0.05, 8)
    assert pol[pk.P_AD_ON] == 0.0


@pytest.mark.parametrize("batch,on_below,off_above,starts_on,ends_on", [
    (4, 1.0, 4.0, True, True), (5, 1.0, 4.0, True, False),
    (2, 2.0, 4.0, False, False), (1, 2.0, 4.0, False, True)])
def test_a_mean_at_a_threshold_does_not_switch(batch, on_below, off_above, starts_on, ends_on) -> None:
    """Hysteresis is strict: off only above ``off_above_batch``, on only below
    ``on_below_batch`` (steps of 0.25 s: the windowed mean is exactly the batch)."""
    policy = _policy(on_below, off_above, 1.0)
    pol, state = pk.policy_array(policy), PolicyState()
    pol[pk.P_AD_ON] = 1.0 if starts_on else 0.0
    state.on = starts_on
    for i in range(1, 13):
        pk.observe(pol, 0.25 * i, 0.25, batch)
        policy.observe(state, 0.25 * i, 0.25, batch)
    assert pol[pk.P_AD_WSUM] / pol[pk.P_AD_DSUM] == batch
    assert (pol[pk.P_AD_ON] != 0.0, state.on) == (ends_on, ends_on)


def _fleet_frames(spec: FleetSpec, reqs: list[Request], python: bool):
    fleet = Fleet(spec, ProfileStepTimer(synthetic_profile()), np.random.default_rng(0))
    built, grew = [], []
    with pytest.MonkeyPatch.context() as mp:
        # uniforms a few at a time: many steps are finished after a refill (their own path)
        mp.setattr(fleet_arrays, "UNIFORM_CHUNK", 16)
        real_grown = routed_fleet.grown
        mp.setattr(routed_fleet, "grown", lambda pol: grew.append(real_grown(pol) is not pol) or real_grown(pol))
        if python:  # the timer not packed: one SimPy event per step, the window in PolicyState
            mp.setattr(timer_packing, "pack", lambda timer, proposer: None)
        real = engine.build_replicas
        mp.setattr(engine, "build_replicas", lambda *a: built.append(real(*a)) or built[-1])
        run = fleet.run([Request(r.idx, r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.segment,
                                 r.timeout_s, list(r.negrates)) for r in reqs])
    kind = type(built[0][0]).__name__, any(grew)
    return kind, (requests_frame(run, "c", 0, 0.0), steps_frame(run, "c", 0), itl_frame(run, "c", 0),
                  run.queue_log)


@pytest.mark.parametrize("replicas,restart", [(1, None), (2, None), (3, "same"), (2, "baseline")])
def test_adaptive_fleet_runs_in_the_kernel_equal_to_simpy(replicas, restart) -> None:
    """Load that rises past ``off_above_batch`` then falls below ``on_below_batch``: the fleet
    kernel (its ring grown from 64 steps) gives SimPy's frames bit for bit, speculation switched
    off and back on; a restart starts the window afresh (or falls back to the baseline)."""
    rng = np.random.default_rng(5)
    gaps = np.concatenate([rng.exponential(0.2, 40), rng.exponential(0.01, 300), rng.exponential(0.3, 60)])
    reqs = [Request(i, i, float(t), int(rng.integers(4, 60)), int(rng.integers(5, 40)), "s", None,
                    [-0.7, -0.5, -0.3]) for i, t in enumerate(np.cumsum(gaps))]
    cfg = SchedulerConfig.of(max_num_seqs=8, max_num_batched_tokens=128, block_size=4, kv_blocks=800)
    rs = None if restart is None else RestartConfig(at_s=4.0, replica=replicas - 1, cold_start_s=0.5,
                                                    on_restart="reroute", fallback=restart)
    spec = FleetSpec(cfg, _policy(1.5, 3.0, 2.0), proposer="ngram", replicas=replicas, restart=rs)
    kind_c, compiled = _fleet_frames(spec, reqs, python=False)
    kind_p, python = _fleet_frames(spec, reqs, python=True)
    assert (kind_c, kind_p) == (("RoutedReplica", True), ("CompiledReplica", False))  # its ring grew
    for a, b in zip(compiled, python, strict=True):
        assert a.equals(b) if hasattr(a, "equals") else a == b
    decoding = compiled[1].filter((pl.col("replica") == 0) & (pl.col("decode_seqs") > 0))
    spec_on = decoding["k"].to_numpy() > 0
    first_off = int(np.argmin(spec_on))
    assert spec_on[0] and first_off > 0, "speculation never switched off"
    assert spec_on[first_off:].any(), "speculation never came back on"
