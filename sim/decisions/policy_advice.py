"""Load-dependent speculation policy: k by batch size and a cut-off with hysteresis, from a profile.

At decode batch ``b`` one speculative step costs ``step(b, k) = V(b, k+1) + D(b, k) + H(b, k)``
(the simulator's own step timer) and commits ``b·M(k)`` tokens, ``M(k) = 1 + s_1 + … + s_k``
from the profile's survival rates (share-weighted over the workload's segments); plain decoding
costs ``T(b) = step(b, 0)`` per ``b`` tokens. So the time per committed token is
``step(b, k) / (b·M(k))`` against ``T(b)/b``: the best k per batch is its argmin, and the cut-off
is the largest batch up to which some k still beats the baseline. This is the per-step view: it
ignores queueing, which the simulator (capacity, sweep) adds. The hysteresis band switches
speculation off above the cut-off and back on only below the largest batch where it wins by a
margin, so a batch hovering at the edge does not flap.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.profile_acceptance import AcceptanceKey
from sim.decisions import vllm_config
from sim.model.acceptance_match import match_segment
from sim.model.k_schedule import batch_cost
from sim.model.step_time import ProfileStepTimer


@dataclass(frozen=True, slots=True)
class BatchAdvice:
    """One decode batch size: time per committed token for k = 0..k_max and the best k."""

    batch: int
    baseline_s: float
    """T(b)/b: seconds per committed token without speculation."""
    per_k_s: tuple[float, ...]
    """Seconds per committed token for k = 1..k_max."""
    best_k: int
    """argmin k (0 when no k beats the baseline)."""

    @property
    def speedup(self) -> float:
        """Baseline time per token over the best k's (1.0 when the best is the baseline)."""
        return self.baseline_s / self.per_k_s[self.best_k - 1] if self.best_k else 1.0


