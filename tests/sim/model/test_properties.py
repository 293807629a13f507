"""Hypothesis properties of the engine over random small fleets and workloads.

KV use never exceeds capacity (and every block comes back), every arrival ends in exactly one
outcome, replicas never run two steps at once, utilisation stays within [0, 1], and completed
requests got exactly the tokens they asked for. And the planner's drivers — the kernels that
take the arrivals (the fleet kernel: routed, or a lone replica's inline) and run the steps back to
back, and SimPy's one event per step (the reference semantics), priced in Python — give the same
frames, bit for bit, on every such fleet. (The rules
themselves are compared step by step with the oracle in ``test_planner_oracle.py``.)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.fleet_config import RestartConfig
from sim.contracts.synthetic import synthetic_profile
from sim.model import timer_packing
from sim.model.drivers.engine import Fleet, FleetSpec
from sim.model.kernels import kernel_state as ks
from sim.model.speculation import OFF, SpeculationPolicy
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import ProfileStepTimer, StepShape
from sim.results.records import itl_frame, requests_frame, steps_frame
from sim.results.time_weighted import utilization


def shape_timer(shape: StepShape) -> float:
    """Deterministic step time growing with the work in the step."""
    return 0.01 + 0.002 * shape.decode_seqs * (1 + shape.k) + 0.0005 * shape.prefill_tokens


@st.composite
def fleets(draw):
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.floats(0.0, 0.2), min_size=n, max_size=n))
    times = np.cumsum(gaps).tolist()
    k = draw(st.integers(0, 3))
    timeout = draw(st.one_of(st.none(), st.floats(0.05, 3.0)))
    reqs = []
    for i, t in enumerate(times):
        rates = sorted(draw(st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3)), reverse=True)
        reqs.append(
            Request(
                i, i, t, draw(st.integers(1, 40)), draw(st.integers(1, 25)), "s",
                timeout, [-r for r in rates],
            )
        )
    block_size = draw(st.integers(1, 8))
    # KV sized around the largest request (a few too-big ones get rejected) so that several
    # running requests compete for blocks and preemption happens
    longest = max(r.prompt_tokens + r.output_tokens for r in reqs) + k
    kv_blocks = max(1, -(-longest // block_size) * draw(st.integers(1, 3)) + draw(st.integers(-2, 4)))
    cfg = SchedulerConfig.of(
        max_num_seqs=draw(st.integers(1, 6)),
        max_num_batched_tokens=draw(st.integers(4, 48)),
        block_size=block_size,
        kv_blocks=kv_blocks,
        chunked_prefill=draw(st.booleans()),
        queue_limit=draw(st.one_of(st.none(), st.integers(0, 12))),
        max_queue_time_s=draw(st.one_of(st.none(), st.floats(0.05, 2.0))),
        prefix_caching=draw(st.booleans()),
    )
    if cfg.prefix_caching:  # prompts share prefixes: a leading part of one of two chains, or none
        chain = 40 // block_size + 1
        for r in reqs:
            group = draw(st.sampled_from([None, 0, 1]))
            if group is not None:
                r.prefix = [group * chain + j for j in range(draw(st.integers(0, r.prompt_tokens // block_size)))]
    replicas = draw(st.integers(1, 3))
    restart = None
    if draw(st.booleans()):
        restart = RestartConfig(
            at_s=draw(st.floats(0.0, 3.0)),
            replica=draw(st.integers(0, replicas - 1)),
            cold_start_s=draw(st.floats(0.0, 2.0)),
            on_restart=draw(st.sampled_from(["reroute", "drop"])),
            fallback=draw(st.sampled_from(["baseline", "same"])),
        )
    policy = OFF
    if k:  # every policy the kernels run (a kv_fallback's or adaptive's state: per replica, per restart)
        policy = draw(st.sampled_from([
            SpeculationPolicy("fixed", k=k), SpeculationPolicy("off_above_batch", k=k, max_batch=2),
            SpeculationPolicy("k_by_batch", k_by_batch=((1, k), (3, 1))),
            SpeculationPolicy("kv_fallback", k=k, kv_off_above=0.5, kv_on_below=0.2,
                              window_s=draw(st.sampled_from([0.02, 0.1, 1.0]))),
            # thresholds a batch of 1-3 crosses, windows of one step to ~50 (test_adaptive_kernel
            # grows its ring)
            _adaptive(k, draw(st.sampled_from([0.5, 1.0, 1.5])), draw(st.sampled_from([0.1, 0.5, 1.5])),
                      draw(st.sampled_from([0.01, 0.1, 0.5])))]))
    spec = FleetSpec(
        cfg, policy, proposer="p" if k else None, replicas=replicas,
        routing=draw(st.sampled_from(["round_robin", "least_outstanding"])), restart=restart,
    )
    return spec, reqs


def _adaptive(k: int, on_below: float, gap: float, window_s: float) -> SpeculationPolicy:
    return SpeculationPolicy("adaptive", k=k, on_below_batch=on_below, off_above_batch=on_below + gap,
                             window_s=window_s)


def _end_state(rep) -> tuple[int, int, int]:
    """(free KV blocks, running, waiting) of a replica at the end of a run."""
    m = rep.rp.meta
    return int(m[ks.M_FREE]), int(m[ks.M_NRUN]), int(m[ks.M_NWAIT])


def _copy(reqs: list[Request]) -> list[Request]:
    out = [Request(r.idx, r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.segment,
                   r.timeout_s, list(r.negrates)) for r in reqs]
    for a, r in zip(out, reqs, strict=True):
        a.prefix = r.prefix
    return out


_PROFILE = synthetic_profile()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.floats(0.0, 1.0), st.sampled_from(["shape", "paged", "padded"]),
       st.one_of(st.none(), st.floats(0.1, 4.0)), st.booleans())
def test_drivers_agree(case, proposal, timing, stop_s, write_back) -> None:
    """Same fleet, same requests, same seed: the same request, step and ITL frames and queue
    log, whether the replicas price steps compiled (a profile's timer: the fleet kernel, which
    takes the arrivals) or in Python (one SimPy event per step), drained or stopped at ``stop_s``,
    restarted or not (at 0 s too), its records written back into the requests or read from its
    arrays."""
    spec, reqs = case
    spec = replace(spec, proposer="ngram" if spec.proposer else None)
    if stop_s is not None:
        spec = replace(spec, drain=False, duration_s=stop_s)
    frames = []
    for engine in ("compiled", "python"):
        run_reqs = _copy(reqs)
        for r in run_reqs:
            r.proposal = proposal  # n-gram style: some steps have no proposal
        timer = shape_timer if timing == "shape" else ProfileStepTimer(_PROFILE, kv_layout=timing)
        fleet = Fleet(spec, timer, np.random.default_rng(0))
        with pytest.MonkeyPatch.context() as mp:
            if engine == "python":  # the timer not packed: each step priced in Python
                mp.setattr(timer_packing, "pack", lambda timer, proposer: None)
            run = fleet.run(run_reqs, write_back=write_back or engine == "python")
        assert (run.columns is None) == (write_back or engine == "python")
        frames.append((requests_frame(run, "c", 0, 0.0), steps_frame(run, "c", 0),
                       itl_frame(run, "c", 0), run.queue_log))
    for a, b in zip(*frames, strict=True):
        if isinstance(a, pl.DataFrame):
            assert a.equals(b), (a, b)
        else:
            assert a == b


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_engine_invariants(case) -> None:
    spec, reqs = case
    fleet = Fleet(spec, shape_timer, np.random.default_rng(0))
    run = fleet.run(reqs)
    req_df = requests_frame(run, "c", 0, 0.0)
    steps = steps_frame(run, "c", 0)

    # every arrival ends in exactly one outcome, once
    assert req_df["outcome"].is_in(["completed", "rejected", "timed_out"]).all()
    assert req_df["finish_s"].is_not_null().all()
    assert (req_df["finish_s"] >= req_df["arrival_s"] - 1e-12).all()

    # KV never over capacity during any step, and every block is returned at the end
    assert (steps["kv_used_blocks"] <= steps["kv_total_blocks"]).all()
    assert (steps["kv_used_blocks"] >= 0).all()
    for rep in fleet.replicas:
        assert _end_state(rep) == (spec.scheduler.kv_blocks, 0, 0)

    # a replica runs one step at a time; utilisation within [0, 1]
    for (_,), g in steps.group_by(["replica"]):
        s = g.sort("t_start_s")
        ends = (s["t_start_s"] + s["duration_s"]).to_numpy()[:-1]
        assert (s["t_start_s"].to_numpy()[1:] >= ends - 1e-9).all()
    end = max(run.end_s, 1e-9)
    for u in utilization(steps, 0.0, end, spec.replicas):
        assert 0.0 <= u <= 1.0 + 1e-9

    # token accounting: budget respected, drafts bounded, completions complete
    assert ((steps["prefill_tokens"] + steps["decode_seqs"] * (1 + steps["k"]))
            <= spec.scheduler.max_num_batched_tokens).all() or not spec.scheduler.chunked_prefill
    assert (steps["accepted_tokens"] <= steps["draft_tokens"]).all()
    done = req_df.filter(pl.col("outcome") == "completed")
    assert (done["generated_tokens"] == done["output_tokens"]).all()
    assert (done["first_token_s"] <= done["finish_s"]).all()
    assert (done["scheduled_s"] >= done["arrival_s"]).all()
    assert (req_df["generated_tokens"] <= req_df["output_tokens"]).all()


@pytest.mark.parametrize("replicas", [1, 2])
def test_compiled_logs_grow_and_records_stay_the_same(replicas: int) -> None:
    """A run long enough that the queue log outgrows its 4,096 entries and the step log its 2
    rows a request (the ITL log is sized for the run's output tokens, 100k here): the replicas
    grow each log they stopped for and give the frames and queue log of a run whose logs were
    large enough from the start."""
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.exponential(0.04 / replicas, 2600)).tolist()
    reqs = [Request(i, i, t, int(rng.integers(4, 40)), int(rng.integers(20, 60)), "s", 600.0, [-0.3, -0.1])
            for i, t in enumerate(times)]
    cfg = SchedulerConfig.of(max_num_seqs=8, max_num_batched_tokens=64, block_size=4, kv_blocks=400,
                          queue_limit=None, max_queue_time_s=300.0)
    spec = FleetSpec(cfg, SpeculationPolicy("fixed", k=2), proposer="ngram", replicas=replicas)
    frames = []
    new_logs, new_replica = ks.new_logs, ks.new_replica
    for engine in ("growing", "large"):
        fleet = Fleet(spec, ProfileStepTimer(_PROFILE), np.random.default_rng(0))
        with pytest.MonkeyPatch.context() as mp:
            if engine == "large":
                mp.setattr(ks, "new_logs", lambda gaps, steps: new_logs(gaps, 64 * steps))
                mp.setattr(ks, "new_replica", lambda *a, **kw: new_replica(*a, **kw)._replace(
                    qlog=np.zeros(1 << 16)))
            run = fleet.run(_copy(reqs))
        frames.append((requests_frame(run, "c", 0, 0.0), steps_frame(run, "c", 0), itl_frame(run, "c", 0),
                       run.queue_log))
    a, b = frames
    assert len(a[3]) > 4096 and a[1].height > 2 * len(reqs)  # both grew
    for x, y in zip(a, b, strict=True):
        assert x.equals(y) if isinstance(x, pl.DataFrame) else x == y


@pytest.mark.parametrize("routing", ["round_robin", "least_outstanding"])
def test_replicas_whose_steps_end_together_draw_in_simpy_order(routing: str) -> None:
    """Requests in identical pairs arriving together on two replicas: both replicas' steps end
    at the same instants, so which one draws its accepted drafts first (the uniforms are one
    stream) is SimPy's tie order; the fleet routed in the kernel must keep it."""
    reqs = []
    for j in range(30):
        for _ in range(2):
            reqs.append(Request(len(reqs), len(reqs), 0.37 * j, 24 + j % 5, 12 + j % 7, "s", None, [-0.6, -0.3]))
    cfg = SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, kv_blocks=200)
    spec = FleetSpec(cfg, SpeculationPolicy("fixed", k=2), proposer="ngram", replicas=2, routing=routing)
    frames = []
    for engine in ("compiled", "python"):
        fleet = Fleet(spec, ProfileStepTimer(_PROFILE), np.random.default_rng(0))
        with pytest.MonkeyPatch.context() as mp:
            if engine == "python":
                mp.setattr(timer_packing, "pack", lambda timer, proposer: None)
            run = fleet.run(_copy(reqs))
        frames.append((requests_frame(run, "c", 0, 0.0), steps_frame(run, "c", 0), itl_frame(run, "c", 0)))
    steps = frames[0][1]
    ends = steps["t_start_s"] + steps["duration_s"]
    assert ends.is_duplicated().any()  # the ties this test is about happen
    for a, b in zip(*frames, strict=True):
        assert a.equals(b)
