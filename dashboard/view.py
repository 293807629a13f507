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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from dashboard import figures as fg
from dashboard import load_points as lp
from dashboard.acceptance_figure import acceptance_needed_chart
from dashboard.chart_frames import (
    acceptance_frame,
    breakeven_frame,
    latency_values,
    levels_over_time,
)
from dashboard.colors import candidate_colors
from dashboard.figure_style import Figure
from dashboard.html_report import ReportContent
from dashboard.labels import profile_words
from dashboard.run_cache import PointRunner, RunCache
from dashboard.state import DEFAULT_LOAD_FACTORS
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.decisions.acceptance_needed_text import need_frame
from sim.decisions.answer import answer_scenario, device_of, with_acceptance_needed, with_load_limit
from sim.decisions.answer_export import rows_frame
from sim.decisions.answer_rows import rows
from sim.decisions.answer_text import Answer, lines
from sim.decisions.bottleneck import Bottleneck, attribute_result
from sim.decisions.bottleneck_text import describe
from sim.decisions.sustain import SustainCriteria, criteria_from_scenario
from sim.results import metric_names as mn
from sim.results.intervals import interval_text
from sim.results.runner import ScenarioResult

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
    ("acc-needed", "Acceptance"),
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
    ("spec_off_step_share", "spec. off (share of decode steps)"),
    ("spec_off_time_share", "spec. off (share of decode time)"),
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
    bracket: pl.DataFrame = field(default_factory=pl.DataFrame)
    """Summary rows of the points run for one candidate each, bracketing its estimated capacity
    (columns as ``sweep``); the load charts draw them with the sweep, the decision rules do not."""
    capacity: Mapping[str, lp.CapacityEstimate] = field(default_factory=dict)
    """Each candidate's capacity per replica estimated from its load points (``dashboard.load_points``)."""
    bottlenecks: tuple[Bottleneck, ...] = ()
    """What limits each candidate near its capacity (``sim.decisions.bottleneck``)."""
    verdict: tuple[str, ...] = ()
    """The answer first (the decision's lines at the scenario's load, the same ``specplan
    simulate`` prints, labelled as at the scenario's fixed fleet): the page and the report lead with it."""
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
    acceptance_budget: int = 0,
) -> View:
    """Run the scenario at each load factor (1.0 always included), then each candidate at two
    points bracketing its estimated capacity (``dashboard.load_points``), and assemble the view.

    With a ``cache`` (and a ``profile_key`` naming the profile's content), each candidate's run
    at each load point is kept, so a what-if re-simulates only what it changed: another k
    reruns one candidate, a new rate reuses the load points the old sweep already covered.
    ``acceptance_budget`` > 0: the acceptance each speculative candidate needs at every load
    point of the grid (``sim.decisions.acceptance_needed``, at most that many evaluations per
    point; kept in ``cache`` too), in the answer and its chart.
    """
    factors = tuple(sorted({1.0, *load_factors}))
    t0 = time.perf_counter()
    names = scenario.candidate_names
    points = PointRunner(scenario, profile, cache, profile_key, progress)
    order = sorted(factors, key=lambda f: (f != 1.0, f))  # the detailed run first
    allowance = 2 * len(names)  # the bracketing points, planned once the grid has run
    points.expect(points.uncached(order, names) + allowance)
    results = {f: points.run(f, names) for f in order}
    base_s, base = results[1.0]
    answer: Answer | None = None
    if len(base.candidates) > 1:
        before = len(base.seeds)
        base, answer = answer_scenario(base_s, profile, result=base)
        results[1.0] = (base_s, base)
        answer = with_load_limit(answer, [(offered_rate(s, r), r) for f, (s, r) in results.items() if f > 1.0],
                                 device=device_of(profile, base_s))
        if len(base.seeds) > before and progress is not None:
            progress(max(points.done, points.total), max(points.done, points.total), f"load ×1: {len(base.seeds)} seeds")
        if acceptance_budget > 0:
            answer = with_acceptance_needed(answer, [(offered_rate(s, r), r) for s, r in results.values()], profile,
                                            budget=acceptance_budget, cache=cache, cache_salt=profile_key or "",
                                            progress=progress)
    sweep = pl.concat([_rows(*results[f], f) for f in factors], how="vertical_relaxed")
    rate1 = offered_rate(base_s, base) / base_s.fleet.replicas
    criteria = _criteria(base_s)
    capacity: dict[str, lp.CapacityEstimate] = {}
    runs = [(f, *results[f]) for f in factors]
    bracket = sweep.clear()
    if criteria is not None:
        # each candidate's capacity from its points; points just below and above it; where the
        # first extra point was past the grid's end, a second round brackets it the same way
        have, todo, first = list(factors), list(names), {}
        for round_ in range(2):
            est = lp.estimates(pl.concat([sweep, bracket], how="vertical_relaxed"), criteria, todo)
            if round_:
                todo = [n for n in todo if first[n].estimate is None and est[n].estimate is not None]
                est = {n: est[n] for n in todo}
            first = first or est
            by_factor: dict[float, list[str]] = {}
            for name, fs in lp.bracket_factors(est, rate1, have).items():
                for f in fs:
                    by_factor.setdefault(f, []).append(name)
            points.expect(sum(len(v) for v in by_factor.values()) - (allowance if not round_ else 0))
            for f in sorted(by_factor):
                runs.append((f, *points.run(f, by_factor[f])))
                bracket = pl.concat([bracket, _rows(*runs[-1][1:], f)], how="vertical_relaxed")
            have += list(by_factor)
        capacity = lp.estimates(pl.concat([sweep, bracket], how="vertical_relaxed"), criteria, names)
    t_sim = time.perf_counter() - t0
    decisions = rows_frame(rows(answer)) if answer is not None else rows_frame([])
    be, be_label, be_notes = breakeven_frame(base_s, profile)
    notes = list(base.notes) + be_notes
    if any(len(results[f][1].seeds) == 1 for f in factors):
        notes.append("one seed per load point: no confidence intervals (raise 'seeds' for them)")
    return View(
        verdict=view_verdict(answer), answer=answer,
        scenario=base_s, profile=profile, result=base, sweep=sweep,
        acceptance=acceptance_frame(base_s, profile), breakeven=be, breakeven_label=be_label,
        decisions=decisions, sources=tuple(base.sources), notes=tuple(dict.fromkeys(profile_words(n) for n in notes)),
        seconds={"simulate": t_sim, "runs_reused": float(points.reused),
                 "runs_simulated": float(points.simulated)},
        bracket=bracket, capacity=capacity,
        bottlenecks=_bottlenecks(runs, capacity, profile, criteria, names),
    )


