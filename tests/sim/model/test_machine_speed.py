"""The machine's speed over a run: the timeline ``--drift-correct`` multiplies step times by."""

from __future__ import annotations

import pytest

from sim.model.machine_speed import SpeedSample, SpeedTimeline, speed_timeline


def test_timeline_is_linear_between_knots_and_flat_outside() -> None:
    s = SpeedTimeline((0.0, 10.0), (1.0, 1.2), (0.0, 20.0), (2.0, 1.0))
    assert s.at(-5) == (1.0, 2.0)
    assert s.at(5) == pytest.approx((1.1, 1.75))
    assert s.at(10) == pytest.approx((1.2, 1.5))
    assert s.at(99) == (1.2, 1.0)


def test_mean_is_the_exact_time_average() -> None:
    s = SpeedTimeline((0.0, 10.0, 20.0), (1.0, 2.0, 1.0), (0.0,), (1.3,))
    assert s.mean(0, 20) == pytest.approx((1.5, 1.3))
    assert s.mean(0, 10) == pytest.approx((1.5, 1.3))
    assert s.mean(10, 30) == pytest.approx(((1.5 * 10 + 1.0 * 10) / 20, 1.3))  # flat after the last knot
    assert SpeedTimeline.constant(1.1, 0.9).mean(3, 7) == pytest.approx((1.1, 0.9))


@pytest.mark.parametrize("args", [
    ((), (), (0.0,), (1.0,)),                 # no decode knot
    ((0.0, 1.0), (1.0,), (0.0,), (1.0,)),     # lengths differ
    ((0.0,), (0.0,), (0.0,), (1.0,)),         # ratio not > 0
    ((1.0, 0.0), (1.0, 1.0), (0.0,), (1.0,)),  # time going back
    ((0.0,), (float("nan"),), (0.0,), (1.0,)),
])
def test_invalid_timelines_are_refused(args) -> None:
    with pytest.raises(ValueError, match="SpeedTimeline"):
        SpeedTimeline(*args)


def test_without_samples_the_timeline_joins_the_two_checks() -> None:
    s = speed_timeline((1.0, 1.1), (1.2, 1.3), 50.0)
    assert s.decode_t == (0.0, 50.0) and s.decode_ratio == (1.0, 1.2)
    assert s.prefill_ratio == (1.1, 1.3)
    assert s.mean(0, 50) == pytest.approx((1.1, 1.2))  # the bracket mean


def test_samples_add_one_knot_per_window_with_enough_of_them() -> None:
    samples = [
        # window 0-20 s: three decode passes -> a knot at their median time and ratio
        SpeedSample(4.0, "decode", 1.5), SpeedSample(6.0, "decode", 1.4), SpeedSample(9.0, "decode", 2.0),
        # window 20-40 s: two decode passes, under min_samples -> no knot
        SpeedSample(25.0, "decode", 3.0), SpeedSample(26.0, "decode", 3.0),
        # prefill: three in window 40-60 s
        SpeedSample(41.0, "prefill", 0.9), SpeedSample(42.0, "prefill", 0.8), SpeedSample(50.0, "prefill", 0.95),
        SpeedSample(70.0, "decode", 9.0),  # after the run's end: ignored
    ]
    s = speed_timeline((1.0, 1.0), (1.1, 1.2), 60.0, samples, window_s=20.0, min_samples=3)
    assert s.decode_t == (0.0, 6.0, 60.0) and s.decode_ratio == (1.0, 1.5, 1.1)
    assert s.prefill_t == (0.0, 42.0, 60.0) and s.prefill_ratio == (1.0, 0.9, 1.2)


def test_speed_timeline_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="end_s"):
        speed_timeline((1, 1), (1, 1), -1.0)
    with pytest.raises(ValueError, match="window_s"):
        speed_timeline((1, 1), (1, 1), 10.0, window_s=0)
