"""The dashboard in a real headless Chromium: run, change a what-if, share, upload, export.

The app is served from a thread against a temporary folder holding a synthetic profile
(numbers labelled assumed) and a one-minute scenario, so each run takes about a second.
Screenshots of the main views go to artifacts/screenshots/ for a person to look at.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dashboard.app import create_app
from dashboard.files import Roots
from sim.contracts.synthetic import synthetic_profile_dict
from tests.helpers import scenario_toml

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # five browser sessions: ~1.5 min together

SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"

SCENARIO = scenario_toml(
    'small',
    run={'duration_s': 60, 'warmup_s': 10, 'seeds': [1]},
    workload={'arrival': 'poisson', 'rate': 2.0},
    segments=[
        {'name': 'chat', 'share': 0.7, 'prompt_tokens': {'dist': 'lognormal', 'median': 200, 'sigma': 0.5, 'min': 8, 'max': 1024}, 'output_tokens': {'dist': 'lognormal', 'median': 60, 'sigma': 0.5, 'min': 4, 'max': 256}, 'acceptance': {'task': 'chat', 'language': 'en'}},
        {'name': 'code', 'share': 0.3, 'prompt_tokens': {'dist': 'uniform', 'min': 100, 'max': 400}, 'output_tokens': {'dist': 'fixed', 'value': 80}, 'acceptance': {'task': 'code', 'language': 'en'}},
    ],
    slo={'ttft_ms': 1000, 'tpot_ms': 60, 'e2el_ms': 10000, 'pause_ms': 500},
    fleet={'profile': '../profiles/synthetic-small.json', 'replicas': 1, 'price_per_gpu_hour': 2.5},
    engine={'max_num_seqs': 32, 'max_num_batched_tokens': 1024},
    candidates=[
        {'name': 'baseline', 'speculation': 'off'},
        {'name': 'ngram-k3', 'proposer': 'ngram', 'k': 3},
        {'name': 'ngram-k5-cutoff', 'proposer': 'ngram', 'k': 5, 'policy': 'off_above_batch', 'max_batch': 8},
        {'name': 'ngram-assumed', 'proposer': 'ngram', 'k': 2, 'assumed_acceptance': [0.5, 0.3]},
    ],
    description='browser-test scenario on a synthetic profile (assumed numbers)',
)


def make_root(base: Path) -> Path:
    (base / "profiles").mkdir(parents=True)
    (base / "scenarios").mkdir()
    prof = synthetic_profile_dict(name="synthetic-small", segments=[("chat", "en", 0.0), ("code", "en", 0.0)],
                                  base_step_s=0.02, per_seq_s=0.002)
    (base / "profiles" / "synthetic-small.json").write_text(json.dumps(prof), encoding="utf-8")
    (base / "scenarios" / "small.toml").write_text(SCENARIO, encoding="utf-8")
    return base


@pytest.fixture
def app_url(tmp_path, serve_dash):
    root = make_root(tmp_path / "root")
    app = create_app(Roots.under(root, traces=()), cache_dir=tmp_path / "cache")
    return serve_dash(app)


def wait_for(driver, cond, timeout: float = 60.0, what: str = "condition"):
    from selenium.common.exceptions import JavascriptException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    def safe(d):
        try:
            return cond(d)
        except (StaleElementReferenceException, JavascriptException):
            return False

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.25).until(safe)
    except RunFailed:
        shot(driver, f"failed-{what.replace(' ', '-')}")
        raise
    except Exception as exc:  # noqa: BLE001 - re-raised with what we waited for
        shot(driver, f"failed-{what.replace(' ', '-')}")
        raise AssertionError(f"timed out waiting for {what}; run state {run_state(driver)!r}; "
                             f"error box: {text_of(driver, 'error')!r}") from exc


class RunFailed(AssertionError):
    """The app said its run ended in an error: fail now, not at the timeout."""


def run_state(driver) -> str:
    """The app's readiness signal (hidden ``#run-state``): idle, then done/error <n> per run."""
    return driver.execute_script("const e = document.getElementById('run-state');"
                                 "return e ? e.textContent : '';") or ""


STALL_S = 180.0
"""A run fails when the page shows no sign of life (run state, progress text) for this long."""


