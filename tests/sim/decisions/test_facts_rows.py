"""``window_rows`` (sim/decisions/facts.py): one row per (candidate, seed) whatever the order
of the records, and the same rows whether a result's records are read whole or part by part."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.decisions.facts import _groups, window_rows
from sim.results import metric_names as mn


def _requests(keys: list[tuple[str, int]], seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    n = len(keys)
    arrival = rng.random(n) * 10
    first = arrival + rng.random(n)
    finish = first + rng.random(n) * 2
    done = rng.random(n) < 0.7
    return pl.DataFrame({
        mn.CANDIDATE: [k[0] for k in keys], mn.SEED: [k[1] for k in keys],
        "arrival_s": arrival, "first_token_s": np.where(done, first, np.nan),
        "finish_s": np.where(done, finish, np.nan), "scheduled_s": arrival,
        "generated_tokens": rng.integers(2, 50, n), "output_tokens": rng.integers(2, 50, n),
        "max_pause_s": rng.random(n), "num_drafts": rng.integers(0, 9, n),
        "accepted_tokens": rng.integers(0, 9, n),
        "outcome": np.where(done, mn.COMPLETED, np.where(rng.random(n) < 0.5, mn.REJECTED, mn.TIMED_OUT)),
    }).with_columns(pl.col("first_token_s", "finish_s").fill_nan(None))


KEYS = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 3)), min_size=0, max_size=60)


@settings(max_examples=40, deadline=None)
@given(keys=KEYS)
def test_groups_are_each_keys_rows_in_order_of_first_appearance(keys) -> None:
    got = _groups(pl.DataFrame({mn.CANDIDATE: [k[0] for k in keys], mn.SEED: [k[1] for k in keys]},
                               schema={mn.CANDIDATE: pl.String, mn.SEED: pl.Int64}))
    want: dict[tuple[str, int], list[int]] = {}
    for i, k in enumerate(keys):
        want.setdefault(k, []).append(i)
    assert [k for k, _ in got] == list(want)
    assert all(ix.tolist() == want[k] for k, ix in got)


@settings(max_examples=25, deadline=None)
@given(keys=KEYS, seed=st.integers(0, 2**16), t0=st.floats(0, 5), span=st.floats(0.5, 10))
def test_rows_read_part_by_part_equal_rows_read_whole(keys, seed, t0, span) -> None:
    frame = _requests(keys, seed)
    limits = {mn.TTFT: 700.0, mn.TPOT: 90.0}
    whole = window_rows(frame, limits, t0, t0 + span)
    parts: dict = {}
    for _, part in frame.group_by([mn.CANDIDATE, mn.SEED], maintain_order=True):
        parts.update(window_rows(part, limits, t0, t0 + span))
    assert whole == parts
