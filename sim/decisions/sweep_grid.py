"""A sweep's grid: ``--vary key=v1,v2,…`` parsed, expanded to cells, each keyed by content.

A cell is a set of ``Scenario.with_overrides`` paths → values; its key hashes the cell with
the scenario's and profile's content, so a resumed sweep finds exactly its finished cells.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.contracts.errors import SpecplanError
from sim.contracts.input_limits import MAX_SWEEP_CELLS, check_tree

SEED_ALIASES = ("seed", "run.seed")


@dataclass(frozen=True, slots=True)
class Vary:
    """One ``--vary key=v1,v2,…``: a scenario path and the values it takes."""

    key: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.key:
            raise SpecplanError("--vary: empty key; write --vary workload.rate=1,2,4")
        if not self.values:
            raise SpecplanError(f"--vary {self.key}: no values; write --vary {self.key}=v1,v2")
        if len(set(map(repr, self.values))) != len(self.values):
            raise SpecplanError(f"--vary {self.key}: values repeat: {list(self.values)}")


def parse_value(text: str) -> Any:
    """A CLI value: int, float, true/false, or a plain string (policy names)."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    return t


def parse_vary(text: str) -> Vary:
    """Parse ``key=v1,v2,…`` (the key may contain ``candidates[name].k`` brackets)."""
    if "=" not in text:
        raise SpecplanError(f"--vary {text!r}: expected key=v1,v2,… (e.g. workload.rate=1,2,4)")
    key, _, rest = text.partition("=")
    raw = [v for v in rest.split(",") if v.strip()]
    values = [parse_value(v) for v in raw]
    for v in values:  # the same magnitude limits as a scenario file (sim/contracts/input_limits.py)
        check_tree(v, f"--vary {key.strip()}", "value")
    if any(isinstance(v, float) for v in values) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        values = [float(v) for v in values]
    return Vary(key.strip(), tuple(values))


def expand_grid(varies: Sequence[Vary]) -> list[dict[str, Any]]:
    """Cartesian product of the varied values, first ``--vary`` slowest, in a stable order."""
    keys = [v.key for v in varies]
    if len(set(keys)) != len(keys):
        raise SpecplanError(f"--vary: a key is given twice: {keys}")
    n = math.prod(len(v.values) for v in varies)
    if n > MAX_SWEEP_CELLS:
        raise SpecplanError(f"--vary: {n:,} cells, over the limit of {MAX_SWEEP_CELLS:,}")
    return [dict(zip(keys, combo, strict=True)) for combo in
            itertools.product(*(v.values for v in varies))]


def scenario_overrides(cell: Mapping[str, Any]) -> dict[str, Any]:
    """Cell values → ``with_overrides`` paths (``seed=3`` → ``run.seeds=[3]``)."""
    out: dict[str, Any] = {}
    for k, v in cell.items():
        if k in SEED_ALIASES or (k == "run.seeds" and not isinstance(v, list)):
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or v != int(v):
                raise SpecplanError(f"--vary {k}: a seed must be an integer >= 0, got {v!r}")
            out["run.seeds"] = [int(v)]
        else:
            out[k] = v
    return out


def content_digest(*parts: Any) -> str:
    """sha256 over canonical JSON of ``parts`` (what makes a cell's result what it is)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str, separators=(",", ":")).encode())
        h.update(b"\x00")
    return h.hexdigest()


def cell_key(base_digest: str, cell: Mapping[str, Any]) -> str:
    """Stable file-name key of one cell: its overrides + the scenario/profile digest."""
    return content_digest(base_digest, dict(cell))[:20]


def describe_grid(varies: Iterable[Vary]) -> str:
    """``workload.rate(3) × seed(2) = 6 cells`` for the CLI header."""
    vs = list(varies)
    n = 1
    for v in vs:
        n *= len(v.values)
    return " × ".join(f"{v.key}({len(v.values)})" for v in vs) + f" = {n} cells"
