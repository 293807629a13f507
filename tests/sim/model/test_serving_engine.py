"""The engine a scenario names, and the step rule that follows it: a decoding row without an
n-gram match verifies k filled slots on vLLM's Model Runner V2 (and SGLang, TensorRT-LLM), and is
a plain one-token decode on vLLM's V1 runner (sim/model/serving_engine.py)."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.fleet_config import EngineConfig
from sim.contracts.profile import load_profile
from sim.contracts.profile_identity import Device
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile
from sim.model.scheduler import Scheduler
from sim.model.serving_engine import resolve
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import ProfileStepTimer, StepShape
from sim.results.simulation import simulate_once
from tests.helpers import BASELINE, scenario_toml, segment, write_scenario

# the synthetic profile's closed forms (sim/contracts/synthetic.py), context cost off
P = dict(base_step_s=0.010, per_seq_s=0.0005, per_token_s=0.0002, per_context_token_s=0.0,
         draft_base_s=0.0002, draft_per_token_s=0.00005, overhead_base_s=0.0003, overhead_per_seq_s=0.00002)
K = 3


def fwd(b: int, s: float) -> float:
    return P["base_step_s"] + P["per_seq_s"] * b + P["per_token_s"] * b * s


def spec(b: int, nd: int, s: float) -> float:
    """A speculative step: forward at ``s`` tokens per row, drafting and overhead for ``nd`` rows."""
    return fwd(b, s) + P["draft_base_s"] + P["draft_per_token_s"] * nd * K + P["overhead_base_s"] + P["overhead_per_seq_s"] * nd


@pytest.mark.parametrize(("name", "runner", "kind", "want_runner", "full"), [
    ("vllm", None, "cpu", "v1", False),      # vLLM's CPU backend runs the V1 runner
    ("vllm", None, "cuda", "v2", True),      # Model Runner V2: vLLM's default on GPUs
    ("vllm", "v1", "cuda", "v1", False),     # VLLM_USE_V2_MODEL_RUNNER=0
    ("vllm", "v2", "cpu", "v2", True),
    ("sglang", None, "cuda", None, True),    # NGRAMWorker verifies bs * draft_token_num
    ("trtllm", None, "cuda", None, True),    # drafts padded to the max for CUDA graphs
])
def test_the_engine_decides_whether_a_row_without_a_match_verifies_full_width(
        name, runner, kind, want_runner, full) -> None:
    prof = synthetic_profile()
    dev = Device(kind, "a CPU" if kind == "cpu" else "NVIDIA H200")
    prov = dataclasses.replace(prof.timing.provenance, device=dev)
    prof = dataclasses.replace(prof, timing=dataclasses.replace(prof.timing, provenance=prov))
    e = resolve(EngineConfig(name=name, runner=runner), prof)
    assert (e.runner, e.full_width_drafts) == (want_runner, full)
    assert ("full width" in e.source_line) == full and e.label in e.source_line


def test_an_unknown_engine_or_a_runner_off_vllm_is_one_line_naming_the_valid_values(tmp_path) -> None:
    def load(engine):
        text = scenario_toml("e", run={"duration_s": 5, "warmup_s": 0, "seeds": [1]},
                             workload={"arrival": "poisson", "rate": 1.0}, segments=[segment()],
                             fleet={"profile": "profile.json"}, engine=engine, candidates=[BASELINE])
        return load_scenario(write_scenario(tmp_path, text))

    with pytest.raises(SpecplanError, match=r"fleet\.engine\.name.*'vllm', 'sglang', 'trtllm'.*'tgi'"):
        load({"name": "tgi"})
    with pytest.raises(SpecplanError, match=r"fleet\.engine\.runner.*'v2', 'v1'"):
        load({"runner": "v3"})
    with pytest.raises(SpecplanError, match=r"fleet\.engine\.runner: only vLLM"):
        load({"name": "sglang", "runner": "v2"})
    with pytest.raises(SpecplanError, match=r"fleet\.engine\.version: must be a release number"):
        load({"version": "latest"})
    assert load({"name": "trtllm", "version": "1.2.0rc1"}).fleet.engine.version == "1.2.0rc1"


def _two_decoding(full: bool) -> tuple[Scheduler, list[Request]]:
    """Two requests past their prompts; the second's proposer found no match."""
    s = Scheduler(SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, kv_blocks=100,
                                  full_width_drafts=full))
    reqs = [Request(i, i, 0.0, 4, 10) for i in range(2)]
    for r in reqs:
        s.add_request(r, 0.0)
    plan = s.schedule(0.0, K)
    s.update(plan, None, 0.01)
    reqs[1].proposes = False  # read in at the next schedule
    return s, reqs


