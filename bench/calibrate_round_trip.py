"""How close `specplan calibrate` lands to known terms, and what it costs.

Why: the round-trip test holds four generated truths to a tolerance; this prints the errors of
many, so the tolerance in docs/fidelity.md ("Calibrating from your own runs") is a measurement.
Each truth: the synthetic test profile simulated with a random acceptance scale (0.5–1),
per-step overhead (0.5–3 ms) and per-request overhead (0–100 ms) at 2, 6 and 12 req/s, written as
`--save-detailed` files with the run's own acceptance length as the measured one (the helpers of
tests/sim/fidelity/test_calibrate.py), then calibrated from the uncalibrated profile. Simulated
truth: it checks that the fit inverts the simulator, not that the simulator matches vLLM.
``--draft-host``: instead, the draft's host time H(b, k) × s (0–4; an import's H is assumed) and
the per-request overhead, on the profile with H of 2 ms a step (the test's ``DRAFT_HOST_PROFILE``).

    .venv/bin/python bench/calibrate_round_trip.py [--n 12] [--seed 1] [--draft-host]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from sim.contracts.scenario import load_scenario  # noqa: E402
from sim.fidelity.calibrate import calibrate  # noqa: E402
from sim.fidelity.calibration_terms import Terms  # noqa: E402
from tests.sim.fidelity.test_calibrate import DRAFT_HOST_PROFILE, _request, _scenario, _truth  # noqa: E402

TRUTHS = {"acceptance_scale": (0.5, 1.0), "step_overhead_ms": (0.5, 3.0), "request_overhead_ms": (0.0, 100.0)}
"""Each fitted term and the range its random truths are drawn from."""
DRAFT_HOST_TRUTHS = {"draft_host_scale": (0.0, 4.0), "request_overhead_ms": (0.0, 100.0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=12, help="random truths (default 12)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the truths (default 1)")
    ap.add_argument("--draft-host", action="store_true", help="fit the draft's host time and the request overhead")
    args = ap.parse_args()
    truths, profile = (DRAFT_HOST_TRUTHS, DRAFT_HOST_PROFILE) if args.draft_host else (TRUTHS, None)
    fit = tuple(truths)
    rng = np.random.default_rng(args.seed)
    worst = dict.fromkeys(fit, 0.0)
    print("".join(f"{k:>22}{'err':>9}" for k in fit) + f"{'sims':>6}{'s':>6}")
    for _ in range(args.n):
        truth = Terms(**{k: rng.uniform(*r) for k, r in truths.items()})
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            paths, al = _truth(folder, load_scenario(_scenario(folder)), truth, profile=profile)
            t0 = time.perf_counter()
            cal = calibrate(_request(folder, paths, fit, acceptance=al, profile=profile))
            dt = time.perf_counter() - t0
        err = {k: cal.after.get(k) - truth.get(k) for k in fit}
        for k in fit:
            worst[k] = max(worst[k], abs(err[k]))
        print("".join(f"{truth.get(k):22.3f}{err[k]:+9.4f}" for k in fit) + f"{cal.simulations:6d}{dt:6.1f}")
    print("worst |error|: " + ", ".join(f"{k} {v:.4g}" for k, v in worst.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
