"""Closed-loop clients in the compiled fleet kernel (``client_kernels``) against the SimPy
reference driver (``ClientReplica``): the same records, bit for bit, over generated client
settings; and where the kernel does not take the clients, SimPy does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.fleet_config import RestartConfig
from sim.contracts.synthetic import synthetic_profile
from sim.model.drivers.clients import ClientFleet, PoolExhausted
from sim.model.drivers.engine import Fleet, FleetSpec
from sim.model.drivers.routed_fleet import RoutedReplica
from sim.model.speculation import OFF, SpeculationPolicy
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import FixedStepTimer, ProfileStepTimer
from sim.results.records import itl_frame, requests_frame, steps_frame

_PROFILE = synthetic_profile()
_POOL = 400


@st.composite
def client_fleets(draw):
    """A fleet, its clients and a pool: think times fixed, per request or none; an overhead
    outside the engine or none; a client timeout or none; limits that queue, refuse on arrival
    (a prompt that never fits: the client is held to the next step), expire and preempt; prefix
    caching; a restart; drained or stopped; every policy the kernels run."""
    k = draw(st.integers(0, 3))
    # binary fractions as well as decimals: with the fixed step timer (1/32 s) they tie exactly
    # with steps' ends, which is where SimPy's order matters
    timeout = draw(st.sampled_from([None, 0.02, 0.05, 0.3, 0.125, 0.25]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    reqs = []
    for i in range(_POOL):
        rates = sorted(rng.uniform(0, 1, 3).tolist(), reverse=True)
        reqs.append(Request(i, i, 0.0, int(rng.integers(1, 60)), int(rng.integers(1, 25)), "s", timeout,
                            [-r for r in rates]))
    block_size = draw(st.integers(1, 8))
    cfg = SchedulerConfig.of(
        max_num_seqs=draw(st.integers(1, 6)),
        max_num_batched_tokens=draw(st.integers(8, 64)),
        block_size=block_size,
        kv_blocks=max(1, (60 + 25) // block_size * draw(st.integers(1, 3)) + draw(st.integers(-12, 4))),
        chunked_prefill=draw(st.booleans()),
        queue_limit=draw(st.one_of(st.none(), st.integers(0, 6))),
        max_queue_time_s=draw(st.one_of(st.none(), st.sampled_from([0.01, 0.05, 0.2, 0.0625, 0.125]))),
        prefix_caching=draw(st.booleans()),
    )
    if cfg.prefix_caching:  # prompts share a leading part of one of two chains, or none
        chain = 60 // block_size + 1
        for r in reqs:
            group = int(rng.integers(-1, 2))
            if group >= 0:
                r.prefix = [group * chain + j for j in range(int(rng.integers(0, r.prompt_tokens // block_size + 1)))]
    replicas = draw(st.integers(1, 3))
    restart = None
    if draw(st.booleans()):
        restart = RestartConfig(at_s=draw(st.sampled_from([0.01, 0.05, 0.1, 0.3, 0.125])),
                                replica=draw(st.integers(0, replicas - 1)),
                                cold_start_s=draw(st.sampled_from([0.0, 0.02, 0.2, 0.0625])),
                                on_restart=draw(st.sampled_from(["reroute", "drop"])),
                                fallback=draw(st.sampled_from(["baseline", "same"])))
    policy = OFF
    if k:
        policy = draw(st.sampled_from([SpeculationPolicy("fixed", k=k),
                                       SpeculationPolicy("off_above_batch", k=k, max_batch=2),
                                       SpeculationPolicy("k_by_batch", k_by_batch=((1, k), (3, 1))),
                                       SpeculationPolicy("kv_fallback", k=k, kv_off_above=0.5, kv_on_below=0.2,
                                                         window_s=0.05),
                                       # thresholds a batch of 1-3 crosses (its window: the kernel's ring)
                                       SpeculationPolicy("adaptive", k=k, on_below_batch=1.0, off_above_batch=1.5,
                                                         window_s=0.05)]))
    stop = draw(st.sampled_from([None, 0.25, 0.5]))
    spec = FleetSpec(cfg, policy, proposer="ngram" if k else None, replicas=replicas,
                     routing=draw(st.sampled_from(["round_robin", "least_outstanding"])), restart=restart,
                     drain=stop is None, duration_s=stop)
    think = draw(st.sampled_from([0.0, 0.01, 0.03, 0.03125, "per_request"]))
    if think == "per_request":
        think = np.round(rng.exponential(0.02, _POOL) * 64) / 64
    over = draw(st.sampled_from([0.0, 0.0, 0.005, 0.02, 0.015625]))
    clients = draw(st.integers(1, 12))
    return spec, reqs, clients, think, over, draw(st.sampled_from([0.2, 0.4]))


def _copy(reqs: list[Request]) -> list[Request]:
    out = [Request(r.idx, r.id, 0.0, r.prompt_tokens, r.output_tokens, r.segment, r.timeout_s,
                   list(r.negrates)) for r in reqs]
    for a, r in zip(out, reqs, strict=True):
        a.prefix = r.prefix
    return out


def _run(case, kernel: bool, timing: str):
    spec, reqs, clients, think, over, stop_s = case
    timer = FixedStepTimer(1 / 32) if timing == "fixed" else ProfileStepTimer(_PROFILE, kv_layout=timing)
    fleet = ClientFleet(spec, timer, np.random.default_rng(0), clients, think, stop_s, over, kernel=kernel)
    run = fleet.run(_copy(reqs), write_back=False)
    in_kernel = isinstance(fleet.replicas[0], RoutedReplica)
    return in_kernel, (requests_frame(run, "c", 0, 0.0), steps_frame(run, "c", 0), itl_frame(run, "c", 0),
                       run.queue_log)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(client_fleets(), st.sampled_from(["paged", "padded", "fixed"]))
def test_clients_in_the_kernel_give_simpys_records(case, timing) -> None:
    """The fleet kernel's clients (arrivals made in compiled code at each end + think time, each
    overhead's end, each timeout, held refusals resent after the next step, in SimPy's event
    order) and SimPy's ``ClientReplica`` give the same request, step and ITL frames and queue log."""
    try:
        in_kernel, compiled = _run(case, True, timing)
    except PoolExhausted as exc:  # both drivers must run out at the same instant
        with pytest.raises(PoolExhausted) as ref:
            _run(case, False, timing)
        assert ref.value.at_s == exc.at_s
        return
    assert in_kernel
    ref_in_kernel, reference = _run(case, False, timing)
    assert not ref_in_kernel
    for a, b in zip(compiled, reference, strict=True):
        if isinstance(b, type(compiled[0])):
            assert a.equals(b), (a, b)
        else:
            assert a == b


