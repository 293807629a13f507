"""How much each compared percentile moves when every step time moves by a few percent.

Why: ``specplan validate`` holds TTFT and E2EL p50/p95 to ±10 %, but on a short run (40 requests)
at low load a p95 rests on two or three requests, and whether a request arrived during another
one's prefill flips with small timing shifts. This simulates the validation's own request lists
(``scenarios/validate-cpu.toml`` on the shipped profile, each candidate at fractions of its own
simulated capacity) with every step time × (1 − d) and × (1 + d), and prints the relative change
of each metric: the noise floor a real run's step-time error of ``d`` turns into. Simulation
only (no torch, no real runs); medians over arrival seeds.

    .venv/bin/python bench/bench_fidelity_sensitivity.py [--requests 40] [--seeds 0,1,2] [--delta 0.05]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sim.contracts.profile import load_profile  # noqa: E402
from sim.contracts.scenario import load_scenario  # noqa: E402
from sim.fidelity import live_load  # noqa: E402

METRICS = ("ttft_ms_median", "ttft_ms_p95", "e2el_ms_median", "e2el_ms_p95")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(REPO / "scenarios" / "validate-cpu.toml"))
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--loads", default="0.3,0.6,0.85")
    ap.add_argument("--delta", type=float, default=0.05)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    loads = [float(x) for x in args.loads.split(",")]
    sc0, _ = live_load.live_scenario(load_scenario(args.scenario))
    prof = load_profile(sc0.require_profile_path())
    cands = [sc0.baseline.name] + ([sc0.speculative[0].name] if sc0.speculative else [])
    d = args.delta
    print(f"profile {prof.name}; {args.requests} requests per point; seeds {seeds}; step times × {1 - d:g} and × {1 + d:g}")
    print(f"{'candidate':10} {'load':>5} " + " ".join(f"{m:>24}" for m in METRICS))
    for cand in cands:
        cap = live_load.capacity_of(sc0, prof, 0, cand).rate
        for load in loads:
            moves: dict[str, list[tuple[float, float]]] = {m: [] for m in METRICS}
            for seed in seeds:
                sc = live_load.scenario_at(sc0, load * cap, args.requests, seed)
                reqs = live_load.workload_requests(sc, seed)
                v = {s: live_load.predict(sc, prof, cand, reqs, seed, 3, scales=(s, s)).values
                     for s in (1 - d, 1.0, 1 + d)}
                for m in METRICS:
                    mid = v[1.0][m]
                    moves[m].append((v[1 - d][m] / mid - 1, v[1 + d][m] / mid - 1))
            cells = [f"{100 * statistics.median(a for a, _ in moves[m]):+6.1f}% / "
                     f"{100 * statistics.median(b for _, b in moves[m]):+6.1f}%" for m in METRICS]
            print(f"{cand:10} {load:5.0%} " + " ".join(f"{c:>24}" for c in cells))
    print(f"(each cell: median change for step times −{d:.0%} / +{d:.0%}; "
          "a change well beyond ±5 % means the metric amplifies step-time error)")


if __name__ == "__main__":
    main()
