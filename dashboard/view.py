"""One view of a scenario: the runs behind every chart, and the charts themselves.

The dashboard's run callback, ``specplan report`` and the benchmark all call
:func:`compute_view` then :func:`view_figures`, so what the browser shows and what the report
holds are the same numbers. Nothing here simulates: it calls ``sim.results.runner.run_scenario`` at the
scenario's load and at each load factor of the sweep (``Scenario.with_load_scale``), the break-
even model (``sim.decisions.breakeven``), the acceptance models the simulator uses (``sim.model.acceptance``) and
the one decision (``sim.decisions.answer``: seeds added at the scenario's load until it is
resolved, as ``specplan simulate`` does), and reshapes their frames for the figure builders.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from dashboard import figures as fg
from dashboard.chart_frames import (
    acceptance_frame,
    breakeven_frame,
    latency_values,
    levels_over_time,
)
from dashboard.colors import candidate_colors
from dashboard.figure_style import Figure
from dashboard.html_report import ReportContent
from dashboard.run_cache import RunCache, assemble, decode, encode, piece, run_keys
from dashboard.state import DEFAULT_LOAD_FACTORS
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.decisions.answer import answer_scenario, device_of, with_load_limit
from sim.decisions.answer_text import Answer, lines, rows, rows_frame
from sim.results import metric_names as mn
from sim.results.runner import ScenarioResult, run_scenario

Progress = Callable[[int, int, str], None]

# Figure ids in display order, with the section each belongs to (layout and report use these).
FIGURES: tuple[tuple[str, str], ...] = (
    ("lat-ttft", "Latency vs offered load"),
    ("lat-tpot", "Latency vs offered load"),
    ("lat-e2el", "Latency vs offered load"),
    ("lat-pause", "Latency vs offered load"),
    ("goodput", "Goodput and cost vs offered load"),
    ("cost", "Goodput and cost vs offered load"),
    ("cdf-ttft", "Latency distributions at the scenario's load"),
    ("cdf-tpot", "Latency distributions at the scenario's load"),
    ("cdf-e2el", "Latency distributions at the scenario's load"),
    ("acc-position", "Acceptance"),
    ("acc-segment", "Acceptance"),
    ("breakeven", "Break-even"),
    ("levels", "Engine state over time"),
)
FIGURE_IDS: tuple[str, ...] = tuple(f for f, _ in FIGURES)

KEY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ttft_ms_p95", "p95 TTFT (ms)"),
    ("tpot_ms_p95", "p95 TPOT (ms)"),
    ("e2el_ms_p95", "p95 E2E (ms)"),
    ("pause_ms_p99", "p99 pause (ms)"),
    ("request_goodput", "goodput (req/s)"),
    ("slo_attainment", "SLO met"),
    ("mean_acceptance_length", "acceptance length"),
    ("cost_per_good_answer_usd", "$ per 1k good answers"),
)


@dataclass(frozen=True)
class View:
    """What one run of the dashboard shows (frames already reshaped for the figure builders)."""

    scenario: Scenario
    """The scenario as run at load factor 1 (what-ifs applied)."""
    profile: Profile
    result: ScenarioResult
    """The run at the scenario's own load: CDFs, levels and per-segment acceptance come from it."""
    sweep: pl.DataFrame
    """Summary rows (every segment) of every load point, plus ``load_factor``, ``offered_rate``
    (fleet req/s) and ``rate`` (req/s per replica)."""
    acceptance: pl.DataFrame
    breakeven: pl.DataFrame
    breakeven_label: str
    decisions: pl.DataFrame
    sources: tuple[str, ...]
    notes: tuple[str, ...]
    seconds: Mapping[str, float] = field(default_factory=dict)
    """Wall time of each part (simulation, figures), for the benchmark and the page footer."""
    verdict: tuple[str, ...] = ()
    """The answer first (the decision's lines at the scenario's load, the same ``specplan
    simulate`` prints, then the replicas each candidate needs from the sweep,
    ``sim.decisions.fleet_sizing``): the page and the report lead with it."""
    answer: Answer | None = None
    """The decision itself (``decisions`` and ``verdict`` render it)."""

    @property
    def colors(self) -> dict[str, str]:
        return candidate_colors(self.scenario.candidate_names, self.scenario.baseline.name)


def offered_rate(scenario: Scenario, result: ScenarioResult) -> float:
    """Fleet arrival rate in req/s: the scenario's mean rate, or for a trace the arrivals per
    second in the measured window of the run (averaged over seeds)."""
    r = scenario.workload.mean_rate(scenario.run.duration_s)
    if r is not None:
        return float(r)
    req = result.requests
    first = req.filter(pl.col(mn.CANDIDATE) == result.candidates[0])
    n = first.filter(pl.col("in_window")).height / max(1, len(result.seeds))
    return n / scenario.run.measured_s


