"""The page's first run is asked for even when no build of the controls named the URL (issue 19:
a fresh-clone run once found the page idle for 180 s). The watchdog's decision, without a browser."""

from __future__ import annotations

import pytest
from dash.exceptions import PreventUpdate

from dashboard.callbacks import replayed_url_state

PANEL = ["controls"]


def test_an_idle_page_whose_controls_never_asked_for_a_run_replays_its_url_state():
    got = replayed_url_state("?scenario=default.toml&fleet.replicas=2", "idle", None, None, PANEL)
    assert got["scenario"] == "default.toml" and got["overrides"] == {"fleet.replicas": 2}
    assert got["n"] > 0  # a new value each time, so the controls are rebuilt from it
    bare = replayed_url_state("", "idle", False, None, PANEL)
    assert bare["scenario"] is None and bare["overrides"] == {}


@pytest.mark.parametrize(("run_state", "running", "autorun", "panel"), [
    ("idle", None, {"n": 1.0}, PANEL),  # the first run was asked for: the normal path worked
    ("done 17", None, None, PANEL),      # a run finished
    ("error 17", None, None, PANEL),     # a run failed: the page says why, no retry
    ("idle", True, None, PANEL),         # a run is in flight
    ("idle", None, None, []),            # the controls are not built yet: wait for them
])
def test_the_watchdog_leaves_every_other_page_alone(run_state, running, autorun, panel):
    with pytest.raises(PreventUpdate):
        replayed_url_state("", run_state, running, autorun, panel)


def test_a_bad_url_is_left_to_the_url_callback_that_reports_it():
    with pytest.raises(PreventUpdate):
        replayed_url_state("?nonsense=1", "idle", None, None, PANEL)
