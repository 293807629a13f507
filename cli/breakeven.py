"""`specplan breakeven`: does speculative decoding pay off, from a profile or from numbers.

From a profile: ``--profile P --proposer X [--segment task:lang:temp] [--batch 1] [--context 512]
[--k-max N] [--alpha A]``. From numbers: ``--alpha 0.7 --T-ms 20 --D-ms 3 --V-ms 22 --H-ms 1
--k 1..6``, where ``--D-ms`` is per draft token (D(k) = k·D) and ``--V-ms``/``--H-ms`` are per
cycle, the same for every k. Numeric options are parsed here (not by argparse) so a bad value
is one error line and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from sim.contracts.errors import SpecplanError
from sim.contracts.machine_identity import machine_line
from sim.contracts.profile import load_profile
from sim.contracts.profile_acceptance import AcceptanceKey
from sim.decisions.best_k import best_k_table, format_best_k
from sim.decisions.breakeven import breakeven_from_numbers, breakeven_from_profile
from sim.decisions.breakeven_text import format_table

_NUMBER_ONLY = ("T_ms", "D_ms", "V_ms", "H_ms", "k")
_PROFILE_ONLY = ("proposer", "segment", "batch", "context", "k_max", "best_k")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("from a profile")
    src.add_argument("--profile", metavar="PATH", help="calibration profile JSON")
    src.add_argument("--proposer", metavar="NAME", help="proposer of the profile to evaluate")
    src.add_argument("--segment", metavar="TASK:LANG:TEMP", help="acceptance segment, e.g. chat:en:0")
    src.add_argument("--batch", metavar="N", help="decode batch size (default 1)")
    src.add_argument("--context", metavar="TOKENS", help="context length in tokens (default 512)")
    src.add_argument("--k-max", dest="k_max", metavar="N", help="largest k to show (default: acceptance k_max)")
    src.add_argument("--best-k", dest="best_k", metavar="BATCHES",
                     help="also show, per acceptance segment, the best k (incl. 0) at these batch sizes, e.g. 1,8,64,256")
    num = parser.add_argument_group("from numbers (all assumed)")
    num.add_argument("--alpha", metavar="A", help="per-token acceptance in [0, 1] (with --profile: overrides measured acceptance)")
    num.add_argument("--T-ms", dest="T_ms", metavar="MS", help="plain decode step time T")
    num.add_argument("--D-ms", dest="D_ms", metavar="MS", help="draft time per draft token: D(k) = k * D")
    num.add_argument("--V-ms", dest="V_ms", metavar="MS", help="verification pass time (same for every k)")
    num.add_argument("--H-ms", dest="H_ms", metavar="MS", help="overhead per cycle (default 0)")
    num.add_argument("--k", metavar="RANGE", help="draft lengths: 1..6, 1,2,4 or 3 (default 1..6)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    if args.profile:
        given = [f"--{n.replace('_', '-')}" for n in _NUMBER_ONLY if getattr(args, n) is not None]
        if given:
            raise SpecplanError(f"{', '.join(given)}: only for break-even from numbers, not with --profile")
        if not args.proposer:
            raise SpecplanError("--proposer: required with --profile (a key of the profile's proposers)")
        profile = load_profile(args.profile)
        if (line := machine_line(profile)) is not None:
            print(line, file=sys.stderr)
        if args.best_k and args.segment is None:  # the best k of every segment, without one segment's table
            return _print_best_k(args, _best_k(args, profile))
        result = breakeven_from_profile(
            profile,
            args.proposer,
            segment=_segment(args.segment),
            alpha=None if args.alpha is None else _float("--alpha", args.alpha),
            batch=1 if args.batch is None else _int("--batch", args.batch),
            context=512.0 if args.context is None else _float("--context", args.context),
            k_max=None if args.k_max is None else _int("--k-max", args.k_max),
        )
    else:
        given = [f"--{n.replace('_', '-')}" for n in _PROFILE_ONLY if getattr(args, n) is not None]
        if given:
            raise SpecplanError(f"{', '.join(given)}: only with --profile")
        missing = [f"--{n}" for n, v in (("alpha", args.alpha), ("T-ms", args.T_ms), ("D-ms", args.D_ms), ("V-ms", args.V_ms)) if v is None]
        if missing:
            raise SpecplanError(
                f"{', '.join(missing)}: required without --profile (e.g. --alpha 0.7 --T-ms 20 --D-ms 3 --V-ms 22)"
            )
        result = breakeven_from_numbers(
            alpha=_float("--alpha", args.alpha),
            baseline_s=_float("--T-ms", args.T_ms) / 1e3,
            draft_per_token_s=_float("--D-ms", args.D_ms) / 1e3,
            verify_s=_float("--V-ms", args.V_ms) / 1e3,
            overhead_s=0.0 if args.H_ms is None else _float("--H-ms", args.H_ms) / 1e3,
            ks=_ks(args.k or "1..6"),
        )
    table = _best_k(args, profile) if args.profile and args.best_k else None
    if args.json:
        doc = result.to_dict()
        if table is not None:
            doc["best_k"] = _best_k_json(table)
        print(json.dumps(doc, indent=2))
    else:
        print("\n".join(format_table(result)))
        if table is not None:
            print("\n".join(format_best_k(table)))
    return 0


def _best_k_json(table: list) -> list[dict]:
    return [{"segment": c.segment, "batch": c.batch, "proposal_rate": c.proposal_rate,
             "best_k": c.best_k, "speedup": c.speedup, "per_k_s": list(c.per_k_s)} for c in table]


def _print_best_k(args: argparse.Namespace, table: list) -> int:
    print(json.dumps({"best_k": _best_k_json(table)}, indent=2) if args.json else "\n".join(format_best_k(table)))
    return 0


def _best_k(args: argparse.Namespace, profile) -> list:
    try:
        batches = [int(x) for x in args.best_k.split(",")]
    except ValueError:
        raise SpecplanError(f"--best-k: expected batch sizes like 1,8,64, got {args.best_k!r}") from None
    return best_k_table(profile, args.proposer, batches,
                        context=512.0 if args.context is None else _float("--context", args.context),
                        k_max=None if args.k_max is None else _int("--k-max", args.k_max))


def _float(flag: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise SpecplanError(f"{flag}: expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise SpecplanError(f"{flag}: expected a finite number, got {text!r}")
    return v


def _int(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SpecplanError(f"{flag}: expected an integer, got {text!r}") from None


MAX_K = 1024  # no drafter proposes more tokens per step


def _ks(text: str) -> list[int]:
    """``1..6`` (inclusive), ``1,2,4`` or ``3``."""
    try:
        if ".." in text:
            lo, hi = text.split("..", 1)
            if int(hi) - int(lo) >= MAX_K:
                raise SpecplanError(f"--k: at most {MAX_K} draft lengths, got {text!r}")
            ks = list(range(int(lo), int(hi) + 1))
        else:
            ks = [int(x) for x in text.split(",")]
    except ValueError:
        raise SpecplanError(f"--k: expected a range like 1..6, a list like 1,2,4 or one k, got {text!r}") from None
    if any(k > MAX_K for k in ks):
        raise SpecplanError(f"--k: draft lengths must be <= {MAX_K}, got {text!r}")
    if not ks or any(k < 1 for k in ks):
        raise SpecplanError(f"--k: draft lengths must be >= 1 and the range non-empty, got {text!r}")
    return ks


def _segment(text: str | None) -> AcceptanceKey | None:
    if text is None:
        return None
    parts = text.split(":")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise SpecplanError(f"--segment: expected TASK:LANG:TEMP like chat:en:0, got {text!r}")
    return AcceptanceKey(parts[0], parts[1], _float("--segment temperature", parts[2]))
