"""`specplan validate`: measure the simulator against real serving.

Live: ``specplan validate SCENARIO [--loads 0.3,0.6,0.85] [--candidates baseline,ngram-k3]
[--requests N] [--out DIR]`` serves one open-loop arrival schedule per load for real (the
profile's target model on this machine, ``profiler/passes/serving.py``) and simulates the same
requests with the profile, then prints the error table and writes it (Parquet, CSV, JSON) and
plots (HTML) to ``--out``. torch is imported only here, on this path. Every finished real run
is checkpointed in ``--out``/checkpoints/ as it finishes; after an interruption (Ctrl-C, kill -9)
the same command with ``--resume`` serves only the runs that had not finished.

vLLM: ``specplan validate --vllm-results FILE [--scenario S] [--profile P]`` compares a
`vllm bench serve --save-result --save-detailed` run with a simulation of the same load.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import polars as pl

from dashboard import fidelity_figures
from sim.contracts.errors import SpecplanError, echo
from sim.contracts.machine_identity import both_machines
from sim.contracts.profile import Profile, load_profile
from sim.contracts.scenario import Scenario, load_scenario
from sim.fidelity import comparison, live_load, vllm_compare


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", nargs="?", metavar="SCENARIO", help="scenario TOML (live validation)")
    parser.add_argument("--scenario", dest="scenario_opt", metavar="PATH",
                        help="scenario TOML (same as the positional; for --vllm-results)")
    parser.add_argument("--profile", metavar="PATH", help="calibration profile (default: the scenario's fleet.profile)")
    parser.add_argument("--loads", default="0.3,0.6,0.85", metavar="F,F,…",
                        help="loads as fractions of capacity (default 0.3,0.6,0.85; see --load-basis)")
    parser.add_argument("--load-basis", default="own", choices=live_load.LOAD_BASES,
                        help="own: each candidate's loads are fractions of its own simulated capacity "
                             "(default); baseline: every candidate gets the baseline's rates (the same traffic)")
    parser.add_argument("--candidates", metavar="A,B", help="candidates to validate (default: baseline and the "
                        "scenario's first speculative candidate)")
    parser.add_argument("--requests", default="60", metavar="N", help="requests per load point (default 60)")
    parser.add_argument("--out", default="validate-out", metavar="DIR", help="output folder (default validate-out); "
                        "every finished real run is checkpointed in DIR/checkpoints/ as it finishes")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the real runs an interrupted validation with the same arguments checkpointed "
                             "in DIR/checkpoints/ (--sim-reps, --reps and --drift-correct may change)")
    parser.add_argument("--seed", default="0", metavar="N", help="seed of the arrival schedule (default 0)")
    parser.add_argument("--drift-correct", action="store_true",
                        help="predict each real run with the profile's step times × the machine's speed "
                             "during it (re-timed reference cells before and after it and in its idle gaps; "
                             "for machines whose speed moves: shared VMs, thermal limits); the uncorrected "
                             "bar is printed too")
    parser.add_argument("--no-idle-probes", action="store_true",
                        help="do not time reference passes in the real runs' idle gaps (they never delay "
                             "a request; off, --drift-correct interpolates between the checks around a run)")
    parser.add_argument("--reps", default="1", metavar="N",
                        help="real runs per load point; the measured number is their median (default 1)")
    parser.add_argument("--sim-reps", default="5", metavar="N",
                        help="acceptance replications averaged for a speculative prediction (default 5)")
    parser.add_argument("--capacity", metavar="REQ_S",
                        help="capacity in req/s that every candidate's loads are fractions of "
                             "(default: the simulator's capacity search on the profile, per --load-basis)")
    live = parser.add_argument_group("real serving")
    live.add_argument("--model", metavar="SPEC", help="target model (default: the profile's target, e.g. smollm2)")
    live.add_argument("--device", default="cpu", metavar="DEV", help="cpu, cuda or auto (default cpu)")
    live.add_argument("--threads", metavar="N", help="torch CPU threads (default: torch's default; recorded either way)")
    live.add_argument("--max-wall-s", metavar="S", help="abort a real run after this many seconds (default 4× its arrival span + 120)")
    vl = parser.add_argument_group("vLLM benchmark results")
    vl.add_argument("--vllm-results", metavar="FILE", help="JSON written by `vllm bench serve --save-result --save-detailed`")
    vl.add_argument("--candidate", default=None, metavar="NAME",
                    help="scenario candidate the vLLM server ran (default: the baseline)")
    vl.add_argument("--seeds", default="0,1,2,3,4", metavar="S,S,…",
                    help="arrival draws averaged for the simulation of a vLLM run (default 0..4)")
    parser.add_argument("--json", action="store_true", help="print the error table as JSON instead of text")


# ---------------------------------------------------------------------------------------------
# argument parsing helpers (bad values are one line, exit 2)


def _int(flag: str, raw: str, lo: int = 1) -> int:
    try:
        v = int(raw)
    except (TypeError, ValueError):
        raise SpecplanError(f"{flag}: expected an integer, got {raw!r}") from None
    if v < lo:
        raise SpecplanError(f"{flag}: must be >= {lo}, got {v}")
    if v > 2**53:
        raise SpecplanError(f"{flag}: must be <= 2**53, got {echo(raw, 40)}")
    return v


def _float(flag: str, raw: str) -> float:
    try:
        v = float(raw)
    except (TypeError, ValueError):
        raise SpecplanError(f"{flag}: expected a number, got {raw!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise SpecplanError(f"{flag}: must be a positive number, got {raw}")
    return v


def _loads(raw: str) -> list[float]:
    out = []
    for part in raw.split(","):
        v = _float("--loads", part.strip())
        if v > 2:
            raise SpecplanError(f"--loads: {v} is a fraction of capacity; expected values like 0.3,0.6,0.85")
        out.append(v)
    return out


def _scenario_path(args: argparse.Namespace) -> str | None:
    if args.scenario and args.scenario_opt and args.scenario != args.scenario_opt:
        raise SpecplanError("give the scenario once: positional SCENARIO or --scenario, not both")
    return args.scenario or args.scenario_opt


def _profile(args: argparse.Namespace, scenario: Scenario | None) -> Profile:
    if args.profile:
        return load_profile(args.profile)
    if scenario is None:
        raise SpecplanError("--profile: required without a scenario (the profile to simulate with)")
    return load_profile(scenario.require_profile_path())


def _candidates(args: argparse.Namespace, scenario: Scenario) -> list[str]:
    names = list(scenario.candidate_names)
    if args.candidates:
        chosen = [c.strip() for c in args.candidates.split(",") if c.strip()]
        for c in chosen:
            if c not in names:
                raise SpecplanError(f"--candidates: unknown candidate {c!r}; the scenario has {', '.join(names)}")
        return chosen
    out = [scenario.baseline.name]
    if scenario.speculative:
        out.append(scenario.speculative[0].name)
    return out


def run(args: argparse.Namespace) -> int:
    if args.vllm_results:
        return _run_vllm(args)
    path = _scenario_path(args)
    if not path:
        raise SpecplanError("SCENARIO: required (a scenario TOML), or --vllm-results FILE")
    return _run_live(args, path)


# ---------------------------------------------------------------------------------------------
# live validation


def _run_live(args: argparse.Namespace, scenario_path: str) -> int:
    scenario, layout_note = live_load.live_scenario(load_scenario(scenario_path))
    profile = _profile(args, scenario)
    machines = both_machines(profile)  # the profile's machine and this one, named both
    _say(machines)
    loads = _loads(args.loads)
    cands = _candidates(args, scenario)
    n_req = _int("--requests", args.requests)
    seed = _int("--seed", args.seed, lo=0)
    sim_reps = _int("--sim-reps", args.sim_reps)
    real_reps = _int("--reps", args.reps)
    threads = _int("--threads", args.threads) if args.threads else None
    max_wall = _float("--max-wall-s", args.max_wall_s) if args.max_wall_s else None
    out = Path(args.out)
    if scenario.workload.arrival not in ("poisson", "gamma"):
        raise SpecplanError(f"{scenario_path}: workload.arrival: validate needs poisson or gamma arrivals")

    given = _float("--capacity", args.capacity) if args.capacity else None
    caps = live_load.capacities(scenario, profile, seed, cands, args.load_basis, given, say=_say)
    for c, cap in caps.items():
        _say(f"{c}: loads are fractions of {cap.rate:.3g} req/s — {cap.method}")

    from profiler.live.live_settings import LiveValidation
    from profiler.live.live_validation import run_live  # torch: the live path only

    command = " ".join(["specplan", "validate", *sys.argv[2:]]) if sys.argv[1:2] == ["validate"] else None
    basis = "given" if args.capacity else args.load_basis
    v = LiveValidation(scenario_path, scenario, profile, tuple(loads), tuple(cands), caps, basis, requests=n_req,
                       seed=seed, sim_reps=sim_reps, real_reps=real_reps, model=args.model, device=args.device,
                       threads=threads, max_wall_s=max_wall, command=command,
                       notes=(machines, *([layout_note] if layout_note else [])), drift_correct=args.drift_correct,
                       idle_probes=not args.no_idle_probes, checkpoints=out / "checkpoints",
                       resume=args.resume)
    try:
        res = run_live(v, say=_say, on_progress=lambda r: _write(out, r.table, r.frames, r.header, r.meta))
    except KeyboardInterrupt:
        _say(f"interrupted: the finished real runs are kept in {out / 'checkpoints'}; the same command "
             "with --resume serves only the rest")
        raise
    _write(out, res.table, res.frames, res.header, res.meta)
    _print(args, res.table, res.header, out)
    return 0


# ---------------------------------------------------------------------------------------------
# vLLM results


def _vllm_scenario(args: argparse.Namespace, result: Any) -> Scenario:
    path = _scenario_path(args)
    if path:
        return load_scenario(path)
    if not args.profile:
        raise SpecplanError("--vllm-results: give --scenario (engine limits, SLOs) or at least --profile")
    return vllm_compare.vllm_default_scenario(args.profile)


def _run_vllm(args: argparse.Namespace) -> int:
    from sim.contracts.vllm_results import load_vllm_results

    results = load_vllm_results(args.vllm_results)
    seeds = [_int("--seeds", s.strip(), lo=0) for s in args.seeds.split(",") if s.strip()]
    if not seeds:
        raise SpecplanError("--seeds: give at least one seed")
    cmp = vllm_compare.compare_vllm_results(
        results, str(args.vllm_results), lambda res: _vllm_scenario(args, res),
        lambda scenario: _profile(args, scenario), args.candidate, seeds)
    out = Path(args.out)
    _write(out, cmp.table, {}, cmp.header, {"vllm_results": str(args.vllm_results),
                                            "scenario": _scenario_path(args),
                                            "profile": cmp.profile.origin if cmp.profile else None,
                                            "seeds": seeds})
    _print(args, cmp.table, cmp.header, out)
    return 0


# ---------------------------------------------------------------------------------------------
# output


def _say(msg: str) -> None:
    print(f"[validate] {msg}", file=sys.stderr, flush=True)


def _write(out: Path, table: pl.DataFrame, frames: dict[str, list[pl.DataFrame]],
           header: list[str], meta: dict[str, Any]) -> None:
    comparison.write_tables(out, table, frames, header, meta)
    fidelity_figures.write_html(fidelity_figures.figures(table), out / "fidelity.html", "specplan validate",
                                "\n".join(header + [comparison.format_bar(table), *comparison.tail_warnings(table)]))


def _print(args: argparse.Namespace, table: pl.DataFrame, header: list[str], out: Path) -> None:
    if args.json:
        print(json.dumps(table.to_dicts(), indent=1, default=str))
        return
    print("\n".join(header))
    print(comparison.format_table(table))
    print()
    print(comparison.format_bar(table))
    for line in comparison.tail_warnings(table):
        print(line)
    print(f"\nwritten: {out}/fidelity.parquet, fidelity.csv, fidelity.json, fidelity.html")
