"""``specplan profile import-aiconfigurator``: flags and glue (the library does the work).

``--system list`` / ``--target list`` print what the installed database covers instead.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from sim.contracts.errors import SpecplanError
from sim.contracts.timing_sanity import repaired_note


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument_group("import-aiconfigurator (GPU timing and memory from aiconfigurator-core)")
    a.add_argument("--system", help="database system, e.g. h200_sxm, h100_sxm (list: what the database covers)")
    a.add_argument("--backend", default="vllm", help="vllm | sglang | trtllm (default vllm)")
    a.add_argument("--backend-version", help="database version of the backend (default: the database's current)")
    a.add_argument("--draft", action="append", default=[], metavar="D",
                   help="vLLM method: eagle | eagle3 | mtp | ngram | suffix | none, or a draft model id "
                        "(e.g. meta-llama/Llama-3.2-1B; --target list prints them) (repeatable)")
    a.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs per replica (default 1)")
    a.add_argument("--ep", type=int, default=1,
                   help="MoE: expert-parallel GPUs among the --tp ones (experts TP = tp/ep; default 1: experts "
                        "tensor-parallel; --ep TP is vLLM's --enable-expert-parallel)")
    a.add_argument("--assume-proposal-rate", action="append", default=[], metavar="P=RATE",
                   help="ngram/suffix: fraction of steps with a proposal for P's assumed acceptance (repeatable)")
    a.add_argument("--assume-acceptance", action="append", default=[], metavar="P=r1,r2,...",
                   help="write an acceptance entry for proposer P with these per-position survival rates, "
                        "method 'assumed' (segment chat:any:0), the last resort: a published table for P's kind "
                        "on the target's family wins (profiles/acceptance/); repeatable")


def run(args: argparse.Namespace, command: str) -> int:
    from profiler.imported import aic_database as db

    if args.system == "list":
        for system, backends in db.supported().items():
            print(f"{system}: " + "; ".join(f"{b} {', '.join(v)}" for b, v in backends.items()))
        return 0
    if args.target == "list":
        for model in db.cached_models():
            print(model)
        return 0
    if not args.out:
        raise SpecplanError("profile import-aiconfigurator: -o/--out OUT.json is required")
    if not args.system or not args.target:
        raise SpecplanError("profile import-aiconfigurator: --system and --target are required (or 'list')")
    from profiler.host_proposers import lookup_seconds
    from profiler.imported.aiconfigurator_import import ImportRequest, build_profile
    from profiler.profile_io import check_writable, write_profile

    check_writable(args.out)
    req = ImportRequest(system=args.system, backend=args.backend, target=args.target, drafts=tuple(args.draft),
                        backend_version=args.backend_version, tp=args.tp, dtype=args.dtype, command=command,
                        assumed_acceptance=_rates(args.assume_acceptance), ep=args.ep,
                        kv_dtype=getattr(args, "kv_cache_dtype", "auto"),
                        assumed_proposal_rate={k: v[0] for k, v in _rates(args.assume_proposal_rate,
                                                                          "--assume-proposal-rate").items()},
                        lookup_s_per_row=lookup_seconds(getattr(args, "host_lookup_us", None)),
                        step_overhead_of=getattr(args, "step_overhead_of", None), **_overheads(args))
    t0 = time.perf_counter()
    profile = build_profile(req)
    if args.name:
        profile["name"] = args.name
    write_profile(args.out, profile)
    _print_summary(profile, args.out, time.perf_counter() - t0)
    return 0


def _overheads(args: argparse.Namespace) -> dict[str, float]:
    """--step-overhead-ms / --draft-pass-overhead-ms (shared with `estimate`) when given."""
    out = {}
    for flag, key in (("step_overhead_ms", "step_overhead_s"), ("draft_pass_overhead_ms", "draft_pass_overhead_s")):
        ms = getattr(args, flag, None)
        if ms is not None:
            if not ms >= 0:
                raise SpecplanError(f"--{flag.replace('_', '-')} {ms}: must be >= 0 ms")
            out[key] = ms * 1e-3
    return out


def _rates(items: list[str], flag: str = "--assume-acceptance") -> dict[str, tuple[float, ...]]:
    out: dict[str, tuple[float, ...]] = {}
    for item in items:
        name, _, text = item.partition("=")
        try:
            out[name] = tuple(float(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise SpecplanError(f"{flag} {item!r}: expected NAME=r1,r2,... (numbers)") from None
        if not name or not out[name] or (flag != "--assume-acceptance" and len(out[name]) != 1):
            raise SpecplanError(f"{flag} {item!r}: expected NAME=" + ("r1,r2,..." if flag == "--assume-acceptance" else "RATE"))
    return out


def _print_summary(p: dict[str, Any], out: str, wall_s: float) -> None:
    tf = p["timing"]["target_forward"]
    ctx = tf["axes"]["context"]
    c = ctx.index(1024) if 1024 in ctx else 0
    t1 = tf["median"][0][0][c]
    print(f"wrote {out}: {p['name']} in {wall_s:.1f} s")
    b64 = tf["axes"]["batch"].index(64) if 64 in tf["axes"]["batch"] else -1
    print(f"  decode step T(batch=1, context={ctx[c]}) = {t1 * 1e3:.2f} ms, T(batch={tf['axes']['batch'][b64]}) = "
          f"{tf['median'][b64][0][c] * 1e3:.2f} ms [imported], "
          f"+ {p['timing']['step_overhead']['seconds'] * 1e3:.2f} ms per step "
          f"[{p['timing']['step_overhead']['provenance']['method']}]; steps fused")
    mem = p["memory"]
    print(f"  replica: {mem['provenance']['device']['count']} GPU(s), weights {mem['target_weight_bytes'] / 2**30:.1f} GiB, "
          f"KV {mem['target_kv_bytes_per_token']} B/token, {mem['kv_capacity'][0]['kv_tokens']} KV tokens at 0.9 [imported]")
    for name, ident in p["proposers"].items():
        pt = p["timing"]["proposers"][name]
        d, h = pt["draft"], pt["overhead"]
        print(f"  proposer {name} ({ident['kind']}): D(batch=1, k=3, context={ctx[c]}) = {d['median'][0][2][c] * 1e3:.2f} ms, "
              f"batch {tf['axes']['batch'][b64]}: {d['median'][b64][2][c] * 1e3:.2f} ms [imported + modelled]; host "
              f"H(k=3) = {h['median'][0][2] * 1e3:.3f} / {h['median'][b64][2] * 1e3:.3f} ms [assumed]")
    for name, ident in p["proposers"].items():
        acc = p["acceptance"].get(name)
        how = (f"{acc['provenance']['method']}" if acc else "none") + (
            "" if acc and acc["provenance"]["method"] == "published" else
            f" (no published acceptance for {ident['kind']} on this model family; bring measured counters: "
            "specplan profile import-vllm)")
        print(f"  acceptance {name}: {how}")
    repaired = repaired_note(p["timing"]["provenance"].get("notes"))
    if repaired:  # never silent: the database's grids were changed (docs/profile-format.md)
        print(f"  {repaired}")
