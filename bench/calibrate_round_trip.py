"""How close `specplan calibrate` lands to known terms, and what it costs.

Why: the round-trip test holds four generated truths to a tolerance; this prints the errors of
many, so the tolerance in docs/fidelity.md ("Calibrating from your own runs") is a measurement.
Each truth: the synthetic test profile simulated with a random acceptance scale (0.5–1),
per-step overhead (0.5–3 ms) and per-request overhead (0–100 ms) at 2, 6 and 12 req/s, written as
`--save-detailed` files with the run's own acceptance length as the measured one (the helpers of
tests/sim/fidelity/test_calibrate.py), then calibrated from the uncalibrated profile. Simulated
truth: it checks that the fit inverts the simulator, not that the simulator matches vLLM.

    .venv/bin/python bench/calibrate_round_trip.py [--n 12] [--seed 1]
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
from tests.sim.fidelity.test_calibrate import _request, _scenario, _truth  # noqa: E402

FIT = ("acceptance_scale", "step_overhead_ms", "request_overhead_ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=12, help="random truths (default 12)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the truths (default 1)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    worst = dict.fromkeys(FIT, 0.0)
    print(f"{'scale':>7}{'err':>9}{'step ms':>9}{'err':>8}{'req ms':>8}{'err':>7}{'sims':>6}{'s':>6}")
    for _ in range(args.n):
        truth = Terms(acceptance_scale=rng.uniform(0.5, 1.0), step_overhead_ms=rng.uniform(0.5, 3.0),
                      request_overhead_ms=rng.uniform(0.0, 100.0))
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            paths, al = _truth(folder, load_scenario(_scenario(folder)), truth)
            t0 = time.perf_counter()
            cal = calibrate(_request(folder, paths, FIT, acceptance=al))
            dt = time.perf_counter() - t0
        err = {k: cal.after.get(k) - truth.get(k) for k in FIT}
        for k in FIT:
            worst[k] = max(worst[k], abs(err[k]))
        print(f"{truth.acceptance_scale:7.3f}{err['acceptance_scale']:+9.4f}{truth.step_overhead_ms:9.2f}"
              f"{err['step_overhead_ms']:+8.3f}{truth.request_overhead_ms:8.1f}{err['request_overhead_ms']:+7.2f}"
              f"{cal.simulations:6d}{dt:6.1f}")
    print("worst |error|: " + ", ".join(f"{k} {v:.4g}" for k, v in worst.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
