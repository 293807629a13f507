"""What pricing steps from Python costs: the callers that price many shapes one by one
(``k_schedule``'s table for a ``schedule = "auto"`` candidate, ``breakeven``), one
``ProfileStepTimer.price`` call, and a SimPy-driver run whose steps the Python timer prices and
whose arrivals the Python router routes (the path of a speed timeline or a custom timer).

Each case is one child process (imports and kernels warm first, then timed; medians of
``--repeats``); ``--tree OTHER_CHECKOUT`` measures another checkout the same way, interleaved,
and the ratio other/this is printed. The outputs (schedule, speed-ups, the run's mean TTFT) are
printed too (the run's: the sum of finish times, of replica indices, the request count), so
two trees can be seen to compute the same numbers.
Run: ``.venv/bin/python bench/bench_pricing.py [--tree /path/to/old/checkout] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tree_child import child_json

REPO = Path(__file__).resolve().parents[1]
CASES = ("schedule", "breakeven", "price-call", "simpy-python-priced")
"""``simpy-python-priced``: decision-grid.toml on 2 replicas, its second candidate, seed 1."""

CHILD = r'''
import json, statistics, sys, time
from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario

case, repeats = sys.argv[1], int(sys.argv[2])

def timed(f, n):
    f()  # warm
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); out = f(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out

if case == "schedule":  # the auto candidate of the shipped scenario: batches 1..1024, k 0..3
    from sim.model.k_schedule import candidate_schedule
    sc = load_scenario("scenarios/gpu-chat-h200-auto.toml")
    prof = load_profile(sc.require_profile_path())
    cand = next(c for c in sc.candidates if getattr(c, "schedule", None) == "auto")
    s, out = timed(lambda: candidate_schedule(sc, prof, cand), repeats)
    print(json.dumps({"s": s, "out": out.describe()}))
elif case == "breakeven":
    from sim.decisions.breakeven import breakeven_from_profile
    prof = load_profile("profiles/smollm2-135m-cpu.json")
    seg = prof.acceptance["ngram"].segments[0].key
    s, out = timed(lambda: breakeven_from_profile(prof, "ngram", segment=seg, batch=8, context=512.0), repeats)
    print(json.dumps({"s": s, "out": [round(r.speedup, 9) for r in out.rows]}))
elif case == "price-call":  # 20,000 shapes, every one a new point (no lookup cache hits)
    from sim.model.step_time import ProfileStepTimer
    timer = ProfileStepTimer(load_profile("profiles/llama-3.1-8b-h200-vllm.json"))
    shapes = [(1 + i % 512, 100.0 + i, i % 4, "eagle3" if i % 4 else None, 0, 0.0, None, 0.0, 0, 0, None)
              for i in range(20000)]
    s, out = timed(lambda: sum(timer.price(*a) for a in shapes), repeats)
    print(json.dumps({"s": s / len(shapes), "out": out}))
else:  # the SimPy driver with the Python timer and router: as a speed timeline runs
    from unittest import mock
    from sim.model import timer_packing
    from sim.results.simulation import simulate_once
    sc = load_scenario("scenarios/decision-grid.toml").with_overrides({"fleet.replicas": 2})
    prof = load_profile(sc.require_profile_path())
    with mock.patch.object(timer_packing, "pack", lambda timer, proposer: None):
        s, out = timed(lambda: simulate_once(sc, prof, sc.candidate_names[1], 1), max(1, repeats // 2))
    req = out.requests
    print(json.dumps({"s": s, "out": [float(req["finish_s"].sum()), int(req["replica"].sum()), req.height]}))
'''


def once(tree: Path, case: str, repeats: int) -> dict:
    return child_json(tree, CHILD, case, str(repeats))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, help="another checkout to measure the same way")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    for case in CASES:
        here = once(REPO, case, args.repeats)
        unit = "µs a call" if case == "price-call" else "s"
        scale = 1e6 if case == "price-call" else 1.0
        line = f"{case:20s} this tree {here['s'] * scale:9.4f} {unit}"
        if args.tree:
            other = once(args.tree.resolve(), case, args.repeats)
            same = "same output" if other["out"] == here["out"] else f"OUTPUT DIFFERS: {other['out']!r}"
            line += f"; other tree {other['s'] * scale:9.4f} ({other['s'] / here['s']:.2f}x this); {same}"
        print(line, f"| {here['out']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