@dataclass(frozen=True)
class PolicyAdvice:
    """k by batch, the cut-off with hysteresis, and where the numbers came from."""

    profile: str
    proposer: str
    proposer_kind: str
    context: float
    batches: tuple[BatchAdvice, ...]
    off_above_batch: int | None
    """Speculation off when more than this many requests decode (None: wins at every batch)."""
    on_below_batch: float | None
    """Back on when the decode batch falls below this (hysteresis), None without a cut-off."""
    fixed_k: int
    """The single k to use below the cut-off where per-batch k is not available (0: none)."""
    margin: float
    acceptance: str
    sources: tuple[str, ...]
    notes: tuple[str, ...]
    proposer_identity: Any = None

    @property
    def k_by_batch(self) -> list[list[int]]:
        """``[[batch_at_least, k], …]`` (the scenario's ``k_by_batch`` policy format)."""
        out: list[list[int]] = []
        for b in self.batches:
            if self.off_above_batch is not None and b.batch > self.off_above_batch:
                break
            if not out or out[-1][1] != b.best_k:
                out.append([b.batch if out else 1, b.best_k])
        if self.off_above_batch is not None and (not out or out[-1][1] != 0):
            out.append([self.off_above_batch + 1, 0])
        return out

    def vllm_speculative_config(self) -> dict[str, Any]:
        """The ``speculative_config`` to paste into vLLM (``--speculative-config`` JSON)."""
        return vllm_config.speculative_config(self)

    @property
    def method(self) -> str | None:
        """vLLM's method name for this proposer (``vllm_config.vllm_method``)."""
        return vllm_config.method_of(self)

    def vllm_notes(self) -> list[str]:
        """What the snippet can and cannot express (``vllm_config.notes``)."""
        return vllm_config.notes(self)

    def vllm_snippet(self) -> str:
        """JSON to paste, followed by the caveats as comment lines."""
        return vllm_config.snippet(self)

    def engine_support(self) -> list[tuple[str, vllm_config.EngineSupport]]:
        """Each suggestion of this advice and whether vLLM can run it today (fixed k: yes; k by
        batch, the load cut-off and the KV fallback: idealised, with the deployable form)."""
        if self.fixed_k == 0:
            return []
        rows = [(f"fixed k = {self.fixed_k}", vllm_config.engine_support("fixed"))]
        if len({k for _, k in self.k_by_batch if k}) > 1:
            rows.append(("k by batch size", vllm_config.engine_support("k_by_batch")))
        if self.off_above_batch is not None:
            rows.append((f"off above decode batch {self.off_above_batch}, on below {self.on_below_batch:g}",
                         vllm_config.engine_support("adaptive")))
        rows.append(("off under KV-cache pressure (kv_fallback)", vllm_config.engine_support("kv_fallback")))
        return rows

    def engine_lines(self) -> list[str]:
        """Terminal lines for ``engine_support``."""
        out = []
        for what, e in self.engine_support():
            if e.runs:
                out.append(f"vLLM runs {what} today: {e.how}")
            else:
                out.append(f"vLLM cannot run {what} (an idealised in-engine policy: {e.how}); "
                           f"deployable: {e.deployable}")
        return out

    def scenario_candidates_toml(self) -> str:
        """Two candidates to paste into a scenario to check the advice under queueing."""
        if self.fixed_k == 0:
            return ""
        kb = ", ".join(f"[{b}, {k}]" for b, k in self.k_by_batch)
        lines = ["[[candidates]]", f'name = "{self.proposer}-by-batch"', f'proposer = "{self.proposer}"',
                 'policy = "k_by_batch"', f"k_by_batch = [{kb}]"]
        if self.off_above_batch is not None and self.on_below_batch is not None:
            lines += ["", "[[candidates]]", f'name = "{self.proposer}-adaptive"',
                      f'proposer = "{self.proposer}"', 'policy = "adaptive"', f"k = {self.fixed_k}",
                      f"adaptive = {{on_below_batch = {self.on_below_batch:g}, "
                      f"off_above_batch = {self.off_above_batch}, window_s = 5.0}}"]
        return "\n".join(lines)

    def format_table(self) -> list[str]:
        """Terminal lines: time per committed token by batch and k, best k, cut-off."""
        kmax = len(self.batches[0].per_k_s) if self.batches else 0
        head = f"{'batch':>5}  {'k=0 ms/tok':>10}  " + "  ".join(f"{'k=' + str(k):>7}" for k in range(1, kmax + 1))
        lines = [f"policy advice for {self.proposer} on {self.profile} (context {self.context:.0f} "
                 f"tokens, acceptance {self.acceptance})", head + "  best  speedup"]
        show = {1, *(2**i for i in range(12))}
        if self.off_above_batch is not None:
            show |= {self.off_above_batch, self.off_above_batch + 1}
        for prev, b in zip((None, *self.batches), self.batches, strict=False):
            if prev is None or prev.best_k != b.best_k:
                show.add(b.batch)
        for b in self.batches:
            if b.batch not in show and b is not self.batches[-1]:
                continue
            lines.append(f"{b.batch:>5}  {b.baseline_s * 1e3:>10.3f}  "
                         + "  ".join(f"{t * 1e3:>7.3f}" for t in b.per_k_s)
                         + f"  {b.best_k:>4}  {b.speedup:>6.2f}x")
        if self.fixed_k == 0:
            lines.append("speculation does not beat the baseline at any batch size: keep the baseline")
        elif self.off_above_batch is None:
            lines.append(f"speculation wins at every batch size up to {self.batches[-1].batch}: no cut-off needed")
        else:
            lines.append(f"cut-off: speculation off above decode batch {self.off_above_batch}, back on "
                         f"below {self.on_below_batch:g} (hysteresis, margin {self.margin:.0%}); "
                         f"fixed k below the cut-off: {self.fixed_k}")
        lines += self.engine_lines()
        lines += [f"source: {s}" for s in self.sources] + [f"note: {n}" for n in self.notes]
        return lines


def mixed_survival(profile: Profile, proposer: str,
                   segments: Sequence[tuple[AcceptanceKey, float]] | None) -> tuple[np.ndarray, str]:
    """Share-weighted survival rates over ``segments`` (all profile segments, equal, if None)."""
    entry = profile.acceptance.get(proposer)
    if entry is None:
        raise profile.error(f"acceptance.{proposer}", f"no acceptance entry for proposer {proposer!r} "
                            f"(entries: {', '.join(profile.acceptance) or 'none'})")
    if segments is None:
        chosen = [(s, 1.0) for s in entry.segments]
    else:
        chosen = []
        for key, share in segments:
            seg = match_segment(entry.segments, key)
            if seg is None:
                have = ", ".join(str(s.key) for s in entry.segments)
                raise SpecplanError(f"{profile.origin}: acceptance.{proposer}: no segment matches "
                                    f"{key}; available: {have}")
            chosen.append((seg, float(share)))
    total = sum(w for _, w in chosen)
    if not chosen or total <= 0:
        raise SpecplanError(f"{profile.origin}: acceptance.{proposer}: no segments to weigh")
    rates = sum(np.asarray(s.survival) * (w / total) for s, w in chosen)
    label = " + ".join(f"{s.key} ×{w / total:.2f}" for s, w in chosen)
    return np.asarray(rates, dtype=float), label


def best_fixed_k(rows: Sequence[BatchAdvice], weights: Mapping[int, float] | None = None) -> int:
    """The one k for all of ``rows``: the best (weighted) geometric-mean speedup over them;
    ``weights`` by batch size (default: every batch counts once)."""
    kmax = len(rows[0].per_k_s)
    score = [sum((weights[r.batch] if weights else 1.0) * math.log(r.baseline_s / r.per_k_s[k - 1]) for r in rows)
             for k in range(1, kmax + 1)]
    return int(np.argmax(score)) + 1


