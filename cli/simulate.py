"""``specplan simulate SCENARIO``: run every candidate × seed and print the comparison."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sim.contracts.errors import SpecplanError, echo
from sim.contracts.scenario import load_scenario
from sim.decisions.acceptance_needed import DEFAULT_BUDGET
from sim.results.summary_table import render


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SpecplanError(f"--seeds: expected comma-separated integers like 1,2,3, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise SpecplanError(f"--seeds: need distinct integers >= 0, got {text!r}")
    if any(s > 2**53 for s in seeds) or len(seeds) > 1000:
        raise SpecplanError(f"--seeds: at most 1000 seeds, each <= 2**53, got {echo(text, 80)}")
    return seeds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML (docs/scenario-format.md)")
    parser.add_argument("--profile", help="calibration profile JSON (default: the scenario's fleet.profile)")
    parser.add_argument("--seeds", help="comma-separated seeds, e.g. 1,2 (default: the scenario's run.seeds)")
    parser.add_argument("--candidates", help="comma-separated candidate names (default: all)")
    parser.add_argument("--out", metavar="DIR", help="write requests/steps/summary Parquet and summary.json here")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")
    parser.add_argument("--by-segment", action="store_true", help="also print one table per workload segment")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--verbose", action="store_true",
                        help="intervals in every cell, the full provenance and every note")
    parser.add_argument("--max-seeds", metavar="N", type=int, default=None,
                        help="replication budget: while the answer is undetermined, seeds are added "
                             "until it is resolved or N ran (default: the scenario's run.max_seeds, 10)")
    parser.add_argument("--sizing", action="store_true",
                        help="also find the replicas each candidate needs for the scenario's rate, by the "
                             "rule `specplan capacity` uses (simulated at each count, judged across seeds)")
    parser.add_argument("--acceptance-needed", metavar="N", type=int, nargs="?", const=DEFAULT_BUDGET, default=None,
                        help="also find the acceptance length each speculative candidate needs to pay at "
                             "the scenario's load: bisection with at most N evaluations (one run per seed "
                             f"each; default {DEFAULT_BUDGET}) per candidate (docs/decisions.md)")


def run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    seeds = _seeds(args.seeds) if args.seeds else None
    cands = [c.strip() for c in args.candidates.split(",") if c.strip()] if args.candidates else None
    bar = None
    progress = None
    if not args.quiet:
        from tqdm import tqdm

        bar = tqdm(total=0, file=sys.stderr, unit="run", desc="simulate", leave=False)

        def progress(done: int, total: int, label: str) -> None:
            bar.total = total
            bar.set_postfix_str(label)
            bar.update(done - bar.n)

    from sim.decisions.answer import answer_scenario
    from sim.decisions.answer_export import rows_json, to_json
    from sim.decisions.answer_rows import rows
    from sim.decisions.answer_text import lines

    if args.max_seeds is not None and not 1 <= args.max_seeds <= 1000:
        raise SpecplanError(f"--max-seeds: must be in 1..1000, got {args.max_seeds}")
    rate = None
    if args.acceptance_needed is not None:  # checked before anything runs
        from sim.decisions.acceptance_needed import check_budget
        from sim.decisions.answer import offered

        check_budget(args.acceptance_needed)
        rate = offered(scenario)
        if rate is None:
            raise SpecplanError("--acceptance-needed: needs an offered rate (poisson, gamma or piecewise "
                                "arrivals); a trace or closed-loop clients have none to scale")
    sizing: list[str] = []
    sizes = None
    if args.sizing:
        from sim.decisions.fleet_sizing import fleet_sizes, sizing_lines
        from sim.decisions.load_scaling import arrival_rate

        found, used = fleet_sizes(scenario, args.profile, candidates=cands, seeds=seeds, max_seeds=args.max_seeds)
        sizing = sizing_lines(arrival_rate(scenario), found, used)
        sizes = {name: (z.n, z.low) for name, z in found.items()}
    try:
        result, answer = answer_scenario(scenario, args.profile, candidates=cands, seeds=seeds,
                                         max_seeds=args.max_seeds, progress=progress, sizes=sizes)
        if rate is not None:
            from sim.decisions.answer import with_acceptance_needed

            answer = with_acceptance_needed(answer, [(rate, result)], args.profile,
                                            budget=args.acceptance_needed, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    if args.out:
        from sim.results.atomic_io import write_text_atomic

        paths = result.write(args.out)
        dj = Path(args.out) / "decision.json"
        write_text_atomic(dj, json.dumps({"decision": to_json(answer), "decision_rows": rows_json(rows(answer))},
                                         indent=2, allow_nan=False) + "\n")
        paths.append(dj)
        if not args.json:
            print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    if args.json:
        doc = result.to_json()
        doc["decision"] = to_json(answer)
        doc["decision_rows"] = rows_json(rows(answer))
        if sizing:
            doc["fleet_sizing"] = sizing
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        text = render(result, by_segment=args.by_segment, verbose=args.verbose, verdict=lines(answer, verbose=args.verbose))
        if sizing:  # right under the verdict block, before the table
            head, sep, rest = text.partition("\n\ncells: ")
            text = head + "\n" + "\n".join(sizing) + sep + rest
        print(text)
    return 0

