"""Reading a request trace in any supported format: the one dispatcher over
sim/contracts/trace_formats (docs/scenario-format.md describes each format's fields).

``read_trace(path)`` detects the format from the file (only when exactly one matches: the Azure
or BurstGPT header, a Mooncake first line, a vLLM results object); ``read_trace(TraceConfig)``
reads the format the scenario names, with its column mapping. Every problem is one line naming
the file, the line and the field; what reading assumed (zero-token rows, a coarse time grid) is
in the trace's notes (sim/contracts/trace_formats/read_notes.py). Nothing is cached on disk.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from sim.contracts.errors import SpecplanError, echo
from sim.contracts.input_limits import check_file
from sim.contracts.trace_config import TraceConfig
from sim.contracts.trace_formats import azure, burstgpt, generic, mooncake, rows, vllm_bench
from sim.contracts.trace_formats.parsed import Trace
from sim.contracts.trace_formats.read_notes import grid_note

__all__ = ["Trace", "detect_format", "read_trace"]


def read_trace(source: str | Path | TraceConfig) -> Trace:
    """The trace at ``source`` (a path: format detected; a TraceConfig: its format and mapping)."""
    cfg = source if isinstance(source, TraceConfig) else None
    p, _ = check_file(cfg.resolved_path if cfg else source, "trace")
    fmt = cfg.format if cfg else "auto"
    if fmt == "auto":
        fmt = detect_format(p)
    if cfg is not None and fmt != "vllm-bench":
        for name in ("schedule_seed", "run_index"):
            if getattr(cfg, name) is not None:
                raise SpecplanError(f"{p}: workload.trace.{name}: only used by format \"vllm-bench\"; "
                                    f"this file reads as {echo(fmt, 60)}")
    if fmt == "vllm-bench":  # send times drawn, not recorded: no time resolution to speak of
        return vllm_bench.read(p, cfg.schedule_seed if cfg else None, cfg.run_index if cfg else None)
    if fmt == "azure":
        trace = azure.read(p)
    elif fmt == "burstgpt":
        trace = burstgpt.read(p)
    elif fmt == "mooncake":
        trace = mooncake.read(p)
    else:
        assert cfg is not None and cfg.columns is not None  # TraceConfig requires columns for these
        trace = generic.read_csv(p, cfg.columns) if fmt == "csv" else generic.read_jsonl(p, cfg.columns)
    grid = grid_note(p.name, trace.offsets_s)
    return dataclasses.replace(trace, notes=(*trace.notes, grid)) if grid else trace


def detect_format(p: Path) -> str:
    """The one format whose signature the file has, or a one-line error listing what is valid."""
    first = rows.first_line(p)
    if not first:
        raise SpecplanError(f"{p}:1: empty trace file (or a blank first line); valid: {_VALID}")
    if first[0] in "{[":
        try:
            obj = json.loads(first)
        except (ValueError, RecursionError):  # not JSON, or a number of thousands of digits
            obj = None
        if isinstance(obj, dict) and all(k in obj for k in mooncake.KEYS):
            return "mooncake"
        if (isinstance(obj, dict) and "input_lens" in obj) or (obj is None and _mentions_input_lens(p)):
            return "vllm-bench"
        raise SpecplanError(
            f"{p}:1: JSON with neither Mooncake's keys ({', '.join(mooncake.KEYS)}) on its first line "
            f"nor vLLM's input_lens; valid: {_VALID}")
    header = rows.header_of(p)
    if header == azure.HEADER:
        return "azure"
    if header == burstgpt.HEADER:
        return "burstgpt"
    raise SpecplanError(f"{p}:1: bad header {echo(first, 80)}; valid: {_VALID}")


_VALID = (f"{','.join(azure.HEADER)} (Azure LLM trace schema), {','.join(burstgpt.HEADER)} (BurstGPT), "
          "Mooncake JSONL, a `vllm bench serve --save-detailed` file, or workload.trace.format = "
          "\"csv\"/\"jsonl\" with workload.trace.columns")


def _mentions_input_lens(p: Path) -> bool:
    with p.open("rb") as fh:
        return b'"input_lens"' in fh.read(1 << 24)
