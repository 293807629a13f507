"""`specplan calibrate`: fit a profile's free terms to the user's own measured runs.

``specplan calibrate SCENARIO --points SWEEP.toml [--candidate NAME] [--duration S]`` fits the
acceptance scale on a sweep's lightest load and holds out every heavier one (summary points as
papers and dashboards publish them, ``sim.contracts.sweep_points``).
``specplan calibrate SCENARIO --vllm-results A.json B.json C.json [--candidate NAME]
[--fit acceptance_scale,step_overhead_ms,request_overhead_ms] [--holdout last|lightest|loo]
[--acceptance-trace FILE --trace-format vllm-per-request] [--spec-metrics FILE] -o OUT.json``
(docs/fidelity.md, "Calibrating from your own runs"). Parses, calls
``sim.fidelity.calibrate``, prints ``sim.fidelity.calibration_report``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.contracts.errors import SpecplanError

TRACE_FORMATS = ("vllm-per-request", "specplan", "specdecode-bench-eagle", "specdecode-bench-ngram")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", metavar="SCENARIO", help="scenario TOML: the deployment's engine and candidate")
    parser.add_argument("--profile", metavar="PATH", help="profile to calibrate (default: the scenario's fleet.profile)")
    parser.add_argument("--vllm-results", nargs="+", metavar="FILE",
                        help="`vllm bench serve --save-result --save-detailed` files, two or more loads in all")
    parser.add_argument("--points", metavar="FILE", help="a sweep's summary points per load (TOML, docs/fidelity.md "
                        "\"Calibrating from a published sweep\"): acceptance is fitted on the lightest load only, "
                        "every heavier load is held out")
    parser.add_argument("--duration", metavar="S", help="with --points: simulated seconds per load (default the "
                        "scenario's run.duration_s)")
    parser.add_argument("--candidate", metavar="NAME", help="the candidate that served the runs (default: the "
                        "scenario's first speculative candidate, else the baseline)")
    parser.add_argument("--fit", metavar="T,T", help="terms to fit: acceptance_scale, step_overhead_ms, "
                        "request_overhead_ms, spec_host_us_per_row, draft_host_scale (default: the first three with a measured "
                        "acceptance; acceptance_scale,request_overhead_ms without one, since acceptance and the "
                        "per-step cost both move TPOT; step_overhead_ms,request_overhead_ms without speculation)")
    parser.add_argument("--holdout", choices=("last", "lightest", "loo"),
                        help="last: hold out the heaviest load (default); lightest: fit on the lightest load only "
                             "(the only one with --points); loo: leave each load out in turn")
    parser.add_argument("--seeds", metavar="N,N", help="arrival/acceptance draws per simulation (default 0; with "
                        "--points the scenario's run.seeds)")
    parser.add_argument("--acceptance-trace", metavar="FILE", help="the deployment's per-request acceptance "
                        "(vLLM --per-request-spec-decode-metrics detailed, one response a line)")
    parser.add_argument("--trace-format", default="vllm-per-request", choices=TRACE_FORMATS,
                        help="layout of --acceptance-trace (default vllm-per-request)")
    parser.add_argument("--spec-metrics", metavar="FILE", help="a /metrics scrape of the server (Prometheus text): "
                        "its spec-decode counters give the measured acceptance length")
    parser.add_argument("--rounds", default="1", metavar="N", help="coordinate-search rounds (default 1)")
    parser.add_argument("--evals-per-line", default="10", metavar="N", help="evaluations per line search (default 10)")
    parser.add_argument("--iterations", default="15", metavar="N", help="Levenberg–Marquardt iterations (default 15)")
    parser.add_argument("-o", "--output", metavar="PATH", help="write the calibrated profile here")
    parser.add_argument("--scenario-out", metavar="PATH", help="write the calibrated scenario (its request overhead, "
                        "scaled assumed acceptance; fleet.profile pointing at -o) here")
    parser.add_argument("--json", metavar="PATH", help="write the fitted values and the table as JSON")


def _int(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SpecplanError(f"{flag}: expected an integer, got {text!r}") from None


def _measured_acceptance(args: argparse.Namespace, k: int | None):  # -> MeasuredAcceptance | None
    from sim.fidelity.calibrate import MeasuredAcceptance

    if args.acceptance_trace and args.spec_metrics:
        raise SpecplanError("--acceptance-trace and --spec-metrics: give one source of measured acceptance")
    if args.acceptance_trace:
        from sim.contracts.acceptance_trace import measured_acceptance_length
        from sim.model.trace_acceptance import load_trace

        if k is None:
            raise SpecplanError("--acceptance-trace: the candidate has no fixed k to replay the trace at")
        recs = load_trace(args.acceptance_trace, args.trace_format)
        return MeasuredAcceptance(measured_acceptance_length(recs, k), args.acceptance_trace)
    if args.spec_metrics:
        from profiler.imported.vllm_import import spec_counters
        from sim.contracts.errors import read_text

        c = spec_counters(read_text(args.spec_metrics, "metrics scrape"), args.spec_metrics)
        if c.num_drafts <= 0:
            raise SpecplanError(f"{args.spec_metrics}: vllm:spec_decode_num_drafts is 0; no acceptance to measure")
        return MeasuredAcceptance(1.0 + c.num_accepted_tokens / c.num_drafts, args.spec_metrics)
    return None


def _seeds(text: str) -> tuple[int, ...]:
    return tuple(_int(s, "--seeds") for s in text.split(",") if s.strip())


def run_points(args: argparse.Namespace) -> int:
    """``--points``: acceptance fitted on the lightest load of a sweep's summary points."""
    from sim.contracts.profile import load_profile_document
    from sim.contracts.scenario import load_scenario
    from sim.contracts.sweep_points import load_sweep_points
    from sim.fidelity.sweep_calibrate import calibrate_sweep
    from sim.fidelity.sweep_report import format_sweep, write_sweep_outputs

    if args.vllm_results:
        raise SpecplanError("--points and --vllm-results: give one kind of measured input")
    if args.holdout not in (None, "lightest"):
        raise SpecplanError(f"--holdout {args.holdout}: with --points acceptance is fitted on the lightest load only "
                            "(--holdout lightest)")
    if args.fit not in (None, "acceptance_scale"):
        raise SpecplanError(f"--fit {args.fit}: with --points only acceptance_scale is fitted (summary points cannot "
                            "separate the overheads from acceptance); use --vllm-results for the other terms")
    for flag in ("acceptance_trace", "spec_metrics"):
        if getattr(args, flag):
            raise SpecplanError(f"--{flag.replace('_', '-')}: with --points give the measured acceptance in the points "
                                "file (speculative = { acceptance_length = ... })")
    pts = load_sweep_points(args.points)
    scenario = load_scenario(args.scenario)
    if args.duration is not None:
        try:
            d = float(args.duration)
        except ValueError:
            raise SpecplanError(f"--duration: expected seconds, got {args.duration!r}") from None
        if not (d > 0 and d < 1e7):
            raise SpecplanError(f"--duration: expected seconds > 0, got {args.duration!r}")
        scenario = scenario.with_overrides({"run.duration_s": d, "run.warmup_s": min(scenario.run.warmup_s, d / 5)})
    profile_path = args.profile or str(scenario.require_profile_path())
    doc, profile = load_profile_document(profile_path)
    name = args.candidate or pts.candidate or next((c.name for c in scenario.candidates if c.speculates), None)
    if name is None:
        raise SpecplanError(f"{args.scenario}: no speculative candidate to calibrate; add one or pass --candidate")
    seeds = _seeds(args.seeds) if args.seeds else scenario.run.seeds
    cal = calibrate_sweep(pts, scenario, doc, profile.origin, name, seeds)
    header = [f"specplan calibrate --points: {pts.name} ({len(pts.points)} loads, {pts.load_kind}), profile "
              f"{profile.name} ({profile.origin}), candidate {name} against {cal.baseline}, "
              f"{scenario.run.duration_s:g} s simulated per load"]
    print(format_sweep(cal, header))
    for line in write_sweep_outputs(cal, Path(args.output) if args.output else None,
                                    Path(args.scenario_out) if args.scenario_out else None,
                                    Path(args.json) if args.json else None):
        print(line)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.points:
        return run_points(args)
    if not args.vllm_results:
        raise SpecplanError("calibrate: give --vllm-results FILE... (per-request runs) or --points FILE (a sweep's "
                            "summary points)")
    if args.duration is not None:
        raise SpecplanError("--duration: only with --points (--vllm-results replays the measured requests)")
    from sim.contracts.profile import load_profile_document
    from sim.contracts.scenario import load_scenario
    from sim.contracts.vllm_results import load_vllm_results
    from sim.fidelity.calibrate import CalibrationRequest, calibrate
    from sim.fidelity.calibration_report import format_calibration, write_outputs
    from sim.fidelity.calibration_terms import parse_fit

    scenario = load_scenario(args.scenario)
    profile_path = args.profile or str(scenario.require_profile_path())
    doc, profile = load_profile_document(profile_path)
    results = tuple(r for f in args.vllm_results for r in load_vllm_results(f))
    if args.candidate:
        cand = scenario.candidate(args.candidate)
    else:
        cand = next((c for c in scenario.candidates if c.speculates), scenario.baseline)
    acceptance = _measured_acceptance(args, cand.k) if cand.speculates else None
    default_fit = ("step_overhead_ms,request_overhead_ms" if not cand.speculates
                   else "acceptance_scale,step_overhead_ms,request_overhead_ms" if acceptance is not None
                   else "acceptance_scale,request_overhead_ms")
    fit = parse_fit(args.fit or default_fit)
    seeds = _seeds(args.seeds or "0")
    req = CalibrationRequest(
        results=results, scenario=scenario, profile_doc=doc, profile_origin=profile.origin,
        candidate=cand.name, fit=fit, holdout=args.holdout or "last", seeds=seeds,
        acceptance=acceptance,
        rounds=_int(args.rounds, "--rounds"), evals_per_line=_int(args.evals_per_line, "--evals-per-line"),
        iterations=_int(args.iterations, "--iterations"),
    )
    cal = calibrate(req, say=lambda m: print(m, file=sys.stderr))
    header = [f"specplan calibrate: profile {profile.name} ({profile.origin}), candidate {cand.name}, "
              f"{len(results)} measured load(s): {', '.join(r.source for r in req.ordered())}",
              *[f"source: {s}" for s in cal.sources]]
    print(format_calibration(cal, header))
    for line in write_outputs(cal, Path(args.output) if args.output else None,
                              Path(args.scenario_out) if args.scenario_out else None,
                              Path(args.json) if args.json else None):
        print(line)
    return 0
