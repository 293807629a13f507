"""Wall time of a full profile run (the speed target: the default CPU profile in ~15 minutes).

By default it reads the wall time the run recorded in the shipped profile (``x-run`` and the
timing provenance notes); ``--run`` times a fresh run of the same command instead (minutes).

    .venv/bin/python bench/bench_profile.py                 # read profiles/smollm2-135m-cpu.json
    .venv/bin/python bench/bench_profile.py --run --quick   # time a --quick run now
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "profiles" / "smollm2-135m-cpu.json"
DEFAULT_CMD = ["profile", "--target", "smollm2", "--proposer", "ngram", "--proposer", "selfdraft:6",
               "--temperatures", "0,0.7", "--k-max", "6", "--threads", "1", "--no-progress"]


def report(profile: dict, source: str) -> None:
    run = profile.get("x-run", {})
    prov = profile["timing"]["provenance"]
    print(f"profile: {source}")
    print(f"  command: {prov.get('command')}")
    print(f"  device: {prov['device']['name']} ({prov.get('notes', '').split(';')[0]})")
    print(f"  wall time: {run.get('wall_s', float('nan')):.0f} s  phases: {run.get('phases_s')}")
    acc_run = run.get("acceptance_run")
    if acc_run:  # a merged profile: acceptance came from another run
        print(f"  acceptance merged from a run of {acc_run.get('wall_s', float('nan')):.0f} s, "
              f"phases: {acc_run.get('phases_s')}")
    tf = profile["timing"]["target_forward"]
    cells = sum(1 for a in tf["median"] for b in a for c in b if c is not None)
    print(f"  target_forward cells: {cells}, acceptance entries: {len(profile.get('acceptance', {}))}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="store_true", help="time a fresh run instead of reading the shipped profile")
    ap.add_argument("--quick", action="store_true", help="with --run: the --quick profile")
    args = ap.parse_args()
    if not args.run:
        if not SHIPPED.exists():
            print(f"{SHIPPED.relative_to(ROOT)} not found; use --run", file=sys.stderr)
            return 2
        report(json.loads(SHIPPED.read_text()), str(SHIPPED.relative_to(ROOT)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        cmd = [str(ROOT / ".venv" / "bin" / "specplan"), *DEFAULT_CMD, *(["--quick"] if args.quick else []), "-o", str(out)]
        t0 = time.perf_counter()
        code = subprocess.run(cmd, cwd=ROOT).returncode
        wall = time.perf_counter() - t0
        if code != 0:
            print(f"profile run failed with exit code {code}", file=sys.stderr)
            return code
        print(f"measured wall time of `specplan {' '.join(DEFAULT_CMD)}{' --quick' if args.quick else ''}`: {wall:.0f} s")
        report(json.loads(out.read_text()), "fresh run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
