"""A profile run's time, known before it starts: a cost model from a short probe, an estimate
per phase, and a grid shrunk (or refused) to fit ``--budget``.

Why before: a grid that needs hours must not start silently; the user either gets a grid that
fits, or one line saying what the smallest one would need. The probe times a handful of real
passes (a few seconds); everything else is arithmetic on those, labelled an estimate.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from profiler.grids.timing_grids import SMALL_BATCHES, Point, TimingGrids
from sim.contracts.errors import SpecplanError

_BUDGET_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)?\s*$", re.IGNORECASE)
_UNIT_S = {None: 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_budget(text: str) -> float:
    """``600``, ``600s``, ``10m``, ``1.5h`` → seconds."""
    m = _BUDGET_RE.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise SpecplanError(f"--budget {text!r}: expected a positive duration such as 600, 600s, 10m or 1.5h")
    return float(m.group(1)) * _UNIT_S[(m.group(2) or "").lower() or None]


@dataclass(frozen=True)
class CostModel:
    """Seconds of one pass, fitted to the probe's passes.

    ``target(b, s, c)`` = ``t0 + per_row·(b·s − 1) + per_row_ctx·b·s·c``: fixed cost, one term
    per token row, one per row × cached token (attention). Prefill costs ``per_prefill_token``
    per prompt token. A model proposer's step costs ``draft_step[name]`` at batch 1 and scales
    with rows like the target; a lookup proposer ``lookup_s`` per lookup.
    """

    t0: float
    per_row: float
    per_row_ctx: float
    per_prefill_token: float
    draft_step: dict[str, float]
    lookup_s: float = 1e-4
    probe_s: float = 0.0
    """Wall seconds the probe itself took (so the report can say what the estimate rests on)."""

    def __post_init__(self) -> None:
        for name in ("t0", "per_row", "per_row_ctx", "per_prefill_token", "lookup_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"CostModel.{name}={v}: must be a finite number >= 0")

    def target(self, b: int, s: int, c: int) -> float:
        rows = b * s
        return self.t0 + self.per_row * (rows - 1) + self.per_row_ctx * rows * c

    def prefill(self, tokens: int) -> float:
        return self.per_prefill_token * tokens

    def draft(self, name: str, b: int, c: int) -> float:
        """One draft step (model) or one lookup per sequence (host)."""
        if name in self.draft_step:
            scale = self.draft_step[name] / max(self.target(1, 1, 0), 1e-12)
            return self.draft_step[name] + scale * (self.target(b, 1, c) - self.target(1, 1, 0))
        return self.lookup_s * b


def fit_cost_model(samples: Sequence[tuple[int, int, int, float]], prefill: tuple[int, float],
                   draft_step: dict[str, float], probe_s: float) -> CostModel:
    """From ``(b, s, c, seconds)`` probe passes: the first at one row and the smallest context,
    one with many rows, one with a long context (any more are ignored); ``prefill`` is
    ``(tokens, seconds)`` of one prefill pass."""
    (b0, s0, c0, t_a), (b1, s1, _c1, t_b), (_b2, _s2, c2, t_c) = samples[:3]
    rows0, rows1 = b0 * s0, b1 * s1
    per_row_ctx = max(0.0, (t_c - t_a) / max(c2 - c0, 1))
    per_row = max(0.0, (t_b - t_a) / max(rows1 - rows0, 1))
    t0 = max(0.0, t_a - per_row_ctx * c0)
    tokens, t_p = prefill
    return CostModel(t0=t0, per_row=per_row, per_row_ctx=per_row_ctx,
                     per_prefill_token=max(t_p, 0.0) / max(tokens, 1), draft_step=dict(draft_step),
                     probe_s=probe_s)


# ---------------------------------------------------------------------------------------------
# estimates


@dataclass(frozen=True)
class AcceptancePlan:
    """What the acceptance phase will run: requests per proposer and tokens per request."""

    requests: int
    """(segment, temperature, prompt) runs per proposer."""
    max_new_tokens: int
    prompts_per_segment: int | None
    prompt_tokens: float
    """Mean prompt length in tokens (estimated)."""
    proposers: tuple[str, ...]
    segments: tuple[int, ...] = ()
    """Prompts available per segment, to recount ``requests`` when shrinking."""
    temperatures: int = 1


def cell_seconds(pt: Point, g: TimingGrids, cost: CostModel) -> float:
    """Estimated wall time of measuring one grid point (its share of the prefill included)."""
    d = pt.as_dict()
    reps = g.warmup + g.repeats
    q = pt.quantity
    if q == "target_forward":
        b, s, c = d["batch"], d["tokens_per_seq"], d["context"]
        return reps * cost.target(b, s, c) + cost.prefill(b * c) / len(g.tokens_per_seq)
    if q == "target_prefill":
        n, c = d["tokens"], d["context"]
        return (g.warmup + g.prefill_repeats) * cost.prefill(n) + cost.prefill(c) / len(g.prefill_tokens)
    name = q.split(":", 1)[1]
    if q.startswith("draft:"):
        b, c = d["batch"], d["context"]
        # one cumulative run of k_max steps gives every k: charge it once, on k = 1
        return reps * g.k_max * cost.draft(name, b, c) if d["k"] == 1 else 0.0
    b, k, c = d["batch"], d["k"], g.overhead_context  # overhead: whole cycles
    return reps * (k * cost.draft(name, b, c) + cost.target(b, k + 1, c)) + 2 * cost.prefill(b * c) / len(g.overhead_k)


def grid_points(g: TimingGrids, proposers: Sequence[str]) -> list[Point]:
    """Every timing point of a grid, in the names ``timing.plan_tasks`` gives them."""
    from profiler.grids.timing_grids import point

    pts = [point("target_forward", batch=b, tokens_per_seq=s, context=c)
           for b in g.batch for c in g.context for s in g.tokens_per_seq]
    pts += [point("target_prefill", tokens=n, context=c) for c in g.prefill_context for n in g.prefill_tokens]
    for p in proposers:
        pts += [point(f"draft:{p}", batch=b, k=k, context=c)
                for b in g.draft_batch for c in g.draft_context for k in g.draft_k]
        pts += [point(f"overhead:{p}", batch=b, k=k) for b in g.overhead_batch for k in g.overhead_k]
    return pts


def phase_seconds(g: TimingGrids, proposers: Sequence[str], cost: CostModel, rounds: int,
                  acc: AcceptancePlan | None) -> dict[str, float]:
    """Estimated seconds per phase, in run order."""
    timing = rounds * sum(cell_seconds(p, g, cost) for p in grid_points(g, proposers))
    bmax, tmax = max(g.batch), max(g.prefill_tokens)
    memory = 3 * cost.prefill(tmax) + 3 * cost.target(bmax, 1, 0) + 2 * cost.prefill(32)
    # padded batch: a join and a leave per (batch, context) cell, each a per-layer copy of the
    # batch's KV; priced as a decode pass over that batch (same bytes touched), an upper bound
    padded = rounds * 2 * (g.warmup + g.repeats) * sum(cost.target(b, 1, c) for b in g.batch for c in g.context)
    out = {"timing": timing, "memory": memory, "padded batch": padded}
    if acc is not None and acc.proposers:
        out["acceptance"] = sum(acceptance_seconds(acc, p, cost) for p in acc.proposers)
    return out


def acceptance_seconds(acc: AcceptancePlan, proposer: str, cost: CostModel, k: int = 6) -> float:
    """Upper bound: every step verifies ``k + 1`` tokens and keeps one (acceptance unknown yet)."""
    c = acc.prompt_tokens + acc.max_new_tokens / 2
    step = cost.target(1, k + 1, int(c)) + k * cost.draft(proposer, 1, int(c))
    return acc.requests * (cost.prefill(int(acc.prompt_tokens)) + acc.max_new_tokens * step)


def format_phases(phases: dict[str, float]) -> str:
    total = sum(phases.values())
    parts = ", ".join(f"{k} {_dur(v)}" for k, v in phases.items())
    return f"about {_dur(total)} ({parts})"


def _dur(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


# ---------------------------------------------------------------------------------------------
# fitting a budget


@dataclass(frozen=True)
class Plan:
    """The grid and acceptance settings a run will measure, with the estimate that chose them."""

    grids: TimingGrids
    acceptance: AcceptancePlan | None
    phases: dict[str, float]
    shrunk: tuple[str, ...] = ()
    """What was cut to fit the budget, in order (empty: the requested grid fits)."""
    budget_s: float | None = None

    @property
    def total_s(self) -> float:
        return sum(self.phases.values())

    @property
    def refine_s(self) -> float:
        """Seconds the grid's checks may spend on the points they ask for: what is left of the
        budget; without one, ``UNBUDGETED_REFINE_SHARE`` of the timing phase's own estimate."""
        if self.budget_s is None:
            return UNBUDGETED_REFINE_SHARE * self.phases.get("timing", 0.0)
        return max(0.0, self.budget_s - self.total_s)

    def to_json(self) -> dict[str, Any]:
        a = self.acceptance
        return {"grids": self.grids.as_dict(), "phases": self.phases, "shrunk": list(self.shrunk),
                "budget_s": self.budget_s,
                "acceptance": None if a is None else {"requests": a.requests, "max_new_tokens": a.max_new_tokens,
                                                      "prompts_per_segment": a.prompts_per_segment}}


