"""`specplan capacity SCENARIO`: highest sustainable rate per replica and fewest replicas per
candidate, with the decision table, bottlenecks and a load-dependent policy recommendation.

Accuracy is a trade against time: each probe simulates ``run.duration_s`` (``--duration``
shortens it) and the search stops when the bracket is within ``--rel-tol`` or after
``--max-evals`` probes per seed; the printed bracket and the spread over seeds say how exact
the answer is.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from sim.contracts.errors import SpecplanError, echo
from sim.results.atomic_io import ensure_dir, write_parquet_atomic, write_text_atomic


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML")
    parser.add_argument("--percentile", metavar="P", help="hold SLOs at this percentile: 50, 95 or "
                        "99 (default: the scenario's slo.percentile)")
    parser.add_argument("--target-rate", metavar="R", help="req/s the fleet must serve for the "
                        "replica count (default: the scenario's mean rate)")
    parser.add_argument("--seeds", metavar="S,S,…", help="seeds (default: the scenario's run.seeds)")
    parser.add_argument("--candidates", metavar="A,B,…", help="only these candidates")
    parser.add_argument("--profile", metavar="PATH", help="profile instead of the scenario's fleet.profile")
    parser.add_argument("--duration", metavar="S", help="simulated seconds per probe (default: the "
                        "scenario's run.duration_s; shorter is faster and noisier); a trace: the "
                        "slice replayed, which probes at other rates compress or stretch")
    parser.add_argument("--rel-tol", metavar="F", default="0.1", help="stop when the bracket is "
                        "within this relative width (default 0.1)")
    parser.add_argument("--max-evals", metavar="N", default="8", help="probes per seed and "
                        "candidate (default 8)")
    parser.add_argument("--max-loss", metavar="F", default="0.01", help="tolerated share of "
                        "rejected or timed-out requests (default 0.01)")
    parser.add_argument("--jobs", metavar="N", default="1", help="processes that simulate the "
                        "independent load levels side by side (same results); 'auto' = this "
                        "machine's CPUs; default 1")
    parser.add_argument("--max-seeds", metavar="N", help="replication budget: while the capacities "
                        "cannot be told apart, seeds are added until they can or N ran (default: "
                        "the scenario's run.max_seeds, 10)")
    parser.add_argument("--per-window", metavar="S", help="also size each S-second window of a "
                        "recorded trace on its own: replicas per window, peak and mean GPUs (what an "
                        "autoscaler would follow), beside the whole trace's fleet")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--out", metavar="DIR", help="also write capacity.json and Parquet frames here; finished probes (the acceptance interval's too) are kept in DIR/probes/ and a rerun (after Ctrl-C or kill -9) reuses them")
    parser.add_argument("--verbose", action="store_true", help="the full provenance and every note")
    parser.add_argument("--no-profile-band", action="store_true",
                        help="skip the two extra searches at the profile's p90/p10 step times")


def _num(name: str, raw: str | None, conv: type = float) -> Any:
    if raw is None:
        return None
    try:
        v = conv(raw)
    except ValueError:
        raise SpecplanError(f"{name}: expected a {'number' if conv is float else 'whole number'}, "
                            f"got {raw!r}") from None
    if conv is float and not math.isfinite(v):
        raise SpecplanError(f"{name}: must be finite, got {raw!r}")
    return v


def _int_list(name: str, raw: str | None) -> list[int] | None:
    if raw is None:
        return None
    try:
        vals = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise SpecplanError(f"{name}: expected comma-separated whole numbers, got {raw!r}") from None
    if any(not 0 <= v <= 2**53 for v in vals) or len(vals) > 1000:
        raise SpecplanError(f"{name}: at most 1000 whole numbers in [0, 2**53], got {echo(raw, 80)}")
    return vals


def _jobs(raw: str) -> int:
    import os

    if raw == "auto":
        return max(1, os.cpu_count() or 1)
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= 256:
        raise SpecplanError(f"--jobs: expected a whole number 1..256 or 'auto', got {echo(raw, 40)}")
    return n


def run(args: argparse.Namespace) -> int:
    from sim.contracts.scenario import load_scenario
    from sim.decisions.capacity import plan_capacity
    from sim.decisions.load_scaling import with_duration
    from sim.results.runner import resolve_profile

    scenario = load_scenario(args.scenario)
    duration = _num("--duration", args.duration)
    if duration is not None:
        scenario = with_duration(scenario, duration)
    if (per_window := _num("--per-window", args.per_window)) is not None:
        from sim.decisions.trace_sizing import check_windows

        check_windows(scenario, per_window, _num("--target-rate", args.target_rate))  # before the search
    profile = resolve_profile(scenario, args.profile)
    cands = [c.strip() for c in args.candidates.split(",")] if args.candidates else None
    rel_tol = _num("--rel-tol", args.rel_tol)
    max_evals = _num("--max-evals", args.max_evals, int)
    if not (rel_tol and rel_tol > 0) or max_evals < 2:
        raise SpecplanError("--rel-tol must be > 0 and --max-evals ≥ 2")
    quiet = args.json or not sys.stderr.isatty()
    report = plan_capacity(
        scenario, profile,
        percentile=_num("--percentile", args.percentile),
        target_rate=_num("--target-rate", args.target_rate),
        seeds=_int_list("--seeds", args.seeds),
        candidates=cands, rel_tol=rel_tol, max_evals=max_evals,
        max_loss_fraction=_num("--max-loss", args.max_loss),
        progress=None if quiet else (lambda m: print(f"  … {m}", file=sys.stderr)),
        profile_band=not args.no_profile_band,
        cache_dir=Path(args.out) / "probes" if args.out else None,
        workers=_jobs(args.jobs),
        max_seeds=_max_seeds(args.max_seeds),
    )
    from sim.decisions.answer import checked_capacity_answer, device_of
    from sim.decisions.engine_config import deployability

    engines = deployability(scenario, profile, [c.candidate for c in report.candidates])
    answer = checked_capacity_answer(
        report, scenario, profile, device=device_of(profile, scenario), engines=engines,
        progress=None if quiet else (lambda m: print(f"  … {m}", file=sys.stderr)),
        cache_dir=Path(args.out) / "probes" if args.out else None)
    advice = _advice(scenario, profile, report, cands)
    routes = _two_routes(scenario, profile, report, answer)
    deploy = _deploy(scenario, profile, answer)
    windows = _per_window(scenario, profile, report, answer, args.per_window, quiet)
    doc = to_json(report, advice, answer, routes, deploy)
    if windows is not None:
        doc["per_window"] = windows.to_json()
    if args.out:
        write_outputs(report, doc, Path(args.out), answer)
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        print("\n".join(format_report(report, advice, answer, verbose=args.verbose, routes=routes,
                                       deploy=deploy)))
        if windows is not None:
            print("\n".join(["", *windows.lines()]))
    return 0


def _per_window(scenario: Any, profile: Any, report: Any, answer: Any, raw: str | None, quiet: bool) -> Any:
    """``--per-window S``: the trace's windows sized on their own (None without the flag)."""
    from sim.decisions.trace_sizing import windows_of_plan

    window_s = _num("--per-window", raw)
    if window_s is None:
        return None
    return windows_of_plan(scenario, profile, report, answer, window_s,
                           progress=None if quiet else (lambda m: print(f"  … {m}", file=sys.stderr)))


