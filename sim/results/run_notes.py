"""What a run's numbers rest on, said beside them: approximations, unfinished requests, thin or
off-target acceptance, extrapolated timing lookups, and the provenance lines of a run."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import polars as pl

from sim.contracts.candidate import Candidate
from sim.contracts.scenario import Scenario
from sim.model.acceptance import FEW_REQUESTS, OUTPUT_LENGTH_RATIO, AcceptanceModel
from sim.model.engine_defaults import ModelLength
from sim.model.step_time import ProfileStepTimer
from sim.results import metric_names as mn

MIXED_STEP_NOTE = (
    "approximation: a step mixing prefill and decode is timed as the sum of the two passes "
    "(a fused pass is cheaper on GPUs; docs/profile-format.md)"
)



def too_long_notes(name: str, seed: int, length: ModelLength, req_df: pl.DataFrame) -> list[str]:
    """What ``max_model_len`` did to a run: the requests it refused (never served as if they
    fit) and a length the scenario set past the model's own."""
    out = [f"{name}: {length.note}"] if length.note else []
    if length.tokens is None or mn.TOO_LONG not in req_df.columns:
        return out
    long = req_df.filter(pl.col(mn.TOO_LONG))
    if long.height:
        top = int((long["prompt_tokens"] + long["output_tokens"]).max())  # type: ignore[arg-type]
        out.append(
            f"{name} seed {seed}: {long.height} of {req_df.height} requests "
            f"({long.height / req_df.height:.2%}) need prompt + output over max_model_len "
            f"{length.tokens:,} (longest {top:,} tokens): rejected on arrival as vLLM rejects them "
            f"(HTTP 400), never served; counted in rejected ({mn.REJECTED_TOO_LONG})")
    return out


def run_notes(scenario: Scenario, cand: Candidate, seed: int, timer: object,
               extrap: dict[str, int] | None, req_df: pl.DataFrame, step_df: pl.DataFrame,
               model: AcceptanceModel | None, k_max: int,
               limits_source: str | None, timing_flags: Sequence[str] = (),
               prefix_shared: bool | None = None) -> tuple[list[str], list[str]]:
    """The notes (step-time grids that break the sanity rules, approximations, unfinished
    requests, thin acceptance, prefix caching with nothing to share) and provenance lines of one
    run. ``timing_flags``: the profile's (``Profile.timing_flags``), said first, since every step
    time rests on them; ``prefix_shared``: whether the requests carry shared-prefix information
    (None: prefix caching off)."""
    notes = list(timing_flags)
    notes += [] if extrap is not None else list(_timer_notes(timer))
    if prefix_shared is False:
        notes.append(no_shared_prefix_note(cand.name, scenario.workload.arrival == "trace"))
    fused = isinstance(timer, ProfileStepTimer) and timer.fused  # one pass per step: no approximation note
    if not fused and step_df.height and (
        step_df.filter((pl.col("decode_seqs") > 0) & (pl.col("prefill_tokens") > 0)).height
    ):
        notes.append(MIXED_STEP_NOTE)
    if not scenario.run.drain:
        n_unf = req_df.filter(pl.col("outcome") == mn.UNFINISHED).height
        if n_unf:
            notes.append(
                f"{cand.name} seed {seed}: {n_unf} requests still in flight at duration_s "
                "(drain = false) end as 'unfinished' and count as not good"
            )
    sources: list[str] = [limits_source] if limits_source else []
    if scenario.fleet.request_overhead is not None:
        sources.append(scenario.fleet.request_overhead.source_line)
    if model is not None and cand.assumed_acceptance is not None:
        sources.append(f"{cand.name}: {model.source} (chosen by a person, not measured)")
    elif model is not None:
        if cand.acceptance_trace is not None:
            sources.append(f"{cand.name}: {model.source}")
        outputs = {
            str(seg): float(med)
            for seg, med in req_df.group_by("segment").agg(pl.col("output_tokens").median()).iter_rows()
        }
        notes.extend(
            acceptance_notes(model, scenario.workload.segment_names, cand.name, k_max, outputs)
        )
    return notes, sources


