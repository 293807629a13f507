"""A profile run checkpoints every point; an interrupted run resumes without re-measuring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.grids.profile_request import ProfileRequest, ProposerRequest
from profiler.grids.timing_grids import TimingGrids
from profiler.run import partial_path, run_profile
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import load_profile


def grids() -> TimingGrids:
    return TimingGrids(batch=(1, 2), tokens_per_seq=(1, 3), context=(8, 16), prefill_tokens=(4, 8),
                       prefill_context=(0, 8), draft_batch=(1,), k_max=2, draft_context=(8,),
                       overhead_batch=(1,), overhead_k=(1, 2), overhead_context=8, warmup=0, repeats=2,
                       prefill_repeats=1)


def request(out: Path, resume: bool = False) -> ProfileRequest:
    return ProfileRequest(target="config:tiny-llama", out=out, device="cpu",
                          proposers=(ProposerRequest.parse("ngram"), ProposerRequest.parse("selfdraft:2")),
                          k_max=2, grids=grids(), resume=resume, progress=False, command="test",
                          grid_checks=False)


class Boom(Exception):
    pass


def test_interrupted_run_resumes_without_remeasuring(tmp_path: Path):
    out = tmp_path / "tiny.json"

    def stop_after_5(n: int) -> None:
        if n == 5:
            raise Boom

    with pytest.raises(Boom):
        run_profile(request(out), on_point=stop_after_5)
    assert not out.exists()
    ckpt = partial_path(out)
    lines = [json.loads(x) for x in ckpt.read_text().splitlines()]
    assert len(lines) == 1 + 5  # the run's plan (kept so a resumed run measures the same grid) and 5 points
    first = {rec["key"]: rec["value"] for rec in lines if rec["key"] != "plan"}

    calls: list[int] = []
    profile = run_profile(request(out, resume=True), on_point=calls.append)
    # timing points: forward 2*2*2, prefill 2*2, per proposer draft 1*2*1 + overhead 2 → 20; memory 1
    assert len(calls) == 20 + 1 - 5
    assert not ckpt.exists()
    parsed = load_profile(out)
    assert set(parsed.proposers) == {"ngram", "selfdraft-l2"}
    assert "6 checkpointed records reused" in profile["timing"]["provenance"]["notes"]
    # the five finished points kept their checkpointed values
    tf = profile["timing"]["target_forward"]
    ctx, toks = tf["axes"]["context"], tf["axes"]["tokens_per_seq"]
    kept = [v for v in first.values() if v["quantity"] == "target_forward"]
    assert kept
    for v in kept:
        p = v["point"]
        i, j, k = tf["axes"]["batch"].index(p["batch"]), toks.index(p["tokens_per_seq"]), ctx.index(p["context"])
        assert tf["median"][i][j][k] == v["median"]


def test_without_resume_a_stale_checkpoint_is_discarded(tmp_path: Path):
    out = tmp_path / "tiny.json"
    partial_path(out).write_text('{"fingerprint": "old", "key": "x", "value": {}}\n')
    calls: list[int] = []
    run_profile(request(out), on_point=calls.append)
    assert len(calls) == 21 and load_profile(out).name


def test_unwritable_output_fails_before_measuring(tmp_path: Path):
    calls: list[int] = []
    with pytest.raises(SpecplanError, match="does not exist"):
        run_profile(request(tmp_path / "missing" / "x.json"), on_point=calls.append)
    assert calls == []


def test_rounds_measure_every_cell_again_and_keep_the_median_of_rounds(tmp_path: Path):
    from dataclasses import replace

    out = tmp_path / "tiny.json"
    calls: list[int] = []
    req = replace(request(out), rounds=3, measure_acceptance=False)
    profile = run_profile(req, on_point=calls.append)
    assert len(calls) == 3 * 20 + 1  # every timing point three times, memory once
    tf = profile["timing"]["target_forward"]
    assert tf["repeats"] == 3 * 2 and profile["timing"]["target_prefill"]["repeats"] == 3 * 1
    assert "3 rounds over the whole grid" in profile["timing"]["provenance"]["notes"]
    flat = [v for plane in tf["median"] for row in plane for v in row]
    assert all(v > 0 for v in flat)
    with pytest.raises(SpecplanError, match="--rounds 0"):
        replace(request(out), rounds=0)


def test_combine_rounds_takes_the_median_and_the_envelope():
    from profiler.grids.timing_grids import Measured, combine_rounds, point

    pt = point("target_forward", batch=1, tokens_per_seq=1, context=8)
    rounds = [Measured(pt, 0.040, 0.039, 0.045, 5), Measured(pt, 0.050, 0.048, 0.060, 5),
              Measured(pt, 0.042, 0.041, 0.044, 5)]
    m = combine_rounds(rounds)
    assert (m.median, m.p10, m.p90, m.repeats, m.limit) == (0.042, 0.039, 0.060, 15, None)
    lim = combine_rounds([rounds[0], Measured.limited(pt, "out of memory")])
    assert lim.median is None and lim.limit == "out of memory"


@pytest.mark.parametrize("stop_at", [1, 7, 19, 30])
def test_a_run_interrupted_after_n_cells_resumes_to_the_uninterrupted_cells(tmp_path: Path, stop_at: int):
    """Fake device (each cell's time a function of the cell, with a kink at batch 2 that the grid
    checks add rows for): interrupted anywhere, in the grid or in the checks, the resumed profile
    holds exactly the cells of a run that was never interrupted."""
    from dataclasses import replace

    from tests.profiler.fake_passes import factory, kinked

    quick = replace(grids(), batch=(1, 4))

    def req(out: Path, resume: bool = False) -> ProfileRequest:
        return replace(request(out, resume=resume), grids=quick, grid_checks=True)

    first: list = []
    whole = run_profile(req(tmp_path / "whole.json"), passes=factory(step=kinked(2, 1.5), made=first))
    out = tmp_path / "cut.json"

    def stop(n: int) -> None:
        if n == stop_at:
            raise Boom

    cut: list = []
    with pytest.raises(Boom):
        run_profile(req(out), passes=factory(step=kinked(2, 1.5), made=cut), on_point=stop)
    made: list = []
    resumed = run_profile(req(out, resume=True), passes=factory(step=kinked(2, 1.5), made=made))
    assert made[0].probed == 0  # the interrupted run's plan is reused, not probed again
    for section in ("target_forward", "target_prefill"):
        assert resumed["timing"][section] == whole["timing"][section]
    assert resumed["timing"]["proposers"] == whole["timing"]["proposers"]
    assert resumed["timing"]["target_forward"]["axes"]["batch"] == [1, 2, 3, 4]
    # nothing measured twice: the resumed run measured only what the interrupted one had not
    assert len(cut[0].measured) + len(made[0].measured) == len(first[0].measured)