def _deploy(scenario: Any, profile: Any, answer: Any) -> Any:
    """The config of the candidate the verdict names, for the scenario's engine."""
    from sim.decisions.engine_config import verdict_config

    return verdict_config(scenario, profile, answer)


def _max_seeds(raw: str | None) -> int | None:
    n = _num("--max-seeds", raw, int)
    if n is not None and not 1 <= n <= 1000:
        raise SpecplanError(f"--max-seeds: must be in 1..1000, got {n}")
    return n


def _advice(scenario: Any, profile: Any, report: Any, cands: list[str] | None) -> list[Any]:
    """Policy advice for each proposer the (chosen) speculative candidates use."""
    from sim.decisions.policy_advice import advise_for_capacity

    return advise_for_capacity(scenario, profile, report, cands)


def _two_routes(scenario: Any, profile: Any, report: Any, answer: Any) -> list[Any]:
    """The scenario's [[two_routes]], sized and priced beside their candidates alone."""
    from sim.decisions.two_route import plan_two_routes

    facts = answer.whole.facts
    reps = {c.name: c.replicas for c in facts.candidates}
    return plan_two_routes(scenario, profile, report, reps)


def to_json(report: Any, advice: list[Any], answer: Any, routes: list[Any] | None = None,
            deploy: Any = None) -> dict[str, Any]:
    from sim.decisions import answer_export as ax
    from sim.decisions.answer_rows import rows as answer_rows
    from sim.decisions.bottleneck import Bottleneck
    from sim.decisions.bottleneck_text import evidence, limit_label

    c = report.criteria
    return {
        "scenario": report.scenario_name,
        "sustains": {"percentile": c.percentile, "limits_ms": dict(c.limits_ms),
                     "max_loss_fraction": c.max_loss_fraction},
        "search": {"rel_tol": report.rel_tol, "max_evals": report.max_evals,
                   "duration_s": report.duration_s},
        "candidates": [
            {"candidate": r.candidate, "capacity_rps_mean": r.mean,
             "capacity_rps_ci95": _interval(answer, r.candidate)[1],
             "capacity_rps_interval": _interval(answer, r.candidate)[2],
             "capacity_rps_profile_band": list(r.profile_band) if r.profile_band else None,
             "fleet_replicas": r.fleet_replicas,
             "per_seed": [{"seed": sd, "capacity_rps": s.rate / r.fleet_replicas,
                           "fleet_capacity_rps": s.rate, "bracket": [s.lower, s.upper],
                           "status": s.status, "evaluations": len(s.probes),
                           "probes": [[p.rate, p.sustained, p.margin, p.reason] for p in s.probes]}
                          for sd, s in zip(r.seeds, r.per_seed, strict=True)],
             "target_rate": r.target_rate, "replicas": _reps(answer, r.candidate),
             "replicas_covering_mean": answer.whole.facts.candidate(r.candidate).replicas_mean,
             "replicas_low": answer.whole.facts.candidate(r.candidate).replicas_low,
             "replicas_undetermined": answer.whole.facts.candidate(r.candidate).replicas_undetermined,
             "replicas_below": r.replicas_below, "replicas_status": r.replicas_status,
             "gpus_per_replica": report.gpus_per_replica,
             "gpus": None if _reps(answer, r.candidate) is None else _reps(answer, r.candidate) * report.gpus_per_replica,
             "operating_point": r.operating_row}
            for r in report.candidates
        ],
        "decision": ax.to_json(answer),
        "decisions": ax.rows_json(answer_rows(answer)),
        "bottlenecks": [{**b.to_row(), "limit_label": limit_label(b), "evidence": evidence(b)}
                        for b in report.bottlenecks if isinstance(b, Bottleneck)],
        "policy_advice": [
            {"proposer": a.proposer, "k_by_batch": a.k_by_batch, "off_above_batch": a.off_above_batch,
             "on_below_batch": a.on_below_batch, "fixed_k": a.fixed_k,
             "vllm_speculative_config": a.vllm_speculative_config(), "vllm_notes": a.vllm_notes(),
             "engine_support": [{"suggestion": w, "vllm_runs": e.runs, "how": e.how,
                                 "deployable": e.deployable} for w, e in a.engine_support()],
             "sources": list(a.sources), "notes": list(a.notes)} for a in advice
        ],
        "deploy_config": None if deploy is None else deploy.to_json(),
        "two_routes": [r.to_json() for r in routes or ()],
        "sources": [*report.sources, *([report.price_source] if report.price_source else [])],
        "notes": list(report.notes),
    }


