"""The pricing rule written readably, in Python: the oracle of the compiled ``price_kernels.price``.

This is ``ProfileStepTimer.price`` as it was before the compiled kernel became the rule's one
home (CONVENTIONS 19): the same composition (docs/profile-format.md), looked up on the timer's
own Python grids (``GridInterpolator``), so it counts lookups and extrapolations as the compiled
lookups do once unpacked. ``test_price_kernels.py`` holds the two together over generated shapes.
"""

from __future__ import annotations

from sim.model.kernels.price_kernels import graph_tokens, verify_tokens_per_row
from sim.model.step_time import ProfileStepTimer


class OraclePricer:
    """Prices steps on ``timer``'s grids in Python (give it a timer of its own: it counts there,
    steps and unpriced padded changes too)."""

    def __init__(self, timer: ProfileStepTimer) -> None:
        self.t = timer

    def price(self, b: int, c_mean: float, k: int, proposer: str | None, n: int, c0: float,
              c_max: float | None, start_s: float, joined: int, left: int,
              drafting: int | None) -> float:
        """Seconds of one step (``ProfileStepTimer.price``'s arguments)."""
        t = self.t
        t.steps += 1
        sd, sp = self._scales(start_s)
        c = c_max if t.padded and c_max is not None else c_mean
        nd = b if drafting is None or k == 0 else drafting  # rows without a proposal feed 1 token
        if t.fused:
            return self._fused(b, c, k, proposer, n, c0, joined, left, nd, sd, sp)
        total = 0.0
        if b > 0:
            s = verify_tokens_per_row(b, nd, k, t.padded)
            total = t._forward(b, s, c) + t.sample_s * b * s
            if k > 0 and nd > 0:
                total += t._draft[proposer](nd, k, c) + t._overhead[proposer](nd, k)  # type: ignore[index]
            if self._priced_change(joined, left):  # added one by one, as the summed rule adds them
                if joined:
                    total += t._join(b, c)
                total += left * t._leave(b, c)
            total *= sd
        if n > 0:
            total += (t._prefill(n, c0) + t.sample_s) * sp
            total += self._draft_prefill(proposer, k, n, c0) * sp
        return total + t.step_overhead_s + self._host(b, n, k, nd)

    def _fused(self, b, c, k, proposer, n, c0, joined, left, nd, sd, sp) -> float:
        """One pass over the step's prefill and decode tokens, plus drafting and overheads."""
        t = self.t
        rows = b * verify_tokens_per_row(b, nd, k, t.padded) if b > 0 else 0
        scored = rows + (1 if n else 0)
        total = t._dense(graph_tokens(t._graphs, rows + n, k + 1)) + t._logits(scored) + t.sample_s * scored
        if b > 0:
            total += t._dattn(b, rows / b, c)
        if n > 0:
            total += t._pattn(n, c0)
        total *= sd if b > 0 else sp
        if b > 0 and k > 0 and nd > 0:
            total += (t._draft[proposer](nd, k, c) + t._overhead[proposer](nd, k)) * sd
        if b > 0 and self._priced_change(joined, left):
            total += ((t._join(b, c) if joined else 0.0) + left * t._leave(b, c)) * sd
        if n > 0:
            total += self._draft_prefill(proposer, k, n, c0) * sp
        return total + t.step_overhead_s + self._host(b, n, k, nd)

    def _host(self, b: int, n: int, k: int, nd: int) -> float:
        """``timing.host_rows``: per scheduled request (decode rows, one per prompt chunk), and
        more per step and per request when the step verifies drafts."""
        per_row, spec, spec_per_row = self.t.host_rows
        rows = b + (1 if n > 0 else 0)
        host = per_row * rows
        if b > 0 and k > 0 and nd > 0:
            host += spec + spec_per_row * rows
        return host

    def _priced_change(self, joined: int, left: int) -> bool:
        """Whether a padded engine pays for rows that joined (once) or left (each) the decode
        batch; a change without the profile's ``padded_batch`` grids is counted unpriced."""
        t = self.t
        if not (t.padded and (joined or left)):
            return False
        if t._join is None or t._leave is None:
            t.unpriced_changes += 1
            return False
        return True

    def _scales(self, start_s: float) -> tuple[float, float]:
        t = self.t
        if t.speed is None:
            return t.scale, t.prefill_scale
        sd, sp = t.speed.at(start_s)
        return sd * t.scale, sp * t.prefill_scale

    def _draft_prefill(self, proposer: str | None, k: int, n: int, c0: float) -> float:
        """The drafter's pass over the prompt tokens: the drafting proposer's on a step with
        ``k > 0``, else the attached one's (a step with ``k = 0`` drafts with nobody)."""
        t = self.t
        name = proposer if k > 0 and proposer is not None else t.attached
        grid = t._draft_prefill.get(name) if name is not None else None
        return grid(n, c0) if grid is not None else 0.0
