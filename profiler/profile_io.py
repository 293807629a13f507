"""Assemble, validate, write (atomically) and merge calibration profiles.

Validation is the simulator's own reader (``sim.contracts.profile.Profile.from_dict``): the profiler never
writes a file the simulator would refuse.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import SCHEMA, SCHEMA_VERSION, Profile

_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def command_line(argv: list[str] | None = None) -> str:
    """The command as typed, with machine paths reduced to file names."""
    args = list(sys.argv[1:] if argv is None else argv)
    shown = [os.path.basename(a) if os.path.isabs(a) else a for a in args]
    return " ".join(["specplan", *shown]) if shown and shown[0] != "specplan" else " ".join(shown)


def safe_name(text: str) -> str:
    """A profile or proposer name matching ``[A-Za-z0-9._-]+``."""
    out = _NAME_RE.sub("-", text).strip("-")
    return out or "profile"


def provenance(method: str, *, device: dict[str, Any] | None = None, dtype: str | None = None,
               libraries: dict[str, str] | None = None, models: dict[str, str] | None = None,
               command: str | None = None, citation: str | None = None,
               notes: str | None = None, date: str | None = None) -> dict[str, Any]:
    return {
        "method": method,
        "device": device,
        "dtype": dtype,
        "libraries": libraries or {},
        "models": models or {},
        "date": date or now_iso(),
        "command": command,
        "citation": citation,
        "notes": notes,
    }


def assemble(*, name: str, description: str, target: dict[str, Any], proposers: dict[str, Any],
             timing: dict[str, Any], memory: dict[str, Any],
             acceptance: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> dict[str, Any]:
    """The profile dict in the documented key order."""
    d: dict[str, Any] = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "name": safe_name(name),
        "description": description,
        "target": target,
        "proposers": proposers,
        "timing": timing,
        "memory": memory,
        "acceptance": acceptance or {},
    }
    for k, v in (extras or {}).items():
        d[k if k.startswith("x-") else f"x-{k}"] = v
    return d


def validate(profile: dict[str, Any], origin: str) -> Profile:
    """Parse with the simulator's reader; any problem is a one-line SpecplanError."""
    return Profile.from_dict(profile, origin)


def check_writable(path: str | Path) -> Path:
    """Fail before measuring (minutes of work) if the output cannot be written."""
    out = Path(path)
    parent = out.parent if str(out.parent) else Path(".")
    if out.exists() and out.is_dir():
        raise SpecplanError(f"{path}: is a directory; give a file name ending in .json")
    if not parent.is_dir():
        raise SpecplanError(f"{path}: folder {parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".specplan-probe-", dir=parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise SpecplanError(f"{path}: cannot write there ({exc.strerror or exc})") from None
    return out


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> None:
    """Temp file in the same folder, fsync, then ``os.replace``: readers never see half a file."""
    out = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent or Path("."))
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a profile is meant to be shared
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, allow_nan=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_profile(path: str | Path, profile: dict[str, Any]) -> Profile:
    """Validate then write; returns the parsed profile."""
    parsed = validate(profile, str(path))
    write_json_atomic(path, profile)
    return parsed


def read_profile_dict(path: str | Path) -> dict[str, Any]:
    """Read and validate a profile file, returning the raw dict for merging."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecplanError(f"{path}: no such profile file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecplanError(f"{path}: not readable JSON ({exc})") from None
    validate(data, str(path))
    return data


def _norm_id(mid: str) -> str:
    """A model id without organisation, ``meta-`` prefix, ``-shaped``, quantization or
    instruct/chat suffix: the weights' family and size, which acceptance depends on."""
    base = mid.split("/")[-1].lower().removeprefix("meta-")
    for suffix in ("-shaped", "-fp8", "-nvfp4", "-instruct", "-chat", "-it", "-base"):
        base = base.removesuffix(suffix)
    return base


