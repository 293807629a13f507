"""Callbacks: URL ↔ controls, uploads, the (background) run, and the report export.

The run callback's body is :func:`dashboard.page_run.run_view`, a plain function from what the
browser sends to what the page shows; this module only wires the page's components to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from dash import ALL, Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dashboard import layout as ly
from dashboard import state as st
from dashboard.files import (
    Roots,
    decode_upload,
    list_profiles,
    list_scenarios,
    parse_profile_upload,
    parse_scenario_upload,
    profile_name_of,
    upload_label,
)
from dashboard.html_report import DECISION_COLUMNS
from dashboard.page_run import (
    UPLOADED,
    RunOutput,
    open_run_cache,
    report_from_page,
    resolve_scenario,
    run_view,
    view_key,
)
from dashboard.view import FIGURE_IDS
from sim.contracts.errors import SpecplanError, echo


def _error(exc: Exception) -> html.Div:
    return html.Div([html.Strong("Error: "), html.Span(str(exc))])


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


def register(app: Dash, roots: Roots, *, background: bool = True, manager: Any = None,
             run_cache_dir: str | None = None) -> None:
    """Attach every callback to ``app``; ``background`` runs simulations in a worker process
    (cancellable, with progress) through ``manager``; finished runs are kept in
    ``run_cache_dir`` so the next what-if reuses what it did not change."""
    _register_url(app, roots)
    _register_uploads(app, roots)
    _register_controls(app, roots)
    _register_autorun_watch(app)
    _register_run(app, roots, background, manager, run_cache_dir)
    _register_stale(app, roots)
    _register_export(app)


def _url_state(vs: st.ViewState, now: float) -> dict[str, Any]:
    """The ``URL_STATE`` store's data for a parsed URL; ``n`` makes every write a change."""
    return {"scenario": vs.scenario, "profile": vs.profile, "overrides": dict(vs.overrides), "n": now}


def _register_url(app: Dash, roots: Roots) -> None:
    """The URL's query → the scenario, profile, overrides, load and seeds controls."""

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
                raise SpecplanError(f"URL: scenario {echo(vs.scenario, 80)} is not in scenarios/; valid: "
                                    f"{', '.join(list_scenarios(roots))}")
            if vs.profile is not None and vs.profile not in list_profiles(roots):
                raise SpecplanError(f"URL: profile {echo(vs.profile, 80)} is not in profiles/; valid: "
                                    f"{', '.join(list_profiles(roots))}")
        except SpecplanError as exc:
            return no_update, no_update, {"overrides": {}, "scenario": None, "n": time.time()}, \
                no_update, no_update, _error(exc)
        return (vs.scenario or no_update, vs.profile or no_update, _url_state(vs, time.time()),
                ", ".join(f"{f:g}" for f in vs.load_factors), vs.seeds, "")


def _register_uploads(app: Dash, roots: Roots) -> None:
    """An uploaded scenario or profile: validated, stored in the page, chosen in its dropdown."""
    _register_upload(app, ly.UPLOADED_SCENARIO, ly.SCENARIO, ly.UPLOAD_SCENARIO,
                     lambda: list_scenarios(roots),
                     lambda text, filename: parse_scenario_upload(text, filename, roots), "uploaded.toml")
    _register_upload(app, ly.UPLOADED_PROFILE, ly.PROFILE, ly.UPLOAD_PROFILE,
                     lambda: list_profiles(roots),
                     lambda text, filename: parse_profile_upload(text, filename), "uploaded.json")


def _register_upload(app: Dash, store: str, dropdown: str, upload: str,
                     listed: Callable[[], Sequence[str]], parse: Callable[[str, str | None], object],
                     default_name: str) -> None:
    """One upload component: its file goes to ``store`` and becomes ``dropdown``'s choice."""

    @app.callback(
        Output(store, "data"),
        Output(dropdown, "options"),
        Output(dropdown, "value", allow_duplicate=True),
        Output(ly.ERROR, "children", allow_duplicate=True),
        Input(upload, "contents"),
        State(upload, "filename"),
        prevent_initial_call=True,
    )
    def accept_upload(contents: str | None, filename: str | None) -> tuple:
        return _accept_upload(contents, filename, listed, lambda text: parse(text, filename), default_name)


