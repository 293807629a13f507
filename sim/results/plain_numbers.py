"""Numbers as a reader sees them in a sentence: "8.67 req/s", never "8.66667 req/s".

Why one home: Python's ``:g`` writes six significant digits (a rate of 26/3 reads 8.66667) and
switches to exponents (1e+06); each surface that formatted its own rates said the same number
differently. ``plain`` keeps three significant digits (more for whole numbers, which stay
whole), no exponent, thousands separated; ``rate`` adds the unit.
"""

from __future__ import annotations

import math


def plain(x: float, sig: int = 3) -> str:
    """``x`` to ``sig`` significant digits without an exponent or trailing zeros: 8.66667 →
    "8.67", 20 → "20", 1234.5 → "1,234", 0.012345 → "0.0123"; "∞" and "n/a" for the rest."""
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if x == 0:
        return "0"
    digits = sig - 1 - math.floor(math.log10(abs(x)))
    if digits <= 0:  # as many digits as the whole part has: a rate of 1,234 req/s stays 1,234
        return f"{round(x):,}"
    text = f"{round(x, digits):,.{digits}f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def rate(x: float | None) -> str:
    """A request rate in words: "8.67 req/s" ("the offered load" when unknown)."""
    return "the offered load" if x is None else f"{plain(x)} req/s"
