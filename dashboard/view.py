"""One view of a scenario: the runs behind every chart, and the charts themselves.

The dashboard's run callback, ``specplan report`` and the benchmark all call
:func:`compute_view` then :func:`view_figures`, so what the browser shows and what the report
holds are the same numbers. Nothing here simulates: it calls ``sim.results.runner.run_scenario`` at the
scenario's load and at each load factor of the sweep (``Scenario.with_load_scale``), the break-
even model (``sim.decisions.breakeven``), the acceptance models the simulator uses (``sim.model.acceptance``) and
the decision rules (``sim.decisions.rules``), and reshapes their frames for the figure builders.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import plotly.graph_objects as go
import polars as pl

from dashboard import figures as fg
from dashboard.colors import candidate_colors
from dashboard.html_report import ReportContent
from dashboard.state import DEFAULT_LOAD_FACTORS
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.profile_acceptance import AcceptanceKey
from sim.contracts.scenario import Scenario
from sim.decisions.breakeven import BreakevenRow, acceptance_length_rates, breakeven_from_profile
from sim.decisions.rules import decision_table, decisions_frame
from sim.model.acceptance import AcceptanceModel
from sim.results import metric_names as mn
from sim.results.metrics import with_latencies
from sim.results.runner import ScenarioResult, aggregate, run_scenario

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
    (fleet req/s) and ``rate`` (req/s per replica, what ``sim.decisions.rules`` reads)."""
    acceptance: pl.DataFrame
    breakeven: pl.DataFrame
    breakeven_label: str
    decisions: pl.DataFrame
    sources: tuple[str, ...]
    notes: tuple[str, ...]
    seconds: Mapping[str, float] = field(default_factory=dict)
    """Wall time of each part (simulation, figures), for the benchmark and the page footer."""
    verdict: tuple[str, ...] = ()
    """The answer first (``sim.results.verdict`` at the scenario's load, then the replicas each
    candidate needs from the sweep, ``sim.decisions.fleet_sizing``): the page and the report lead with it."""

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


class RunCache(Protocol):
    """Where finished runs are kept between what-ifs (a ``diskcache.Cache`` or a dict)."""

    def get(self, key: str, default: Any = None) -> Any: ...
    def __setitem__(self, key: str, value: Any) -> None: ...


