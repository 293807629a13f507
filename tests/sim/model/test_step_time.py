"""Step-time composition from a profile, and the simple timers for queueing-theory tests."""

from __future__ import annotations

import numpy as np
import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.synthetic import synthetic_profile, synthetic_profile_dict
from sim.model.step_time import FixedStepTimer, ProfileStepTimer, RandomServiceTimer, StepShape

P = dict(
    base_step_s=0.010,
    per_seq_s=0.0005,
    per_token_s=0.0002,
    per_context_token_s=1e-7,
    prefill_base_s=0.005,
    prefill_per_token_s=0.0001,
    prefill_per_context_token_s=1e-8,
    draft_base_s=0.0002,
    draft_per_token_s=0.00005,
    overhead_base_s=0.0003,
    overhead_per_seq_s=0.00002,
)


def fwd(b: int, s: int, c: float) -> float:
    return P["base_step_s"] + P["per_seq_s"] * b + P["per_token_s"] * b * s + P["per_context_token_s"] * b * c


def pre(n: int, c: float) -> float:
    return P["prefill_base_s"] + P["prefill_per_token_s"] * n + P["prefill_per_context_token_s"] * n * c


def draft(b: int, k: int) -> float:
    return P["draft_base_s"] + P["draft_per_token_s"] * b * k


def over(b: int) -> float:
    return P["overhead_base_s"] + P["overhead_per_seq_s"] * b


@pytest.fixture
def timer() -> ProfileStepTimer:
    return ProfileStepTimer(synthetic_profile(**P))


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (StepShape(1, 100.0, 0, None), fwd(1, 1, 100.0)),
        (StepShape(8, 1000.5, 0, None), fwd(8, 1, 1000.5)),
        (StepShape(8, 1000.5, 3, "ngram"), fwd(8, 4, 1000.5) + draft(8, 3) + over(8)),
        (StepShape(0, 0.0, 0, None, 300, 0.0), pre(300, 0.0)),
        (StepShape(0, 0.0, 4, "ngram", 300, 700.0), pre(300, 700.0)),  # k ignored without decodes
        (StepShape(5, 256.0, 2, "ngram", 64, 1024.0), fwd(5, 3, 256.0) + draft(5, 2) + over(5) + pre(64, 1024.0)),
        (StepShape(3, 10.0, 5, "ngram"), fwd(3, 6, 10.0) + draft(3, 5) + over(3)),
    ],
)
def test_profile_step_time_composes_the_documented_parts(
    timer: ProfileStepTimer, shape: StepShape, expected: float
) -> None:
    assert timer(shape) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("k", [0, 3])
def test_padded_kv_layout_charges_the_longest_row(k: int) -> None:
    """paged: a decode step costs the mean context; padded: every row attends over the longest."""
    prof = synthetic_profile(**P)
    shape = StepShape(6, 200.0, k, "ngram" if k else None, 0, 0.0, 900.0)
    paged, padded = ProfileStepTimer(prof), ProfileStepTimer(prof, kv_layout="padded")
    extra = (draft(6, k) + over(6)) if k else 0.0
    assert paged(shape) == pytest.approx(fwd(6, k + 1, 200.0) + extra, rel=1e-12)
    assert padded(shape) == pytest.approx(fwd(6, k + 1, 900.0) + extra, rel=1e-12)
    # a shape that does not know its longest row is timed at the mean either way
    unknown = StepShape(6, 200.0, k, "ngram" if k else None)
    assert padded(unknown) == paged(unknown)


def test_kv_layout_and_longest_context_are_checked() -> None:
    with pytest.raises(ValueError, match="kv_layout must be one of paged, padded"):
        ProfileStepTimer(synthetic_profile(**P), kv_layout="ragged")
    with pytest.raises(ValueError, match="below the mean"):
        StepShape(2, 300.0, 0, None, 0, 0.0, 100.0)
    with pytest.raises(ValueError, match="scale must be a finite number > 0"):
        ProfileStepTimer(synthetic_profile(**P), scale=0.0)


def test_scales_multiply_the_decode_and_the_prefill_part() -> None:
    prof = synthetic_profile(**P)
    shape = StepShape(5, 256.0, 2, "ngram", 64, 1024.0)
    dec, pre_ = fwd(5, 3, 256.0) + draft(5, 2) + over(5), pre(64, 1024.0)
    assert ProfileStepTimer(prof, scale=1.25)(shape) == pytest.approx(1.25 * (dec + pre_), rel=1e-12)
    assert ProfileStepTimer(prof, scale=1.25, prefill_scale=0.5)(shape) == pytest.approx(
        1.25 * dec + 0.5 * pre_, rel=1e-12)