def _rows(s: Scenario, r: ScenarioResult, f: float) -> pl.DataFrame:
    """A load point's summary rows with its load factor and offered rate (fleet and per replica)."""
    rate = offered_rate(s, r)
    return r.summary.with_columns(pl.lit(f).alias("load_factor"), pl.lit(rate).alias("offered_rate"),
                                  pl.lit(rate / s.fleet.replicas).alias("rate"))


def _criteria(scenario: Scenario) -> SustainCriteria | None:
    """What "sustains" means for this scenario's SLOs (None without any SLO)."""
    try:
        return criteria_from_scenario(scenario)
    except SpecplanError:
        return None


def _bottlenecks(runs: Sequence[tuple[float, Scenario, ScenarioResult]],
                 capacity: Mapping[str, lp.CapacityEstimate], profile: Profile,
                 criteria: SustainCriteria | None, names: Sequence[str]) -> tuple[Bottleneck, ...]:
    """What limits each candidate, judged at its load point nearest its estimated capacity
    (``sim.decisions.bottleneck``; the highest point when the capacity lies above them all)."""
    out = []
    for name in names:
        mine = [(f, s, r) for f, s, r in runs if name in r.candidates]
        if not mine:
            continue
        e = capacity.get(name)
        cap = e.estimate if e is not None else None
        above = e is not None and e.lower is not None  # unbracketed: beyond the highest point

        def distance(t: tuple[float, Scenario, ScenarioResult], c: float | None = cap, up: bool = above) -> float:
            rate = offered_rate(t[1], t[2]) / t[1].fleet.replicas
            return abs(math.log(rate / c)) if c else (-rate if up else rate)

        f, s, r = min(mine, key=distance)
        rate = offered_rate(s, r) / s.fleet.replicas
        out += attribute_result(r, profile, criteria=criteria, rate=rate, candidates=[name],
                                capacities=None if cap is None else {name: cap})
    return tuple(out)


