"""Tensor-parallel all-reduces in the kernel database's passes, counted against its own table.

Why: a TP forward all-reduces the hidden state after attention's output projection and after the
MLP (or MoE) in every layer (Megatron-LM's row-parallel linear; vLLM's and SGLang's
``RowParallelLinear(reduce_results=True)``), so a pass over ``t`` tokens at TP > 1 pays at least
``2 x layers`` all-reduces of ``t x hidden`` elements. aiconfigurator-core names them by model
family: ``ar_1``/``ar_2`` in its dense builders (``sdk/models/llama.py``), the
``moe_pre_dispatch``/``moe_post_dispatch`` ops in its MoE builders (its ``MoEDispatch`` prices a
custom all-reduce of ``tokens x hidden`` on each side when attention is tensor-parallel), and one
``tp_allreduce`` op of ``2 x layers`` calls in DeepSeek's vLLM builder. This module reads the
database's own all-reduce table and says how many such calls a compiled pass holds, so an
omission is found by arithmetic, not by op names (issue 37: the TP 4 MoE case).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

COLLECTIVE = re.compile(r"(^|_)ar(_|$)|allreduce|dispatch")
"""Op names of the database's TP collectives (``ar_1``, ``embedding_ar``, ``tp_allreduce``,
``moe_pre_dispatch``; the phase prefix already folded off); such an op is communication, not
compute."""
COMPOSITE = "overlap"
"""An op the package times as two overlapped streams (DeepSeek's ``moe_overlap``: shared experts
beside the routed experts with their dispatches); its collectives are inside it, not countable."""
GRAPH_KERNEL = "graph"
"""The vLLM and SGLang tables' CUDA-graph rows (``*_graph``): decode steps run captured, so these
are the calls a decode pass makes (the ``*_eager`` rows cost 20-30 us a call, launch-bound);
TRT-LLM's table has one kind of row."""


@dataclass(frozen=True)
class AllReduceAudit:
    """How many per-layer TP all-reduces a compiled pass prices, in the table's own units."""

    tokens: int
    hidden: int
    layers: int
    tp: int
    collective_ms: float
    """Sum of the pass's collective ops (embedding all-reduce included)."""
    one_call_ms: float
    """The database's all-reduce of ``tokens x hidden`` bf16 elements across ``tp`` GPUs."""

    @property
    def per_layer(self) -> float:
        """All-reduce calls per layer the pass prices, the embedding's one call left out."""
        return (self.collective_ms / self.one_call_ms - 1.0) / self.layers

    def missing_ms(self, needed_per_layer: int = 2) -> float:
        """Milliseconds the pass lacks for ``needed_per_layer`` calls a layer (0: none missing)."""
        return max(needed_per_layer - self.per_layer, 0.0) * self.layers * self.one_call_ms


@cache
def _table(system: str, backend: str, version: str, tp: int) -> tuple[tuple[int, float], ...]:
    """(message elements, ms) of the database's CUDA-graph all-reduce rows, sorted; () if none."""
    import polars as pl

    path = Path(str(resources.files("aiconfigurator_core"))) / "systems" / "data" / system / "comm" / backend / version
    path = path / "custom_allreduce_perf.parquet"
    if not path.is_file():
        return ()
    rows = pl.read_parquet(path).filter(pl.col("num_gpus") == tp)
    if "backend" in rows.columns:  # vLLM and SGLang tables hold graph and eager rows; TRT-LLM's one kind
        rows = rows.filter(pl.col("backend").str.ends_with(GRAPH_KERNEL))
    rows = rows.sort("message_size")
    return tuple(zip(rows["message_size"].to_list(), rows["latency"].to_list(), strict=True))


def allreduce_ms(system: str, backend: str, version: str, tp: int, elements: int) -> float | None:
    """The table's all-reduce of ``elements`` bf16 values across ``tp`` GPUs (linear between its
    rows, clamped at its ends); None where the database has no table for it."""
    rows = _table(system, backend, version, tp)
    if not rows:
        return None
    if elements <= rows[0][0]:
        return rows[0][1]
    for (x0, y0), (x1, y1) in zip(rows, rows[1:], strict=False):
        if elements <= x1:
            return y0 + (y1 - y0) * (elements - x0) / (x1 - x0)
    return rows[-1][1] * elements / rows[-1][0]


def collective_ms(ops: dict[str, float]) -> float:
    """The pass's TP collectives: every op whose name :data:`COLLECTIVE` matches."""
    return sum(v for k, v in ops.items() if COLLECTIVE.search(k))


def audit(ops: dict[str, float], tokens: int, hidden: int, layers: int, system: str, backend: str,
          version: str, tp: int) -> AllReduceAudit | None:
    """The pass ``ops`` (one decode pass over ``tokens`` rows) against the table; None at TP 1,
    where a composite op hides the collectives, or where the database has no all-reduce table for
    the system and backend."""
    if tp < 2 or any(COMPOSITE in k for k in ops):
        return None
    one = allreduce_ms(system, backend, version, tp, tokens * hidden)
    if one is None or one <= 0:
        return None
    return AllReduceAudit(tokens, hidden, layers, tp, collective_ms(ops), one)