def _digest(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _run_keys(scenario: Scenario, profile_key: str) -> dict[str, str]:
    """One cache key per candidate: everything that decides its run except the other candidates
    (runs are independent per candidate: the same seed gives the same workload and draws)."""
    d = scenario.to_dict()
    cands = d.pop("candidates", [])
    base = _digest(d, str(scenario.trace_path), profile_key)
    return {c.name: f"run:{_digest(base, cd)}" for c, cd in zip(scenario.candidates, cands, strict=True)}


def _ipc(frame: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.write_ipc(buf, compression="zstd")
    return buf.getvalue()


def _pack(result: ScenarioResult, name: str) -> tuple[bytes, bytes, bytes, list[str], list[str]]:
    """One candidate's share of a result: its frames and the provenance/notes lines about it."""
    def own(frame: pl.DataFrame) -> bytes:
        return _ipc(frame.filter(pl.col(mn.CANDIDATE) == name))

    others = [c for c in result.candidates if c != name]
    sources = [ln for ln in result.sources if not any(ln.startswith(f"{o}:") for o in others)]
    notes = [ln for ln in result.notes if not any(ln.startswith(f"{o} ") or ln.startswith(f"{o}:") for o in others)]
    return own(result.per_seed), own(result.requests), own(result.steps), sources, notes


def _assemble(scenario: Scenario, pieces: Mapping[str, tuple[bytes, bytes, bytes, list[str], list[str]]]) -> ScenarioResult:
    names = [c.name for c in sorted(scenario.candidates, key=lambda c: not c.is_baseline)]
    per_seed, requests, steps = ([pl.read_ipc(io.BytesIO(pieces[n][i])) for n in names] for i in range(3))
    per_seed_df = pl.concat(per_seed, how="vertical")
    return ScenarioResult(
        scenario=scenario, summary=aggregate(per_seed_df), per_seed=per_seed_df,
        requests=pl.concat(requests, how="vertical"), steps=pl.concat(steps, how="vertical"),
        sources=tuple(dict.fromkeys(ln for n in names for ln in pieces[n][3])),
        notes=tuple(dict.fromkeys(ln for n in names for ln in pieces[n][4])),
        candidates=tuple(names), seeds=tuple(scenario.run.seeds),
    )


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
        keys = _run_keys(s, profile_key) if cache is not None and profile_key else {}
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
        pieces = dict(hits)
        for name in missing:
            assert fresh is not None
            pieces[name] = _pack(fresh, name)
            cache[keys[name]] = pieces[name]
        results[f] = (s, _assemble(s, pieces))
    t_sim = time.perf_counter() - t0
    base_s, base = results[1.0]
    parts = []
    for f in factors:
        s, r = results[f]
        rate = offered_rate(s, r)
        parts.append(r.summary.with_columns(
            pl.lit(f).alias("load_factor"), pl.lit(rate).alias("offered_rate"),
            pl.lit(rate / s.fleet.replicas).alias("rate"),
        ))
    sweep = pl.concat(parts, how="vertical_relaxed")
    base_rate = offered_rate(base_s, base) / base_s.fleet.replicas
    ks = {c.name: c.max_k for c in base_s.speculative}
    decisions = decisions_frame(decision_table(sweep, base_s.baseline.name, operating_rate=base_rate, ks=ks))
    be, be_label, be_notes = breakeven_frame(base_s, profile)
    notes = list(base.notes) + be_notes
    if any(len(results[f][1].seeds) == 1 for f in factors):
        notes.append("one seed per load point: no confidence intervals (raise 'seeds' for them)")
    return View(
        verdict=view_verdict(base_s, base, sweep),
        scenario=base_s, profile=profile, result=base, sweep=sweep,
        acceptance=acceptance_frame(base_s, profile), breakeven=be, breakeven_label=be_label,
        decisions=decisions, sources=tuple(base.sources), notes=tuple(dict.fromkeys(notes)),
        seconds={"simulate": t_sim, "runs_reused": float(reused),
                 "runs_simulated": float(sum(len(p[-1]) for p in plan))},
    )


def view_verdict(scenario: Scenario, result: ScenarioResult, sweep: pl.DataFrame) -> tuple[str, ...]:
    """The verdict lines at the scenario's load and the fleet each candidate needs (the same
    ``sim.results.verdict`` the terminal prints, and ``sim.decisions.fleet_sizing`` over the sweep)."""
    from sim.decisions.fleet_sizing import size_from_sweep
    from sim.decisions.sustain import criteria_from_scenario

    v = result.verdict()
    lines = list(v.lines()) if v is not None else []
    offered = offered_rate(scenario, result)
    try:
        criteria = criteria_from_scenario(scenario)
    except SpecplanError:
        return tuple(lines)  # no SLO: no sizing to give
    sizing = size_from_sweep(sweep, offered, criteria, scenario.candidate_names)
    lines.append(f"fleet for {offered:g} req/s, from the load sweep (upper bounds; `specplan capacity` "
                 f"searches exactly):")
    lines += [f"  {z.describe(offered)}" for z in sizing]
    return tuple(lines)


def acceptance_frame(scenario: Scenario, profile: Profile) -> pl.DataFrame:
    """Survival rate per draft position for every speculative candidate × scenario segment,
    from the same acceptance models the simulator samples (assumed rates win over the profile).

    Columns: ``candidate``, ``segment``, ``position``, ``rate``, ``method``.
    """
    rows = []
    for c in scenario.speculative:
        assert c.proposer is not None
        if c.assumed_acceptance is not None:
            model = AcceptanceModel.from_assumed(c.assumed_acceptance, scenario.workload.segment_names, c.proposer)
            method = "assumed"
        else:
            keys = {s.name: (s.acceptance.task, s.acceptance.language, s.temperature)
                    for s in scenario.workload.segments if s.acceptance is not None}
            model = AcceptanceModel.from_profile(profile, c.proposer, keys)
            method = profile.acceptance[c.proposer].provenance.method
        for seg in scenario.workload.segment_names:
            agg = model.segment(seg).aggregate
            for pos in range(1, min(len(agg), max(c.max_k, 1)) + 1):
                rows.append({"candidate": c.name, "segment": seg, "position": pos,
                             "rate": float(agg[pos - 1]), "method": method})
    return pl.DataFrame(rows, schema={"candidate": pl.String, "segment": pl.String, "position": pl.Int64,
                                      "rate": pl.Float64, "method": pl.String})


def breakeven_frame(scenario: Scenario, profile: Profile, *, batch: int = 1) -> tuple[pl.DataFrame, str, list[str]]:
    """D(k), V(k), H(k) and time per committed token for k = 1..max k of each candidate.

    Evaluated at ``batch`` sequences and a context of the largest segment's median prompt
    length, with that segment's acceptance (or the candidate's assumed rates). Returns the
    frame, a label saying where it was evaluated, and notes (extrapolations).
    """
    seg = max(scenario.workload.segments, key=lambda s: s.share)
    context = typical_length(seg.prompt_tokens)
    rows: list[dict[str, object]] = []
    notes: list[str] = []
    for c in scenario.speculative:
        assert c.proposer is not None
        k_top = max(1, c.max_k)
        key = None if seg.acceptance is None else AcceptanceKey(seg.acceptance.task, seg.acceptance.language,
                                                                 seg.temperature)
        try:
            if c.assumed_acceptance is not None or key is None:
                res = breakeven_from_profile(profile, c.proposer, alpha=0.0, batch=batch, context=context,
                                             k_max=k_top)
                rates = list(c.assumed_acceptance or [])
                brs = [BreakevenRow(r.k, r.draft_s, r.verify_s, r.overhead_s,
                                    acceptance_length_rates(rates, r.k), r.baseline_s) for r in res.rows]
            else:
                res = breakeven_from_profile(profile, c.proposer, segment=key, batch=batch, context=context,
                                             k_max=k_top)
                brs = list(res.rows)
        except SpecplanError as exc:
            notes.append(f"break-even for {c.name} not drawn: {exc}")
            continue
        notes += [f"break-even {c.name}: {n}" for n in res.notes]
        for r in brs:
            rows.append({"candidate": c.name, "k": r.k, "draft_ms": r.draft_s * 1e3, "verify_ms": r.verify_s * 1e3,
                         "overhead_ms": r.overhead_s * 1e3, "per_token_ms": r.time_per_token_s * 1e3,
                         "baseline_ms": r.baseline_s * 1e3})
    label = f"batch {batch}, context {context:g} tokens, acceptance of segment {seg.name}"
    frame = pl.DataFrame(rows, schema={"candidate": pl.String, "k": pl.Int64, "draft_ms": pl.Float64,
                                       "verify_ms": pl.Float64, "overhead_ms": pl.Float64,
                                       "per_token_ms": pl.Float64, "baseline_ms": pl.Float64})
    return frame, label, notes


def typical_length(d: object) -> float:
    """A length distribution's middle: the median (lognormal, empirical), the value (fixed) or
    the midpoint (uniform); 512 tokens when unknown."""
    kind = getattr(d, "dist", None)
    if kind == "fixed" and getattr(d, "value", None) is not None:
        return float(d.value)  # type: ignore[attr-defined]
    if kind == "lognormal" and getattr(d, "median", None) is not None:
        return float(d.median)  # type: ignore[attr-defined]
    if kind == "uniform" and getattr(d, "min", None) is not None and getattr(d, "max", None) is not None:
        return (d.min + d.max) / 2.0  # type: ignore[attr-defined]
    vals = getattr(d, "values", None)
    if kind == "empirical" and vals:
        v = sorted(vals)
        return float(v[len(v) // 2])
    return 512.0


def latency_values(result: ScenarioResult, metric: str) -> pl.DataFrame:
    """Per-request latency in ms of the first seed's measured, completed requests:
    ``candidate``, ``value_ms`` (latencies as ``sim.results.metrics.with_latencies`` defines them)."""
    seed = result.seeds[0]
    req = with_latencies(result.requests.filter((pl.col(mn.SEED) == seed) & pl.col("in_window")))
    col = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2el_s"}[metric]
    return req.select(mn.CANDIDATE, (pl.col(col) * 1000.0).alias("value_ms")).drop_nulls()


def view_figures(view: View) -> dict[str, go.Figure]:
    """Every chart of the view, keyed by :data:`FIGURE_IDS`."""
    colors = view.colors
    slo = view.scenario.slo.limits
    allseg = view.sweep.filter(pl.col(mn.SEGMENT) == mn.ALL_SEGMENTS)
    res = view.result
    first = res.seeds[0]
    steps = res.steps.filter(pl.col(mn.SEED) == first)
    duration = view.scenario.run.duration_s
    bin_s = max(1.0, duration / 300.0)
    out: dict[str, go.Figure] = {}
    for m in ("ttft", "tpot", "e2el", "pause"):
        out[f"lat-{m}"] = fg.latency_vs_load(allseg, m, colors, slo_ms=slo.get(m))
    out["goodput"] = fg.goodput_vs_load(allseg, colors)
    out["cost"] = fg.cost_vs_load(allseg, colors)
    for m in ("ttft", "tpot", "e2el"):
        out[f"cdf-{m}"] = fg.latency_cdf(latency_values(res, m), m, colors, slo_ms=slo.get(m))
    out["acc-position"] = fg.acceptance_by_position(view.acceptance, colors)
    seg_rows = res.summary.filter(pl.col(mn.SEGMENT) != mn.ALL_SEGMENTS)
    out["acc-segment"] = fg.acceptance_by_segment(seg_rows, colors)
    be = fg.breakeven_chart(view.breakeven, colors)
    be.update_layout(title_text=f"Break-even of speculation vs k ({view.breakeven_label})")
    out["breakeven"] = be
    out["levels"] = fg.kv_queue_over_time(fg.levels_over_time(steps, bin_s), colors)
    out["levels"].update_layout(title_text=f"KV use and queue length over time (seed {first}, {bin_s:g} s bins)")
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


def report_content(view: View, figs: Mapping[str, go.Figure | Mapping[str, object]]) -> ReportContent:
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
