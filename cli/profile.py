"""``specplan profile``: measure a calibration profile, or estimate / merge / import / publish one.

``specplan profile --target SPEC …`` (no action word) measures on this machine. The actions:

- ``estimate``    roofline estimate for a datasheet GPU (no acceptance section);
- ``merge``       timing + memory from one profile, acceptance from another;
- ``import-vllm`` acceptance counters from a running vLLM's Prometheus ``/metrics``;
- ``published``   acceptance typed in from a paper or blog, with its citation;
- ``import-aiconfigurator`` GPU timing and memory from NVIDIA's kernel database (optional extra
  ``specplan[gpu-data]``; cli/profile_import_aiconfigurator.py);
- ``interval``    add each measured segment's sample size and bootstrap interval (from its stored
  per-prompt rows) to a copy of ``--profile BASE`` written before they were recorded;
- ``padded-batch`` add ``timing.padded_batch`` (a padded engine's batch join/leave cost),
  measured now, to a copy of ``--profile BASE``.

The CLI parses and calls the library; every user error is a SpecplanError (one line, exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cli.profile_acceptance import floats
from sim.contracts.errors import SpecplanError

ACTIONS = ("run", "estimate", "merge", "import-vllm", "published", "padded-batch", "import-aiconfigurator",
           "interval")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", default="run", choices=ACTIONS,
                        help="what to do (default: run = measure on this machine)")
    parser.add_argument("-o", "--out", help="output profile JSON (written atomically)")
    parser.add_argument("--name", help="profile name ([A-Za-z0-9._-]+); default from the target")

    m = parser.add_argument_group("measure (run) and estimate")
    m.add_argument("--target", help="smollm2 | FILE.gguf | MODEL_DIR | org/name (cached) | config:NAME | config:FILE.json")
    m.add_argument("--proposer", action="append", default=[], metavar="P",
                   help="ngram[:MIN-MAX] | selfdraft:LAYERS | draft:MODEL_SPEC (repeatable); estimate: "
                        "ngram | suffix | eagle | eagle3 | mtp | selfdraft:L")
    m.add_argument("--dtype", default="auto",
                   help="weights: auto | float32 | bfloat16 | float16; estimate and import-aiconfigurator also "
                        "fp8 | fp4 (auto: bf16, or the checkpoint's own for an import)")
    m.add_argument("--kv-cache-dtype", default="auto",
                   help="estimate and import-aiconfigurator: KV cache values auto | bf16 | fp8 (vLLM's "
                        "kv_cache_dtype; fp8 halves KV bytes per token; import: auto is vLLM's auto, the model "
                        "dtype unless the checkpoint declares a quantized KV cache)")
    m.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    m.add_argument("--quick", action="store_true", help="small grids and few prompts: a useful profile in minutes")
    m.add_argument("--resume", action="store_true", help="reuse points checkpointed in OUT.partial.jsonl")
    m.add_argument("--prompts", help="JSONL prompt file (task, language, prompt[, id]); default: built-in sets")
    m.add_argument("--temperatures", default="0,0.7", help="comma-separated sampling temperatures")
    m.add_argument("--k-max", type=int, default=6, help="largest draft length measured (default 6)")
    m.add_argument("--prompts-per-segment", type=int, help="prompts per (task, language) for acceptance (default 10, --quick 1)")
    m.add_argument("--max-new-tokens", type=int, help="tokens generated per prompt for acceptance")
    m.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice; 1 is steadier on a busy machine)")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--rounds", type=int, default=1,
                   help="measure the whole timing grid this many times, spread over the run, and keep per cell "
                        "the median of the rounds (default 1; 3 on a shared machine whose speed drifts)")
    m.add_argument("--budget", metavar="TIME",
                   help="the whole run's time limit, e.g. 600, 10m or 1.5h: a short probe estimates every phase "
                        "and the grid is shrunk to fit, or the run refused, before anything is measured")
    m.add_argument("--no-acceptance", action="store_true", help="timing and memory only")
    m.add_argument("--reserve-gb", type=float, metavar="GIB",
                   help="memory kept for other applications (GiB): taken out of every KV capacity, recorded "
                        "in the profile's memory.reserve and subtracted by the simulator too")
    m.add_argument("--reserve-fraction", type=float, metavar="F",
                   help="or this share of the device's memory (0 <= F < 1), instead of --reserve-gb")
    m.add_argument("--no-progress", action="store_true", help="no progress bar")

    e = parser.add_argument_group("estimate")
    e.add_argument("--gpu", help="A100-80GB | H100-SXM | H200 | L40S | B200 | FILE.toml/.json (a GPU spec file)")
    e.add_argument("--tensor-parallel-size", type=int, metavar="T",
                   help="GPUs per replica sharding the model (default 1; --tp works too)")
    e.add_argument("--step-overhead-ms", type=float, metavar="MS",
                   help="host time added to every target pass (estimate: default 1 ms, assumed; import-aiconfigurator: "
                        "the engine's, estimated from NVIDIA's silicon measurements: 0 for the database's vLLM, "
                        "SGLang and TensorRT-LLM)")
    e.add_argument("--step-overhead-of", metavar="ENGINE", default=None,
                   help="import-aiconfigurator: write an older engine's published per-step overhead instead "
                        "(vllm-0.10.1: 1.207 ms, SpecDecode-Bench's fit)")
    e.add_argument("--draft-pass-overhead-ms", type=float, metavar="MS",
                   help="host time added to every draft pass (default 0.5 ms, assumed)")
    e.add_argument("--host-lookup-us", type=float, metavar="US",
                   help="estimate and import-aiconfigurator: host time of an ngram/suffix lookup per request per "
                        "step (default 5 us, assumed)")
    e.add_argument("--proposer-model", action="append", default=[], metavar="SPEC",
                   help="draft model architecture for the estimate (repeatable)")
    e.add_argument("--calibrate-from", metavar="PROFILE", help="carry efficiency over from a profile measured on a known GPU")
    e.add_argument("--compute-efficiency", type=float, help="fraction of peak FLOP/s (default 0.6)")
    e.add_argument("--bandwidth-efficiency", type=float, help="fraction of peak bandwidth (default 0.8)")

    g = parser.add_argument_group("merge")
    g.add_argument("--timing", metavar="PROFILE", help="profile whose timing and memory are kept")
    g.add_argument("--acceptance", metavar="FILE", help="profile (or acceptance file) whose acceptance is taken")
    g.add_argument("--acceptance-proposer", action="append", default=[], metavar="NAME",
                   help="only these proposers' acceptance (repeatable; default all)")
    g.add_argument("--accept-mismatch", metavar="REASON",
                   help="merge although target or draft identities differ; REASON is recorded in provenance")

    i = parser.add_argument_group("import-vllm / published")
    i.add_argument("--metrics", help="FILE or http://HOST:PORT/metrics of a running vLLM")
    i.add_argument("--log", help="import-vllm from a vLLM server log's 'SpecDecoding metrics:' lines instead")
    i.add_argument("--proposer-name", dest="proposer_name", metavar="NAME",
                   help="proposer name the acceptance belongs to (--proposer NAME works too)")
    i.add_argument("--segment", action="append", default=[], metavar="TASK:LANG:TEMP",
                   help="segment key the numbers describe, e.g. chat:en:0.7")
    i.add_argument("--baseline", help="an earlier scrape (FILE or URL) to subtract: import only the traffic since")
    i.add_argument("--model-name", help="only counters with this vLLM model_name label")
    i.add_argument("--rates", help="published per-position survival rates, e.g. 0.8,0.6,0.45")
    i.add_argument("--rate-kind", default="survival", choices=("survival", "conditional", "alpha"),
                   help="what --rates are: per-position survival, conditional, or one alpha (k_max from --k-max)")
    i.add_argument("--citation", help="where the published numbers come from")
    i.add_argument("--library", action="store_true",
                   help="published: give every proposer of --profile BASE that has no measured or published "
                        "acceptance the shipped library's table for its kind and model family (profiles/acceptance/)")
    i.add_argument("--profile", metavar="BASE", help="add the entry to a copy of this profile (else write an acceptance file)")
    i.add_argument("--proposer-kind", default=None, help="draft_model | eagle | eagle3 | mtp | ngram | suffix | self_draft (vLLM method names) when BASE lacks the proposer")
    from cli import profile_import_aiconfigurator as cmd_import_aiconfigurator

    cmd_import_aiconfigurator.add_arguments(parser)
    _remember_flags(parser)


_FLAGS: dict[str, tuple[str, Any]] = {}
"""dest -> (option string, default): to write the command back into provenance."""


def _remember_flags(parser: argparse.ArgumentParser) -> None:
    for act in parser._actions:
        if act.option_strings and act.dest != "help":
            _FLAGS[act.dest] = (max(act.option_strings, key=len), act.default)


def command_of(args: argparse.Namespace) -> str:
    """The command as a user would retype it (non-default options; absolute paths shortened)."""
    import os

    words = ["specplan", "profile"] + ([args.action] if args.action != "run" else [])
    for dest, (flag, default) in _FLAGS.items():
        val = getattr(args, dest, default)
        if val == default or val is None:
            continue
        for v in val if isinstance(val, list) else [val]:
            if v is True:
                words.append(flag)
            else:
                text = str(v)
                words += [flag, os.path.basename(text) if os.path.isabs(text) else text]
    return " ".join(words)


def run(args: argparse.Namespace) -> int:
    action = args.action
    if action == "import-aiconfigurator":
        from cli import profile_import_aiconfigurator as cmd_import_aiconfigurator

        return cmd_import_aiconfigurator.run(args, command_of(args))
    if not args.out:
        raise SpecplanError(f"profile {action}: -o/--out OUT.json is required")
    if action == "run":
        return _run_measure(args)
    if action == "estimate":
        return _run_estimate(args)
    if action == "merge":
        return _run_merge(args)
    if action == "padded-batch":
        return _run_padded_batch(args)
    if action == "interval":
        return _run_interval(args)
    from cli.profile_acceptance import run_acceptance_source

    return run_acceptance_source(args, command_of(args))


def _set_threads(threads: int | None) -> None:
    """``--threads N``: torch's CPU threads for this process (the same for timing and its checks)."""
    if threads is None:
        return
    if threads < 1:
        raise SpecplanError(f"--threads {threads}: must be at least 1")
    import torch

    torch.set_num_threads(threads)