def _register_controls(app: Dash, roots: Roots) -> None:
    """The what-if panel of the chosen scenario (and its own profile, when it has one)."""

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
        # several inputs may fire together (the URL sets the scenario and its overrides at once).
        # On a loaded machine the browser may send the page's first call with the URL already
        # parsed but no trigger named: that first build runs from the URL too (else no autorun)
        from_url = any(p.startswith(f"{ly.URL_STATE}.") for p in ctx.triggered_prop_ids) or (
            not ctx.triggered_prop_ids and url_state is not None)
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


POLL_MS = 200
"""How often the page asks whether a background run has finished: on average a run's result
waits half of this in the job's store (400 ms cost a what-if ~0.2 s; polls are tiny requests)."""

STALLED_AUTORUN_S = 6.0
"""Seconds after the first run was asked for at which an idle page with nothing running asks
again (a run starts, and disables the Run button, as soon as it is asked for)."""


def first_run_nudge(search: str | None, run_state: str | None, running: bool | None,
                    autorun: Any, panel: Any, now: float, cancelled: Any = 0) -> tuple[Any, Any]:
    """(URL state, autorun) to write when the page's first run never started; else
    ``PreventUpdate``. Why: on a loaded machine a page has been seen idle with nothing running
    (a fresh-clone test run waited 180 s for the first run, issue 19). Controls built without
    the URL (no autorun asked): the URL state is replayed, so they are built from it, overrides
    included, and run once. Asked but never started: asked again (not after a Cancel)."""
    if run_state != "idle" or running or not panel or cancelled:
        raise PreventUpdate
    if autorun is None:
        try:
            vs = st.from_search(search)
        except SpecplanError:
            raise PreventUpdate from None  # the URL callback already showed this error
        return _url_state(vs, now), no_update
    asked = autorun.get("n") if isinstance(autorun, dict) else None
    if isinstance(asked, int | float) and now - asked >= STALLED_AUTORUN_S:
        return no_update, {"n": now}
    raise PreventUpdate


def _register_autorun_watch(app: Dash) -> None:
    """A few checks in the seconds after load that the first run was asked for and started."""

    @app.callback(
        Output(ly.URL_STATE, "data", allow_duplicate=True),
        Output(ly.AUTORUN, "data", allow_duplicate=True),
        Input(ly.AUTORUN_WATCH, "n_intervals"),
        State(ly.URL, "search"),
        State(ly.RUN_STATE, "children"),
        State(ly.RUN, "disabled"),
        State(ly.AUTORUN, "data"),
        State(ly.WHATIF_PANEL, "children"),
        State(ly.CANCEL, "n_clicks"),
        prevent_initial_call=True,
    )
    def autorun_watch(_n: Any, search: str | None, run_state: str | None, running: bool | None,
                      autorun: Any, panel: Any, cancelled: Any) -> tuple[Any, Any]:
        return first_run_nudge(search, run_state, running, autorun, panel, time.time(), cancelled)


