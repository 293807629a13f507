"""A profile run checkpoints every point; an interrupted run resumes without re-measuring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.run import ProfileRequest, ProposerRequest, partial_path, run_profile
from profiler.timing import TimingGrids
from sim.errors import SpecplanError
from sim.profile import load_profile


def grids() -> TimingGrids:
    return TimingGrids(batch=(1, 2), tokens_per_seq=(1, 3), context=(8, 16), prefill_tokens=(4, 8),
                       prefill_context=(0, 8), draft_batch=(1,), k_max=2, draft_context=(8,),
                       overhead_batch=(1,), overhead_k=(1, 2), overhead_context=8, warmup=0, repeats=2,
                       prefill_repeats=1)


def request(out: Path, resume: bool = False) -> ProfileRequest:
    return ProfileRequest(target="config:tiny-llama", out=out, device="cpu",
                          proposers=(ProposerRequest.parse("ngram"), ProposerRequest.parse("selfdraft:2")),
                          k_max=2, grids=grids(), resume=resume, progress=False, command="test")


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
    assert len(lines) == 5
    first = {rec["key"]: rec["value"] for rec in lines}

    calls: list[int] = []
    profile = run_profile(request(out, resume=True), on_point=calls.append)
    # timing points: forward 2*2*2, prefill 2*2, per proposer draft 1*2*1 + overhead 2 → 20; memory 1
    assert len(calls) == 20 + 1 - 5
    assert not ckpt.exists()
    parsed = load_profile(out)
    assert set(parsed.proposers) == {"ngram", "selfdraft-l2"}
    assert "5 checkpointed records reused" in profile["timing"]["provenance"]["notes"]
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
