"""Token-length distributions of a workload segment (prompt and output lengths).

Kept apart from the scenario loader because the workload generator samples them and tests
check them on their own. Every draw is an integer ≥ 1: a request always has at least one
prompt and one output token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from sim.contracts.errors import FieldError, echo

DistName = Literal["fixed", "uniform", "lognormal", "empirical"]

# which keys each distribution uses (besides `dist`); everything else is rejected
_USES: dict[str, tuple[str, ...]] = {
    "fixed": ("value",),
    "uniform": ("min", "max"),
    "lognormal": ("median", "sigma", "min", "max"),
    "empirical": ("values",),
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "fixed": ("value",),
    "uniform": ("min", "max"),
    "lognormal": ("median", "sigma"),
    "empirical": ("values",),
}


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A distribution of token counts: fixed, uniform, lognormal (clipped) or empirical."""

    dist: DistName
    """Which distribution: "fixed", "uniform", "lognormal" or "empirical"."""
    value: int | None = None
    """fixed: the one length (≥ 1)."""
    min: int | None = None
    """uniform: smallest length (inclusive); lognormal: lower clip (default 1)."""
    max: int | None = None
    """uniform: largest length (inclusive); lognormal: upper clip (default: none)."""
    median: float | None = None
    """lognormal: median length (> 0); the mean is median·exp(sigma²/2) before clipping."""
    sigma: float | None = None
    """lognormal: standard deviation of log(length) (≥ 0)."""
    values: tuple[int, ...] | None = None
    """empirical: lengths drawn uniformly with replacement (each ≥ 1)."""

    def __post_init__(self) -> None:
        if self.dist not in _USES:
            raise FieldError("dist", f"must be one of {', '.join(_USES)}; got {echo(self.dist, 60)}")
        uses = _USES[self.dist]
        for name in ("value", "min", "max", "median", "sigma", "values"):
            given = getattr(self, name) is not None
            if given and name not in uses:
                raise FieldError(
                    name, f"not used by dist {echo(self.dist, 60)}; valid: dist, {', '.join(uses)}"
                )
            if not given and name in _REQUIRED[self.dist]:
                raise FieldError(name, f"required for dist {echo(self.dist, 60)}")
        if self.value is not None and self.value < 1:
            raise FieldError("value", f"must be ≥ 1 token, got {self.value}")
        if self.min is not None and self.min < 1:
            raise FieldError("min", f"must be ≥ 1 token, got {self.min}")
        if self.max is not None and self.max < 1:
            raise FieldError("max", f"must be ≥ 1 token, got {self.max}")
        if self.min is not None and self.max is not None and self.max < self.min:
            raise FieldError("max", f"must be ≥ min ({self.min}), got {self.max}")
        if self.median is not None and not self.median > 0:
            raise FieldError("median", f"must be > 0, got {self.median}")
        if self.sigma is not None and self.sigma < 0:
            raise FieldError("sigma", f"must be ≥ 0, got {self.sigma}")
        if self.values is not None:
            if not self.values:
                raise FieldError("values", "must hold at least one length")
            for i, v in enumerate(self.values):
                if v < 1:
                    raise FieldError(f"values[{i}]", f"must be ≥ 1 token, got {v}")

    @property
    def lower_bound(self) -> int:
        """Smallest length this distribution can produce."""
        if self.dist == "fixed":
            return int(self.value or 1)
        if self.dist == "empirical":
            return min(self.values or (1,))
        return int(self.min or 1)

    @property
    def upper_bound(self) -> int | None:
        """Largest length it can produce; None when unbounded (lognormal without max)."""
        if self.dist == "fixed":
            return self.value
        if self.dist == "empirical":
            return max(self.values or (1,))
        return self.max

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` lengths as an int64 array (each ≥ 1)."""
        if self.dist == "fixed":
            return np.full(n, int(self.value or 1), dtype=np.int64)
        if self.dist == "uniform":
            return rng.integers(int(self.min or 1), int(self.max or 1), size=n, endpoint=True).astype(
                np.int64
            )
        if self.dist == "lognormal":
            raw = float(self.median or 1.0) * np.exp(float(self.sigma or 0.0) * rng.standard_normal(n))
            hi = float(self.max) if self.max is not None else np.inf
            clipped = np.clip(np.rint(raw), float(self.min or 1), hi)
            # far-tail draws beyond int64 cannot happen with a max; without one, cap at 2**40
            return np.minimum(clipped, 2.0**40).astype(np.int64)
        vals = np.asarray(self.values, dtype=np.int64)
        return vals[rng.integers(0, len(vals), size=n)]