def advise_policy(
    profile: Profile,
    proposer: str,
    *,
    segments: Sequence[tuple[AcceptanceKey, float]] | None = None,
    context: float = 512.0,
    batches: Sequence[int] | None = None,
    margin: float = 0.05,
) -> PolicyAdvice:
    """k by batch size, cut-off and hysteresis for ``proposer`` (see module docstring)."""
    if proposer not in profile.proposers:
        raise profile.error("proposers", f"unknown proposer {proposer!r} (profile proposers: "
                            f"{', '.join(profile.proposers) or 'none'})")
    if not 0 <= margin < 1:
        raise SpecplanError(f"--margin: must be in [0, 1), got {margin}")
    if context < 0:
        raise SpecplanError(f"--context: must be >= 0 tokens, got {context}")
    timer = ProfileStepTimer(profile)
    timer.check_proposer(proposer)
    rates, label = mixed_survival(profile, proposer, segments)
    if batches is None:
        top = int(profile.timing.target_forward.axes[0][-1])
        batches = list(range(1, top + 1))
    bs = sorted({int(b) for b in batches})
    if not bs or bs[0] < 1:
        raise SpecplanError(f"--batches: batch sizes must be >= 1, got {list(batches)}")
    rows = []
    for b in bs:  # the per-batch rule's one home (sim/model/k_schedule.py), every row drafting
        cell = batch_cost(timer, proposer, b, context, rates, 1.0)
        rows.append(BatchAdvice(b, cell.per_k_s[0], cell.per_k_s[1:], cell.best_k))
    wins = [r.best_k > 0 for r in rows]
    if not any(wins):
        off, on, fixed = None, None, 0
    else:
        first_loss = next((i for i, w in enumerate(wins) if not w), None)
        off = None if first_loss is None else (rows[first_loss - 1].batch if first_loss > 0 else 0)
        if off == 0:  # loses at the smallest batch already, wins only somewhere above: keep it off
            off, on, fixed = None, None, 0
        else:
            on_rows = [r for r in rows if (off is None or r.batch <= off) and r.speedup >= 1 + margin]
            on = None
            if off is not None:
                on = float(max((r.batch for r in on_rows), default=off))
                if on >= off:
                    on = max(off - 0.5, 0.5)
            fixed = best_fixed_k([r for r in rows if off is None or r.batch <= off])
    notes = [*timer.describe_extrapolations()]
    if fixed == 0:
        notes.append("speculation does not beat the baseline at batch 1: no k and no cut-off to give")
    sources = (f"timing: {profile.timing.provenance.describe()}",
               f"acceptance[{proposer}]: {profile.acceptance[proposer].provenance.describe()}")
    ident = profile.proposers[proposer]
    return PolicyAdvice(profile.name, proposer, ident.kind, float(context), tuple(rows), off, on,
                        fixed, margin, label, sources, tuple(notes), ident)