def compute_view(
    scenario: Scenario,
    profile: Profile,
    *,
    load_factors: tuple[float, ...] = DEFAULT_LOAD_FACTORS,
    progress: Progress | None = None,
    cache: RunCache | None = None,
    profile_key: str | None = None,
) -> View:
    """Run the scenario at each load factor (1.0 always included) and assemble the view.

    With a ``cache`` (and a ``profile_key`` naming the profile's content), each candidate's run
    at each load point is kept, so a what-if re-simulates only what it changed: another k
    reruns one candidate, a new rate reuses the load points the old sweep already covered.
    """
    factors = tuple(sorted({1.0, *load_factors}))
    t0 = time.perf_counter()
    order = sorted(factors, key=lambda f: (f != 1.0, f))  # the detailed run first
    plan: list[tuple[float, Scenario, dict[str, str], dict[str, Any], list[str]]] = []
    for f in order:
        s = scenario if f == 1.0 else scenario.with_load_scale(f)
        keys = run_keys(s, profile_key) if cache is not None and profile_key else {}
        hits = {n: cache.get(k) for n, k in keys.items()} if cache is not None else {}
        hits = {n: v for n, v in hits.items() if v is not None}
        missing = [c.name for c in s.candidates if c.name not in hits]
        plan.append((f, s, keys, hits, missing))
    seeds = len(scenario.run.seeds)
    total = max(1, sum(len(p[-1]) for p in plan) * seeds)
    done_before = 0
    results: dict[float, tuple[Scenario, ScenarioResult]] = {}
    reused = 0
    for f, s, keys, hits, missing in plan:
        def point_progress(done: int, _total: int, label: str, _base: int = done_before, _f: float = f) -> None:
            if progress is not None:
                progress(_base + done, total, f"load ×{_f:g}: {label}")

        fresh = run_scenario(s, profile, candidates=missing, progress=point_progress) if missing else None
        done_before += len(missing) * seeds
        reused += len(s.candidates) - len(missing)
        if not keys or cache is None:
            assert fresh is not None
            results[f] = (s, fresh)
            continue
        pieces = {n: decode(v) for n, v in hits.items()}
        for name in missing:
            assert fresh is not None
            pieces[name] = piece(fresh, name)
            cache[keys[name]] = encode(pieces[name])
        results[f] = (s, assemble(s, pieces))
    base_s, base = results[1.0]
    sizing = _sizing(base_s, base, results)
    if len(base.candidates) > 1:
        before = len(base.seeds)
        base, answer = answer_scenario(base_s, profile, result=base,
                                       sizes={z.candidate: z.replicas for z in sizing})
        results[1.0] = (base_s, base)
        answer = with_load_limit(answer, [(offered_rate(s, r), r) for f, (s, r) in results.items() if f > 1.0],
                                 device=device_of(profile, base_s))
        if len(base.seeds) > before and progress is not None:
            progress(total, total, f"load ×1: {len(base.seeds)} seeds")
    else:
        answer = None
    t_sim = time.perf_counter() - t0
    parts = []
    for f in factors:
        s, r = results[f]
        rate = offered_rate(s, r)
        parts.append(r.summary.with_columns(
            pl.lit(f).alias("load_factor"), pl.lit(rate).alias("offered_rate"),
            pl.lit(rate / s.fleet.replicas).alias("rate"),
        ))
    sweep = pl.concat(parts, how="vertical_relaxed")
    decisions = rows_frame(rows(answer)) if answer is not None else rows_frame([])
    be, be_label, be_notes = breakeven_frame(base_s, profile)
    notes = list(base.notes) + be_notes
    if any(len(results[f][1].seeds) == 1 for f in factors):
        notes.append("one seed per load point: no confidence intervals (raise 'seeds' for them)")
    return View(
        verdict=view_verdict(base_s, base, sizing, answer), answer=answer,
        scenario=base_s, profile=profile, result=base, sweep=sweep,
        acceptance=acceptance_frame(base_s, profile), breakeven=be, breakeven_label=be_label,
        decisions=decisions, sources=tuple(base.sources), notes=tuple(dict.fromkeys(notes)),
        seconds={"simulate": t_sim, "runs_reused": float(reused),
                 "runs_simulated": float(sum(len(p[-1]) for p in plan))},
    )


def _sizing(scenario: Scenario, base: ScenarioResult, results: Mapping[float, tuple[Scenario, ScenarioResult]]) -> list[Any]:
    """Replicas each candidate needs for the offered rate, from the load points
    (``sim.decisions.fleet_sizing``); none without an SLO."""
    from sim.decisions.fleet_sizing import size_from_sweep
    from sim.decisions.sustain import criteria_from_scenario

    try:
        criteria = criteria_from_scenario(scenario)
    except SpecplanError:
        return []
    parts = []
    for _f, (s, r) in sorted(results.items()):
        parts.append(r.summary.with_columns(pl.lit(offered_rate(s, r) / s.fleet.replicas).alias("rate")))
    frame = pl.concat(parts, how="vertical_relaxed")
    return size_from_sweep(frame, offered_rate(scenario, base), criteria, scenario.candidate_names)