def _run_measure(args: argparse.Namespace) -> int:
    from profiler.grids.budget import parse_budget
    from profiler.grids.profile_request import ProfileRequest, ProposerRequest
    from profiler.profile_io import check_writable
    from profiler.run import run_profile

    if not args.target:
        raise SpecplanError("profile: --target SPEC is required (e.g. --target smollm2)")
    if args.kv_cache_dtype != "auto":
        raise SpecplanError(f"--kv-cache-dtype {args.kv_cache_dtype}: measuring keeps the KV cache in the model's "
                            "dtype (valid here: auto; fp8 KV: profile estimate or import-aiconfigurator)")
    check_writable(args.out)
    _set_threads(args.threads)
    if args.prompts:  # a bad prompt file fails now, not after minutes of timing
        from profiler.prompt_sets import load_prompts

        load_prompts(args.prompts)
    for flag in ("prompts_per_segment", "max_new_tokens", "rounds"):
        val = getattr(args, flag)
        if val is not None and val < 1:
            raise SpecplanError(f"--{flag.replace('_', '-')} {val}: must be at least 1")
    req = ProfileRequest(
        target=args.target,
        out=Path(args.out),
        proposers=tuple(ProposerRequest.parse(p) for p in args.proposer),
        dtype=args.dtype,
        device=args.device,
        quick=args.quick,
        resume=args.resume,
        prompts=args.prompts,
        temperatures=floats(args.temperatures, "--temperatures"),
        k_max=args.k_max,
        name=args.name,
        seed=args.seed,
        command=command_of(args),
        measure_acceptance=not args.no_acceptance,
        prompts_per_segment=args.prompts_per_segment,
        max_new_tokens=args.max_new_tokens,
        progress=not args.no_progress,
        rounds=args.rounds,
        reserve_gb=args.reserve_gb,
        reserve_fraction=args.reserve_fraction,
        budget_s=parse_budget(args.budget) if args.budget else None,
    )
    profile = run_profile(req, say=lambda msg: print(f"[profile] {msg}", file=sys.stderr, flush=True))
    _summary(profile, args.out)
    return 0