def _at_size(answer: Any, name: str) -> float | None:
    """$ per answer at the banked fleet size (None: no size or no price)."""
    import math as _m

    from sim.decisions.decision import cost_at_size

    v = cost_at_size(answer.whole.facts.candidate(name), answer.whole.facts.rate) / 1000.0
    return v if _m.isfinite(v) else None


def _gpu_words(answer: Any, name: str, g: int) -> str:
    """"baseline 4 × 8 = 32 GPUs"; "baseline 9 or 10 × 8 = 72 or 80 GPUs" while 9 is undetermined."""
    c = answer.whole.facts.candidate(name)
    n = c.replicas
    if c.replicas_undetermined:
        return f"{name} {c.replicas_low} or {n} × {g} = {c.replicas_low * g} or {n * g} GPUs"
    return f"{name} {n} × {g} = {n * g} GPUs"


def _reps(answer: Any, name: str) -> int | None:
    return answer.whole.facts.candidate(name).replicas


def _interval(answer: Any, name: str) -> tuple[float, float | None, str]:
    """Mean capacity, its half-width (seeds' t interval, never narrower than the search
    bracket's) and the words for it."""
    from sim.decisions.paired import mean_interval
    from sim.results.intervals import clip_interval

    c = answer.whole.facts.candidate(name)
    if not c.capacity or not any(x > 0 for x in c.capacity):
        return 0.0, None, "no capacity found"
    m, half, txt = mean_interval(c.capacity)
    if half is not None and half < c.capacity_resolution:
        res = c.capacity_resolution
        low, high, clipped = clip_interval(m, res)  # a capacity is never below 0
        return m, res, (f"{low:.3g}–{high:.3g} (the search bracket's half-width, clipped at 0)" if clipped
                        else f"± {res:.2g} (the search bracket's half-width)")
    return m, half, txt


