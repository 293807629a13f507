"""How long workload generation takes (target: 20k requests well under a second).

Run: .venv/bin/python bench/bench_workload.py
Prints the median of repeated runs per arrival kind; the numbers are measured on this machine.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from sim.contracts.scenario import Scenario, load_scenario
from sim.contracts.trace import read_trace
from sim.workload.workload import generate_requests

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "traces" / "azure_llm_2023_conv.csv"


def _median_s(fn, repeats: int = 7) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    base = load_scenario(REPO / "scenarios" / "default.toml")
    n_target = 20_000
    dur = base.run.duration_s
    cases: dict[str, Scenario] = {
        "poisson": base.with_overrides({"workload.rate": n_target / dur}),
        "gamma b=0.5": base.with_overrides(
            {"workload.arrival": "gamma", "workload.rate": n_target / dur, "workload.burstiness": 0.5}
        ),
        "piecewise step": base.with_overrides(
            {"workload.arrival": "piecewise", "workload.rate": None,
             "workload.piecewise": {"shape": "step", "points": [[0, 20.0], [200, 60.0], [400, 20.0]]}}
        ),
    }
    print(f"workload generation, median of 7 runs ({dur:.0f} s simulated)")
    for name, s in cases.items():
        n = len(generate_requests(s, rng=np.random.SeedSequence(1)))
        t = _median_s(lambda s=s: generate_requests(s, rng=np.random.SeedSequence(1)))
        print(f"  {name:16s} {n:7d} requests  {t * 1e3:8.1f} ms  ({n / t / 1e6:.2f} M req/s)")
    if TRACE.is_file():
        t = _median_s(lambda: read_trace(TRACE))
        print(f"  read_trace conv  {len(read_trace(TRACE)):7d} rows      {t * 1e3:8.1f} ms")
        s = load_scenario(REPO / "scenarios" / "azure-conv-replay.toml").with_overrides(
            {"workload.trace.rate_scale": 1.0, "workload.trace.start_s": 0,
             "run.duration_s": 3600.0, "run.warmup_s": 0}
        )
        tr = read_trace(TRACE)
        n = len(generate_requests(s, rng=1, trace=tr))
        t = _median_s(lambda: generate_requests(s, rng=1, trace=tr))
        print(f"  trace replay     {n:7d} requests  {t * 1e3:8.1f} ms  (trace pre-read)")
    else:
        print(f"  trace: skipped, {TRACE} not found")


if __name__ == "__main__":
    main()
