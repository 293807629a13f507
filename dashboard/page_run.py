"""What the run button does, as a plain function: from what the browser sends to what the page shows.

``run_view`` resolves the files through ``dashboard.files``, turns control values into
overrides with ``dashboard.state``, and calls ``dashboard.view`` (which calls the same library
functions as the CLI). The run callback, the benchmark and the tests call it directly; nothing
here needs a Dash context.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dashboard import state as st
from dashboard.figure_style import Figure
from dashboard.files import (
    Roots,
    list_profiles,
    load_named_scenario,
    named_path,
    parse_profile_upload,
    parse_scenario_upload,
    profile_name_of,
    upload_label,
)
from dashboard.html_report import ReportContent, decision_rows, render_report
from dashboard.run_cache import RunCache
from dashboard.view import (
    FIGURE_IDS,
    FIGURES,
    compute_view,
    key_numbers,
    report_content,
    view_figures,
)
from sim.contracts.errors import SpecplanError, read_text
from sim.contracts.profile import Profile, parse_profile_text
from sim.contracts.scenario import Scenario
from sim.decisions.acceptance_needed import DEFAULT_BUDGET

UPLOADED = "__upload__"
"""Dropdown value meaning 'the uploaded file' (uploads live in a dcc.Store, never on disk)."""


def resolve_scenario(roots: Roots, value: str | None, uploaded: Mapping[str, Any] | None) -> tuple[Scenario, str | None]:
    """The chosen scenario and its scenarios/ name (None for an upload)."""
    if value == UPLOADED:
        if not uploaded or "text" not in uploaded:
            raise SpecplanError("no uploaded scenario: upload a .toml file or pick one from scenarios/")
        return parse_scenario_upload(str(uploaded["text"]), str(uploaded.get("name")), roots), None
    if not value:
        raise SpecplanError("no scenario chosen: pick one from scenarios/ or upload a .toml file")
    return load_named_scenario(roots, value), value


def resolve_profile(roots: Roots, value: str | None, uploaded: Mapping[str, Any] | None,
                    scenario: Scenario) -> tuple[Profile, str | None, str]:
    """The chosen profile (or the scenario's own, if it lies in profiles/), its name, and a
    digest of its content (the key finished runs are cached under)."""
    if value == UPLOADED:
        if not uploaded or "text" not in uploaded:
            raise SpecplanError("no uploaded profile: upload a .json profile or pick one from profiles/")
        text = str(uploaded["text"])
        label = upload_label(str(uploaded.get("name")), "uploaded.json")
        key = _sha(text.encode())
        return _parsed(label, key, lambda: parse_profile_upload(text, str(uploaded.get("name")))), None, key
    name = value or profile_name_of(scenario, roots)
    if name is None:
        raise SpecplanError(
            f"{scenario.origin or scenario.name}: fleet.profile: not a file in profiles/; choose a "
            f"profile (available: {', '.join(list_profiles(roots)) or 'none'}) or upload one")
    path = named_path(roots.profiles, name, ".json", "profile")
    text = read_text(path, "profile")  # size and encoding checked as load_profile does
    key = _sha(text.encode())
    return _parsed(str(path), key, lambda: parse_profile_text(text, str(path))), name, key


_PARSED: dict[tuple[str, str], Profile] = {}
_PARSED_KEEP = 8


def _parsed(origin: str, key: str, parse: Callable[[], Profile]) -> Profile:
    """The profile parsed from content ``key`` under ``origin``, parsed once per process: a
    what-if re-reads the same file, and validating a measured profile is ~40 ms of each
    redraw (a Profile is frozen, so one object serves every run). The file is still read each
    time, so an edited file is parsed afresh."""
    hit = _PARSED.get((origin, key))
    if hit is None:
        hit = parse()
        if len(_PARSED) >= _PARSED_KEEP:
            del _PARSED[next(iter(_PARSED))]
        _PARSED[(origin, key)] = hit
    return hit


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class RunOutput:
    """What one run puts on the page."""

    figures: dict[str, Figure]
    decisions: list[dict[str, str]]
    key_numbers: list[dict[str, object]]
    sources: list[str]
    notes: list[str]
    scenario_toml: str
    search: str
    status: str
    report: dict[str, Any]
    verdict: list[str]
    limits: list[str]
    """What limits each candidate's capacity (``View.bottlenecks`` in words)."""
    key: str
    """``view_key`` of the inputs this run came from: the page marks results stale when they differ."""


def view_key(roots: Roots, *, scenario_value: str | None, uploaded_scenario: Mapping[str, Any] | None,
             profile_value: str | None, uploaded_profile: Mapping[str, Any] | None,
             whatif: Mapping[str, Any], load_text: str | None, seeds: Any) -> str:
    """A digest of what a run depends on, as the controls say it: the files (uploads by content),
    the what-ifs as overrides (so 20 and 20.0 are one view), the load points and seeds. Raw
    values stand in where they do not parse: a control that cannot run differs from any run."""
    up = {k: _sha(str(v.get("text", "")).encode()) if isinstance(v, Mapping) else None
          for k, v in (("scenario", uploaded_scenario), ("profile", uploaded_profile))}
    try:
        base, _ = resolve_scenario(roots, scenario_value, uploaded_scenario)
        what: Any = st.overrides_from_controls(base, whatif)
        factors: Any = st.parse_load_factors(load_text or "1")
    except SpecplanError:
        what, factors = dict(whatif), load_text
    parts = [scenario_value, up["scenario"] if scenario_value == UPLOADED else None, profile_value,
             up["profile"] if profile_value == UPLOADED else None, what, factors, str(seeds)]
    return _sha(json.dumps(parts, sort_keys=True, default=str).encode())


def run_view(
    roots: Roots,
    *,
    scenario_value: str | None,
    uploaded_scenario: Mapping[str, Any] | None,
    profile_value: str | None,
    uploaded_profile: Mapping[str, Any] | None,
    whatif: Mapping[str, Any],
    load_text: str | None,
    seeds: Any,
    progress: Callable[[int, int, str], None] | None = None,
    cache: RunCache | None = None,
) -> RunOutput:
    """Everything the run button does, from raw control values to figures and tables."""
    t0 = time.perf_counter()
    key = view_key(roots, scenario_value=scenario_value, uploaded_scenario=uploaded_scenario,
                   profile_value=profile_value, uploaded_profile=uploaded_profile, whatif=whatif,
                   load_text=load_text, seeds=seeds)
    base, scen_name = resolve_scenario(roots, scenario_value, uploaded_scenario)
    profile, prof_name, profile_key = resolve_profile(roots, profile_value, uploaded_profile, base)
    overrides = st.overrides_from_controls(base, whatif)
    factors = st.parse_load_factors(load_text or "1")
    try:
        n_seeds = int(seeds) if seeds not in (None, "") else 1
    except (TypeError, ValueError):
        raise SpecplanError(f"seeds per point: expected a whole number, got {str(seeds)[:20]!r}") from None
    vs = st.ViewState(scen_name, prof_name if profile_value else None, overrides, factors, n_seeds)
    scenario = st.apply(base, vs)
    view = compute_view(scenario, profile, load_factors=factors, progress=progress, cache=cache,
                        profile_key=profile_key, acceptance_budget=DEFAULT_BUDGET)
    t1 = time.perf_counter()
    figs = view_figures(view)
    content = report_content(view, figs)
    t2 = time.perf_counter()
    n_seeds = len(scenario.run.seeds)
    fresh = int(view.seconds.get("runs_simulated", 0))
    runs = fresh + int(view.seconds.get("runs_reused", 0))
    grid = len(scenario.candidates) * len(factors)
    status = (f"{runs * n_seeds} simulations ({len(scenario.candidates)} candidates × {len(factors)} load points, "
              f"{runs - grid} more around the candidates' capacities, × {n_seeds} seed(s); "
              f"{fresh * n_seeds} run now, the rest reused) in {t1 - t0:.1f} s, charts in {t2 - t1:.1f} s")
    spent = sum(n.runs for n in view.answer.needs) if view.answer is not None else 0
    if spent:
        status += f"; {spent} more for the acceptance each candidate needs"
    report = {"title": content.title, "subtitle": content.subtitle, "decisions": list(content.decisions),
              "key_numbers": list(content.key_numbers), "scenario_toml": content.scenario_toml,
              "sources": list(content.sources), "notes": list(content.notes), "name": scenario.name,
              "verdict": list(content.verdict), "limits": list(content.limits)}
    return RunOutput(figs, decision_rows(view.decisions.to_dicts()), key_numbers(view), list(view.sources),
                     list(view.notes), content.scenario_toml, st.to_search(vs), status, report,
                     list(view.verdict), list(content.limits), key)


def report_from_page(figures: Sequence[Mapping[str, Any] | None], data: Mapping[str, Any]) -> str:
    """The HTML report of what is on screen: the figures as the browser holds them."""
    sections = dict(FIGURES)
    figs = [(sections[fid], fid, fig) for fid, fig in zip(FIGURE_IDS, figures, strict=True) if fig]
    content = ReportContent(
        title=str(data.get("title", "specplan report")), subtitle=str(data.get("subtitle", "")),
        figures=figs, decisions=list(data.get("decisions", [])), key_numbers=list(data.get("key_numbers", [])),
        scenario_toml=str(data.get("scenario_toml", "")), sources=list(data.get("sources", [])),
        notes=list(data.get("notes", [])), verdict=list(data.get("verdict", [])),
        limits=list(data.get("limits", [])),
    )
    return render_report(content)


def open_run_cache(folder: str | None) -> RunCache | None:
    """The cache of finished runs shared by the app's worker processes (None: no reuse)."""
    if folder is None:
        return None
    import diskcache

    return diskcache.Cache(folder, size_limit=RUN_CACHE_BYTES)


RUN_CACHE_BYTES = 512 * 1024 * 1024
"""Finished runs kept for reuse (least recently used are dropped beyond this)."""
