"""Best k per load: for each acceptance segment and decode batch size, the k (0 = no
speculation) that minimises time per committed token, from a profile's grids.

Why: whether speculation pays, and with how many draft tokens, changes with the batch (a
verification pass is almost free at batch 1 and costs nearly k+1 decodes when the engine is
compute-bound) and with the segment's acceptance. One cycle at batch ``b`` drafting ``k``:

- proposal rate ``p`` (n-gram: the share of steps with a match; 1 for model drafters): each
  row drafts ``k`` tokens with probability ``p`` on a step, the rest feed one token (vLLM's V1
  runner schedules them so; an engine that verifies full width feeds ``k + 1`` anyway);
- step time: the simulator's own step timer averaged over Binomial(b, p) drafting rows, as the
  simulator draws them (``k_schedule.drafting_mix``), on the engine a scenario naming none
  would get (vLLM, its runner by the profile's device);
- tokens committed per row ``1 + p·(s_1 + … + s_k)``;
- time per committed token = step time / (b · tokens per row); k = 0 is the plain decode.

The rule's one home is ``sim.model.k_schedule.batch_cost``; a ``schedule = "auto"`` candidate
merges its per-batch winners into ranges.

This ignores queueing and the spread of acceptance across requests: the simulator answers those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.contracts.errors import SpecplanError
from sim.contracts.fleet_config import EngineConfig
from sim.contracts.profile import Profile
from sim.contracts.profile_acceptance import AcceptanceSegment
from sim.model import serving_engine
from sim.model.k_schedule import batch_cost, best_of, speedup_of, verifies_full_width
from sim.model.step_time import ProfileStepTimer


@dataclass(frozen=True)
class BestK:
    """One (segment, batch) cell: time per committed token at every k and the winner."""

    segment: str
    batch: int
    proposal_rate: float
    per_k_s: tuple[float, ...]
    """Seconds per committed token at k = 0, 1, …, k_max."""

    @property
    def best_k(self) -> int:
        return best_of(self.per_k_s)

    @property
    def speedup(self) -> float:
        return speedup_of(self.per_k_s)


def best_k_table(
    profile: Profile,
    proposer: str,
    batches: Sequence[int],
    *,
    context: float = 512.0,
    segments: Sequence[AcceptanceSegment] | None = None,
    k_max: int | None = None,
) -> list[BestK]:
    """One :class:`BestK` per segment (default: every segment of the proposer's entry) × batch."""
    entry = profile.acceptance.get(proposer)
    ptiming = profile.timing.proposers.get(proposer)
    if entry is None or ptiming is None:
        raise profile.error(f"acceptance.{proposer}", f"proposer {proposer!r} needs an acceptance entry and draft timing")
    if not batches or any(b < 1 for b in batches):
        raise SpecplanError(f"--best-k: batch sizes must be >= 1, got {list(batches)}")
    top = entry.k_max if k_max is None else min(k_max, entry.k_max)

    timer = ProfileStepTimer(profile)
    timer.check_proposer(proposer, top)
    full = verifies_full_width(serving_engine.resolve(EngineConfig(), profile), profile, proposer)
    out = []
    for seg in segments if segments is not None else entry.segments:
        p = seg.proposal_rate
        rates = [p * x for x in seg.survival[:top]]
        for b in batches:
            cell = batch_cost(timer, proposer, int(b), context, rates, p, full_width=full)  # the rule's one home
            out.append(BestK(str(seg.key), int(b), p, cell.per_k_s))
    return out


def format_best_k(table: Sequence[BestK]) -> list[str]:
    """Terminal lines: one row per segment, the best k (and speed-up) at each batch size."""
    if not table:
        return []
    batches = sorted({c.batch for c in table})
    lines = ["best k per load (k minimising time per committed token; 0 = no speculation):",
             f"{'segment':<24} {'proposal':>8} " + " ".join(f"{'b=' + str(b):>11}" for b in batches)]
    for seg in dict.fromkeys(c.segment for c in table):
        cells = {c.batch: c for c in table if c.segment == seg}
        first = next(iter(cells.values()))
        row = " ".join(f"{cells[b].best_k:>2} ({cells[b].speedup:.2f}x)" for b in batches)
        lines.append(f"{seg:<24} {100 * first.proposal_rate:>7.0f}% {row}")
    return lines
