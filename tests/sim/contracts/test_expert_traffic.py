"""Routed-expert traffic (sim/contracts/expert_traffic.py) and the bandwidth floor built on it."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.expert_traffic import ExpertTraffic, expert_coverage
from sim.contracts.profile import Profile
from sim.contracts.synthetic import synthetic_profile_dict
from sim.contracts.timing_sanity import floor_grid, profile_floor

shapes = st.integers(2, 512).flatmap(lambda e: st.tuples(st.just(e), st.integers(1, e)))


@given(shapes, st.integers(1, 4096))
def test_distinct_experts_grow_concavely_from_top_k_at_one_token_towards_all(shape, t) -> None:
    e, k = shape
    c0, c1, c2 = (expert_coverage(e, k, x) for x in (t - 1, t, t + 1))
    assert expert_coverage(e, k, 1) == np.float64(k) or abs(expert_coverage(e, k, 1) - k) < 1e-9
    assert c1 >= c0 - 1e-9 and c2 >= c1 - 1e-9  # increasing
    assert (c2 - c1) <= (c1 - c0) + 1e-9  # concave: each token adds no more than the one before
    assert c1 <= min(e, k * t) + 1e-9  # never more than all experts or all routings
    assert expert_coverage(e, k, 0) == 0.0


@given(shapes)
def test_distinct_experts_tend_to_all_experts(shape) -> None:
    e, k = shape
    assert abs(expert_coverage(e, k, 10**7) - e) < 1e-6 * e


def test_coverage_is_vectorised_as_the_floor_grids_need() -> None:
    t = np.array([[1, 4], [16, 64]])
    out = expert_coverage(128, 4, t)
    assert out.shape == t.shape and np.allclose(out, [[expert_coverage(128, 4, int(x)) for x in r] for r in t])


def _moe_profile(bandwidth: float = 4.8e12) -> Profile:
    d = synthetic_profile_dict()
    arch = d["target"]["architecture"]
    arch["moe"] = {"num_experts": 64, "experts_per_token": 4, "expert_intermediate_size": arch["intermediate_size"],
                   "shared_intermediate_size": 0, "dense_layers": 0}
    d["timing"]["provenance"]["device"] = {"kind": "cuda", "name": "x", "memory_bandwidth_bytes_per_s": bandwidth}
    return Profile.from_dict(json.loads(json.dumps(d)), "t")


def test_the_floor_of_a_moe_verify_is_a_decode_floor_plus_its_extra_experts() -> None:
    p = _moe_profile()
    floor, why = profile_floor(p)
    assert floor is not None and floor.experts is not None, why
    grid = p.timing.target_forward
    fl = floor_grid("target_forward", grid, floor)
    named = dict(zip(grid.axis_names, range(3), strict=True))
    fl = np.moveaxis(fl, [named["batch"], named["tokens_per_seq"], named["context"]], [0, 1, 2])
    batch, spr = grid.axes[named["batch"]], grid.axes[named["tokens_per_seq"]]
    ex = floor.experts
    for i, b in enumerate(batch):
        for j, s in enumerate(spr):
            extra = (ex.bytes(b * s) - ex.bytes(b)) / floor.bandwidth
            assert np.allclose(fl[i, j] - fl[i, 0], extra, rtol=1e-9, atol=1e-15), (b, s)
    assert (fl[:, 1:] > fl[:, :-1]).all()  # every extra verified token touches some new expert


def test_a_dense_profile_floor_does_not_depend_on_tokens_per_row() -> None:
    d = synthetic_profile_dict()
    d["timing"]["provenance"]["device"] = {"kind": "cuda", "name": "x", "memory_bandwidth_bytes_per_s": 1e12}
    p = Profile.from_dict(json.loads(json.dumps(d)), "t")
    floor, _ = profile_floor(p)
    assert floor is not None and floor.experts is None
    grid = p.timing.target_forward
    fl = floor_grid("target_forward", grid, floor)
    s_ax = grid.axis_names.index("tokens_per_seq")
    assert np.allclose(np.diff(fl, axis=s_ax), 0.0)


@given(st.floats(1, 1e4), st.floats(0, 1e4))
def test_extra_seconds_are_the_bytes_of_the_experts_beyond_the_base(t, more) -> None:
    tr = ExpertTraffic(128, 4, 36, 13e6)
    got = tr.extra_seconds(t + more, t, 1e12)
    assert got >= 0 and abs(got - (tr.bytes(t + more) - tr.bytes(t)) / 1e12) < 1e-12
    assert tr.extra_seconds(t, t + more, 1e12) == 0.0


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 64).flatmap(lambda e: st.tuples(st.just(e), st.integers(1, e))), st.integers(1, 40),
       st.integers(0, 2**32 - 1))
def test_the_count_is_the_mean_of_uniform_routing_sampled(shape, t, seed) -> None:
    """Each of t tokens picks k distinct experts of E uniformly: the sampled mean of distinct
    experts matches E*(1-(1-k/E)^t) within four standard errors."""
    e, k = shape
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    trials = 2000
    picks = np.argsort(rng.random((trials, t, e)), axis=2)[:, :, :k]  # k distinct experts per token
    touched = np.zeros((trials, e), dtype=bool)
    np.put_along_axis(touched, picks.reshape(trials, -1), True, axis=1)
    distinct = touched.sum(axis=1)
    se = distinct.std(ddof=1) / np.sqrt(trials)
    assert abs(distinct.mean() - expert_coverage(e, k, t)) <= 4 * se + 2e-3 * e  # slack: a rare miss unsampled
