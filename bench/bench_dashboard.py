"""How long a what-if takes to redraw every chart (issue 18: at most 1 s on a 2-core machine).

Measures the run callback's body (``dashboard.page_run.run_view``) from the control values it
receives to every figure built, on scenarios/default.toml (ten simulated minutes) with the
interactive defaults (one seed, load points ×0.5, 1, 1.5, 2), changing the arrival rate on
every repeat so nothing is reused. Prints the median and spread over repeats and how the time
splits between simulation and figures. With ``--browser`` it also times the whole round trip in
headless Chromium: click Run → every chart redrawn (background callback, JSON transfer and
Plotly rendering included).

    .venv/bin/python bench/bench_dashboard.py [--repeats 5] [--browser]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from plotly.utils import PlotlyJSONEncoder  # noqa: E402

from dashboard import state as st  # noqa: E402
from dashboard.callbacks import POLL_MS  # noqa: E402
from dashboard.files import Roots, load_named_scenario, profile_name_of  # noqa: E402
from dashboard.page_run import run_view  # noqa: E402
from dashboard.view import FIGURE_IDS  # noqa: E402


def _synthetic_root(scenario_name: str) -> tuple[Path, str]:
    """A temporary root with the scenario and a synthetic profile (assumed numbers) that has its
    proposers and acceptance segments, for when the shipped profile has not been measured yet."""
    from sim.contracts.synthetic import synthetic_profile_dict

    roots = Roots.under(REPO)
    s = load_named_scenario(roots, scenario_name)
    keys = sorted({(seg.acceptance.task, seg.acceptance.language, seg.temperature)
                   for seg in s.workload.segments if seg.acceptance is not None})
    d = synthetic_profile_dict(name="synthetic-bench", segments=keys, base_step_s=0.03, per_seq_s=0.002)
    for c in s.speculative:
        if c.proposer and c.proposer not in d["proposers"]:
            for section in (d["proposers"], d["timing"]["proposers"], d["memory"]["proposers"], d["acceptance"]):
                section[c.proposer] = section["ngram"]
    tmp = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    (tmp / "profiles").mkdir()
    (tmp / "scenarios").mkdir()
    (tmp / "profiles" / "synthetic-bench.json").write_text(json.dumps(d), encoding="utf-8")
    (tmp / "scenarios" / scenario_name).write_text((REPO / "scenarios" / scenario_name).read_text(), encoding="utf-8")
    return tmp, "synthetic-bench.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="default.toml", help="a scenarios/ file name")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--load", default="0.5, 1, 1.5, 2", help="load points of the sweep")
    ap.add_argument("--browser", action="store_true", help="also time the round trip in headless Chromium")
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds between a redraw and the next click in the browser (default 5)")
    args = ap.parse_args()

    roots = Roots.under(REPO)
    base = load_named_scenario(roots, args.scenario)
    profile_value = profile_name_of(base, roots)
    label = f"profile {profile_value}"
    if profile_value is None:
        root, profile_value = _synthetic_root(args.scenario)
        roots = Roots.under(root, traces=())
        label = "SYNTHETIC profile (assumed step times; the shipped profile is not in profiles/)"
    rate = base.workload.rate or 1.0
    print(f"bench_dashboard: {args.scenario} ({base.run.duration_s:g} simulated s, "
          f"{len(base.candidates)} candidates), {label}")
    print(f"interactive view: 1 seed, load points ×{args.load}; what-if = arrival rate changed each repeat")
    totals, sims, figs, sizes = [], [], [], []
    for i in range(args.repeats):
        whatif = dict(st.control_values(base, {}))
        whatif["workload.rate"] = round(rate * (1.0 + 0.05 * (i + 1)), 4)
        t0 = time.perf_counter()
        out = run_view(roots, scenario_value=args.scenario, uploaded_scenario=None, profile_value=profile_value,
                       uploaded_profile=None, whatif=whatif, load_text=args.load, seeds=1)
        t1 = time.perf_counter()
        assert set(out.figures) == set(FIGURE_IDS)
        payload = sum(len(json.dumps(f, cls=PlotlyJSONEncoder)) for f in out.figures.values())
        totals.append(t1 - t0)
        sizes.append(payload)
        # the status line holds the split measured inside run_view
        parts = out.status.split(" in ")
        sims.append(float(parts[1].split(" s")[0]))
        figs.append(float(parts[2].split(" s")[0]))
        print(f"  repeat {i + 1}: {t1 - t0:.2f} s (simulate {sims[-1]:.1f} s, charts {figs[-1]:.1f} s), "
              f"figure JSON {payload / 1e6:.2f} MB")
    med = statistics.median(totals)
    print(f"COLD what-if (nothing reusable) → all {len(FIGURE_IDS)} figures built: median {med:.2f} s "
          f"(min {min(totals):.2f}, max {max(totals):.2f}, n={len(totals)}); "
          f"simulate median {statistics.median(sims):.1f} s, charts median {statistics.median(figs):.1f} s; "
          f"target <= 1 s: {'met' if med <= 1 else 'NOT met'}")
    warm_what_ifs(roots, args.scenario, profile_value, base, args.load, rate)
    if args.browser:
        browser_round_trip(roots, args.scenario, profile_value, args.repeats, rate, args.settle)
    return 0


def warm_what_ifs(roots: Roots, scenario: str, profile: str, base, load: str, rate: float) -> None:
    """What the dashboard does between what-ifs: finished runs are cached, so a change re-runs only
    the candidates and load points it touches. Times a sequence of typical edits."""
    from dashboard.page_run import open_run_cache

    cache = open_run_cache(tempfile.mkdtemp(prefix="bench-dashboard-runs-"))
    controls = dict(st.control_values(base, {}))
    spec = next((c for c in base.speculative if c.k is not None), None)
    steps: list[tuple[str, dict]] = [("first view (cache empty)", {})]
    if spec is not None:
        steps.append((f"{spec.name}: k {spec.k} → {spec.k + 1}", {f"candidates[{spec.name}].k": spec.k + 1}))
    steps += [(f"arrival rate {rate:g} → {rate * 2:g} req/s (sweep points overlap)", {"workload.rate": rate * 2}),
              ("back to the first view", {})]
    if spec is not None:
        steps.append((f"{spec.name}: policy fixed → off_above_batch", {f"candidates[{spec.name}].policy": "off_above_batch"}))
    print("with the run cache (what the app does):")
    for label, change in steps:
        t0 = time.perf_counter()
        out = run_view(roots, scenario_value=scenario, uploaded_scenario=None, profile_value=profile,
                       uploaded_profile=None, whatif={**controls, **change}, load_text=load, seeds=1, cache=cache)
        took = time.perf_counter() - t0
        print(f"  {label}: {took:.2f} s ({'within' if took <= 1 else 'over'} 1 s) — {out.status}")


_TIMING_HOOK = """
window._spDraws = [];
for (const fn of ['react', 'newPlot']) {
  const orig = Plotly[fn];
  Plotly[fn] = function (...args) {
    const t = performance.now(); const out = orig.apply(this, args);
    window._spDraws.push(performance.now() - t); return out;
  };
}"""
"""Times every chart's drawing (plotly.js draws synchronously inside ``react``)."""

