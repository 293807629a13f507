"""Callbacks: URL ↔ controls, uploads, the (background) run, and the report export.

The run callback's body is :func:`run_view`, a plain function from what the browser sends to
what the page shows: it resolves the files through ``dashboard.files``, turns control values
into overrides with ``dashboard.state``, and calls ``dashboard.view`` (which calls the same
library functions as the CLI). The benchmark and tests call it directly.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from dash import ALL, Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dashboard import layout as ly
from dashboard import state as st
from dashboard.files import (
    Roots,
    decode_upload,
    list_profiles,
    list_scenarios,
    load_named_profile,
    load_named_scenario,
    named_path,
    parse_profile_upload,
    parse_scenario_upload,
    profile_name_of,
    upload_label,
)
from dashboard.html_report import DECISION_COLUMNS, ReportContent, decision_rows, render_report
from dashboard.view import (
    FIGURE_IDS,
    FIGURES,
    RunCache,
    compute_view,
    key_numbers,
    report_content,
    view_figures,
)
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario

UPLOADED = "__upload__"
"""Dropdown value meaning 'the uploaded file' (uploads live in a dcc.Store, never on disk)."""


# --------------------------------------------------------------------------------------------
# pure helpers (no Dash context)


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
        return parse_profile_upload(text, str(uploaded.get("name"))), None, _sha(text.encode())
    name = value or profile_name_of(scenario, roots)
    if name is None:
        raise SpecplanError(
            f"{scenario.origin or scenario.name}: fleet.profile: not a file in profiles/; choose a "
            f"profile (available: {', '.join(list_profiles(roots)) or 'none'}) or upload one")
    profile = load_named_profile(roots, name)
    try:
        key = _sha(named_path(roots.profiles, name, ".json", "profile").read_bytes())
    except OSError as exc:
        raise SpecplanError(f"profiles/{name}: cannot read ({exc.strerror})") from None
    return profile, name, key


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class RunOutput:
    """What one run puts on the page."""

    figures: dict[str, go.Figure]
    decisions: list[dict[str, str]]
    key_numbers: list[dict[str, object]]
    sources: list[str]
    notes: list[str]
    scenario_toml: str
    search: str
    status: str
    report: dict[str, Any]
    verdict: list[str]


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
                        profile_key=profile_key)
    t1 = time.perf_counter()
    figs = view_figures(view)
    content = report_content(view, figs)
    t2 = time.perf_counter()
    runs = len(scenario.candidates) * len(scenario.run.seeds) * len(factors)
    fresh = int(view.seconds.get("runs_simulated", runs // max(1, len(scenario.run.seeds))))
    status = (f"{runs} simulations ({len(scenario.candidates)} candidates × {len(scenario.run.seeds)} seed(s) × "
              f"{len(factors)} load points; {fresh * len(scenario.run.seeds)} run now, the rest reused) "
              f"in {t1 - t0:.1f} s, charts in {t2 - t1:.1f} s")
    report = {"title": content.title, "subtitle": content.subtitle, "decisions": list(content.decisions),
              "key_numbers": list(content.key_numbers), "scenario_toml": content.scenario_toml,
              "sources": list(content.sources), "notes": list(content.notes), "name": scenario.name,
              "verdict": list(content.verdict)}
    return RunOutput(figs, decision_rows(view.decisions.to_dicts()), key_numbers(view), list(view.sources),
                     list(view.notes), content.scenario_toml, st.to_search(vs), status, report,
                     list(view.verdict))


def report_from_page(figures: Sequence[Mapping[str, Any] | None], data: Mapping[str, Any]) -> str:
    """The HTML report of what is on screen: the figures as the browser holds them."""
    sections = dict(FIGURES)
    figs = [(sections[fid], fid, fig) for fid, fig in zip(FIGURE_IDS, figures, strict=True) if fig]
    content = ReportContent(
        title=str(data.get("title", "specplan report")), subtitle=str(data.get("subtitle", "")),
        figures=figs, decisions=list(data.get("decisions", [])), key_numbers=list(data.get("key_numbers", [])),
        scenario_toml=str(data.get("scenario_toml", "")), sources=list(data.get("sources", [])),
        notes=list(data.get("notes", [])), verdict=list(data.get("verdict", [])),
    )
    return render_report(content)


def _error(exc: Exception) -> html.Div:
    return html.Div([html.Strong("Error: "), html.Span(str(exc))])


# --------------------------------------------------------------------------------------------
# registration


def _accept_upload(contents: str | None, filename: str | None, listed: Callable[[], Sequence[str]],
                   parse: Callable[[str], object], default_name: str) -> tuple:
    """An upload callback's outputs (stored upload, dropdown options, dropdown value, error):
    the file is decoded and validated by ``parse``; a bad one leaves all but the error as is.
    The options are the ``listed`` folder's files plus the upload."""
    if not contents:
        raise PreventUpdate
    options = [{"label": s, "value": s} for s in listed()]
    try:
        text = decode_upload(contents, filename)
        parse(text)
    except SpecplanError as exc:
        return no_update, no_update, no_update, _error(exc)
    name = upload_label(filename, default_name)
    options.append({"label": f"⬆ {name} (uploaded)", "value": UPLOADED})
    return {"name": name, "text": text}, options, UPLOADED, ""


