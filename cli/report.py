"""`specplan report SCENARIO -o report.html`: the dashboard's view as one self-contained file."""

from __future__ import annotations

import argparse
from pathlib import Path

from sim.contracts.errors import SpecplanError
from sim.decisions.acceptance_needed import DEFAULT_BUDGET


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", type=Path, help="scenario TOML file")
    parser.add_argument("-o", "--output", type=Path, default=Path("report.html"),
                        help="HTML file to write (default report.html)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="calibration profile JSON (default: the scenario's fleet.profile)")
    parser.add_argument("--load", default="0.5,1,1.5,2",
                        help="load points as multiples of the scenario's rate (default 0.5,1,1.5,2)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="run only the first N of the scenario's seeds (default: all of them)")
    parser.add_argument("--max-seeds", type=int, default=None,
                        help="replication budget of the decision (default: the scenario's run.max_seeds, 10)")
    parser.add_argument("--acceptance-needed", metavar="N", type=int, default=DEFAULT_BUDGET,
                        help="evaluations per candidate and load point for the acceptance each "
                             f"speculative candidate needs (default {DEFAULT_BUDGET}; 0 leaves it out; "
                             "docs/decisions.md)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                        help="what-if override, e.g. --set workload.rate=2 --set candidates[ngram-k3].k=4")


def run(args: argparse.Namespace) -> int:
    from dashboard.html_report import render_report, write_report
    from dashboard.state import parse_load_factors, parse_value
    from dashboard.view import compute_view, report_content, view_figures
    from sim.contracts.profile import load_profile
    from sim.contracts.scenario import load_scenario
    from sim.results.runner import resolve_profile

    scenario = load_scenario(args.scenario)
    overrides = {}
    for item in args.overrides:
        if "=" not in item:
            raise SpecplanError(f"--set {item!r}: expected PATH=VALUE, e.g. workload.rate=2")
        key, value = item.split("=", 1)
        overrides[key.strip()] = parse_value(value)
    if overrides:
        scenario = scenario.with_overrides(overrides)
    if args.seeds is not None:
        if args.seeds < 1:
            raise SpecplanError(f"--seeds: must be >= 1, got {args.seeds}")
        scenario = scenario.with_overrides({"run.seeds": list(scenario.run.seeds)[: args.seeds]})
    if args.max_seeds is not None:
        if not 1 <= args.max_seeds <= 1000:
            raise SpecplanError(f"--max-seeds: must be in 1..1000, got {args.max_seeds}")
        scenario = scenario.with_overrides({"run.max_seeds": args.max_seeds})
    profile = load_profile(args.profile) if args.profile else resolve_profile(scenario, None)
    factors = parse_load_factors(args.load)
    from sim.decisions.acceptance_needed import check_budget

    check_budget(args.acceptance_needed)

    def progress(done: int, total: int, label: str) -> None:
        print(f"\r{done}/{total} simulations  {label:<60}", end="", flush=True)

    view = compute_view(scenario, profile, load_factors=factors, progress=progress,
                        acceptance_budget=args.acceptance_needed)
    print()
    figs = view_figures(view)
    out = write_report(args.output, render_report(report_content(view, figs)))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {len(figs)} charts, "
          f"{view.decisions.height} decisions, {len(view.sources)} provenance lines")
    return 0