def _run_outputs() -> tuple[list[Output], list[Input | State]]:
    """The run callback's outputs (figures, tables, URL, status) and inputs (the controls)."""
    figure_outputs = [Output(f"fig-{fid}", "figure") for fid in FIGURE_IDS]
    outputs = [
        *figure_outputs,
        Output(ly.DECISIONS, "children"),
        Output(ly.KEY_NUMBERS, "children"),
        Output(ly.LIMITS, "children"),
        Output(ly.PROVENANCE, "children"),
        Output(ly.SCENARIO_TOML, "children"),
        Output(ly.REPORT_DATA, "data"),
        Output(ly.URL, "search"),
        Output(ly.APPLIED_SEARCH, "data"),
        Output(ly.APPLIED_KEY, "data"),
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
    return outputs, inputs


def _page_parts(out: RunOutput) -> tuple:
    """A finished run as the page's components: figures, decisions, key numbers, provenance."""
    figs = [out.figures[fid] for fid in FIGURE_IDS]
    decisions = (ly.table(out.decisions, DECISION_COLUMNS, "sp-table sp-decisions") if out.decisions
                 else html.P("No decision: one candidate only, nothing to compare.", className="sp-muted"))
    kcols = [(k, k) for k in (out.key_numbers[0].keys() if out.key_numbers else ())]
    keys = html.Div([html.Ul([html.Li(line.strip()) for line in out.verdict], className="sp-verdict"),
                     ly.table(out.key_numbers, kcols, "sp-table sp-numbers")])
    prov = html.Div([html.Ul([html.Li(s) for s in out.sources], className="sp-sources"),
                     html.H3("Notes") if out.notes else None,
                     html.Ul([html.Li(n) for n in out.notes], className="sp-sources")])
    limits = (html.Ul([html.Li(line) for line in out.limits], className="sp-limits") if out.limits
              else html.P("No SLO to judge capacity against.", className="sp-muted"))
    return (*figs, decisions, keys, limits, prov)


def _register_run(app: Dash, roots: Roots, background: bool, manager: Any,
                  run_cache_dir: str | None) -> None:
    """The run button (and the autorun after a URL or upload): ``run_view``, in a background
    worker with progress and cancel when ``background``."""
    outputs, inputs = _run_outputs()
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
        return (*_page_parts(out), out.scenario_toml, out.report, out.search or "?",
                out.search or "?", out.key, "", out.status, False, f"done {done}")

    if background:
        app.callback(
            *outputs, *inputs,
            background=True, manager=manager, prevent_initial_call=True, interval=POLL_MS,
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


STALE_NOTE = ("The settings changed since these results were computed: press Run to update them. "
              "Until then the results below are for the previous settings.")


def _register_stale(app: Dash, roots: Roots) -> None:
    """Results greyed out, said to be stale and not exportable the moment a control differs from
    the run they came from (``view_key``), until a run with these settings finishes."""

    @app.callback(
        Output(ly.STALE, "children"),
        Output(ly.RESULTS, "className"),
        Output(ly.EXPORT, "disabled", allow_duplicate=True),
        Input(ly.SCENARIO, "value"),
        Input(ly.UPLOADED_SCENARIO, "data"),
        Input(ly.PROFILE, "value"),
        Input(ly.UPLOADED_PROFILE, "data"),
        Input({"type": ly.WHATIF, "key": ALL}, "value"),
        Input(ly.LOAD, "value"),
        Input(ly.SEEDS, "value"),
        Input(ly.APPLIED_KEY, "data"),
        State({"type": ly.WHATIF, "key": ALL}, "id"),
        prevent_initial_call=True,
    )
    def mark_stale(scenario_value: Any, uploaded_scenario: Any, profile_value: Any, uploaded_profile: Any,
                   values: list[Any], load_text: Any, seeds: Any, applied: str | None,
                   ids: list[dict[str, str]]) -> tuple:
        if not applied:
            raise PreventUpdate  # nothing on screen yet
        whatif = {i["key"]: v for i, v in zip(ids, values, strict=True)}
        now = view_key(roots, scenario_value=scenario_value, uploaded_scenario=uploaded_scenario,
                       profile_value=profile_value, uploaded_profile=uploaded_profile, whatif=whatif,
                       load_text=load_text, seeds=seeds)
        if now == applied:
            return "", "sp-results", False
        return STALE_NOTE, "sp-results sp-stale", True


def _register_export(app: Dash) -> None:
    """The export button: the HTML report of what is on screen."""

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
