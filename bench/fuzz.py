"""Fuzz the loaders and the CLI with N seeded hostile inputs and print the oracle's counts.

    PYTHONPATH=$PWD python bench/fuzz.py [N=20000] [--seed S] [--subprocess-every K]

Same generator and oracle as tests/cli/test_fuzz.py (tests/fuzz_cases.py): exit 0 or 2 only, no
traceback, no uncaught exception, nothing over 60 s, every error one line naming its input (and
the field the case changed, where it knows).
Exit status 1 if any case failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz_cases import FUZZ_MAX_REQUEST_STEPS  # noqa: E402
from tests.fuzz_oracle import fuzz  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--subprocess-every", type=int, default=200)
    args = ap.parse_args()
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        inproc, subproc = fuzz(args.n, args.seed, Path(d), subprocess_every=args.subprocess_every)
    wall = time.perf_counter() - t
    print(f"fuzz: seed {args.seed}, work limit {FUZZ_MAX_REQUEST_STEPS} request-steps, {wall:.0f} s")
    print("in-process (cli.main.main):")
    print("\n".join("  " + ln for ln in inproc.lines()))
    print("subprocess (python -m cli):")
    print("\n".join("  " + ln for ln in subproc.lines()))
    return 1 if inproc.fails or subproc.fails else 0


if __name__ == "__main__":
    raise SystemExit(main())
