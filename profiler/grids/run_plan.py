"""A profile run's plan, fixed before anything is measured: probe, estimate, fit the budget,
and keep the plan in the checkpoint so a resumed run measures the same grid.

Why keep it: the probe's timings differ from run to run, so a resumed run that probed again
could shrink the grid differently and waste or orphan what the first run measured.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from profiler.grids.budget import AcceptancePlan, CostModel, Plan, fit_budget, format_phases
from profiler.grids.timing_grids import TimingGrids
from profiler.grids.timing_run import Passes

PLAN_KEY = "plan"


def acceptance_plan(req: Any, target: Any, proposers: list[Any], prompts: list[Any]) -> AcceptancePlan | None:
    """What the acceptance phase will run, by the same defaults ``run._acceptance`` applies."""
    if not req.measure_acceptance or not proposers or not prompts or target.random_weights:
        return None
    from profiler.measured_acceptance import acceptance as acc
    from profiler.prompt_sets import by_segment

    names = tuple(p.name for p in proposers if not (p.draft is not None and p.draft.random_weights))
    if not names:
        return None
    per_seg = req.prompts_per_segment or (acc.QUICK_PROMPTS_PER_SEGMENT if req.quick else acc.DEFAULT_PROMPTS_PER_SEGMENT)
    new_tokens = req.max_new_tokens or (acc.QUICK_MAX_NEW_TOKENS if req.quick else acc.DEFAULT_MAX_NEW_TOKENS)
    sizes = tuple(len(ps) for ps in by_segment(prompts).values())
    temps = len(req.temperatures)
    tok = getattr(target, "tokenizer", None)
    lengths = [len(tok.encode(p.prompt)) if tok is not None else len(p.prompt) / 4 for p in prompts]
    return AcceptancePlan(requests=temps * sum(min(per_seg, n) for n in sizes), max_new_tokens=new_tokens,
                          prompts_per_segment=per_seg, prompt_tokens=sum(lengths) / max(len(lengths), 1),
                          proposers=names, segments=sizes, temperatures=temps)


def run_plan(req: Any, passes: Passes, grids: TimingGrids, proposers: list[str], acc: AcceptancePlan | None,
             ckpt: Any, started: float | None = None) -> tuple[Plan, CostModel]:
    """The checkpointed plan when resuming one, else a fresh probe fitted to ``req.budget_s``
    counted from ``started`` (``perf_counter`` at the run's start: loading and the probe count
    against the budget); ``SpecplanError`` when even the smallest grid does not fit (nothing
    has been measured)."""
    if PLAN_KEY in ckpt:
        return _from_json(ckpt.records[PLAN_KEY])
    cost = passes.probe(grids)
    spent = 0.0 if started is None else time.perf_counter() - started  # models loaded, probe run
    plan = fit_budget(grids, proposers, cost, rounds=req.rounds, acceptance=acc, budget_s=req.budget_s,
                      spent_s=spent)
    ckpt.add(PLAN_KEY, {"plan": plan.to_json(), "acceptance": None if plan.acceptance is None else asdict(plan.acceptance),
                        "cost": asdict(cost)})
    return plan, cost


def _from_json(rec: dict[str, Any]) -> tuple[Plan, CostModel]:
    p = rec["plan"]
    g = TimingGrids(**{k: tuple(v) if isinstance(v, list) else v for k, v in p["grids"].items()})
    a = rec.get("acceptance")
    acc = None if a is None else AcceptancePlan(**{k: tuple(v) if isinstance(v, list) else v for k, v in a.items()})
    return Plan(g, acc, dict(p["phases"]), tuple(p["shrunk"]), p["budget_s"]), CostModel(**rec["cost"])


def plan_line(plan: Plan, cost: CostModel, *, reused: int = 0) -> str:
    """One line a user reads before the run starts (and provenance keeps)."""
    budget = "" if plan.budget_s is None else f" within --budget {plan.budget_s:.0f} s"
    cut = f"; shrunk to fit: {', '.join(plan.shrunk)}" if plan.shrunk else ""
    again = f" (plan of the interrupted run, {reused} checkpointed records reused)" if reused else ""
    return (f"estimated run time {format_phases(plan.phases)}{budget}, from a {cost.probe_s:.1f} s probe of "
            f"this machine{cut}{again}")