def wait_run(driver, after: str = "idle", what: str = "run") -> str:
    """Wait until the app finishes a run newer than state ``after`` and its charts are drawn;
    an error state fails at once with the page's error box. Returns the new state.

    Why no fixed total timeout: on a loaded 2-core machine a run may take minutes, yet it keeps
    moving its progress text; only a run whose page stops changing for ``STALL_S`` is stuck.
    """
    from selenium.webdriver.common.by import By

    seen = {"sign": None, "at": time.monotonic()}

    def finished(d) -> bool:
        state = run_state(d)
        if state.startswith("error") and state != after:
            raise RunFailed(f"{what}: the app reported an error: {text_of(d, 'error')!r}")
        if state.startswith("done") and state != after and d.find_element(By.ID, "run-button").is_enabled():
            return True
        sign = (state, text_of(d, "progress-text"))
        if sign != seen["sign"]:
            seen.update(sign=sign, at=time.monotonic())
        elif time.monotonic() - seen["at"] > STALL_S:
            raise RunFailed(f"{what}: no progress for {STALL_S:.0f} s (run state {state!r}, progress "
                            f"{sign[1]!r}, error box {text_of(d, 'error')!r})")
        return False

    wait_for(driver, finished, timeout=900.0, what=what)
    wait_for(driver, loaded, timeout=60.0, what=f"{what}: charts drawn")
    return run_state(driver)


def text_of(driver, element_id: str) -> str:
    from selenium.webdriver.common.by import By

    els = driver.find_elements(By.ID, element_id)
    return els[0].text if els else ""


def shot(driver, name: str, height: int | None = None) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    if height:
        driver.set_window_size(1600, height)
        time.sleep(0.5)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def traces(driver, fig: str) -> list[dict]:
    return driver.execute_script(
        "const g = document.querySelector('#fig-' + arguments[0] + ' .js-plotly-plot');"
        "return g && g.data ? g.data.filter(t => !(t.x && t.x.length === 1 && t.x[0] === null))"
        ".map(t => ({name: t.name, x: t.x, y: t.y})) : null;", fig) or []


def on_grid(xs, grid) -> bool:
    """The sweep's load points are all drawn (with, between or beyond them, the points run
    around the candidate's capacity)."""
    return bool(xs) and set(grid) <= set(xs) and xs == sorted(xs)


def results_class(driver) -> str:
    return driver.execute_script("const e = document.getElementById('results'); return e ? e.className : '';") or ""


def loaded(driver) -> bool:
    """The first run finished: key numbers shown and the sweep charts drawn."""
    return "baseline" in text_of(driver, "key-numbers") and len(traces(driver, "lat-ttft")) > 0


def whatif_input(driver, key: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.XPATH, f"//input[contains(@id, '\"{key}\"')]")


def test_run_change_whatif_and_share_link(browser, app_url):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(app_url)
    first = wait_run(browser, what="first run")
    names = {t["name"] for t in traces(browser, "lat-ttft")}
    assert {"baseline p95", "ngram-k3 p95", "ngram-assumed p99"} <= names
    first_x = traces(browser, "lat-ttft")[0]["x"]
    assert on_grid(first_x, [1.0, 2.0, 3.0, 4.0])  # offered load of the 0.5, 1, 1.5, 2 × 2 req/s sweep
    assert "assumed" in text_of(browser, "provenance")
    for fig in ("lat-tpot", "goodput", "cost", "cdf-e2el", "acc-position", "breakeven", "levels"):
        assert traces(browser, fig), f"chart {fig} is empty"
    before_numbers = text_of(browser, "key-numbers")
    before_decisions = text_of(browser, "decisions")
    shot(browser, "01-main-view")
    shot(browser, "02-full-page", height=5200)
    for fid in ("lat-pause", "goodput", "cdf-tpot", "acc-position", "acc-segment", "breakeven", "levels"):
        browser.find_element(By.ID, f"fig-{fid}").screenshot(str(SHOTS / f"chart-{fid}.png"))
    browser.set_window_size(1600, 1200)

    assert text_of(browser, "stale-note") == "" and "sp-stale" not in results_class(browser)
    rate = whatif_input(browser, "workload.rate")
    rate.send_keys(Keys.CONTROL, "a")
    rate.send_keys("4", Keys.ENTER)
    # the moment a setting differs from the run's, the results say so and cannot be exported
    wait_for(browser, lambda d: "press Run" in text_of(d, "stale-note") and "sp-stale" in results_class(d)
             and not d.find_element(By.ID, "export-button").is_enabled(), what="results marked stale")
    shot(browser, "03a-stale")
    k = whatif_input(browser, "candidates[ngram-k3].k")
    k.send_keys(Keys.CONTROL, "a")
    k.send_keys("2", Keys.ENTER)
    time.sleep(0.3)
    browser.find_element(By.ID, "run-button").click()
    wait_run(browser, after=first, what="rerun after what-if")
    wait_for(browser, lambda d: "workload.rate=4" in d.current_url and text_of(d, "key-numbers") != before_numbers,
             what="what-if in the URL and the key numbers")
    wait_for(browser, lambda d: traces(d, "lat-ttft") and on_grid(traces(d, "lat-ttft")[0]["x"], [2.0, 4.0, 6.0, 8.0]),
             what="sweep charts redrawn at the new load")
    wait_for(browser, lambda d: text_of(d, "stale-note") == "" and "sp-stale" not in results_class(d),
             what="stale mark cleared by the run")
    assert "candidates[ngram-k3].k=2" in browser.current_url
    assert text_of(browser, "decisions") != before_decisions
    # the candidate's name follows its new k everywhere it is shown
    names = {t["name"] for t in traces(browser, "lat-ttft")}
    assert "ngram-k2 p95" in names and "ngram-k3 p95" not in names
    assert "ngram-k2" in text_of(browser, "key-numbers")
    shot(browser, "03-after-whatif")

    shared = browser.current_url
    browser.get("about:blank")
    browser.get(shared)
    wait_run(browser, what="run from a shared link")
    assert whatif_input(browser, "workload.rate").get_attribute("value") == "4"
    assert whatif_input(browser, "candidates[ngram-k3].k").get_attribute("value") == "2"
    wait_for(browser, lambda d: on_grid(traces(d, "lat-ttft")[0]["x"], [2.0, 4.0, 6.0, 8.0]),
             what="shared link reproduces the view")