def view_verdict(answer: Answer | None) -> tuple[str, ...]:
    """The decision's lines at the scenario's load (what the terminal prints, its fixed-fleet
    label included: the load points are the scenario's fleet, never a fleet size of their own)."""
    return tuple(lines(answer, wrap=False)) if answer is not None else ("verdict: one candidate only, nothing to compare",)


def view_figures(view: View) -> dict[str, Figure]:
    """Every chart of the view, keyed by :data:`FIGURE_IDS`."""
    colors = view.colors
    slo = view.scenario.slo.limits
    points = pl.concat([view.sweep, view.bracket], how="diagonal_relaxed") if view.bracket.height else view.sweep
    allseg = points.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    reps = view.scenario.fleet.replicas
    caps = {c: (e.estimate * reps if e.estimate is not None else None) for c, e in view.capacity.items()}
    res = view.result
    first = res.seeds[0]
    steps = res.steps.filter(pl.col(mn.SEED) == first)
    duration = view.scenario.run.duration_s
    bin_s = max(1.0, duration / 300.0)
    out: dict[str, Figure] = {}
    for m in ("ttft", "tpot", "e2el", "pause"):
        out[f"lat-{m}"] = fg.latency_vs_load(allseg, m, colors, slo_ms=slo.get(m), capacities=caps)
    out["goodput"] = fg.goodput_vs_load(allseg, colors, capacities=caps)
    out["cost"] = fg.cost_vs_load(allseg, colors)
    for m in ("ttft", "tpot", "e2el"):
        out[f"cdf-{m}"] = fg.latency_cdf(latency_values(res, m), m, colors, slo_ms=slo.get(m))
    out["acc-position"] = fg.acceptance_by_position(view.acceptance, colors)
    seg_rows = res.summary.filter(pl.col(mn.SEGMENT) != mn.ALL_SEGMENTS)
    out["acc-segment"] = fg.acceptance_by_segment(seg_rows, colors)
    out["acc-needed"] = acceptance_needed_chart(need_frame(view.answer.needs if view.answer else ()), colors)
    out["breakeven"] = fg.breakeven_chart(view.breakeven, colors,
                                          title=f"Break-even of speculation vs k ({view.breakeven_label})")
    out["levels"] = fg.kv_queue_over_time(
        levels_over_time(steps, bin_s), colors,
        title=f"KV use and queue length over time (seed {first}, {bin_s:g} s bins)")
    return out


def limit_lines(view: View) -> list[str]:
    """What limits each candidate near its capacity, with the capacity estimate it was judged at."""
    out = []
    for b in view.bottlenecks:
        e = view.capacity.get(b.candidate)
        cap = f" (capacity {e.text()})" if e is not None else ""
        out.append(f"{describe(b)}{cap}")
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
    if col in mn.SHARE_COLUMNS:
        fmt, ci_fmt = "{:.1%}".format, "{:.1%}".format
    elif col == mn.COST_PER_GOOD_ANSWER_USD:
        fmt, ci_fmt = (lambda y: f"${y * scale:.3g}"), (lambda y: f"${y * scale:.2g}")
    elif "_ms_" in col:
        fmt, ci_fmt = (lambda y: f"{y:,.0f}" if y >= 100 else f"{y:.1f}"), "{:.1f}".format
    else:
        fmt, ci_fmt = "{:.3g}".format, "{:.2g}".format
    half = float(ci) if isinstance(ci, (int, float)) else None  # type: ignore[arg-type]
    # clipped to the metric's range (attainment never above 100 %): sim.results.intervals
    return fmt(x) + interval_text(x, half, fmt, *mn.metric_range(col), half_fmt=ci_fmt)


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
        limits=limit_lines(view),
        scenario_toml=s.to_toml(), sources=list(view.sources), notes=list(view.notes),
    )
