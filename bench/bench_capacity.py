"""Wall and CPU time of the capacity search on the shipped GPU chat scenario.

``specplan capacity scenarios/gpu-chat-h200.toml --target-rate 20`` for three candidates
(baseline, Llama-3.2-1B draft k=3, EAGLE-3 head k=3) on the scenario's two seeds, as a user runs
it. Compare trees in one run (the machine is shared):

    .venv/bin/python bench/bench_capacity.py [--tree /path/to/old/checkout] [--repeats 1] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARGS = ["capacity", "scenarios/gpu-chat-h200.toml", "--target-rate", "20",
        "--candidates", "baseline,draft-1b-k3,eagle3-k3"]


def once(tree: Path, extra: tuple[str, ...] = ()) -> tuple[float, float, str]:
    """(wall s, CPU s of the child, the verdict line) of one capacity run in ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "cli", *ARGS, *extra], capture_output=True, text=True,
                         env=env, cwd=tree, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    first = next((ln for ln in out.stdout.splitlines() if ln.strip()), "")
    return wall, cpu, first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, help="another checkout to compare with (interleaved)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=0,
                    help="also time this tree with capacity --jobs N (load levels side by side)")
    args = ap.parse_args()
    trees = [("this tree", REPO, ())] + ([("other tree", args.tree.resolve(), ())] if args.tree else [])
    if args.jobs:
        trees.append((f"--jobs {args.jobs}", REPO, ("--jobs", str(args.jobs))))
    runs: dict[str, list[tuple[float, float, str]]] = {name: [] for name, _, _ in trees}
    for _ in range(args.repeats):
        for name, tree, extra in trees:
            runs[name].append(once(tree, extra))
    print("specplan " + " ".join(ARGS))
    for name, rs in runs.items():
        wall = statistics.median(r[0] for r in rs)
        cpu = statistics.median(r[1] for r in rs)
        print(f"{name:10s}: wall {wall:6.1f} s, CPU {cpu:6.1f} s (median of {len(rs)}); {rs[0][2][:90]}")
    if args.tree:
        a = statistics.median(r[0] for r in runs["this tree"])
        b = statistics.median(r[0] for r in runs["other tree"])
        print(f"speed-up (wall): {b / a:.2f}x")
    if args.jobs:
        a = statistics.median(r[0] for r in runs["this tree"])
        j = statistics.median(r[0] for r in runs[f"--jobs {args.jobs}"])
        print(f"--jobs {args.jobs} against 1 (wall): {a / j:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