def view_verdict(scenario: Scenario, result: ScenarioResult, sizing: list[Any],
                 answer: Answer | None) -> tuple[str, ...]:
    """The decision's lines at the scenario's load (what the terminal prints) and the fleet each
    candidate needs from the load points."""
    out = list(lines(answer, wrap=False)) if answer is not None else ["verdict: one candidate only, nothing to compare"]
    if sizing:
        offered = offered_rate(scenario, result)
        out.append(f"fleet for {offered:g} req/s, from the load points (upper bounds; `specplan "
                   f"capacity` searches exactly):")
        out += [f"  {z.describe(offered)}" for z in sizing]
    return tuple(out)


def view_figures(view: View) -> dict[str, Figure]:
    """Every chart of the view, keyed by :data:`FIGURE_IDS`."""
    colors = view.colors
    slo = view.scenario.slo.limits
    allseg = view.sweep.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    res = view.result
    first = res.seeds[0]
    steps = res.steps.filter(pl.col(mn.SEED) == first)
    duration = view.scenario.run.duration_s
    bin_s = max(1.0, duration / 300.0)
    out: dict[str, Figure] = {}
    for m in ("ttft", "tpot", "e2el", "pause"):
        out[f"lat-{m}"] = fg.latency_vs_load(allseg, m, colors, slo_ms=slo.get(m))
    out["goodput"] = fg.goodput_vs_load(allseg, colors)
    out["cost"] = fg.cost_vs_load(allseg, colors)
    for m in ("ttft", "tpot", "e2el"):
        out[f"cdf-{m}"] = fg.latency_cdf(latency_values(res, m), m, colors, slo_ms=slo.get(m))
    out["acc-position"] = fg.acceptance_by_position(view.acceptance, colors)
    seg_rows = res.summary.filter(pl.col(mn.SEGMENT) != mn.ALL_SEGMENTS)
    out["acc-segment"] = fg.acceptance_by_segment(seg_rows, colors)
    out["breakeven"] = fg.breakeven_chart(view.breakeven, colors,
                                          title=f"Break-even of speculation vs k ({view.breakeven_label})")
    out["levels"] = fg.kv_queue_over_time(
        levels_over_time(steps, bin_s), colors,
        title=f"KV use and queue length over time (seed {first}, {bin_s:g} s bins)")
    return out


def key_numbers(view: View) -> list[dict[str, object]]:
    """One row per candidate at the scenario's load: the numbers a decision rests on."""
    rows = []
    s = view.result.summary.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    for row in s.iter_rows(named=True):
        out: dict[str, object] = {"candidate": row[mn.CANDIDATE]}
        for col, label in KEY_COLUMNS:
            v = row.get(col)
            ci = row.get(f"{col}_ci95")
            out[label] = format_number(col, v, ci)
        rows.append(out)
    return rows


def format_number(col: str, v: object, ci: object = None) -> str:
    """A summary value for a table: units by column, ± CI when known, '–' when undefined."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    x = float(v)  # type: ignore[arg-type]
    if math.isinf(x):
        return "∞ (no good answers)" if col == mn.COST_PER_GOOD_ANSWER_USD else "∞"
    scale = 1000.0 if col == mn.COST_PER_GOOD_ANSWER_USD else 1.0
    if col == mn.SLO_ATTAINMENT:
        fmt = "{:.1%}"
        text, ci_fmt = fmt.format(x), "{:.1%}"
    elif col == mn.COST_PER_GOOD_ANSWER_USD:
        text, ci_fmt = f"${x * scale:.3g}", "${:.2g}"
    elif "_ms_" in col:
        text, ci_fmt = (f"{x:,.0f}" if x >= 100 else f"{x:.1f}"), "{:.1f}"
    else:
        text, ci_fmt = f"{x:.3g}", "{:.2g}"
    if isinstance(ci, float) and math.isfinite(ci) and ci > 0:
        text += " ± " + ci_fmt.format(ci * scale)
    return text


def report_content(view: View, figs: Mapping[str, Mapping[str, Any]]) -> ReportContent:
    """The report of a view: its charts in display order, decisions, key numbers, the scenario
    as TOML and every provenance line."""
    s = view.scenario
    sections = dict(FIGURES)
    title = f"specplan decision report: {s.name}"
    subtitle = (f"{s.description} · profile {view.profile.name} · {len(s.run.seeds)} seed(s) · "
                f"load points ×{', ×'.join(f'{f:g}' for f in sorted(set(view.sweep['load_factor'].to_list())))}")
    return ReportContent(
        title=title, subtitle=subtitle,
        figures=[(sections[fid], fid, figs[fid]) for fid in FIGURE_IDS if fid in figs],
        decisions=view.decisions.to_dicts(), key_numbers=key_numbers(view), verdict=list(view.verdict),
        scenario_toml=s.to_toml(), sources=list(view.sources), notes=list(view.notes),
    )
