"""The scenario a bench script writes, built from the values it names (one builder).

Why: three bench scripts spelled out the same scenario TOML — the engine's block size, memory
use and chunked prefill, the baseline candidate, the table layout — each with its own values,
so a change to the scenario format had to be made three times. Each now names only what is its
own; ``sim.contracts.toml_writer`` writes the text.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.contracts.toml_writer import dumps_toml  # noqa: E402

ENGINE: dict[str, Any] = {"block_size": 16, "memory_utilization": 0.9, "chunked_prefill": True}
"""The engine every bench scenario runs (vLLM's defaults for these fields)."""
BASELINE: dict[str, Any] = {"name": "baseline", "speculation": "off"}


def bench_scenario(name: str, *, run: dict[str, Any], workload: dict[str, Any], segment: dict[str, Any],
                   slo: dict[str, Any], fleet: dict[str, Any], candidates: list[dict[str, Any]],
                   description: str | None = None, header: str | None = None) -> str:
    """A one-segment scenario's TOML: the baseline first, then ``candidates``, on ``ENGINE``;
    ``header``, when given, as a comment line at the top (what wrote the file)."""
    doc: dict[str, Any] = {"name": name, **({"description": description} if description is not None else {}),
                           "run": run, "workload": {**workload, "segments": [segment]}, "slo": slo,
                           "fleet": {**fleet, "engine": ENGINE}, "candidates": [BASELINE, *candidates]}
    return (f"# {header}\n" if header else "") + dumps_toml(doc)