def test_malformed_uploads_show_the_loader_message(browser, app_url, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(app_url)
    first = wait_run(browser, what="first run")
    bad = tmp_path / "broken.toml"
    bad.write_text('name = "x"\n[run]\nduration_s = = 60\n', encoding="utf-8")
    browser.find_element(By.CSS_SELECTOR, "#upload-scenario input[type=file]").send_keys(str(bad))
    wait_for(browser, lambda d: "TOML syntax error" in text_of(d, "error"), what="syntax error shown")
    assert "broken.toml:3" in text_of(browser, "error")
    shot(browser, "04-upload-error")

    invalid = tmp_path / "invalid.toml"
    invalid.write_text(SCENARIO.replace("rate = 2.0", "rate = -1.0"), encoding="utf-8")
    browser.find_element(By.CSS_SELECTOR, "#upload-scenario input[type=file]").send_keys(str(invalid))
    wait_for(browser, lambda d: "workload.rate" in text_of(d, "error"), what="validation error shown")
    assert "must be > 0" in text_of(browser, "error")

    escape = tmp_path / "escape.toml"
    escape.write_text(SCENARIO.replace('arrival = "poisson"\nrate = 2.0',
                                       'arrival = "trace"\ntrace = {path = "/etc/passwd"}'), encoding="utf-8")
    browser.find_element(By.CSS_SELECTOR, "#upload-scenario input[type=file]").send_keys(str(escape))
    wait_for(browser, lambda d: "workload.trace.path" in text_of(d, "error"), what="trace path refused")

    good = tmp_path / "mine.toml"
    good.write_text(SCENARIO.replace('name = "small"', 'name = "mine"').replace("rate = 2.0", "rate = 1.0"),
                    encoding="utf-8")
    browser.find_element(By.CSS_SELECTOR, "#upload-scenario input[type=file]").send_keys(str(good))
    wait_for(browser, lambda d: text_of(d, "error") == "" and "mine.toml" in d.find_element(By.ID, "scenario-select").text,
             what="valid upload accepted")
    browser.find_element(By.ID, "run-button").click()
    wait_run(browser, after=first, what="uploaded scenario run")
    wait_for(browser, lambda d: traces(d, "lat-ttft") and on_grid(traces(d, "lat-ttft")[0]["x"], [0.5, 1.0, 1.5, 2.0]),
             what="uploaded scenario charts")


def test_upload_whose_named_fleet_points_outside_profiles_is_refused_in_one_line(browser, app_url, tmp_path):
    """A named fleet's profile outside profiles/ is refused, naming the field and nothing of the
    file; the same fleet pointing into profiles/ (a bare file name) is loaded and runs."""
    from selenium.webdriver.common.by import By

    secret = "SECRET-FILE-CONTENT-7f3a"
    outside = tmp_path / "not-served.json"
    outside.write_text(secret, encoding="utf-8")
    browser.get(app_url)
    first = wait_run(browser, what="first run")
    on_fleet = ('\n[[candidates]]\nname = "ngram-k3-other"\nproposer = "ngram"\nk = 3\nfleet = "other"\n'
                '\n[fleets.other]\nprice_per_gpu_hour = 2.0\nprofile = "{}"\n')
    hostile = tmp_path / "fleet-escape.toml"
    hostile.write_text(SCENARIO + on_fleet.format(outside), encoding="utf-8")
    browser.find_element(By.CSS_SELECTOR, "#upload-scenario input[type=file]").send_keys(str(hostile))
    wait_for(browser, lambda d: "fleets.other.profile" in text_of(d, "error"), what="named fleet refused")
    shown = text_of(browser, "error")
    assert shown == ("Error: fleet-escape.toml: fleets.other.profile: an uploaded scenario may only name files in "
                     "profiles/ (a file name in profiles/, or ../profiles/NAME relative to scenarios/); "
                     f"given {str(outside)!r}"), shown
    assert secret not in browser.page_source
    assert "fleet-escape.toml" not in browser.find_element(By.ID, "scenario-select").text
    shot(browser, "04b-upload-named-fleet-refused")

    good = tmp_path / "fleet-inside.toml"
    good.write_text(SCENARIO + on_fleet.format("synthetic-small.json"), encoding="utf-8")
    browser.find_element(By.CSS_SELECTOR, "#upload-scenario input[type=file]").send_keys(str(good))
    wait_for(browser, lambda d: text_of(d, "error") == ""
             and "fleet-inside.toml" in d.find_element(By.ID, "scenario-select").text,
             what="named fleet in profiles/ accepted")
    browser.find_element(By.ID, "run-button").click()
    wait_run(browser, after=first, what="uploaded named-fleet run")
    assert "ngram-k3-other" in text_of(browser, "decisions")


def test_export_report_contains_the_charts(browser, app_url):
    from selenium.webdriver.common.by import By

    browser.get(app_url)
    wait_run(browser, what="first run")
    wait_for(browser, lambda d: d.find_element(By.ID, "export-button").is_enabled(), what="export enabled")
    browser.find_element(By.ID, "export-button").click()
    downloads: Path = browser.sp_downloads
    wait_for(browser, lambda d: [p for p in downloads.glob("*.html")], timeout=60, what="report download")
    report = next(downloads.glob("*.html"))
    wait_for(browser, lambda d: report.stat().st_size > 1_000_000, timeout=30, what="report written")
    text = report.read_text(encoding="utf-8")
    assert report.name == "specplan-report-small.html"
    assert "* plotly.js v" in text and "<script src" not in text  # plotly.js inlined, nothing fetched
    for fid in ("lat-ttft", "lat-pause", "goodput", "cost", "cdf-ttft", "breakeven", "levels"):
        assert f'id="fig-{fid}"' in text
    assert "Decisions" in text and "ngram-k3" in text
    assert "[[candidates]]" in text and "assumed" in text
    browser.get(report.as_uri())
    wait_for(browser, lambda d: d.execute_script("return document.querySelectorAll('.js-plotly-plot').length") >= 13,
             what="report charts rendered offline")
    shot(browser, "05-report", height=3000)


def test_long_run_shows_progress_and_can_be_cancelled(browser, app_url):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(app_url)
    first = wait_run(browser, what="first run")
    status_before = text_of(browser, "status")
    url_before = browser.current_url
    for element_id, value in (("seeds", "10"), ("load-factors", "0.25, 0.5, 1, 2, 3, 4, 5")):
        el = browser.find_element(By.ID, element_id)
        el.send_keys(Keys.CONTROL, "a")
        el.send_keys(value, Keys.ENTER)
    time.sleep(0.3)
    browser.find_element(By.ID, "run-button").click()
    wait_for(browser, lambda d: "simulations" in text_of(d, "progress-text"), what="progress shown")
    assert not browser.find_element(By.ID, "run-button").is_enabled()
    shot(browser, "06-progress")
    browser.find_element(By.ID, "cancel-button").click()
    wait_for(browser, lambda d: d.find_element(By.ID, "run-button").is_enabled(), timeout=30, what="run cancelled")
    time.sleep(1.0)
    assert text_of(browser, "status") == status_before  # the cancelled run never reached the page
    assert run_state(browser) == first
    assert browser.current_url == url_before