@pytest.mark.parametrize("full", [True, False])
def test_a_batch_with_one_unmatched_row_is_priced_by_hand(full) -> None:
    """b = 2, k = 3, one row without a match: Model Runner V2 verifies 2 × 4 tokens and drafts
    for both rows; the V1 runner verifies 4 + 1 (priced at 2.5 per row) and drafts for one."""
    s, reqs = _two_decoding(full)
    plan = s.schedule(0.01, K)
    assert [r.id for r in plan.decode] == [0, 1] and plan.k == K
    timer = ProfileStepTimer(synthetic_profile(**P))
    shape = StepShape(len(plan.decode), plan.decode_context, plan.k, "ngram",
                      drafting_seqs=plan.num_drafting if plan.drafting else None)
    if full:
        assert plan.drafting == () and plan.num_scheduled_tokens == 2 * (K + 1)
        assert timer(shape) == pytest.approx(spec(2, 2, K + 1), rel=1e-12)
    else:
        assert plan.drafting == (True, False) and plan.num_scheduled_tokens == (K + 1) + 1
        assert timer(shape) == pytest.approx(spec(2, 1, 1 + K / 2), rel=1e-12)


def _run(tmp_path, runner: str):
    text = scenario_toml(
        f"one-{runner}", run={"duration_s": 4, "warmup_s": 0, "seeds": [3]},
        workload={"arrival": "poisson", "rate": 0.25},
        segments=[segment(prompt=16, output=40)], fleet={"profile": "profile.json"},
        engine={"runner": runner}, candidates=[BASELINE, {"name": "ngram-k3", "proposer": "ngram", "k": K}])
    sc = load_scenario(write_scenario(tmp_path / runner, text, proposal_rate=0.5,
                                      acceptance_rates=(0.6, 0.4, 0.2), **P))
    return simulate_once(sc, load_profile(sc.require_profile_path()), "ngram-k3", 3)


def test_an_ngram_run_prices_unmatched_steps_as_k_plus_one_on_v2_and_as_decodes_on_v1(tmp_path) -> None:
    """The exact trace of lone requests with an n-gram match on half the steps: the same seed
    draws the same matches and acceptances on both runners; only the unmatched steps differ."""
    (tmp_path / "v2").mkdir()
    (tmp_path / "v1").mkdir()
    v2, v1 = _run(tmp_path, "v2"), _run(tmp_path, "v1")
    cols = ["t_start_s", "decode_seqs", "prefill_tokens", "k", "accepted_tokens", "draft_tokens",
            "drafting_seqs", "duration_s"]
    a, b = v2.steps.select(cols), v1.steps.select(cols)
    assert a.height == b.height > 10
    assert a["accepted_tokens"].to_list() == b["accepted_tokens"].to_list()
    dec = (pl.col("decode_seqs") == 1) & (pl.col("prefill_tokens") == 0)
    lone_a, lone_b = a.filter(dec), b.filter(dec)
    unmatched = lone_b["drafting_seqs"] == 0
    assert 0 < unmatched.sum() < lone_b.height  # both kinds of step occur
    assert (lone_a["draft_tokens"] == K).all() and (lone_a["drafting_seqs"] == 1).all()
    for x, y, miss in zip(lone_a.iter_rows(named=True), lone_b.iter_rows(named=True), unmatched, strict=True):
        assert x["duration_s"] == pytest.approx(spec(1, 1, K + 1), rel=1e-12)  # always a (k+1) verify
        if miss:  # V1 runner: a plain decode, no draft pass, nothing accepted
            assert (y["duration_s"], y["draft_tokens"], y["accepted_tokens"]) == (
                pytest.approx(fwd(1, 1), rel=1e-12), 0, 0)
            assert x["accepted_tokens"] == 0  # the filled slots are rejected
        else:
            assert y["duration_s"] == pytest.approx(x["duration_s"], rel=1e-12)
    # vLLM counts a draft for every verified row on Model Runner V2, only matched ones on V1
    ra, rb = v2.requests, v1.requests
    assert (ra["num_drafts"] == ra["num_spec_steps"]).all()
    assert (rb["num_drafts"] < rb["num_spec_steps"]).any()
    assert any("Model Runner V2" in s and "full width" in s for s in v2.sources)
    assert any("V1 runner" in s and "plain one-token decode" in s for s in v1.sources)
