"""The scenario's [workload.trace] table: which file to replay, in which format, which window."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sim.contracts.dataclass_mapping import internal_field
from sim.contracts.errors import FieldError, echo
from sim.contracts.input_limits import path_problem
from sim.contracts.scenario_fields import looked_in, resolve_path
from sim.contracts.scenario_paths import path_field

TraceFormat = Literal["auto", "azure", "mooncake", "burstgpt", "vllm-bench", "csv", "jsonl"]
TimestampUnit = Literal["s", "ms", "us", "ns", "datetime"]
FORMATS: tuple[str, ...] = ("azure", "mooncake", "burstgpt", "vllm-bench", "csv", "jsonl")
"""The readers of sim/contracts/trace_formats, by the name a scenario gives them."""


@dataclass(frozen=True, slots=True)
class TraceColumns:
    """Which column (CSV header name or JSONL key) holds what, for format "csv" or "jsonl"."""

    timestamp: str
    """Arrival time of the request, in ``timestamp_unit``; rows sorted by it."""
    prompt_tokens: str
    """Prompt length in tokens (integer ≥ 0)."""
    output_tokens: str
    """Generated length in tokens (integer ≥ 0)."""
    timestamp_unit: TimestampUnit = "s"
    """"s", "ms", "us", "ns" (numbers ≥ 0) or "datetime" (``YYYY-MM-DD HH:MM:SS[.fraction]``,
    an optional ``+HH:MM``/``Z`` offset)."""
    hash_ids: str | None = None
    """JSONL only: a key holding a list of prefix-block ids (Mooncake's ``hash_ids``), kept in
    the parsed trace for prefix caching."""
    hash_block_tokens: int = 512
    """Tokens per ``hash_ids`` block (Mooncake: 512)."""

    def __post_init__(self) -> None:
        for name in ("timestamp", "prompt_tokens", "output_tokens", "hash_ids"):
            v = getattr(self, name)
            if v is not None and not v.strip():
                raise FieldError(name, "must name a column (a CSV header name or a JSONL key)")
        if not 1 <= self.hash_block_tokens <= 1_000_000:
            raise FieldError("hash_block_tokens", f"must be in [1, 1000000] tokens, got {self.hash_block_tokens}")


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """Replay a recorded trace (docs/scenario-format.md lists the formats and their fields)."""

    path: str = path_field("data")
    """The trace file, relative to the scenario's folder (then the cwd) or absolute."""
    format: TraceFormat = "auto"
    """"azure" (2023/2024 CSV), "mooncake" (JSONL), "burstgpt" (CSV), "vllm-bench" (`vllm bench
    serve --save-detailed` JSON), "csv"/"jsonl" (any layout, with ``columns``); "auto" picks
    azure, burstgpt, mooncake or vllm-bench from the file's header or keys, and refuses a file
    that matches none."""
    columns: TraceColumns | None = None
    """Required for "csv" and "jsonl": the column mapping; not used by the other formats."""
    start_s: float = 0.0
    """Start of the replayed window, seconds after the trace's first row."""
    window_s: float | None = None
    """Length of the replayed window in trace seconds; default duration_s·rate_scale, which
    exactly fills the run."""
    rate_scale: float = 1.0
    """Arrivals per second relative to the trace: 2.0 halves every gap, 0.5 doubles them."""
    schedule_seed: int | None = None
    """vllm-bench only: vLLM saves no send times, so they are drawn as `vllm bench serve` draws
    them (gamma gaps at the recorded request_rate and burstiness) from this seed (default 0);
    the same schedule for every replication, like a recorded trace."""
    run_index: int | None = None
    """vllm-bench only: which run of a file holding several (``--append-result``), from 0."""
    base_dir: str | None = internal_field()
    """Folder of the scenario file (set by the loader) for resolving ``path``."""

    def __post_init__(self) -> None:
        if not self.path:
            raise FieldError("path", "must name a trace file")
        if why := path_problem(self.path):
            raise FieldError("path", why)
        if self.start_s < 0:
            raise FieldError("start_s", f"must be ≥ 0 seconds, got {self.start_s}")
        if self.window_s is not None and not self.window_s > 0:
            raise FieldError("window_s", f"must be > 0 seconds, got {self.window_s}")
        if not self.rate_scale > 0:
            raise FieldError("rate_scale", f"must be > 0, got {self.rate_scale}")
        generic = self.format in ("csv", "jsonl")
        if generic and self.columns is None:
            raise FieldError("columns", f"required for format {echo(self.format, 60)}: {{timestamp = \"…\", "
                             "prompt_tokens = \"…\", output_tokens = \"…\"}")
        if not generic and self.columns is not None:
            raise FieldError("columns", f"only used by formats \"csv\" and \"jsonl\", not {echo(self.format, 60)}")
        if self.format == "csv" and self.columns is not None and self.columns.hash_ids is not None:
            raise FieldError("columns.hash_ids", "only read from JSONL (a list per row); remove it")
        for name in ("schedule_seed", "run_index"):
            v = getattr(self, name)
            if v is not None and self.format not in ("vllm-bench", "auto"):
                raise FieldError(name, f"only used by format \"vllm-bench\", not {echo(self.format, 60)}")
            if v is not None and not 0 <= v < 2**32:
                raise FieldError(name, f"must be in [0, 2**32), got {v}")
        if not self.resolved_path.is_file():
            raise FieldError(
                "path", f"file not found; looked in {looked_in(self.path, self.base_dir)}"
            )

    @property
    def resolved_path(self) -> Path:
        """Absolute path of the trace file (scenario folder first, then the cwd)."""
        return resolve_path(self.path, self.base_dir)

    def effective_window_s(self, duration_s: float) -> float:
        """Trace seconds replayed for a run of ``duration_s`` simulated seconds."""
        return self.window_s if self.window_s is not None else duration_s * self.rate_scale