def test_a_speed_timeline_scales_each_step_at_its_start_time() -> None:
    from sim.model.machine_speed import SpeedTimeline

    prof = synthetic_profile(**P)
    dec, pre_ = fwd(5, 3, 256.0) + draft(5, 2) + over(5), pre(64, 1024.0)
    speed = SpeedTimeline((0.0, 10.0), (1.0, 2.0), (0.0, 10.0), (1.0, 0.5))
    timer = ProfileStepTimer(prof, scale=1.1, speed=speed)
    for t, sd, sp in ((0.0, 1.0, 1.0), (5.0, 1.5, 0.75), (10.0, 2.0, 0.5), (60.0, 2.0, 0.5)):
        shape = StepShape(5, 256.0, 2, "ngram", 64, 1024.0, None, t)
        assert timer(shape) == pytest.approx(1.1 * (sd * dec + sp * pre_), rel=1e-12), t
    # without a timeline the start time changes nothing
    plain = ProfileStepTimer(prof)
    assert plain(StepShape(5, 256.0, 2, "ngram", 64, 1024.0, None, 0.0)) == plain(
        StepShape(5, 256.0, 2, "ngram", 64, 1024.0, None, 99.0))


def test_engine_steps_carry_their_start_time() -> None:
    """A time-varying timer needs each step's start: the engine passes its clock."""
    from sim.model.drivers.engine import Fleet, FleetSpec
    from sim.model.step_plan import Request, SchedulerConfig
    from sim.results.records import steps_frame

    seen: list[float] = []

    def timer(shape: StepShape) -> float:
        seen.append(shape.start_s)
        return 0.1

    reqs = [Request(i, i, t, 6, 3, "chat", None, None) for i, t in enumerate((0.0, 0.05, 1.0))]
    run = Fleet(FleetSpec(SchedulerConfig.of(max_num_seqs=2, max_num_batched_tokens=8, block_size=4,
                                          kv_blocks=100)), timer).run(reqs)
    starts = steps_frame(run, "c", 0)["t_start_s"].to_list()
    assert seen == pytest.approx(starts) and seen[0] == 0.0 and max(seen) >= 1.0