def reachable_batch(scenario: Any, profile: Profile, proposer: str | None, context: float) -> tuple[int, str]:
    """The largest decode batch the fleet can hold: ``max_num_seqs``, or fewer when the KV
    cache (``sim.model.kv_capacity`` for the engine's memory utilisation) cannot hold that many
    requests at the workload's mean ``context``; and a phrase saying which limit binds."""
    from sim.model.engine_defaults import engine_limits
    from sim.model.kv_capacity import kv_tokens

    eng = scenario.fleet.engine
    top = int(engine_limits(scenario, profile).max_num_seqs)
    fits = int(kv_tokens(profile, eng.memory_utilization, eng.block_size, proposer) // max(context, 1.0))
    if 1 <= fits < top:
        return fits, f"KV holds {fits} requests at context {context:.0f}"
    return top, f"max_num_seqs {top}"


def advise_for_scenario(scenario: Any, profile: Profile, proposer: str, *,
                        margin: float = 0.05,
                        batch_weights: Mapping[int, float] | None = None) -> PolicyAdvice:
    """Advice for a scenario's workload: its segments' acceptance keys and shares, its context
    (mean prompt + half the mean output, estimated from 4000 draws with a fixed seed), and only
    the decode batches the fleet reaches: up to ``max_num_seqs`` or what the KV cache holds at
    that context, whichever is fewer. With ``batch_weights`` (share of decode steps at each batch
    size in a simulation at the scenario's load) the single fixed k is the one that pays best
    over the batches that load produces, weighted by how often each occurs — not a mean over
    batch sizes the fleet never runs."""
    w = scenario.workload
    shares = np.asarray(w.shares, dtype=float) if hasattr(w, "shares") else None
    segs: list[tuple[AcceptanceKey, float]] = []
    ctx_parts: list[float] = []
    rng = np.random.default_rng(np.random.SeedSequence(0))
    for i, s in enumerate(w.segments):
        share = float(shares[i]) if shares is not None else float(s.share)
        if s.acceptance is not None:
            segs.append((AcceptanceKey(s.acceptance.task, s.acceptance.language, float(s.temperature)), share))
        p = float(np.mean(s.prompt_tokens.sample(rng, 4000))) if s.prompt_tokens is not None else 512.0
        o = float(np.mean(s.output_tokens.sample(rng, 4000))) if s.output_tokens is not None else 128.0
        ctx_parts.append(share * (p + o / 2))
    context = float(sum(ctx_parts) / max(sum(float(x) for x in (shares if shares is not None else [1.0])), 1e-12))
    top, why = reachable_batch(scenario, profile, proposer, context)
    advice = advise_policy(profile, proposer, segments=segs or None, context=context,
                           batches=range(1, top + 1), margin=margin)
    notes = [*advice.notes, f"batches 1–{top} considered ({why})"]
    fixed = advice.fixed_k
    if batch_weights and fixed:
        weights = {int(b): float(v) for b, v in batch_weights.items() if 1 <= int(b) <= top and v > 0}
        live = [r for r in advice.batches if r.batch in weights and
                (advice.off_above_batch is None or r.batch <= advice.off_above_batch)]
        if live:
            fixed = best_fixed_k(live, weights)
            lo, hi = min(weights), max(weights)
            notes.append(f"fixed k weighted by the decode batches seen at the scenario's load "
                         f"(batch {lo}–{hi}, by share of steps)")
    return dataclasses.replace(advice, fixed_k=fixed, notes=tuple(notes))


def decode_batch_weights(steps: Any) -> dict[int, float]:
    """Share of decode steps at each decode batch size in a simulation's step records."""
    import polars as pl

    dec = steps.filter(pl.col("decode_seqs") > 0)
    if dec.height == 0:
        return {}
    counts = dec.group_by("decode_seqs").len().sort("decode_seqs")
    return {int(b): n / dec.height for b, n in counts.iter_rows()}


def advise_for_capacity(scenario: Any, profile: Profile, report: Any,
                        candidates: Sequence[str] | None = None) -> list[PolicyAdvice]:
    """Policy advice for each proposer the (chosen) speculative candidates of a capacity report
    use, over the decode batches the scenario's load produces (one simulation of that
    candidate at the scenario's rate), and checked against the capacity search: where the
    search's best candidate for the proposer runs another k, a note says so and why."""
    from sim.model.k_schedule import resolve_candidate
    from sim.results.runner import candidate_profiles, run_scenario

    seen: list[PolicyAdvice] = []
    done: set[tuple[str | None, str | None]] = set()  # (fleet, proposer): each hardware's own table
    caps = {c.candidate: c for c in report.candidates}
    for c in scenario.speculative:
        if (candidates and c.name not in candidates) or (c.fleet, c.proposer) in done:
            continue
        prof = profile if c.fleet is None else candidate_profiles(scenario, None, [c])[c.name]
        if c.proposer not in prof.acceptance:
            continue  # assumed acceptance only: nothing measured to advise from
        done.add((c.fleet, c.proposer))
        res = run_scenario(scenario, profile, [c.name], [scenario.run.seeds[0]])
        advice = advise_for_scenario(scenario.for_candidate(c), prof, c.proposer,
                                     batch_weights=decode_batch_weights(res.steps))
        mine = [x for x in scenario.speculative if x.proposer == c.proposer and x.fleet == c.fleet
                and x.name in caps and caps[x.name].mean > 0]
        if mine:
            best = max(mine, key=lambda x: caps[x.name].mean)
            best = resolve_candidate(scenario, prof, best)  # schedule = "auto": its computed largest k
            if best.max_k != advice.fixed_k and advice.fixed_k:
                advice = dataclasses.replace(advice, fixed_k=best.max_k, notes=(*advice.notes, (
                    f"num_speculative_tokens = {best.max_k}: the k of the capacity search's best "
                    f"{c.proposer} candidate {best.name} ({caps[best.name].mean:.3g} req/s per replica, "
                    f"queueing, prefill and tails included); the per-step table alone would pick "
                    f"k={advice.fixed_k}")))
            else:
                advice = dataclasses.replace(advice, notes=(*advice.notes, (
                    f"agrees with the capacity search: its best {c.proposer} candidate {best.name} "
                    f"runs k={best.max_k}")))
        seen.append(advice)
    return seen
