"""n-gram steps with no match verify one token, as vLLM schedules them (issue 21).

vLLM (``v1/spec_decode/ngram_proposer.py``): a lookup with no match returns no draft and the
request is scheduled with one token; its counters (``v1/spec_decode/metrics.py``, fed from
``scheduler.update_from_output`` only ``if scheduled_spec_token_ids``) count only steps with a
proposal. Here: the proposal rate is part of a segment's acceptance, rows without a proposal
feed one token, and the step is priced with the tokens actually fed.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from sim.contracts.profile import Profile
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile, synthetic_profile_dict
from sim.model.drivers.engine import Fleet, FleetSpec
from sim.model.scheduler import Scheduler
from sim.model.speculation import SpeculationPolicy
from sim.model.step_plan import Request, SchedulerConfig
from sim.model.step_time import FixedStepTimer, ProfileStepTimer, StepShape, verify_tokens_per_row
from sim.results.records import steps_frame
from sim.results.simulation import simulate_once
from tests.helpers import write_scenario


@pytest.mark.parametrize(
    ("rows", "drafting", "k", "padded", "want"),
    [
        (4, 4, 3, False, 4.0),  # everyone drafts: k+1
        (4, 0, 3, False, 1.0),  # nobody has a proposal: a plain decode
        (4, 1, 3, False, 1.75),  # paged: the mean tokens per row, 1 + 3*1/4
        (4, 1, 3, True, 4.0),  # padded: one drafting row makes the rectangle k+1 wide
        (4, 0, 3, True, 1.0),
        (8, 8, 0, False, 1.0),  # no speculation
    ],
)
def test_verify_tokens_per_row(rows, drafting, k, padded, want) -> None:
    assert verify_tokens_per_row(rows, drafting, k, padded) == want


def test_step_price_uses_the_tokens_actually_fed() -> None:
    p = synthetic_profile()
    t = ProfileStepTimer(p)
    c = 512.0

    def fwd(b, s):  # synthetic_profile's linear target_forward
        return 0.010 + 0.0005 * b + 0.0002 * b * s + 1e-7 * b * c

    def draft_and_overhead(b, k):
        return (0.0002 + 0.00005 * b * k) + (0.0003 + 0.00002 * b)

    none = t(StepShape(4, c, 3, "ngram", drafting_seqs=0))
    assert none == pytest.approx(fwd(4, 1))  # exactly the baseline step: no draft cost either
    assert none == pytest.approx(t(StepShape(4, c, 0, None)))
    one = t(StepShape(4, c, 3, "ngram", drafting_seqs=1))
    assert one == pytest.approx(fwd(4, 1.75) + draft_and_overhead(1, 3))
    full = t(StepShape(4, c, 3, "ngram"))
    assert full == pytest.approx(fwd(4, 4) + draft_and_overhead(4, 3))
    assert t(StepShape(4, c, 3, "ngram", drafting_seqs=4)) == full
    with pytest.raises(ValueError, match="drafting_seqs"):
        StepShape(4, c, 3, "ngram", drafting_seqs=5)


def test_a_request_without_a_proposal_is_scheduled_with_one_token() -> None:
    cfg = SchedulerConfig.of(max_num_seqs=4, max_num_batched_tokens=64, block_size=4, kv_blocks=100)
    s = Scheduler(cfg)
    a, b = (Request(i, i, 0.0, 4, 10, "chat", None, [-1.0] * 3) for i in range(2))
    for r in (a, b):
        s.add_request(r, 0.0, 3)
    s.update(s.schedule(0.0, 3), None, 0.1)  # both prefill and sample their first token
    b.proposes = False
    plan = s.schedule(0.1, 3)
    assert plan.decode == (a, b) and plan.drafting == (True, False)
    assert plan.num_drafting == 1 and plan.num_scheduled_tokens == 1 + 3 + 1
    assert b.blocks == 2  # 5 tokens computed + 1: no lookahead slots for drafts it does not have
    s.update(plan, [3, 0], 0.2)
    assert (a.num_drafts, a.num_spec_steps, a.generated) == (1, 1, 5)
    assert (b.num_drafts, b.num_spec_steps, b.generated) == (0, 1, 2)  # vLLM: not a draft


def _fleet_steps(proposal: float, n: int = 40, out: int = 60) -> pl.DataFrame:
    reqs = [Request(i, i, 10.0 * i, 8, out, "chat", None, [-0.5] * 3) for i in range(n)]
    for r in reqs:
        r.proposal = proposal
    cfg = SchedulerConfig.of(max_num_seqs=1, max_num_batched_tokens=64, block_size=4, kv_blocks=1000)
    run = Fleet(FleetSpec(cfg, SpeculationPolicy("fixed", k=3), proposer="p"), FixedStepTimer(0.01),
                np.random.default_rng(5)).run(reqs)
    return steps_frame(run, "c", 0)


def test_fleet_drafts_on_about_the_proposal_rate_of_steps() -> None:
    steps = _fleet_steps(0.15).filter(pl.col("decode_seqs") > 0)
    share = steps["drafting_seqs"].sum() / steps.height
    assert 0.11 < share < 0.19
    no = steps.filter(pl.col("drafting_seqs") == 0)
    assert (no["draft_tokens"] == 0).all() and (no["accepted_tokens"] == 0).all()
    # every request proposing: the old behaviour, drafting_seqs == decode_seqs
    full = _fleet_steps(1.0).filter(pl.col("decode_seqs") > 0)
    assert (full["drafting_seqs"] == full["decode_seqs"]).all()


SCENARIO = """
name = "ngram15"
[run]
duration_s = 200
warmup_s = 0
seeds = [1]
[workload]
arrival = "poisson"
rate = 0.5
[[workload.segments]]
name = "chat"
share = 1.0
prompt_tokens = {dist = "fixed", value = 100}
output_tokens = {dist = "fixed", value = 40}
acceptance = {task = "chat", language = "en"}
[fleet]
profile = "profile.json"
[fleet.engine]
max_num_seqs = 1
[[candidates]]
name = "ngram-k3"
proposer = "ngram"
k = 3
"""


def test_scenario_with_15_percent_proposals_prices_other_steps_at_width_1(tmp_path) -> None:
    """The bar of issue 21: 85 % of verification steps priced as a 1-token decode."""
    sc = load_scenario(write_scenario(tmp_path, SCENARIO, proposal_rate=0.15))
    prof = Profile.from_dict(synthetic_profile_dict(proposal_rate=0.15), "p")
    r = simulate_once(sc, prof, "ngram-k3", 1)
    dec = r.steps.filter((pl.col("decode_seqs") == 1) & (pl.col("prefill_tokens") == 0))
    no = dec.filter(pl.col("drafting_seqs") == 0)
    assert 0.78 < no.height / dec.height < 0.92
    timer = ProfileStepTimer(prof)
    # contexts 100..140 rounded to 16-token blocks: 96..144; a 1-token decode at batch 1 there
    lo, hi = timer(StepShape(1, 96.0, 0, None)), timer(StepShape(1, 144.0, 0, None))
    assert lo - 1e-12 <= no["duration_s"].min() and no["duration_s"].max() <= hi + 1e-12
    drafted = dec.filter(pl.col("drafting_seqs") == 1)
    assert drafted["duration_s"].min() > hi + 0.0005  # 4 tokens wide, plus draft and overhead
    row = r.summary.filter(pl.col("segment") == "all").row(0, named=True)
    req = r.requests.filter(pl.col("outcome") == "completed")
    per_draft = 1 + req["accepted_tokens"].sum() / req["num_drafts"].sum()
    per_step = 1 + req["accepted_tokens"].sum() / req["num_spec_steps"].sum()
    assert row["mean_acceptance_length"] == pytest.approx(per_draft)
    assert row["mean_acceptance_length_per_step"] == pytest.approx(per_step)
    assert per_step < per_draft


def test_profile_num_steps_validation() -> None:
    d = synthetic_profile_dict(proposal_rate=0.5)
    prof = Profile.from_dict(d, "p")
    seg = prof.acceptance["ngram"].segments[0]
    assert seg.proposal_rate == pytest.approx(0.5)
    assert seg.per_request[0].proposal_rate == pytest.approx(0.5)
    bad = synthetic_profile_dict(proposal_rate=0.5)
    bad["acceptance"]["ngram"]["segments"][0]["num_steps"] = 10
    with pytest.raises(Exception, match=r"segments\[0\]\.num_steps: must be >= num_drafts"):
        Profile.from_dict(bad, "p")
