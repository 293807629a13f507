"""Routed-expert weight traffic of a mixture-of-experts pass: the one home of the formula.

Why: a MoE decode step of ``b`` rows reads only the experts its ``b`` tokens were routed to, but
a verification of ``k + 1`` tokens per row, or a prefill chunk, routes more tokens and so reads
more distinct experts. At small batch that is several times the expert weights of a decode
(Saxena et al., arXiv 2506.20675, measured verification 2-3x a decode on five MoEs in vLLM).
The bandwidth floor (``sim.contracts.timing_sanity``), the aiconfigurator import's MoE term
(``profiler.imported.aic_grids``) and the roofline estimate (``profiler.model_shape``) all read the count
from here, so they agree.

Assumption, stated wherever the count is used: **uniform, independent routing**. Each token
picks ``top_k`` of ``E`` experts uniformly, so an expert is untouched by ``t`` tokens with
probability ``(1 - top_k/E)^t`` and the expected number of distinct experts is
``E * (1 - (1 - top_k/E)^t)``. Real routers are skewed and consecutive tokens of a row share
experts (both touch fewer experts), so this is an upper estimate of the traffic for a given
token count and the floor built on it is a floor *under this assumption*, not a bound on
every router. With expert parallelism each of ``ep`` ranks holds ``E/ep`` experts and expects
``E/ep * (1 - (1 - top_k/E)^t)`` of them touched: per rank the count is 1/ep of the total, so the
replica's total bytes over the replica's total bandwidth is the same time (load imbalance
between ranks is not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROUTING_ASSUMPTION = (
    "routed-expert reads: the expected distinct experts t tokens touch, E*(1-(1-top_k/E)^t) per MoE "
    "layer (uniform independent routing assumed; per EP rank E/ep of them; shared experts and dense "
    "parts read once per pass)"
)
"""The line every note that uses :class:`ExpertTraffic` repeats (docs/profile-format.md)."""


def expert_coverage(num_experts: int, per_token: int, tokens: float | np.ndarray) -> float | np.ndarray:
    """Expected distinct experts ``tokens`` tokens touch, each routed to ``per_token`` of
    ``num_experts`` uniformly; 0 for no tokens. Works on arrays (the floor's grids)."""
    t = np.maximum(np.asarray(tokens, dtype=float), 0.0)
    out = num_experts * (1.0 - (1.0 - per_token / num_experts) ** t)
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class ExpertTraffic:
    """The routed experts of a model's MoE layers, as bytes a pass must read."""

    num_experts: int
    experts_per_token: int
    moe_layers: int
    """Layers with routed experts (DeepSeek's leading dense layers excluded)."""
    expert_bytes: float
    """Bytes of one routed expert in one layer, all tensor-parallel shards together."""

    def __post_init__(self) -> None:
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise ValueError(f"ExpertTraffic: experts_per_token {self.experts_per_token} must lie in "
                             f"[1, num_experts {self.num_experts}]")
        if self.moe_layers < 0 or self.expert_bytes < 0:
            raise ValueError("ExpertTraffic: moe_layers and expert_bytes must be >= 0")

    @classmethod
    def of(cls, num_experts: int, experts_per_token: int, moe_layers: int, hidden_size: int,
           expert_intermediate_size: int, bytes_per_param: float) -> ExpertTraffic:
        """From a config's shape: a routed expert is a gated MLP (three ``hidden x width`` matrices)."""
        return cls(num_experts, experts_per_token, moe_layers,
                   3.0 * hidden_size * expert_intermediate_size * bytes_per_param)

    def distinct(self, tokens: float | np.ndarray) -> float | np.ndarray:
        """Expected distinct routed experts per MoE layer touched by ``tokens`` tokens."""
        return expert_coverage(self.num_experts, self.experts_per_token, tokens)

    def bytes(self, tokens: float | np.ndarray) -> float | np.ndarray:
        """Routed-expert bytes a pass over ``tokens`` tokens reads, all layers and GPUs together."""
        return self.moe_layers * self.expert_bytes * self.distinct(tokens)

    @property
    def all_bytes(self) -> float:
        """Every routed expert's bytes: what a pass reads when every expert is touched."""
        return float(self.moe_layers * self.expert_bytes * self.num_experts)

    def extra_seconds(self, tokens: float | np.ndarray, base_tokens: float, bandwidth: float) -> float | np.ndarray:
        """Time to read the experts ``tokens`` tokens touch beyond those ``base_tokens`` touch, at
        ``bandwidth`` bytes/s (0 where ``tokens <= base_tokens``)."""
        return np.maximum(self.bytes(tokens) - self.bytes(base_tokens), 0.0) / bandwidth
