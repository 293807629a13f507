"""Is every rule of the planner held by a test? Seeded one-character mutations of the planning and
apply kernels, each run against a focused subset of ``tests/sim``, which must fail on every one.

Usage: ``python bench/mutate_kernels.py [--seed 30] [--count 12] [--fleet]``. Each mutant is made in a
copy of the tree (``git ls-files``) in a temporary folder, so the checkout is never touched;
numba compiles the mutant afresh there (its cache is keyed by the kernels' source). The tests,
run in order with ``-x`` (the first failure kills the mutant):

- ``tests/sim/model/test_scheduler.py``: the rule tests, through the ``Scheduler`` facade;
- ``tests/sim/model/test_batch_changes.py``: decode-batch joins and leaves against the real loop's;
- ``tests/sim/model/test_planner_oracle.py``: the planner against its oracle, step by step;
- ``tests/sim/results/test_golden_frames.py``: the golden frames, end to end.

``--fleet`` mutates the fleet's event-queue emulation instead (``fleet_kernels.py``: routing,
restarts, ghosts; ``arrival_kernels.py``: arrivals and deadlines), against the drivers-agree
properties, the restart equivalence tests and the golden frames (``FLEET_TESTS``).

(``SPECPLAN_NO_SHRINK=1``: a failing hypothesis example is reported as found, not shrunk.)

Mutations: a comparison flipped (``<`` ↔ ``<=``, ``>`` ↔ ``>=``, ``==`` ↔ ``!=``) or an integer
literal moved by one (``1`` → ``2``, ``0`` → ``1``: off-by-one in token and block counts), at a
site in a kernel function's code (never a docstring or comment), half of each kind, chosen at
random with the seed. A mutant whose tests run past ``--timeout`` hangs, which counts as caught
(CI's time limit would stop the suite). Prints one line per mutant and exits 1 when one
survived.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS = ("sim/model/plan_kernels.py", "sim/model/apply_kernels.py", "sim/model/kv_blocks.py",
           "sim/model/queue_kernels.py")
TESTS = ("tests/sim/model/test_scheduler.py", "tests/sim/model/test_batch_changes.py",
         "tests/sim/model/test_planner_oracle.py", "tests/sim/results/test_golden_frames.py")
FLEET_TARGETS = ("sim/model/fleet_kernels.py", "sim/model/arrival_kernels.py")
FLEET_TESTS = ("tests/sim/model/test_restart_compiled.py", "tests/sim/model/test_properties.py",
               "tests/sim/results/test_golden_frames.py")
FLIPS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
BUMPS = {"1": "2", "0": "1"}


def sites(path: Path) -> list[tuple[int, int, str, str]]:
    """Every ``(line, column, old, new)`` a mutation can change in the code of the file's
    functions (not module constants, signatures, docstrings or comments)."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if (not tok.line.startswith(" ") or tok.line.lstrip().startswith("def ") or ".shape[0]" in tok.line
                or "G_COUNTER" in tok.line):
            # module constants, signatures, checks of a log's room (not rules), and the emulated
            # queue's event ids (they only order events: any increasing count is the same)
            continue
        if tok.type == tokenize.OP and tok.string in FLIPS:
            out.append((tok.start[0], tok.start[1], tok.string, FLIPS[tok.string]))
        elif tok.type == tokenize.NUMBER and tok.string in BUMPS:
            out.append((tok.start[0], tok.start[1], tok.string, BUMPS[tok.string]))
    return out


def mutate(text: str, line: int, col: int, old: str, new: str) -> str:
    lines = text.splitlines(keepends=True)
    src = lines[line - 1]
    assert src[col:col + len(old)] == old, (line, col, old)
    lines[line - 1] = src[:col] + new + src[col + len(old):]
    return "".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--count", type=int, default=12)
    ap.add_argument("--fleet", action="store_true", help="mutate the fleet's event-queue kernels")
    ap.add_argument("--timeout", type=int, default=600,
                    help="seconds a mutant's tests may run; longer counts as caught (it hangs)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    targets, tests = (FLEET_TARGETS, FLEET_TESTS) if args.fleet else (TARGETS, TESTS)
    pool = [(t, *s) for t in targets for s in sites(REPO / t)]
    flips = [p for p in pool if p[3] in FLIPS]
    bumps = [p for p in pool if p[3] in BUMPS]
    half = args.count // 2  # as many comparisons as off-by-ones
    chosen = rng.sample(flips, args.count - half) + rng.sample(bumps, half)
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    survived = 0
    with tempfile.TemporaryDirectory(prefix="specplan-mutants-") as tmp:
        tree = Path(tmp)
        for f in files:
            if (REPO / f).is_file():
                (tree / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / f, tree / f)
        for i, (target, line, col, old, new) in enumerate(chosen, 1):
            original = (REPO / target).read_text()
            (tree / target).write_text(mutate(original, line, col, old, new))
            t0 = time.perf_counter()
            try:
                res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                      *tests], cwd=tree, capture_output=True, text=True,
                                     env=dict(os.environ, SPECPLAN_NO_SHRINK="1"), timeout=args.timeout)
            except subprocess.TimeoutExpired:  # a mutant that never ends (a loop's exit broken)
                res = subprocess.CompletedProcess([], 124, f"FAILED hung-over-{args.timeout}-s", "")
            (tree / target).write_text(original)
            failed = [ln for ln in res.stdout.splitlines() if ln.startswith("FAILED")]
            caught = res.returncode != 0
            survived += not caught
            code = original.splitlines()[line - 1].strip()
            print(f"{i:2d}. {target}:{line} `{old}` -> `{new}` in `{code}`: "
                  f"{'caught by ' + failed[0].split()[1] if caught and failed else 'SURVIVED' if not caught else 'caught (rc ' + str(res.returncode) + ')'}"
                  f" [{time.perf_counter() - t0:.0f} s]", flush=True)
    print(f"{args.count - survived}/{args.count} mutants caught (seed {args.seed})")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