def _summary(profile: dict[str, Any], out: str) -> None:
    tf = profile["timing"]["target_forward"]
    t1 = tf["median"][0][0][0]
    ctx = tf["axes"]["context"][0]
    print(f"wrote {out}: {profile['name']}")
    if t1 is not None:
        print(f"  decode step T(batch=1, context={ctx}) = {t1 * 1e3:.2f} ms "
              f"[{profile['timing']['provenance']['method']}]")
    mem = profile["memory"]
    peak = (mem.get("process_peak") or {}).get("rss_bytes")
    print(f"  weights {mem['target_weight_bytes'] / 2**20:.1f} MiB, KV {mem['target_kv_bytes_per_token']} B/token"
          + (f", process peak RSS {peak / 2**20:.0f} MiB" if peak else "") + f" [{mem['provenance']['method']}]")
    if mem.get("reserve"):
        print(f"  reserved for other applications: {mem['reserve']['bytes'] / 2**30:.2f} GiB "
              f"({mem['reserve']['rule']}), taken out of every KV capacity")
    cold = profile.get("cold_start")
    if cold:
        first, warm = cold["first_request"], cold["warm_request"]
        print(f"  cold start {cold['cold_start_s']:.1f} s: load {cold['load_s']:.1f} s, first request TTFT "
              f"{first['ttft_s'] * 1e3:.0f} ms (warm {warm['ttft_s'] * 1e3:.0f} ms) [{cold['provenance']['method']}]")
    from profiler.measured_acceptance.acceptance_lengths import headline

    for name, entry in (profile.get("acceptance") or {}).items():
        print(f"  {headline(name, entry)}")
        from profiler.measured_acceptance.acceptance_report import precision_summary

        thin = precision_summary(entry)
        if thin:
            print(f"    {thin}")
    plan = (profile.get("x-run") or {}).get("plan") or {}
    if plan.get("grid_checks"):
        added = [c.split(" (")[0] for c in plan["grid_checks"] if c.endswith(": measured")]
        print(f"  grid checks: {len(plan['grid_checks'])} probed between measured values, "
              + (f"measured where step time was not smooth: {', '.join(added)}" if added else "all smooth"))
    if plan.get("shrunk"):
        print(f"  shrunk to fit --budget {plan['budget_s']:.0f} s: {', '.join(plan['shrunk'])}")
    limits = profile["timing"].get("limits") or []
    if limits:
        print(f"  {len(limits)} grid cells not measured (see timing.limits)")