def identity_mismatch(a: dict[str, Any] | str | None, b: dict[str, Any] | str | None) -> str | None:
    """How two model identities differ (id, family, shape, vocabulary), or None when they agree
    or one is unknown. The vocabulary stands in for the tokenizer, which profiles do not record."""
    if not a or not b:
        return None
    if isinstance(a, str) or isinstance(b, str):  # a published library entry names its model only
        ia, ib = (x if isinstance(x, str) else x["id"] for x in (a, b))
        return None if _norm_id(ia) == _norm_id(ib) else f"model {ib!r} vs {ia!r}"
    diffs = []
    if _norm_id(a["id"]) != _norm_id(b["id"]):
        diffs.append(f"model {b['id']!r} vs {a['id']!r}")
    aa, ab = a["architecture"], b["architecture"]
    for key in ("family", "num_layers", "hidden_size", "vocab_size"):
        if aa.get(key) != ab.get(key):
            diffs.append(f"{key} {ab.get(key)} vs {aa.get(key)}")
    return "; ".join(diffs) or None


def merge(timing_profile: dict[str, Any], acceptance_profile: dict[str, Any], *,
          proposers: list[str] | None = None, name: str | None = None,
          timing_origin: str = "timing", acceptance_origin: str = "acceptance",
          accept_mismatch: str | None = None) -> dict[str, Any]:
    """Timing and memory from one profile, acceptance entries from another.

    Each section keeps its own provenance. Acceptance depends on the target and the draft, so
    their identities must agree (model, family, shape, vocabulary); a mismatch is refused in
    one line unless ``accept_mismatch`` gives the reason, which the merged entries record.
    """
    if accept_mismatch is not None and not accept_mismatch.strip():
        raise SpecplanError("--accept-mismatch: give the reason in words (it is recorded in provenance)")
    out = copy.deepcopy(timing_profile)
    src_acc = acceptance_profile.get("acceptance") or {}
    wanted = proposers or list(src_acc)
    if not wanted:
        raise SpecplanError(f"{acceptance_origin}: acceptance: no entries to merge")
    tgt_a, tgt_b = timing_profile["target"], acceptance_profile.get("target")
    found = []
    diff = identity_mismatch(tgt_a, tgt_b)
    if diff:
        found.append(f"target: {diff}")
    for pname in wanted:
        pa, pb = timing_profile["proposers"].get(pname), (acceptance_profile.get("proposers") or {}).get(pname)
        if pa and pb and pa.get("kind") != pb.get("kind"):
            found.append(f"proposer {pname}: kind {pb.get('kind')} vs {pa.get('kind')}")
        elif pa and pb and (d := identity_mismatch(pa.get("model"), pb.get("model"))):
            found.append(f"proposer {pname}: {d}")
    if found and not accept_mismatch:
        raise SpecplanError(
            f"{acceptance_origin}: measured on other models than {timing_origin} ({'; '.join(found)}); acceptance "
            "does not transfer between models (valid: acceptance of the same target and draft, or "
            "--accept-mismatch \"REASON\" to merge anyway, recorded in provenance)"
        )
    for pname in wanted:
        if pname not in src_acc:
            raise SpecplanError(
                f"{acceptance_origin}: acceptance.{pname}: no such entry (has: {', '.join(src_acc) or 'none'})"
            )
        if pname not in out["proposers"]:
            ident = acceptance_profile["proposers"][pname]
            out["proposers"][pname] = copy.deepcopy(ident)
        entry = copy.deepcopy(src_acc[pname])
        notes = entry["provenance"].get("notes") or ""
        origin_note = f"merged from {os.path.basename(acceptance_origin)}" + (
            f" (target {tgt_b if isinstance(tgt_b, str) else tgt_b['id']})" if tgt_b is not None else ""
        )
        if found:
            origin_note += f"; identity mismatch accepted ({'; '.join(found)}): {accept_mismatch}"
        entry["provenance"]["notes"] = f"{notes}; {origin_note}" if notes else origin_note
        out.setdefault("acceptance", {})[pname] = entry
    if "x-run" in acceptance_profile:  # keep the record of the run that measured acceptance
        run = acceptance_profile["x-run"]
        # a merged source got its acceptance from its own acceptance run: that is the one to keep
        run = run.get("acceptance_run", run)
        out.setdefault("x-run", {})["acceptance_run"] = copy.deepcopy(
            {k: v for k, v in run.items() if k != "acceptance_run"})
    if name:
        out["name"] = safe_name(name)
    out["description"] = (
        f"{timing_profile['description']} + acceptance of {', '.join(wanted)} from {acceptance_profile['name']}"
    )
    return out
