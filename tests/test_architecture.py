"""The one-way arrows of docs/architecture.md, checked on the source text (ast), not by importing.

cli → {dashboard, profiler} → sim, and inside sim: contracts ← model ← results ← decisions ←
fidelity. Every import counts, including the lazy ones inside functions: a lazy import of torch
in sim would still make the simulator need torch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# sim's rooms in pipeline order: a room may import itself and the rooms before it
SIM_ROOMS = ("contracts", "workload", "model", "results", "decisions", "fidelity")

# what each top-level package must never import (top-level module names)
FORBIDDEN: dict[str, set[str]] = {
    "sim": {"torch", "transformers", "profiler", "dashboard", "cli", "plotly", "dash"},
    "profiler": {"dashboard", "cli", "dash", "plotly"},
    "dashboard": {"cli", "profiler", "torch", "transformers"},
}


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, lazy ones included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: relative import; write it absolute")
            mod = node.module or ""
            found.append((node.lineno, mod))
            # ``from sim import results`` names the room through the imported name
            found.extend((node.lineno, f"{mod}.{a.name}") for a in node.names)
    return found


def sources(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_never_imports_what_is_above_it(package: str) -> None:
    bad = [f"{rel(p)}:{line}: imports {mod}"
           for p in sources(package) for line, mod in imports_of(p)
           if mod.split(".")[0] in FORBIDDEN[package]]
    assert not bad, "\n".join(bad)


def test_sim_rooms_import_only_earlier_rooms() -> None:
    bad = []
    for p in sources("sim"):
        parts = p.relative_to(REPO / "sim").parts
        if len(parts) < 2:
            continue  # sim/__init__.py
        room = SIM_ROOMS.index(parts[0])
        for line, mod in imports_of(p):
            names = mod.split(".")
            if names[0] != "sim" or len(names) < 2 or names[1] not in SIM_ROOMS:
                continue
            if SIM_ROOMS.index(names[1]) > room:
                bad.append(f"{rel(p)}:{line}: sim.{parts[0]} imports {mod} (a later room)")
    assert not bad, "\n".join(bad)


def test_every_sim_module_lives_in_a_room() -> None:
    loose = [rel(p) for p in (REPO / "sim").glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"sim/ modules outside the rooms {SIM_ROOMS}: {loose}"
    rooms = {p.name for p in (REPO / "sim").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert rooms == set(SIM_ROOMS)


def test_cli_is_the_top_floor() -> None:
    """Nothing outside cli/ (and the tests that drive it) imports cli."""
    bad = [f"{rel(p)}:{line}: imports {mod}"
           for pkg in ("sim", "profiler", "dashboard", "bench")
           for p in sources(pkg) for line, mod in imports_of(p)
           if mod.split(".")[0] == "cli"]
    assert not bad, "\n".join(bad)


def test_the_checks_see_imports() -> None:
    """The walker finds top-level, lazy and from-imports (so an empty result means something)."""
    found = {m for _, m in imports_of(REPO / "cli" / "main.py")}
    assert "importlib" in found and "sim.contracts.errors" in found
    lazy = {m for _, m in imports_of(REPO / "cli" / "validate.py")}
    assert "profiler.live.live_validation" in lazy


# profiler's rooms that must run on a machine without torch (imports and estimates are planned
# before any GPU is bought): checked through every profiler module they reach, lazy imports too
TORCH_FREE_ROOMS = ("profiler/estimates", "profiler/imported")
TORCH = {"torch", "transformers"}


def _module_path(mod: str) -> Path | None:
    base = REPO / Path(*mod.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def test_estimate_and_imported_rooms_never_reach_torch() -> None:
    bad = []
    for room in TORCH_FREE_ROOMS:
        for start in sorted((REPO / room).glob("*.py")):
            seen, todo = {start}, [(start, rel(start))]
            while todo:
                path, chain = todo.pop()
                for line, mod in imports_of(path):
                    if mod.split(".")[0] in TORCH:
                        bad.append(f"{chain}:{line}: imports {mod}")
                    elif mod.split(".")[0] == "profiler" and (nxt := _module_path(mod)) and nxt not in seen:
                        seen.add(nxt)
                        todo.append((nxt, f"{chain} -> {rel(nxt)}"))
    assert not bad, "\n".join(bad)


def test_the_torch_check_follows_imports_through_profiler() -> None:
    """The walk above sees a profiler module that imports torch (so an empty result means something)."""
    found = {m for _, m in imports_of(REPO / "profiler" / "passes" / "device.py")}
    assert "torch" in found


LOOSE_LIMITS = {"profiler": 8, "sim/model": 24}
"""Most modules a package keeps at its top level (``__init__`` not counted): more, and a newcomer
cannot see the rooms for the files (docs/architecture.md names each room)."""


@pytest.mark.parametrize("package", sorted(LOOSE_LIMITS))
def test_packages_keep_their_modules_in_rooms(package: str) -> None:
    loose = sorted(p.name for p in (REPO / package).glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= LOOSE_LIMITS[package], f"{package}: {len(loose)} loose modules {loose}"