def write_outputs(report: Any, doc: dict[str, Any], out: Path, answer: Any) -> None:
    from sim.decisions.answer_export import rows_frame
    from sim.decisions.answer_rows import rows
    from sim.decisions.bottleneck import bottlenecks_frame

    ensure_dir(out)  # every file below is written whole or not at all (sim/results/atomic_io.py)
    write_text_atomic(out / "capacity.json", json.dumps(doc, indent=2, default=str) + "\n")
    if report.load_summary.height:
        write_parquet_atomic(report.load_summary, out / "load_levels.parquet")
    if report.operating_summary.height:
        write_parquet_atomic(report.operating_summary, out / "operating_point.parquet")
    write_parquet_atomic(rows_frame(rows(answer)), out / "decisions.parquet")
    bf = bottlenecks_frame(list(report.bottlenecks))
    if bf.height:
        write_parquet_atomic(bf, out / "bottlenecks.parquet")


def _money(v: Any) -> str:
    """Dollars per 1,000 good answers: the one cost unit of every surface."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return "∞" if math.isinf(v) else f"${1000.0 * v:.3g}"


def format_report(report: Any, advice: list[Any], answer: Any, verbose: bool = False,
                  routes: list[Any] | None = None, deploy: Any = None) -> list[str]:
    from sim.decisions.answer_export import format_rows
    from sim.decisions.answer_rows import rows
    from sim.decisions.answer_text import lines as verdict_lines
    from sim.decisions.bottleneck_text import format_bottlenecks
    from sim.results.summary_table import condense_notes, short_source

    c = report.criteria
    limits = ", ".join(f"{c.column(m)} ≤ {v:g} ms" for m, v in c.limits_ms.items())
    lines = [
        f"capacity of {report.scenario_name}: sustains = {limits}, and ≤ {c.max_loss_fraction:.1%} "
        f"of requests rejected or timed out (simulated)",
        f"search: double/halve to bracket, then safeguarded secant/bisection on log-rate; stop at "
        f"±{report.rel_tol:.0%} or {report.max_evals} probes per seed; {report.duration_s:g} s "
        f"simulated per probe",
        "",
        f"{'candidate':<18} {'req/s per replica':>18} {'±95% CI':>8}  {'per seed':<22} {'probes':>6} "
        f"{'replicas':>9} {'@ req/s':>8}  $ per 1k answers at that size",
    ]
    lines[0:0] = [*verdict_lines(answer), ""]
    fleets = {r.fleet_replicas for r in report.candidates}
    if fleets != {1}:
        whose = getattr(report, "searched_fleet", "the scenario's")  # a trace: where it is carried (notes)
        lines.insert(2, f"searched on {whose} fleet of {', '.join(map(str, sorted(fleets)))} "
                        f"replicas; capacity shown per replica (fleet ÷ replicas)")
    for r in report.candidates:
        per_seed = ", ".join(f"{c:.3g}" for c in r.capacities)
        n = _reps(answer, r.candidate)
        fc = answer.whole.facts.candidate(r.candidate)
        reps = "-" if n is None else (f"{fc.replicas_low}-{n}*" if fc.replicas_undetermined else str(n))
        cap = f"{r.mean:.3g}" if r.mean > 0 else "none"
        half = _interval(answer, r.candidate)[1]
        ci = "n/a" if half is None else f"{half:.2g}"
        lines.append(f"{r.candidate:<18} {cap:>18} {ci:>8}  {per_seed:<22} "
                     f"{r.evaluations:>6} {reps:>9} {r.target_rate:>8.3g}  "
                     f"{_money(_at_size(answer, r.candidate))}")
        if r.profile_band is not None:
            lines.append(f"{'':<18} model band: {r.profile_band[0]:.3g}–{r.profile_band[1]:.3g} req/s per "
                         f"replica with every step at the profile's p90 / p10 times (seed {r.seeds[0]})")
        if r.bounded:
            lines.append(f"{'':<18} note: {r.bounded}")
        if n is None:
            lines.append(f"{'':<18} note: {r.replicas_status}")
        elif fc.replicas_undetermined:
            lines.append(f"{'':<18} * {fc.replicas_low} or {n} replicas: {n} carry the target; "
                         f"{r.replicas_below} at the budget of {len(r.seeds)} seed(s) (run.max_seeds "
                         f"or --max-seeds for more)")
    facts = answer.whole.facts
    if facts.mixed_fleets:
        gpus = ", ".join(f"{r.candidate} {facts.gpus_text(r.candidate, n)}"
                         for r in report.candidates if (n := _reps(answer, r.candidate)) is not None)
        lines.append("replicas of each candidate's own fleet ([fleet] or its [fleets.NAME]); cost is charged "
                     f"per GPU-hour of its kind: {gpus or 'no candidate reached the target rate'}")
    elif (g := report.gpus_per_replica) > 1:
        gpus = ", ".join(_gpu_words(answer, r.candidate, g) for r in report.candidates
                         if _reps(answer, r.candidate) is not None)
        lines.append(f"replicas of {g} GPUs each (fleet.tensor_parallel_size {g}); cost is charged per "
                     f"GPU-hour: {gpus or 'no candidate reached the target rate'}")
    lines += ["replicas: the fewest that carry the target when simulated, every SLO check's 95 % bound "
              "within its limit across the seeds (the rule `simulate` judges a fleet by)", "",
              "decisions (derived from the verdict above):", format_rows(rows(answer))]
    if report.bottlenecks:
        lines += ["", "what limits capacity (judged at each candidate's capacity point, by saturation):",
                  *format_bottlenecks(list(report.bottlenecks))]
    if deploy is not None:
        lines += ["", f"deploy the verdict's {deploy.candidate} (k = {deploy.k}) on {deploy.engine}:",
                  *deploy.lines()]
    for a in advice:
        lines += ["", *a.format_table(), "vLLM speculative_config:", a.vllm_snippet()]
    for r in routes or ():
        lines += ["", *r.lines()]
    sources = list(report.sources) if verbose else [short_source(s) for s in report.sources]
    lines += ["", "sources:" if verbose else "sources: (one line per section; --verbose: full provenance)",
              *(f"  {s}" for s in sources), *([f"  {report.price_source}"] if report.price_source else [])]
    notes = list(report.notes) if verbose else condense_notes(report.notes, [c.candidate for c in report.candidates])
    if notes:
        lines += ["notes:", *(f"  {n}" for n in notes)]
    return lines
