"""What a replica restart costs the simulator: CPU seconds of a run with a restart against the
same fleet without one (bar: within 2x), on the shipped restart scenario and on a GPU-sized one
(two H200 replicas at hundreds of running requests, one restarting mid-run).

Each measurement is one child process (imports and the kernel cache warm first, then timed);
``--tree OTHER_CHECKOUT`` measures another checkout the same way, interleaved.
Run: ``.venv/bin/python bench/bench_restart.py [--tree /path/to/old/checkout]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tree_child import child_json

REPO = Path(__file__).resolve().parents[1]
CASES = ("grid-restart", "gpu-restart")

CHILD = r'''
import dataclasses, json, sys, time
from sim.contracts.fleet_config import RestartConfig
from sim.contracts.scenario import load_scenario
from sim.results.simulation import simulate_once

case, restart = sys.argv[1], sys.argv[2] == "1"
if case == "grid-restart":
    sc = load_scenario("scenarios/decision-grid-restart.toml")
    cands = sc.candidate_names
else:  # GPU-sized: 2 H200 replicas at 80 req/s, replica 0 restarts at 60 s for 20 s
    sc = load_scenario("scenarios/gpu-chat-h200.toml").with_overrides(
        {"workload.rate": 80.0, "fleet.replicas": 2})
    sc = dataclasses.replace(sc, fleet=dataclasses.replace(sc.fleet, restart=RestartConfig(
        at_s=60.0, cold_start_s=20.0, replica=0, on_restart="reroute", fallback="baseline")))
    cands = sc.candidate_names[:2]
if not restart:
    sc = dataclasses.replace(sc, fleet=dataclasses.replace(sc.fleet, restart=None))
prof = None
from sim.contracts.profile import load_profile
prof = load_profile(sc.require_profile_path())
simulate_once(sc, prof, cands[0], 99)  # warm: kernels, grids
t0 = time.process_time()
batch = 0
for cand in cands:
    res = simulate_once(sc, prof, cand, 1)
    batch = max(batch, int(res.steps["decode_seqs"].max() or 0))
print(json.dumps({"cpu_s": time.process_time() - t0, "max_decode_batch": batch, "runs": len(cands)}))
'''


def once(tree: Path, case: str, restart: bool) -> dict:
    return child_json(tree, CHILD, case, str(int(restart)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, help="another checkout to measure the same way")
    args = ap.parse_args()
    trees = [("this tree", REPO)] + ([("other tree", args.tree.resolve())] if args.tree else [])
    for case in CASES:
        for name, tree in trees:
            with_r, without = once(tree, case, True), once(tree, case, False)
            print(f"{case:13s} {name:10s}: restart {with_r['cpu_s']:6.2f} CPU s, without "
                  f"{without['cpu_s']:6.2f} ({with_r['cpu_s'] / without['cpu_s']:.2f}x), "
                  f"{with_r['runs']} runs, largest decode batch {with_r['max_decode_batch']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