def _run_estimate(args: argparse.Namespace) -> int:
    from profiler.estimates.estimate_inputs import efficiency, estimate_from_specs
    from profiler.profile_io import check_writable, write_profile

    if not args.gpu or not args.target:
        raise SpecplanError("profile estimate: --gpu NAME|FILE and --target SPEC are required")
    check_writable(args.out)
    eff = efficiency(calibrate_from=args.calibrate_from, compute=args.compute_efficiency,
                     bandwidth=args.bandwidth_efficiency, step_overhead_ms=args.step_overhead_ms,
                     draft_pass_overhead_ms=args.draft_pass_overhead_ms)
    tp = args.tensor_parallel_size if args.tensor_parallel_size is not None else getattr(args, "tp", 1)
    profile = estimate_from_specs(gpu=args.gpu, target=args.target, proposer_models=args.proposer_model,
                                  proposers=args.proposer, dtype=args.dtype, k_max=args.k_max, eff=eff,
                                  tensor_parallel_size=tp, command=command_of(args), name=args.name,
                                  kv_cache_dtype=args.kv_cache_dtype, host_lookup_us=args.host_lookup_us)
    write_profile(args.out, profile)
    _summary(profile, args.out)
    return 0


def _run_padded_batch(args: argparse.Namespace) -> int:
    from profiler.grids.padded_batch import add_to_profile
    from profiler.passes.models import load_model
    from profiler.profile_io import check_writable, read_profile_dict, write_profile

    if not args.profile or not args.target:
        raise SpecplanError("profile padded-batch: --profile BASE.json and --target SPEC (BASE's target) are required")
    check_writable(args.out)
    base = read_profile_dict(args.profile)
    if args.rounds < 1:
        raise SpecplanError(f"--rounds {args.rounds}: must be at least 1")
    _set_threads(args.threads)
    target = load_model(args.target, dtype=args.dtype, device=args.device)
    out = add_to_profile(base, args.profile, target, command=command_of(args), seed=args.seed,
                         repeats=15, rounds=args.rounds)
    write_profile(args.out, out)
    join = out["timing"]["padded_batch"]["join"]
    print(f"wrote {args.out}: {args.profile} + timing.padded_batch measured on {target.device} "
          f"(join at batch {join['axes']['batch'][0]}, context {join['axes']['context'][0]}: "
          f"{(join['median'][0][0] or float('nan')) * 1e3:.2f} ms)")
    return 0


def _run_interval(args: argparse.Namespace) -> int:
    from profiler.measured_acceptance.acceptance_report import add_intervals
    from profiler.profile_io import check_writable, read_profile_dict, write_profile

    if not args.profile:
        raise SpecplanError("profile interval: --profile BASE.json is required")
    check_writable(args.out)
    out, added = add_intervals(read_profile_dict(args.profile), seed=args.seed)
    write_profile(args.out, out)
    print(f"wrote {args.out}: {args.profile} + sample size and 95 % bootstrap interval for {added} segment(s)")
    return 0


def _run_merge(args: argparse.Namespace) -> int:
    from profiler.profile_io import check_writable, merge, read_profile_dict, write_profile

    if not args.timing or not args.acceptance:
        raise SpecplanError("profile merge: --timing PROFILE and --acceptance FILE are required")
    check_writable(args.out)
    base = read_profile_dict(args.timing)
    from cli.profile_acceptance import read_acceptance_source

    other = read_acceptance_source(args.acceptance)
    merged = merge(base, other, proposers=args.acceptance_proposer or None, name=args.name,
                   timing_origin=args.timing, acceptance_origin=args.acceptance,
                   accept_mismatch=args.accept_mismatch)
    write_profile(args.out, merged)
    print(f"wrote {args.out}: timing+memory from {args.timing}, acceptance of "
          f"{', '.join(args.acceptance_proposer or list(other.get('acceptance', {})))} from {args.acceptance}")
    return 0