def open_run_cache(folder: str | None) -> RunCache | None:
    """The cache of finished runs shared by the app's worker processes (None: no reuse)."""
    if folder is None:
        return None
    import diskcache

    return diskcache.Cache(folder, size_limit=RUN_CACHE_BYTES)


RUN_CACHE_BYTES = 512 * 1024 * 1024
"""Finished runs kept for reuse (least recently used are dropped beyond this)."""


def register(app: Dash, roots: Roots, *, background: bool = True, manager: Any = None,
             run_cache_dir: str | None = None) -> None:
    """Attach every callback to ``app``; ``background`` runs simulations in a worker process
    (cancellable, with progress) through ``manager``; finished runs are kept in
    ``run_cache_dir`` so the next what-if reuses what it did not change."""

    @app.callback(
        Output(ly.SCENARIO, "value", allow_duplicate=True),
        Output(ly.PROFILE, "value", allow_duplicate=True),
        Output(ly.URL_STATE, "data"),
        Output(ly.LOAD, "value"),
        Output(ly.SEEDS, "value"),
        Output(ly.ERROR, "children", allow_duplicate=True),
        Input(ly.URL, "search"),
        State(ly.APPLIED_SEARCH, "data"),
        prevent_initial_call="initial_duplicate",
    )
    def url_to_state(search: str | None, applied: str | None) -> tuple:
        if search is not None and search == applied:
            raise PreventUpdate  # our own write-back after a run
        try:
            vs = st.from_search(search)
            if vs.scenario is not None and vs.scenario not in list_scenarios(roots):
                raise SpecplanError(f"URL: scenario {vs.scenario[:80]!r} is not in scenarios/; valid: "
                                    f"{', '.join(list_scenarios(roots))}")
            if vs.profile is not None and vs.profile not in list_profiles(roots):
                raise SpecplanError(f"URL: profile {vs.profile[:80]!r} is not in profiles/; valid: "
                                    f"{', '.join(list_profiles(roots))}")
        except SpecplanError as exc:
            return no_update, no_update, {"overrides": {}, "scenario": None, "n": time.time()}, \
                no_update, no_update, _error(exc)
        data = {"scenario": vs.scenario, "profile": vs.profile, "overrides": dict(vs.overrides),
                "n": time.time()}
        return (vs.scenario or no_update, vs.profile or no_update, data,
                ", ".join(f"{f:g}" for f in vs.load_factors), vs.seeds, "")

    @app.callback(
        Output(ly.UPLOADED_SCENARIO, "data"),
        Output(ly.SCENARIO, "options"),
        Output(ly.SCENARIO, "value", allow_duplicate=True),
        Output(ly.ERROR, "children", allow_duplicate=True),
        Input(ly.UPLOAD_SCENARIO, "contents"),
        State(ly.UPLOAD_SCENARIO, "filename"),
        prevent_initial_call=True,
    )
    def upload_scenario(contents: str | None, filename: str | None) -> tuple:
        return _accept_upload(contents, filename, lambda: list_scenarios(roots),
                              lambda text: parse_scenario_upload(text, filename, roots), "uploaded.toml")

    @app.callback(
        Output(ly.UPLOADED_PROFILE, "data"),
        Output(ly.PROFILE, "options"),
        Output(ly.PROFILE, "value", allow_duplicate=True),
        Output(ly.ERROR, "children", allow_duplicate=True),
        Input(ly.UPLOAD_PROFILE, "contents"),
        State(ly.UPLOAD_PROFILE, "filename"),
        prevent_initial_call=True,
    )
    def upload_profile(contents: str | None, filename: str | None) -> tuple:
        return _accept_upload(contents, filename, lambda: list_profiles(roots),
                              lambda text: parse_profile_upload(text, filename), "uploaded.json")

    @app.callback(
        Output(ly.WHATIF_PANEL, "children"),
        Output(ly.PROFILE, "value", allow_duplicate=True),
        Output(ly.AUTORUN, "data"),
        Output(ly.ERROR, "children", allow_duplicate=True),
        Input(ly.SCENARIO, "value"),
        Input(ly.UPLOADED_SCENARIO, "data"),
        Input(ly.URL_STATE, "data"),
        State(ly.PROFILE, "value"),
        prevent_initial_call="initial_duplicate",
    )
    def build_controls(value: str | None, uploaded: Any, url_state: Any, profile_value: str | None) -> tuple:
        # several inputs may fire together (the URL sets the scenario and its overrides at once)
        from_url = any(p.startswith(f"{ly.URL_STATE}.") for p in ctx.triggered_prop_ids)
        try:
            scenario, name = resolve_scenario(roots, value, uploaded)
        except SpecplanError as exc:
            return [], no_update, no_update, _error(exc)
        overrides: dict[str, Any] = {}
        if from_url and url_state and url_state.get("scenario") in (None, name):
            overrides = dict(url_state.get("overrides") or {})
        profile_out: Any = no_update
        if from_url and url_state and url_state.get("profile"):
            profile_out = url_state["profile"]
        elif profile_value != UPLOADED:
            own = profile_name_of(scenario, roots)
            if own is not None:
                profile_out = own
            elif profile_value is None and list_profiles(roots):
                profile_out = list_profiles(roots)[0]
        try:
            st.ViewState(name, None, overrides)  # re-check URL keys
            values = st.control_values(scenario, overrides)
        except SpecplanError as exc:
            return no_update, no_update, no_update, _error(exc)
        panel = ly.whatif_panel(st.whatif_fields(scenario), values)
        return panel, profile_out, ({"n": time.time()} if from_url else no_update), ""

    figure_outputs = [Output(f"fig-{fid}", "figure") for fid in FIGURE_IDS]
    outputs = [
        *figure_outputs,
        Output(ly.DECISIONS, "children"),
        Output(ly.KEY_NUMBERS, "children"),
        Output(ly.PROVENANCE, "children"),
        Output(ly.SCENARIO_TOML, "children"),
        Output(ly.REPORT_DATA, "data"),
        Output(ly.URL, "search"),
        Output(ly.APPLIED_SEARCH, "data"),
        Output(ly.ERROR, "children", allow_duplicate=True),
        Output(ly.STATUS, "children"),
        Output(ly.EXPORT, "disabled"),
        Output(ly.RUN_STATE, "children"),
    ]
    inputs = [
        Input(ly.RUN, "n_clicks"),
        Input(ly.AUTORUN, "data"),
        State(ly.SCENARIO, "value"),
        State(ly.UPLOADED_SCENARIO, "data"),
        State(ly.PROFILE, "value"),
        State(ly.UPLOADED_PROFILE, "data"),
        State({"type": ly.WHATIF, "key": ALL}, "value"),
        State({"type": ly.WHATIF, "key": ALL}, "id"),
        State(ly.LOAD, "value"),
        State(ly.SEEDS, "value"),
    ]
    n_out = len(outputs)

    def run(set_progress: Callable[[tuple], None] | None, _clicks: Any, _auto: Any, scenario_value: Any,
            uploaded_scenario: Any, profile_value: Any, uploaded_profile: Any, values: list[Any],
            ids: list[dict[str, str]], load_text: Any, seeds: Any) -> tuple:
        whatif = {i["key"]: v for i, v in zip(ids, values, strict=True)}

        def progress(done: int, total: int, label: str) -> None:
            if set_progress is not None:
                set_progress((str(done), str(total), f"{done}/{total} simulations · {label}"))

        done = time.monotonic_ns()  # a new value per run: the page's readiness signal
        if set_progress is not None:  # the job has started (its process is up): say so at once
            set_progress(("0", "1", "starting the simulations…"))
        try:
            out = run_view(roots, scenario_value=scenario_value, uploaded_scenario=uploaded_scenario,
                           profile_value=profile_value, uploaded_profile=uploaded_profile, whatif=whatif,
                           load_text=load_text, seeds=seeds, progress=progress,
                           cache=open_run_cache(run_cache_dir))
        except SpecplanError as exc:
            return (*([no_update] * (n_out - 4)), _error(exc), "", no_update, f"error {done}")
        except Exception as exc:  # noqa: BLE001 - a bug: say so in the page instead of a silent stall
            message = f"internal error (a specplan bug, please report it): {type(exc).__name__}: {exc}"
            return (*([no_update] * (n_out - 4)), message.splitlines()[0], "", no_update, f"error {done}")
        figs = [out.figures[fid] for fid in FIGURE_IDS]
        decisions = (ly.table(out.decisions, DECISION_COLUMNS, "sp-table sp-decisions") if out.decisions
                     else html.P("No decision rule fired: no difference between candidates exceeded its "
                                 "threshold (sim/decisions/rules.py).", className="sp-muted"))
        kcols = [(k, k) for k in (out.key_numbers[0].keys() if out.key_numbers else ())]
        keys = html.Div([html.Ul([html.Li(line.strip()) for line in out.verdict], className="sp-verdict"),
                         ly.table(out.key_numbers, kcols, "sp-table sp-numbers")])
        prov = html.Div([html.Ul([html.Li(s) for s in out.sources], className="sp-sources"),
                         html.H3("Notes") if out.notes else None,
                         html.Ul([html.Li(n) for n in out.notes], className="sp-sources")])
        return (*figs, decisions, keys, prov, out.scenario_toml, out.report, out.search or "?",
                out.search or "?", "", out.status, False, f"done {done}")

    if background:
        app.callback(
            *outputs, *inputs,
            background=True, manager=manager, prevent_initial_call=True, interval=400,
            running=[(Output(ly.RUN, "disabled"), True, False), (Output(ly.CANCEL, "disabled"), False, True)],
            cancel=[Input(ly.CANCEL, "n_clicks")],
            progress=[Output(ly.PROGRESS, "value"), Output(ly.PROGRESS, "max"), Output(ly.PROGRESS_TEXT, "children")],
            progress_default=["0", "1", ""],
        )(run)
    else:
        def run_foreground(*args: Any) -> tuple:
            return run(None, *args)

        app.callback(*outputs, *inputs, prevent_initial_call=True,
                     running=[(Output(ly.RUN, "disabled"), True, False)])(run_foreground)

    @app.callback(
        Output(ly.DOWNLOAD, "data"),
        Input(ly.EXPORT, "n_clicks"),
        *[State(f"fig-{fid}", "figure") for fid in FIGURE_IDS],
        State(ly.REPORT_DATA, "data"),
        prevent_initial_call=True,
    )
    def export(n: int, *args: Any) -> Any:
        *figs, data = args
        if not n or not data:
            raise PreventUpdate
        text = report_from_page(figs, data)
        return dcc.send_string(text, f"specplan-report-{upload_label(data.get('name'), 'scenario')}.html",
                               type="text/html")
