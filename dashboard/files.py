"""What the dashboard may read: profiles/, scenarios/ and uploads, nothing else.

A named file is served only if its name is in the folder's listing (plain file names, no
folders, no links leading out), so no string from a browser ever becomes a path. Uploads stay
in memory: decoded from the browser's base64 data URL, parsed with ``tomllib``/``json`` (never
pickle or eval) and validated by the simulator's own loaders, so a bad upload shows the same
one-line message the CLI prints. Every path field of an uploaded scenario goes through one
resolver (``sim.contracts.scenario_paths``) before the loader sees it: it must lie in the allowed
folders (``Roots.folders``), or the upload is refused in one line that names the field and the
folders, never the file's content or whether it exists.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile, load_profile, parse_profile_text
from sim.contracts.scenario import Scenario, load_scenario, parse_toml_text
from sim.contracts.scenario_paths import AllowedFolders, PathKind, map_paths

MAX_UPLOAD_BYTES = 5 * 1024 * 1024
"""Largest upload accepted (profiles are well under 1 MB; scenarios a few kB)."""

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True, slots=True)
class Roots:
    """The folders the dashboard serves from."""

    profiles: Path
    """Calibration profiles (``*.json``)."""
    scenarios: Path
    """Scenario files (``*.toml``); uploaded scenarios resolve relative paths against it."""
    traces: tuple[Path, ...] = ()
    """Folders an uploaded scenario's data files (workload and acceptance traces) may lie in,
    besides scenarios/ and profiles/."""

    def folders(self) -> AllowedFolders:
        """What an uploaded scenario may name: profiles in profiles/; data files in scenarios/,
        profiles/ or a trace folder; relative paths against scenarios/."""
        return AllowedFolders(self.scenarios, (self.profiles,), (self.scenarios, self.profiles, *self.traces))

    @classmethod
    def under(cls, base: Path, traces: tuple[Path, ...] | None = None) -> Roots:
        """``base/profiles``, ``base/scenarios`` and, by default, the shared trace folder
        next to the checkout (``base/../shared/traces``) when it exists."""
        base = Path(base).resolve()
        if traces is None:
            shared = base.parent / "shared" / "traces"
            traces = (shared,) if shared.is_dir() else ()
        return cls(base / "profiles", base / "scenarios", tuple(Path(t).resolve() for t in traces))


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return False
    return True


def list_names(root: Path, suffix: str) -> list[str]:
    """Sorted plain file names in ``root`` ending in ``suffix`` (no sub-folders, no names with
    odd characters, no links that lead outside ``root``); empty when ``root`` is missing."""
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        if p.name.endswith(suffix) and _SAFE_NAME.match(p.name) and p.is_file() and _inside(p, root):
            out.append(p.name)
    return sorted(out)


def list_profiles(roots: Roots) -> list[str]:
    """Profile file names the dashboard offers."""
    return list_names(roots.profiles, ".json")


def list_scenarios(roots: Roots) -> list[str]:
    """Scenario file names the dashboard offers."""
    return list_names(roots.scenarios, ".toml")


PREFERRED_SCENARIOS: tuple[str, ...] = ("gpu-chat-h200.toml", "default.toml")
"""What the page opens on, the first of these that is in scenarios/: a GPU team's question on its
imported H200 profile, else the CPU job; a listing without either opens on its first file."""


def opening_scenario(names: list[str]) -> str | None:
    """The scenario the page opens on (``PREFERRED_SCENARIOS``, else the first listed)."""
    return next((n for n in PREFERRED_SCENARIOS if n in names), names[0] if names else None)


def named_path(root: Path, name: str, suffix: str, kind: str) -> Path:
    """The path of ``name`` if, and only if, it is in ``root``'s listing.

    The name is looked up, never joined: ``../x``, absolute paths, sub-folders and names not in
    the folder are all refused with the list of valid names.
    """
    names = list_names(root, suffix)
    if not isinstance(name, str) or name not in names:
        valid = ", ".join(names) or f"none (the folder {root.name}/ has no {suffix} files)"
        raise SpecplanError(f"{kind} {str(name)[:80]!r}: not one of the {root.name}/ files; valid: {valid}")
    return root / name


def load_named_scenario(roots: Roots, name: str) -> Scenario:
    """Load ``scenarios/<name>`` (a name from :func:`list_scenarios`)."""
    return load_scenario(named_path(roots.scenarios, name, ".toml", "scenario"))


def load_named_profile(roots: Roots, name: str) -> Profile:
    """Load ``profiles/<name>`` (a name from :func:`list_profiles`)."""
    return load_profile(named_path(roots.profiles, name, ".json", "profile"))


def profile_name_of(scenario: Scenario, roots: Roots) -> str | None:
    """The profiles/ name a scenario's ``fleet.profile`` points at, if it points into profiles/."""
    p = scenario.profile_path
    if p is None or not p.is_file() or not _inside(p, roots.profiles):
        return None
    return p.name if p.name in list_profiles(roots) else None


def upload_label(filename: str | None, default: str) -> str:
    """A display name for an upload: the base name, reduced to safe characters."""
    base = Path(str(filename or default)).name
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", base)[:80].lstrip(".")
    return clean or default


def decode_upload(contents: str, filename: str | None, *, max_bytes: int = MAX_UPLOAD_BYTES) -> str:
    """Text of a ``dcc.Upload`` data URL (``data:<type>;base64,<payload>``), UTF-8."""
    label = upload_label(filename, "upload")
    if not isinstance(contents, str) or "," not in contents:
        raise SpecplanError(f"{label}: not an uploaded file (expected a data URL)")
    header, payload = contents.split(",", 1)
    if not header.endswith(";base64"):
        raise SpecplanError(f"{label}: upload is not base64-encoded")
    if len(payload) > (max_bytes * 4) // 3 + 4:
        raise SpecplanError(f"{label}: file too large (limit {max_bytes // (1024 * 1024)} MB)")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise SpecplanError(f"{label}: upload is not valid base64") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecplanError(f"{label}: not UTF-8 text (byte {exc.start}); upload a .toml or .json file") from None


def confine_upload_paths(data: Mapping[str, Any], origin: str, roots: Roots) -> dict[str, Any]:
    """``data`` with every path field pinned to the file it names inside the allowed folders, or
    a one-line SpecplanError naming the first field that points elsewhere. [fleet]'s profile is
    the exception that is dropped instead of refused: the dashboard's profile control replaces it
    (kept when it lies in profiles/, so the control opens on it); a named fleet's profile is
    needed by its candidates, so it must lie in profiles/."""
    folders = roots.folders()

    def resolve(raw: str, where: str, kind: PathKind) -> str | None:
        try:
            return folders.resolve(raw, where, kind)
        except SpecplanError as exc:
            if where == "fleet.profile":
                return None
            raise SpecplanError(f"{origin}: {exc}") from None

    return map_paths(Scenario, data, resolve)


def parse_scenario_upload(text: str, filename: str | None, roots: Roots) -> Scenario:
    """Validate an uploaded scenario TOML exactly as ``load_scenario`` would; relative paths
    resolve against ``scenarios/``."""
    origin = upload_label(filename, "uploaded.toml")
    data = parse_toml_text(text, origin)
    data = confine_upload_paths(data, origin, roots)
    return Scenario.from_dict(data, origin, roots.scenarios)


def parse_profile_upload(text: str, filename: str | None) -> Profile:
    """Validate an uploaded calibration profile JSON exactly as ``load_profile`` would."""
    return parse_profile_text(text, upload_label(filename, "uploaded.json"))
