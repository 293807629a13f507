"""The page's first run is asked for and started even when the browser's first calls went wrong
(issue 19: a fresh-clone run once found the page idle for 180 s). The watchdog's decision,
without a browser."""

from __future__ import annotations

import pytest
from dash import no_update
from dash.exceptions import PreventUpdate

from dashboard.callbacks import STALLED_AUTORUN_S, first_run_nudge

PANEL = ["controls"]
NOW = 1000.0


def test_controls_built_without_the_url_get_the_url_state_replayed():
    url, auto = first_run_nudge("?scenario=default.toml&fleet.replicas=2", "idle", None, None, PANEL, NOW)
    assert url["scenario"] == "default.toml" and url["overrides"] == {"fleet.replicas": 2}
    assert url["n"] == NOW and auto is no_update  # a new value: the controls are rebuilt from it
    bare, _ = first_run_nudge("", "idle", False, None, PANEL, NOW)
    assert bare["scenario"] is None and bare["overrides"] == {}


def test_a_first_run_asked_for_but_never_started_is_asked_for_again():
    url, auto = first_run_nudge("", "idle", None, {"n": NOW - STALLED_AUTORUN_S}, PANEL, NOW)
    assert url is no_update and auto == {"n": NOW}
    with pytest.raises(PreventUpdate):  # the user cancelled it: leave it cancelled
        first_run_nudge("", "idle", None, {"n": NOW - STALLED_AUTORUN_S}, PANEL, NOW, cancelled=1)


@pytest.mark.parametrize(("run_state", "running", "autorun", "panel"), [
    ("idle", None, {"n": NOW - 1.0}, PANEL),  # just asked for: give it time to start
    ("done 17", None, None, PANEL),           # a run finished
    ("error 17", None, None, PANEL),          # a run failed: the page says why, no retry
    ("idle", True, None, PANEL),              # a run is in flight
    ("idle", True, {"n": 0.0}, PANEL),        # a long first run is still in flight
    ("idle", None, None, []),                 # the controls are not built yet: wait for them
])
def test_the_watchdog_leaves_every_other_page_alone(run_state, running, autorun, panel):
    with pytest.raises(PreventUpdate):
        first_run_nudge("", run_state, running, autorun, panel, NOW)


def test_a_bad_url_is_left_to_the_url_callback_that_reports_it():
    with pytest.raises(PreventUpdate):
        first_run_nudge("?nonsense=1", "idle", None, None, PANEL, NOW)
