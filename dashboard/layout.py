"""Page sections: file pickers, the what-if panel, results (decisions, charts, provenance).

Layout only: component trees and their ids. Values come from ``dashboard.state`` (what-if
fields of a scenario) and results from callbacks; nothing here reads files or simulates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dash import dcc, html

from dashboard.files import opening_scenario
from dashboard.state import WhatIf
from dashboard.view import FIGURES

# component ids (callbacks and browser tests use these names)
URL = "url"
SCENARIO = "scenario-select"
PROFILE = "profile-select"
UPLOAD_SCENARIO = "upload-scenario"
UPLOAD_PROFILE = "upload-profile"
UPLOADED_SCENARIO = "uploaded-scenario"  # dcc.Store: {"name", "text"} of an uploaded scenario
UPLOADED_PROFILE = "uploaded-profile"
URL_STATE = "url-state"  # dcc.Store: ViewState from the URL, applied once to the controls
APPLIED_SEARCH = "applied-search"  # dcc.Store: the query string of the view on screen
AUTORUN = "autorun"  # dcc.Store: bumped when controls are built from a URL, to run once
AUTORUN_WATCH = "autorun-watch"  # dcc.Interval: a few checks after load that the first run was asked for
WHATIF_PANEL = "whatif-panel"
WHATIF = "whatif"  # pattern-matching type of what-if inputs: {"type": WHATIF, "key": path}
LOAD = "load-factors"
SEEDS = "seeds"
RUN = "run-button"
CANCEL = "cancel-button"
PROGRESS = "progress"
PROGRESS_TEXT = "progress-text"
ERROR = "error"
STATUS = "status"
RUN_STATE = "run-state"  # hidden: "idle", then "done <n>" or "error <n>" after each run (tests wait on it)
DECISIONS = "decisions"
KEY_NUMBERS = "key-numbers"
PROVENANCE = "provenance"
SCENARIO_TOML = "scenario-toml"
REPORT_DATA = "report-data"  # dcc.Store: what the export needs besides the figures
APPLIED_KEY = "applied-key"  # dcc.Store: page_run.view_key of the inputs the results on screen came from
RESULTS = "results"  # the results column (class sp-stale while the controls differ from the run's)
STALE = "stale-note"  # says the results are from other settings, until the next run
LIMITS = "limits"  # what limits each candidate's capacity (sim.decisions.bottleneck)
EXPORT = "export-button"
DOWNLOAD = "download"

UPLOAD_STYLE = {"border": "1px dashed #8a99a8", "borderRadius": "4px", "padding": "6px 10px",
                "cursor": "pointer", "fontSize": "13px", "textAlign": "center", "background": "#fafbfc"}


def header() -> html.Header:
    return html.Header(className="sp-header", children=[
        html.H1("specplan · speculative decoding what-ifs"),
        html.P("Baseline next to every speculative candidate: latency, goodput and cost against "
               "load, from a calibration profile and a scenario. Every number says where it "
               "comes from (see the bottom of the page)."),
    ])


def file_pickers(scenarios: Sequence[str], profiles: Sequence[str]) -> html.Div:
    return html.Div(className="sp-files", children=[
        html.Div([html.Label("Scenario", htmlFor=SCENARIO),
                  dcc.Dropdown(id=SCENARIO, options=[{"label": s, "value": s} for s in scenarios],
                               value=opening_scenario(list(scenarios)), clearable=False)]),
        dcc.Upload(id=UPLOAD_SCENARIO, children=html.Div("⬆ upload a scenario (.toml)"),
                   style=UPLOAD_STYLE, accept=".toml", max_size=5 * 1024 * 1024, multiple=False),
        html.Div([html.Label("Profile", htmlFor=PROFILE),
                  dcc.Dropdown(id=PROFILE, options=[{"label": p, "value": p} for p in profiles],
                               value=None, clearable=False, placeholder="the scenario's profile")]),
        dcc.Upload(id=UPLOAD_PROFILE, children=html.Div("⬆ upload a profile (.json)"),
                   style=UPLOAD_STYLE, accept=".json", max_size=5 * 1024 * 1024, multiple=False),
    ])


OPTION_LABELS = {"fixed": "fixed k", "off_above_batch": "off above a batch size",
                 "adaptive": "adaptive (on/off by batch size)", "k_by_batch": "k by batch size"}
"""What a speculation policy is called in the page (the value stays the scenario file's)."""


def whatif_input(field: WhatIf, value: Any) -> html.Div:
    """One labelled control; its id carries the scenario path it overrides."""
    cid = {"type": WHATIF, "key": field.key}
    label = field.label + (f" ({field.unit})" if field.unit else "")
    if field.kind == "choice":
        ctrl: Any = dcc.Dropdown(id=cid, options=[{"label": OPTION_LABELS.get(o, o), "value": o}
                                                  for o in field.options],
                                 value=value, clearable=False)
    else:
        ctrl = dcc.Input(id=cid, type="number", value=value, debounce=True,
                         min=field.minimum, max=field.maximum,
                         step=field.step if field.step is not None else "any",
                         placeholder="none" if field.kind == "optional_number" else None)
    return html.Div(className="sp-field", children=[html.Label(label), ctrl])


def whatif_panel(fields: Sequence[WhatIf], values: Mapping[str, Any]) -> list[Any]:
    """The what-if controls, grouped (Traffic, Fleet, SLO, Prices, Candidates)."""
    groups: dict[str, list[WhatIf]] = {}
    for f in fields:
        groups.setdefault(f.group, []).append(f)
    out: list[Any] = []
    for group, fs in groups.items():
        out.append(html.Fieldset(className="sp-group", children=[
            html.Legend(group), *[whatif_input(f, values.get(f.key, f.value)) for f in fs]]))
    return out


def run_controls() -> html.Div:
    return html.Div(className="sp-run", children=[
        html.Div(className="sp-field", children=[
            html.Label("load points (× scenario rate)"),
            dcc.Input(id=LOAD, type="text", value="0.5, 1, 1.5, 2", debounce=True)]),
        html.Div(className="sp-field", children=[
            html.Label("seeds per point"),
            dcc.Input(id=SEEDS, type="number", value=1, min=1, max=10, step=1, debounce=True)]),
        html.Div(className="sp-buttons", children=[
            html.Button("Run", id=RUN, n_clicks=0, className="sp-primary"),
            html.Button("Cancel", id=CANCEL, n_clicks=0, disabled=True),
        ]),
        html.Progress(id=PROGRESS, value="0", max="1", style={"width": "100%"}),
        html.Div(id=PROGRESS_TEXT, className="sp-muted"),
    ])


def placeholder_figure() -> dict[str, Any]:
    """What a chart shows before the first run: an empty frame that says so."""
    return {"data": [], "layout": {
        "template": "plotly_white", "height": 380, "xaxis": {"visible": False}, "yaxis": {"visible": False},
        "annotations": [{"text": "waiting for the first run…", "showarrow": False, "xref": "paper",
                         "yref": "paper", "x": 0.5, "y": 0.5, "font": {"size": 14, "color": "#888"}}]}}


def results() -> html.Div:
    sections: dict[str, list[str]] = {}
    for fid, section in FIGURES:
        sections.setdefault(section, []).append(fid)
    charts = []
    for section, fids in sections.items():
        charts.append(html.Section(className="sp-section", children=[
            html.H2(section),
            html.Div(className="sp-grid", children=[
                dcc.Graph(id=f"fig-{fid}", config={"displaylogo": False}, className="sp-graph",
                          figure=placeholder_figure())
                for fid in fids]),
        ]))
    return html.Div(id=RESULTS, className="sp-results", children=[
        html.Div(id=STALE, className="sp-stale-note", role="status"),
        html.Section(className="sp-section", children=[
            html.Div(className="sp-row", children=[
                html.H2("Decisions"),
                html.Button("Export HTML report", id=EXPORT, n_clicks=0, disabled=True),
            ]),
            html.Div(id=DECISIONS, children=html.P("Run the scenario to see the decision table.",
                                                   className="sp-muted")),
            html.H2("Key numbers at the scenario's load"),
            html.Div(id=KEY_NUMBERS),
            html.H2("What limits each candidate's capacity"),
            html.Div(id=LIMITS),
        ]),
        *charts,
        html.Section(className="sp-section", children=[
            html.H2("Where the numbers come from"),
            html.Div(id=PROVENANCE),
            html.Details([html.Summary("Scenario as run (TOML, what-ifs applied)"),
                          html.Pre(id=SCENARIO_TOML)]),
        ]),
    ])


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], class_name: str) -> html.Table:
    """A plain HTML table (the same markup the report uses)."""
    return html.Table(className=class_name, children=[
        html.Thead(html.Tr([html.Th(label) for _, label in columns])),
        html.Tbody([html.Tr([html.Td(str(r.get(k, ""))) for k, _ in columns]) for r in rows]),
    ])


def page(scenarios: Sequence[str], profiles: Sequence[str]) -> html.Div:
    """The whole page."""
    return html.Div(className="sp-page", children=[
        dcc.Location(id=URL, refresh=False),
        dcc.Store(id=UPLOADED_SCENARIO), dcc.Store(id=UPLOADED_PROFILE), dcc.Store(id=URL_STATE),
        dcc.Store(id=APPLIED_SEARCH), dcc.Store(id=AUTORUN), dcc.Store(id=REPORT_DATA), dcc.Store(id=APPLIED_KEY),
        dcc.Download(id=DOWNLOAD),
        dcc.Interval(id=AUTORUN_WATCH, interval=3000, max_intervals=10),
        header(),
        html.Div(className="sp-body", children=[
            html.Aside(className="sp-side", children=[
                file_pickers(scenarios, profiles),
                html.Div(id=ERROR, className="sp-error", role="alert"),
                html.Div(id=STATUS, className="sp-muted"),
                html.Div(id=RUN_STATE, children="idle", hidden=True),
                run_controls(),
                html.Div(id=WHATIF_PANEL, className="sp-whatif"),
            ]),
            html.Main(className="sp-main", children=[results()]),
        ]),
    ])
