"""A self-contained HTML decision report: charts, decision table, scenario and provenance.

One file that opens offline: plotly.js is inlined once, every chart is embedded as its figure
JSON, the decision table and key numbers are plain HTML, the scenario is included as TOML text
(what-ifs applied, so it reruns with ``specplan simulate``) and every provenance line of the
profile sections used is listed. The dashboard's export button and ``specplan report`` both go
through :func:`render_report`.
"""

from __future__ import annotations

import html
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from dashboard.labels import human
from sim.contracts.errors import SpecplanError

DECISION_COLUMNS: tuple[tuple[str, str], ...] = (
    ("finding", "Finding"),
    ("observation", "Observation"),
    ("decision", "Decision"),
    ("risk", "Risk"),
    ("numbers", "Numbers"),
)


@dataclass(frozen=True)
class ReportContent:
    """Everything a report shows; built from a dashboard view or by ``specplan report``."""

    title: str
    figures: Sequence[tuple[str, str, go.Figure | Mapping[str, Any]]]
    """(section, figure id, figure or its JSON dict) in display order."""
    decisions: Sequence[Mapping[str, Any]]
    """Rows of ``sim.decisions.answer_export.rows_frame``: the decision's table (``numbers`` as a
    JSON string or a mapping)."""
    key_numbers: Sequence[Mapping[str, Any]]
    """One row per candidate at the scenario's load (``dashboard.view.key_numbers``)."""
    scenario_toml: str
    sources: Sequence[str]
    notes: Sequence[str] = ()
    subtitle: str = ""
    verdict: Sequence[str] = ()
    """The answer first: ``dashboard.view.View.verdict`` (the decision's lines, the same the
    terminal prints, and the fleet each candidate needs)."""
    limits: Sequence[str] = ()
    """What limits each candidate's capacity, one line each (``sim.decisions.bottleneck_text``)."""
    generated: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))


def format_numbers(numbers: Any) -> str:
    """``{"tpot_gain": 0.41, ...}`` (or its JSON) → ``TPOT gain 0.41 · ...`` for humans."""
    if isinstance(numbers, str):
        try:
            numbers = json.loads(numbers) if numbers else {}
        except ValueError:
            return numbers
    if not isinstance(numbers, Mapping):
        return ""
    from sim.decisions.answer_text import NUMBER_LABELS
    from sim.results.plain_numbers import plain

    parts = []
    for key, v in numbers.items():
        k = NUMBER_LABELS.get(str(key)) or human(str(key))
        if v is None or (isinstance(v, float) and math.isnan(v)):
            parts.append(f"{k} –")
        elif isinstance(v, float):
            parts.append(f"{k} {plain(v)}")  # three significant digits, never 1.23e+03
        else:
            parts.append(f"{k} {v}")
    return " · ".join(parts)


def decision_rows(decisions: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Decision frame rows → display rows with the columns of :data:`DECISION_COLUMNS`."""
    out = []
    for d in decisions:
        scope = str(d.get("candidate", ""))
        if d.get("segment") not in (None, "", "all"):
            scope += f" / {d['segment']}"
        finding = f"[{d.get('rule', '')}] {scope} @ {d.get('load', '')}".strip()
        out.append({"finding": finding, "observation": str(d.get("observation", "")),
                    "decision": str(d.get("decision", "")), "risk": str(d.get("risk", "")),
                    "numbers": format_numbers(d.get("numbers"))})
    return out


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], css: str) -> str:
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(r.get(key, '')))}</td>" for key, _ in columns) + "</tr>"
        for r in rows
    )
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _figure_html(fig: go.Figure | Mapping[str, Any], div_id: str) -> str:
    f = fig if isinstance(fig, go.Figure) else go.Figure(fig)
    return pio.to_html(f, full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;background:#f6f7f9}
header{background:#1f2d3d;color:#fff;padding:18px 28px}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;color:#c9d3de;font-size:13px}
main{padding:8px 28px 40px;max-width:1400px}
section{background:#fff;border:1px solid #e1e4e8;border-radius:6px;margin:16px 0;padding:12px 18px}
h2{font-size:17px;margin:6px 0 10px;color:#1f2d3d}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:8px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #e6e8eb;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f5}
table.numbers td{font-variant-numeric:tabular-nums;white-space:nowrap}
pre{background:#f6f8fa;border:1px solid #e1e4e8;padding:10px;overflow:auto;font-size:12px}
ul.sources li{font-size:13px;margin:2px 0}
.muted{color:#666;font-size:12px}
"""


def render_report(content: ReportContent) -> str:
    """The whole report as one HTML document (plotly.js inlined; no network needed to view)."""
    esc = html.escape
    sections: dict[str, list[str]] = {}
    for i, (section, fid, fig) in enumerate(content.figures):
        sections.setdefault(section, []).append(_figure_html(fig, f"fig-{fid or i}"))
    key_cols = [(k, k) for k in (content.key_numbers[0].keys() if content.key_numbers else ())]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(content.title)}</title>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<style>{_CSS}</style>",
        f'<script type="text/javascript">{get_plotlyjs()}</script>',
        "</head><body>",
        f"<header><h1>{esc(content.title)}</h1><p>{esc(content.subtitle)}"
        f"{' · ' if content.subtitle else ''}generated {esc(content.generated)} by specplan</p></header>",
        "<main>",
    ]
    if content.verdict:
        parts += ['<section id="verdict"><h2>Verdict</h2><ul class="verdict">',
                  *[f"<li>{esc(line.strip())}</li>" for line in content.verdict], "</ul></section>"]
    parts.append('<section id="decisions"><h2>Decisions</h2>')
    rows = decision_rows(content.decisions)
    if rows:
        parts.append(_table(rows, DECISION_COLUMNS, "decisions"))
    else:
        parts.append('<p class="muted">No decision: one candidate only, nothing to compare.</p>')
    parts.append("</section>")
    if key_cols:
        parts += ['<section id="key-numbers"><h2>Key numbers at the scenario\'s load</h2>',
                  _table(content.key_numbers, key_cols, "numbers"), "</section>"]
    if content.limits:
        parts += ['<section id="limits"><h2>What limits each candidate\'s capacity</h2><ul class="sources">',
                  *[f"<li>{esc(line)}</li>" for line in content.limits], "</ul></section>"]
    for section, figs in sections.items():
        parts += [f'<section class="charts"><h2>{esc(section)}</h2><div class="grid">',
                  *[f"<div>{f}</div>" for f in figs], "</div></section>"]
    parts += ['<section id="sources"><h2>Where the numbers come from</h2><ul class="sources">',
              *[f"<li>{esc(s)}</li>" for s in content.sources], "</ul>"]
    if content.notes:
        parts += ["<h2>Notes</h2><ul class=\"sources\">", *[f"<li>{esc(n)}</li>" for n in content.notes], "</ul>"]
    parts += ["</section>",
              '<section id="scenario"><h2>Scenario (what-ifs applied; rerun with '
              "<code>specplan simulate</code>)</h2>",
              f"<pre>{esc(content.scenario_toml)}</pre></section>",
              "</main></body></html>"]
    return "\n".join(parts)


def write_report(path: str | Path, text: str) -> Path:
    """Write the report atomically (temp file + rename) so a reader never sees half a file."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise SpecplanError(f"{p}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, p)
    except OSError as exc:
        raise SpecplanError(f"{p}: cannot write report ({exc.strerror or exc})") from None
    return p
