"""The rule behind ``plan_kernels.num_decoding`` (what a speculation policy reads as the decode
batch): a running request decodes only when every token it has but the last is computed
(``computed == prompt + generated - 1``). A request re-prefilling after a preemption by
recompute has generated tokens yet is not decoding; counting it would change k for the batch."""

from __future__ import annotations

from sim.model.scheduler import Scheduler
from sim.model.step_plan import Request, SchedulerConfig


def _decoding_by_definition(sched: Scheduler) -> int:
    return sum(1 for r in sched.running
               if r.generated and r.computed == r.prompt_tokens + r.generated - 1)


def test_num_decoding_excludes_a_request_recomputing_after_preemption() -> None:
    # 6 blocks of 2 tokens, a 4-token step budget: the newest request is preempted by recompute
    # and then re-prefills its prompt + generated tokens in chunks of 4
    sched = Scheduler(SchedulerConfig.of(max_num_seqs=8, max_num_batched_tokens=4, block_size=2,
                                      kv_blocks=6))
    reqs = [Request(i, i, 0.0, 4, 6) for i in range(3)]
    for r in reqs:
        sched.add_request(r, 0.0)
    seen_recompute = 0
    t = 0.0
    for _ in range(40):
        if not sched.has_work:
            break
        plan = sched.schedule(t)
        t += 1.0
        sched.update(plan, None, t)
        recomputing = [r for r in sched.running
                       if r.generated and r.computed < r.prompt_tokens + r.generated - 1]
        seen_recompute += len(recomputing)
        assert sched.num_decoding() == _decoding_by_definition(sched), (
            [(r.id, r.computed, r.generated) for r in sched.running])
    assert seen_recompute > 0, "the scenario must reach a request re-prefilling after preemption"
    assert any(r.preemptions for r in reqs)
