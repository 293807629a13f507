"""What serving costs over the arrival window, and per SLO-conformant answer.

Hardware is paid by the hour whether it is busy or idle, and time spent on requests that were
rejected or timed out is paid too, so the cost is replicas × GPUs per replica × hours × price
per GPU-hour over the whole window in which requests arrive (warm-up excluded; not per served
token, and not the simulated drain after it, so that two candidates with the same good answers
cost the same at a fixed fleet). A speculative candidate with
separate draft hardware adds its hourly price per replica. Dividing by the answers that met every
SLO gives the number a buyer compares.
"""

from __future__ import annotations

import math


def fleet_cost_usd(
    window_s: float,
    replicas: int,
    price_per_gpu_hour: float | None,
    draft_price_per_hour: float = 0.0,
    *,
    speculative: bool = False,
    gpus_per_replica: int = 1,
) -> float | None:
    """Dollars for ``replicas`` of ``gpus_per_replica`` GPUs over ``window_s`` seconds; None
    when no price is given."""
    if price_per_gpu_hour is None:
        return None
    if window_s < 0 or replicas < 0 or gpus_per_replica < 1:
        raise ValueError(f"window_s, replicas must be >= 0 and gpus_per_replica >= 1, got "
                         f"{window_s}, {replicas}, {gpus_per_replica}")
    hourly = price_per_gpu_hour * gpus_per_replica + (draft_price_per_hour if speculative else 0.0)
    return replicas * hourly * window_s / 3600.0


def cost_per_good_answer(cost_usd: float | None, good_answers: int) -> float | None:
    """Cost divided by SLO-conformant answers: ``inf`` when there are none, None without a cost.

    ``inf`` is deliberate: "no good answer at any price" must not read as free; reports print
    it as such and JSON writes it as null with a label.
    """
    if cost_usd is None:
        return None
    if good_answers <= 0:
        return math.inf
    return cost_usd / good_answers


def describe_cost_per_good_answer(value: float | None) -> str:
    """Human text for a cost per good answer, including the two special cases."""
    if value is None:
        return "n/a (no price_per_gpu_hour)"
    if math.isinf(value):
        return "∞ (no SLO-conformant answers)"
    return f"${value:.6f}" if value < 0.01 else f"${value:.4f}"