UNBUDGETED_REFINE_SHARE = 1.0
"""Without ``--budget`` the grid checks may at most double the timing phase. Why a cap at all: on
a machine whose speed swings (a shared CPU under other work) every probe can read as a kink, and
bisecting every gap of a wide context axis would then measure nearly every value in it."""


Shrink = Callable[[TimingGrids, AcceptancePlan | None], tuple[TimingGrids, AcceptancePlan | None, str] | None]


def _fewer_repeats(g: TimingGrids, a: AcceptancePlan | None) -> Any:
    if g.repeats <= 3 and g.prefill_repeats <= 2 and g.warmup <= 1:
        return None
    ng = replace(g, repeats=min(g.repeats, 3), prefill_repeats=min(g.prefill_repeats, 2), warmup=min(g.warmup, 1))
    return ng, a, f"repeats {g.repeats}→{ng.repeats}, prefill repeats {g.prefill_repeats}→{ng.prefill_repeats}"


def _fewer_prompts(g: TimingGrids, a: AcceptancePlan | None) -> Any:
    if a is None or (a.prompts_per_segment or 10**9) <= 1:
        return None
    cur = a.prompts_per_segment or max(a.segments, default=1)
    n = max(1, cur // 2)
    requests = a.temperatures * sum(min(n, s) for s in a.segments) if a.segments else max(1, a.requests * n // cur)
    return g, replace(a, prompts_per_segment=n, requests=requests), f"acceptance prompts per segment {cur}→{n}"


def _fewer_tokens(g: TimingGrids, a: AcceptancePlan | None) -> Any:
    if a is None or a.max_new_tokens <= 16:
        return None
    n = max(16, a.max_new_tokens // 2)
    return g, replace(a, max_new_tokens=n), f"acceptance tokens per prompt {a.max_new_tokens}→{n}"


def _drop_last(field: str, keep: int = 1) -> Shrink:
    def shrink(g: TimingGrids, a: AcceptancePlan | None) -> Any:
        vals = getattr(g, field)
        if len(vals) <= keep or (field == "batch" and vals[-1] in SMALL_BATCHES):
            return None
        ng = replace(g, **{field: vals[:-1]})
        if field == "context" and ng.overhead_context not in ng.context:
            ng = replace(ng, overhead_context=ng.context[0])
        return ng, a, f"{field} {vals[-1]} dropped"
    return shrink


def _thin_batch(g: TimingGrids, a: AcceptancePlan | None) -> Any:
    """Drop an interior batch size above ``SMALL_BATCHES`` (the grid checks measure it again if
    step time is not smooth there and the budget has room); the small ones are never dropped."""
    inner = [b for b in g.batch[1:-1] if b not in SMALL_BATCHES]
    if not inner:
        return None
    drop = inner[len(inner) // 2]
    return replace(g, batch=tuple(b for b in g.batch if b != drop)), a, f"batch {drop} dropped"


SHRINK_ORDER: tuple[Shrink, ...] = (
    _fewer_repeats, _fewer_tokens, _fewer_prompts, _drop_last("context"), _drop_last("draft_context"),
    _drop_last("prefill_context"), _thin_batch, _drop_last("draft_batch"), _drop_last("overhead_batch"),
    _drop_last("prefill_tokens"), _drop_last("batch", keep=2),
)
"""Cheapest loss first: repeats, then acceptance length and prompts, then grid points (never a
batch in ``SMALL_BATCHES``)."""


def fit_budget(grids: TimingGrids, proposers: Sequence[str], cost: CostModel, *, rounds: int,
               acceptance: AcceptancePlan | None, budget_s: float | None, spent_s: float = 0.0) -> Plan:
    """The requested grid if it fits ``budget_s``; else the grid shrunk step by step
    (``SHRINK_ORDER``) until it does; else ``SpecplanError`` naming what the smallest one needs.
    ``spent_s``: seconds the run has already taken (loading the models, the probe), counted in."""
    g, a, cuts = grids, acceptance, []
    done = {"load and probe": spent_s} if spent_s > 0 else {}

    def phase_seconds_of(g: TimingGrids, a: AcceptancePlan | None) -> dict[str, float]:
        return {**done, **phase_seconds(g, proposers, cost, rounds, a)}

    phases = phase_seconds_of(g, a)
    if budget_s is None:
        return Plan(g, a, phases)
    progress = True
    while sum(phases.values()) > budget_s and progress:
        progress = False
        for shrink in SHRINK_ORDER:
            got = shrink(g, a)
            if got is None:
                continue
            g, a, what = got
            cuts.append(what)
            phases = phase_seconds_of(g, a)
            progress = True
            break
    if sum(phases.values()) > budget_s:
        raise SpecplanError(
            f"--budget {_dur(budget_s)}: even the smallest grid needs {format_phases(phases)} on this machine "
            f"(estimated from a {cost.probe_s:.0f} s probe); raise --budget, or drop proposers, --rounds or "
            f"acceptance (--no-acceptance)")
    return Plan(g, a, phases, tuple(cuts), budget_s)