def no_shared_prefix_note(who: str, trace: bool) -> str:
    """Why a run with prefix caching on shows 0 % hits: nothing in its requests says which
    prompts share tokens, so every block is unique (an "equivalent" verdict says nothing)."""
    missing = "no hash_ids in the trace; " if trace else ""
    # the point first: a condensed note keeps one terminal line
    return (f"{who}: prefix caching is on, but 0 % hits by construction: the traffic carries no "
            f"shared prefix ({missing}no shared_prefix_tokens, documents or conversation on any "
            "segment); add one of those to a segment, or replay a trace with hash_ids (Mooncake, or "
            "JSONL with columns.hash_ids), to see what caching saves (docs/prefix-caching.md)")


def acceptance_notes(
    model: AcceptanceModel,
    segments: Sequence[str],
    who: str,
    k: int,
    output_medians: Mapping[str, float] | None = None,
) -> list[str]:
    """Say when a segment's measured acceptance is thin or off-target: no per-request spread,
    so few requests that its mean is uncertain, or answers much shorter or longer than the
    workload's (``output_medians``: segment -> median output tokens simulated). A wrong mean
    shifts every step count, so every latency."""
    unknown = [s for s in segments if not _spread_known(model, s)]
    notes = []
    for name in segments:
        seg = model.segments.get(name)
        if seg is not None and seg.note:
            notes.append(f"{who}: acceptance for segment {name}: {seg.note}")
    if unknown:
        notes.append(
            f"{who}: acceptance spread across requests unknown for segment(s) "
            f"{', '.join(unknown)}; every request gets the aggregate rates (tails may be "
            "understated)"
        )
    thin: list[str] = []
    no_draft: list[str] = []
    off: dict[str, list[str]] = {"shorter": [], "longer": []}
    for name in segments:
        if name in unknown:
            continue
        mal, half, n = model.precision(name, k)
        if not math.isfinite(mal):  # no prompt drafted anything: no acceptance to give a width to
            no_draft.append(f"{name} ({n} prompt{'s' if n != 1 else ''})")
        elif 0 < n < FEW_REQUESTS:
            width = f"± {half:.2f}" if math.isfinite(half) else "no interval from one request"
            thin.append(f"{name} ({n} requests: {mal:.2f} {width})")
        want = (output_medians or {}).get(name, math.nan)
        had = model.measured_output_tokens(name)
        if want > 0 and had > 0 and max(want / had, had / want) > OUTPUT_LENGTH_RATIO:
            # No simulated number in the text: the note must read the same for every seed.
            off["shorter" if want > had else "longer"].append(f"{name} (~{had:.0f} tokens)")
    if thin:
        notes.append(
            f"{who}: acceptance rests on few measured requests for segment(s) {', '.join(thin)} "
            f"(mean acceptance length at k={k} ± the 95% interval of the mean); measure more "
            "prompts per segment (specplan profile --prompts-per-segment)"
        )
    if no_draft:
        notes.append(
            f"{who}: no draft was proposed in the measured prompts of segment(s) {', '.join(no_draft)}: "
            "those requests are simulated without speculation, and how often another prompt would "
            "get one is unknown"
        )
    for side, names in off.items():
        if names:
            notes.append(
                f"{who}: acceptance was measured on answers over {OUTPUT_LENGTH_RATIO:g}x {side} "
                f"than the simulated outputs for segment(s) {', '.join(names)}; acceptance "
                "changes with answer length (measure with specplan profile --max-new-tokens near "
                "the outputs' lengths)"
            )
    return notes


def _spread_known(model: AcceptanceModel, segment: str) -> bool:
    try:
        return model.spread_known(segment)
    except KeyError:
        return False


def extrapolations(timer: object) -> tuple[dict[str, int] | None, int]:
    """Extrapolated lookups per ``quantity.axis side bound`` (None if the timer has no grids)."""
    grids = getattr(timer, "grids", None)
    if not callable(grids):
        return None, 0
    out: dict[str, int] = {}
    for g in grids():
        for what, n in g.extrapolations().items():
            if n:
                out[f"{g.name.removeprefix('timing.')}.{what}"] = n
    return out, int(getattr(timer, "steps", 0))


def extrapolation_notes(counts: dict[str, int], steps: int, who: str) -> list[str]:
    """``extrapolated: target_forward.context above 2048 in 12.0% of steps (...)`` lines."""
    return [
        f"extrapolated ({who}): {what} in {100.0 * n / max(steps, 1):.1f}% of steps "
        f"({n} of {steps})"
        for what, n in sorted(counts.items())
    ]


def _timer_notes(timer: object) -> list[str]:
    describe = getattr(timer, "describe_extrapolations", None)
    return list(describe()) if callable(describe) else []
