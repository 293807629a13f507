"""``specplan profile import-vllm`` / ``published``: one acceptance entry, written to a copy of a
profile or to an acceptance file that ``profile merge`` attaches (cli/profile.py parses)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sim.contracts.errors import SpecplanError

ACCEPTANCE_FILE = "specplan.acceptance"


def read_acceptance_source(path: str) -> dict[str, Any]:
    """A full profile, or an acceptance file written by import-vllm / published."""
    from profiler.profile_io import read_profile_dict

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecplanError(f"{path}: no such file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecplanError(f"{path}: not readable JSON ({exc})") from None
    if isinstance(data, dict) and data.get("schema") == ACCEPTANCE_FILE:
        for key in ("proposers", "acceptance"):
            if not isinstance(data.get(key), dict):
                raise SpecplanError(f"{path}: {key}: expected an object")
        # shaped like a profile for merge(): proposers + acceptance, no target to compare
        return {"name": data.get("name", Path(path).stem), "target": None, **data}
    return read_profile_dict(path)


def _segment_key(text: str) -> dict[str, Any]:
    parts = text.split(":")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise SpecplanError(f"--segment {text!r}: expected TASK:LANG:TEMPERATURE, e.g. chat:en:0.7")
    try:
        temp = float(parts[2])
    except ValueError:
        raise SpecplanError(f"--segment {text!r}: temperature {parts[2]!r} is not a number") from None
    if temp < 0:
        raise SpecplanError(f"--segment {text!r}: temperature must be >= 0")
    return {"task": parts[0], "language": parts[1], "temperature": temp}


def run_acceptance_source(args: argparse.Namespace, command: str) -> int:
    """import-vllm / published: build one acceptance entry with P2's modules, then write it."""
    from profiler.profile_io import check_writable

    if args.action == "published" and getattr(args, "library", False):
        return _apply_library(args, command)
    if not args.proposer_name and args.proposer:
        args.proposer_name = args.proposer[-1]
    if not args.proposer_name:
        raise SpecplanError(f"profile {args.action}: --proposer-name NAME is required (the proposer it measures)")
    if len(args.segment) != 1:
        raise SpecplanError(f"profile {args.action}: give exactly one --segment TASK:LANG:TEMP")
    segment = _segment_key(args.segment[0])
    check_writable(args.out)
    if args.action == "import-vllm" and args.log:
        from profiler.imported.vllm_log import entry_from_log

        entry = entry_from_log(args.log, task=segment["task"], language=segment["language"],
                               temperature=segment["temperature"], command=command)
        ident = {"kind": args.proposer_kind or "draft_model"}
    elif args.action == "import-vllm":
        if not args.metrics:
            raise SpecplanError("profile import-vllm: --metrics FILE_OR_URL (or --log FILE) is required")
        from profiler.imported import vllm_import

        entry = vllm_import.import_vllm_metrics(
            args.metrics, baseline=args.baseline, model_name=args.model_name, task=segment["task"],
            language=segment["language"], temperature=segment["temperature"], command=command,
        )
        ident = {"kind": args.proposer_kind or "draft_model"}
    else:
        if not args.rates or not args.citation:
            raise SpecplanError("profile published: --rates R1,R2,... and --citation TEXT are required")
        from profiler.imported import published

        entry = published.published_entry(
            floats(args.rates, "--rates"), citation=args.citation, kind=args.rate_kind,
            k_max=args.k_max if args.rate_kind == "alpha" else None, segment=segment,
            command=command,
        )
        ident = {"kind": args.proposer_kind or "draft_model"}
    return _write_acceptance(args, entry, ident)


def _write_acceptance(args: argparse.Namespace, entry: dict[str, Any], ident: dict[str, Any]) -> int:
    from profiler.profile_io import read_profile_dict, safe_name, write_json_atomic, write_profile

    name = args.proposer_name
    if safe_name(name) != name:
        raise SpecplanError(f"--proposer-name {name!r}: use only letters, digits, '.', '_' and '-'")
    if args.profile:
        base = read_profile_dict(args.profile)
        if name not in base["proposers"]:
            raise SpecplanError(f"{args.profile}: proposers: no {name!r} (has: {', '.join(base['proposers']) or 'none'})")
        base.setdefault("acceptance", {})[name] = entry
        write_profile(args.out, base)
        print(f"wrote {args.out}: {args.profile} with {args.action} acceptance for {name}")
        return 0
    from sim.contracts.profile_identity import PROPOSER_KINDS

    if ident["kind"] not in PROPOSER_KINDS:
        raise SpecplanError(f"--proposer-kind {ident['kind']!r}: expected one of {', '.join(PROPOSER_KINDS)}")
    doc = {"schema": ACCEPTANCE_FILE, "name": safe_name(f"{name}-{args.action}"),
           "proposers": {name: ident}, "acceptance": {name: entry}}
    write_json_atomic(args.out, doc)
    print(f"wrote {args.out}: {args.action} acceptance for {name}; attach it with "
          f"`specplan profile merge --timing PROFILE --acceptance {args.out} -o OUT.json`")
    return 0


def _apply_library(args: argparse.Namespace, command: str) -> int:
    """published --library: the shipped tables as defaults for a profile's proposers."""
    from profiler.imported.published_library import TABLES, prefer_published
    from profiler.profile_io import check_writable, read_profile_dict, write_profile

    if not args.profile or not args.out:
        raise SpecplanError("profile published --library: --profile BASE and -o OUT are required")
    check_writable(args.out)
    base = read_profile_dict(args.profile)
    said = prefer_published(base, command)
    if not said:
        covered = ", ".join(sorted({f"{t['kind']} on {t['family']}" for t in TABLES}))
        raise SpecplanError(f"{args.profile}: no proposer without measured or published acceptance has a published "
                            f"table for its kind and model family (the library covers: {covered})")
    write_profile(args.out, base)
    for line in said:
        print(f"  {line}")
    print(f"wrote {args.out}: {args.profile} with published acceptance from the library")
    return 0


def floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SpecplanError(f"{flag} {text!r}: expected comma-separated numbers") from None
    if not vals:
        raise SpecplanError(f"{flag} {text!r}: expected at least one number")
    return vals
