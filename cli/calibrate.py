"""`specplan calibrate`: fit a profile's free terms to the user's own measured runs.

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
    parser.add_argument("--vllm-results", nargs="+", required=True, metavar="FILE",
                        help="`vllm bench serve --save-result --save-detailed` files, two or more loads in all")
    parser.add_argument("--candidate", metavar="NAME", help="the candidate that served the runs (default: the "
                        "scenario's first speculative candidate, else the baseline)")
    parser.add_argument("--fit", metavar="T,T", help="terms to fit: acceptance_scale, step_overhead_ms, "
                        "request_overhead_ms, spec_host_us_per_row (default: all but the last with a measured "
                        "acceptance; acceptance_scale,request_overhead_ms without one, since acceptance and the "
                        "per-step cost both move TPOT; step_overhead_ms,request_overhead_ms without speculation)")
    parser.add_argument("--holdout", default="last", choices=("last", "lightest", "loo"),
                        help="last: hold out the heaviest load (default); lightest: fit on the lightest load only; "
                             "loo: leave each load out in turn")
    parser.add_argument("--seeds", default="0", metavar="N,N", help="arrival/acceptance draws per simulation (default 0)")
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


def run(args: argparse.Namespace) -> int:
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
    seeds = tuple(_int(s, "--seeds") for s in args.seeds.split(",") if s.strip())
    req = CalibrationRequest(
        results=results, scenario=scenario, profile_doc=doc, profile_origin=profile.origin,
        candidate=cand.name, fit=fit, holdout=args.holdout, seeds=seeds,
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