def test_speculation_costs_more_per_step_but_k0_is_plain_decode(timer: ProfileStepTimer) -> None:
    plain = timer(StepShape(4, 512.0, 0, None))
    spec = timer(StepShape(4, 512.0, 2, "ngram"))
    assert spec - plain == pytest.approx(fwd(4, 3, 512) - fwd(4, 1, 512) + draft(4, 2) + over(4))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(decode_seqs=0, decode_context=0.0, k=0, proposer=None), "must compute something"),
        (dict(decode_seqs=2, decode_context=5.0, k=2, proposer=None), "needs a proposer"),
        (dict(decode_seqs=-1, decode_context=5.0, k=0, proposer=None), ">= 0"),
        (dict(decode_seqs=1, decode_context=-5.0, k=0, proposer=None), ">= 0"),
    ],
)
def test_step_shape_refuses_impossible_steps(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StepShape(**kwargs)


def test_step_shape_is_frozen_and_slotted() -> None:
    s = StepShape(1, 1.0, 0, None)
    with pytest.raises(AttributeError):
        s.k = 3  # type: ignore[misc]
    assert not hasattr(s, "__dict__")


def test_unknown_proposer_is_a_specplan_error(timer: ProfileStepTimer) -> None:
    with pytest.raises(SpecplanError, match=r"timing\.proposers\.eagle: no draft/overhead timing.*timed proposers: ngram"):
        timer(StepShape(2, 10.0, 2, "eagle"))
    with pytest.raises(SpecplanError):
        timer.check_proposer("eagle")
    timer.check_proposer("ngram")


def test_extrapolation_counts_are_per_step_with_percentages(timer: ProfileStepTimer) -> None:
    for _ in range(8):
        timer(StepShape(4, 500.0, 2, "ngram"))
    timer(StepShape(100, 500.0, 2, "ngram"))  # batch above 64 in forward, draft and overhead
    timer(StepShape(4, 9000.0, 0, None, 4000, 0.0))  # context above 8192; prefill tokens above 2048
    # linear grids extrapolate exactly above their edges
    assert timer(StepShape(100, 500.0, 0, None)) == pytest.approx(fwd(100, 1, 500.0))
    assert timer.steps == 11
    ex = timer.extrapolations()
    assert ex == {
        "target_forward.batch": 2,
        "target_forward.context": 1,
        "target_prefill.tokens": 1,
        "proposers.ngram.draft.batch": 1,
        "proposers.ngram.overhead.batch": 1,
    }
    lines = timer.describe_extrapolations()
    assert "extrapolated: target_forward.batch above 64 in 18.2% of steps (2 of 11)" in lines
    assert "extrapolated: target_forward.context above 8192 in 9.1% of steps (1 of 11)" in lines


def test_null_cells_are_reported_as_filled() -> None:
    d = synthetic_profile_dict(**P)
    d["timing"]["target_forward"]["median"][-1][-1][-1] = None
    t = ProfileStepTimer(Profile.from_dict(d, "t"))
    # the filled cell takes the value of its nearest measured neighbour along context
    assert t(StepShape(64, 8192.0, 5, "ngram")) == pytest.approx(fwd(64, 6, 2048.0) + draft(64, 5) + over(64))
    assert any(line.startswith("filled: target_forward has 1 unmeasured") for line in t.describe_extrapolations())


def test_fixed_timer() -> None:
    t = FixedStepTimer(0.25)
    assert [t(StepShape(1, 0.0, 0, None)) for _ in range(3)] == [0.25] * 3
    assert t.steps == 3 and t.extrapolations() == {} and t.describe_extrapolations() == []
    with pytest.raises(ValueError):
        FixedStepTimer(0.0)


def test_random_service_timer_is_reproducible_and_has_the_right_mean() -> None:
    shape = StepShape(1, 0.0, 0, None)
    a = RandomServiceTimer.exponential(0.5, np.random.default_rng(7))
    b = RandomServiceTimer.exponential(0.5, np.random.default_rng(7))
    xs = [a(shape) for _ in range(20000)]
    assert xs[:100] == [b(shape) for _ in range(100)]
    # exponential: sd = mean, so the sample mean is within 5 standard errors of 0.5
    assert abs(np.mean(xs) - 0.5) < 5 * 0.5 / np.sqrt(len(xs))
    with pytest.raises(ValueError, match="must be >= 0"):
        RandomServiceTimer(lambda: -1.0)(shape)


def _with_padded_batch(join_s: float = 0.004, leave_per_seq_s: float = 0.001) -> Profile:
    """The synthetic profile plus ``timing.padded_batch``: J = join_s·b, L = leave_per_seq_s·b (flat in w)."""
    d = synthetic_profile_dict(**P)
    batches, contexts = [1, 2, 4, 8], [64, 1024]
    d["timing"]["padded_batch"] = {
        "join": {"axes": {"batch": batches, "context": contexts},
                 "median": [[join_s * b] * len(contexts) for b in batches]},
        "leave": {"axes": {"batch": batches, "context": contexts},
                  "median": [[leave_per_seq_s * b] * len(contexts) for b in batches]},
    }
    return Profile.from_dict(d, "synthetic+padded_batch")


def test_padded_engine_pays_one_join_per_changed_step_and_one_leave_per_leaver() -> None:
    prof = _with_padded_batch()
    base = StepShape(4, 200.0, 0, None, 0, 0.0, 300.0)
    changed = StepShape(4, 200.0, 0, None, 0, 0.0, 300.0, 0.0, rows_joined=2, rows_left=3)
    padded, paged = ProfileStepTimer(prof, kv_layout="padded"), ProfileStepTimer(prof)
    assert padded(changed) == pytest.approx(padded(base) + 0.004 * 4 + 3 * 0.001 * 4, rel=1e-12)
    assert paged(changed) == paged(base), "a paged engine has no batch to edit"
    assert ProfileStepTimer(prof, kv_layout="padded", scale=2.0)(changed) == pytest.approx(
        2.0 * padded(changed), rel=1e-12), "the edit is part of the decode part, scaled with it"


def test_padded_engine_without_the_grids_says_its_batch_changes_went_unpriced() -> None:
    timer = ProfileStepTimer(synthetic_profile(**P), kv_layout="padded")
    base = StepShape(4, 200.0, 0, None, 0, 0.0, 300.0)
    assert timer(StepShape(4, 200.0, 0, None, 0, 0.0, 300.0, 0.0, 1, 0)) == timer(base)
    assert timer.unpriced_changes == 1
    assert any("1 steps whose decode batch changed were charged nothing" in line
               for line in timer.describe_extrapolations())


def test_decode_batch_rows_counts_against_the_last_decoding_step() -> None:
    from sim.model.step_protocol import DecodeBatchRows

    rows = DecodeBatchRows()
    assert rows.change([1]) == (1, 0)
    assert rows.change([1, 2, 3]) == (2, 0)
    assert rows.change([]) == (0, 0), "a prefill-only step leaves the batch as it is"
    assert rows.change([3, 2, 4]) == (1, 1)
    assert rows.change([4, 3, 2]) == (0, 0), "order does not matter"


def test_a_profile_with_padded_batch_loads_its_grids_and_provenance() -> None:
    prof = _with_padded_batch()
    pb = prof.timing.padded_batch
    assert pb is not None and pb.provenance is None
    assert pb.join.axis_names == ("batch", "context") and pb.leave.median.shape == (4, 2)
    assert synthetic_profile(**P).timing.padded_batch is None