def test_pool_running_out_in_the_kernel_names_the_instant() -> None:
    """A pool the clients use up before the stop is signalled with the instant they did, as SimPy
    signals it (the pool is then grown and the run repeated)."""
    cfg = SchedulerConfig.of(max_num_seqs=8, max_num_batched_tokens=256, block_size=16, kv_blocks=2_000)
    got = []
    for kernel in (True, False):
        reqs = [Request(i, i, 0.0, 16, 4) for i in range(30)]
        fleet = ClientFleet(FleetSpec(cfg), ProfileStepTimer(_PROFILE), None, 4, 0.0, 10.0, kernel=kernel)
        with pytest.raises(PoolExhausted) as exc:
            fleet.run(reqs, write_back=False)
        assert isinstance(fleet.replicas[0], RoutedReplica) == kernel
        got.append(exc.value.at_s)
    assert 0 < got[0] == got[1] < 10.0


@pytest.mark.parametrize("what", ["per_request_overhead", "mixed_timeouts", "restart_at_0", "python_timer"])
def test_clients_the_kernel_cannot_order_stay_on_simpy(what: str) -> None:
    """Per-request overheads (requests may reach the engine out of the order sent), timeouts
    that differ by request, a restart at 0 s and a timer only Python runs step through SimPy."""
    cfg = SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=64, block_size=16, kv_blocks=500)
    reqs = [Request(i, i, 0.0, 8 + i % 30, 3 + i % 9, timeout_s=0.3 if what != "mixed_timeouts" else 0.1 + i % 2)
            for i in range(3000)]
    spec = FleetSpec(cfg, replicas=2,
                     restart=RestartConfig(at_s=0.0, cold_start_s=0.1) if what == "restart_at_0" else None)
    over = np.full(len(reqs), 0.01) if what == "per_request_overhead" else 0.0
    timer = (lambda shape: 0.01) if what == "python_timer" else ProfileStepTimer(_PROFILE)
    fleet = ClientFleet(spec, timer, None, 3, 0.01, 0.3, over)
    run = fleet.run(reqs, write_back=False)
    assert not isinstance(fleet.replicas[0], RoutedReplica)
    assert len(run.requests) > 3


def test_an_open_loop_fleet_in_the_kernel_has_no_clients() -> None:
    """An open-loop fleet routed in the kernel serves exactly its own arrivals: the clients'
    hooks are off (no request made, none held, no pool to run out of)."""
    cfg = SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=64, block_size=16, kv_blocks=500)
    reqs = [Request(i, i, 0.02 * i, 16, 4) for i in range(40)]
    fleet = Fleet(FleetSpec(cfg, replicas=2), ProfileStepTimer(_PROFILE))
    rf = requests_frame(fleet.run(reqs, write_back=False), "c", 0, 0.0)
    assert isinstance(fleet.replicas[0], RoutedReplica)
    assert rf["arrival_s"].to_list() == [0.02 * i for i in range(40)]
    assert (rf["outcome"] == "completed").all()


@pytest.mark.parametrize("timeout", [1 / 32, 1 / 16, 3 / 32])
def test_an_expiry_at_a_steps_end_lets_held_clients_send_as_simpy_does(timeout: float) -> None:
    """Clients refused on arrival (a full queue, no think time) are held to the next look at the
    requests; an expiry SimPy runs (a live timeout due exactly at a step's end, 1/32 s steps) is
    such a look, so the kernel must see it as Python's deadline heap does."""
    cfg = SchedulerConfig.of(max_num_seqs=1, max_num_batched_tokens=64, block_size=16, kv_blocks=100,
                             queue_limit=1)
    frames = []
    for kernel in (True, False):
        reqs = [Request(i, i, 0.0, 8, 3, timeout_s=timeout) for i in range(200)]
        fleet = ClientFleet(FleetSpec(cfg), FixedStepTimer(1 / 32), None, 3, 0.0, 0.5, kernel=kernel)
        frames.append(requests_frame(fleet.run(reqs, write_back=False), "c", 0, 0.0))
        assert isinstance(fleet.replicas[0], RoutedReplica) == kernel
    assert frames[0]["outcome"].is_in(["rejected"]).sum() > 10
    assert frames[0].equals(frames[1])