_TIMING_READ = """
const big = performance.getEntriesByType('resource').filter(e => e.name.includes('_dash-update-component'))
  .sort((a, b) => b.transferSize - a.transferSize)[0];
return [big ? big.responseEnd - window._spT0 : NaN, window._spDraws.reduce((a, b) => a + b, 0)];"""
"""(ms from the click to the end of the largest callback response, the one with the figures;
ms plotly.js spent drawing)."""


def browser_round_trip(roots: Roots, scenario: str, profile: str, repeats: int, rate: float,
                       settle_s: float = 0.0) -> None:
    """Click Run after changing the rate; time until every chart shows the new load points."""
    import shutil
    import socket
    import threading

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
    from werkzeug.serving import make_server

    from dashboard.app import create_app

    if not shutil.which("chromium") or not Path("/usr/bin/chromedriver").exists():
        print("browser round trip: skipped (chromium/chromedriver not installed; `make browser`)")
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = Path(tempfile.mkdtemp(prefix="bench-dash-browser-"))
    server = make_server("127.0.0.1", port, create_app(roots, cache_dir=tmp / "cache").server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", f"--user-data-dir={tmp / 'profile'}", "--window-size=1600,1200"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    js = ("return Array.from(document.querySelectorAll('.js-plotly-plot')).filter(g => g.data && g.data.length)"
          ".map(g => JSON.stringify(g.data[g.data.length - 1].x)).join('|');")
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    try:
        driver.get(f"http://127.0.0.1:{port}/?scenario={scenario}&profile={profile}")
        try:
            WebDriverWait(driver, 300).until(lambda d: d.execute_script(js).count("|") >= len(FIGURE_IDS) - 1)
        except Exception:
            shots = REPO / "artifacts" / "screenshots"
            shots.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(shots / "bench-browser-timeout.png"))
            print("browser round trip: first view did not finish; error box:",
                  driver.execute_script("return document.getElementById('error').innerText"),
                  "| charts drawn:", driver.execute_script(js).count("|") + 1)
            raise
        driver.execute_script(_TIMING_HOOK)
        times, fetched, drawn = [], [], []
        for i in range(repeats):
            time.sleep(settle_s)  # a person reading the charts: the next job's spare finishes starting
            value = f"{rate * (1.0 + 0.05 * (i + 1)):.4g}"
            el = driver.find_element(By.XPATH, "//input[contains(@id, '\"workload.rate\"')]")
            el.send_keys(Keys.CONTROL, "a")
            el.send_keys(value, Keys.ENTER)
            driver.execute_script("performance.clearResourceTimings(); window._spDraws = []; "
                                  "window._spT0 = performance.now();")
            t0 = time.perf_counter()
            driver.find_element(By.ID, "run-button").click()
            # the run writes its settings into the URL together with the charts
            WebDriverWait(driver, 300, poll_frequency=0.05).until(
                lambda d, v=value: f"workload.rate={float(v)!r}" in d.current_url
                and d.find_element(By.ID, "run-button").is_enabled())
            times.append(time.perf_counter() - t0)
            got, draw = driver.execute_script(_TIMING_READ)
            fetched.append(got / 1000)
            drawn.append(draw / 1000)
            print(f"  browser repeat {i + 1}: {times[-1]:.2f} s click → charts redrawn (results received "
                  f"{fetched[-1]:.2f} s after the click; plotly.js drawing {drawn[-1]:.2f} s)")
        print(f"browser round trip (click Run → all charts redrawn, {settle_s:g} s between runs): median "
              f"{statistics.median(times):.2f} s (n={len(times)}): results in the page after "
              f"{statistics.median(fetched):.2f} s (the job in its process, polled every "
              f"{POLL_MS / 1000:g} s, and the figures' transfer), plotly.js drawing {statistics.median(drawn):.2f} s")
        shots = REPO / "artifacts" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        driver.set_window_size(1600, 5200)
        time.sleep(1.0)
        driver.save_screenshot(str(shots / f"bench-{Path(scenario).stem}-full-page.png"))
    finally:
        driver.quit()
        server.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
