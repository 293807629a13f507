"""`specplan sweep SCENARIO --vary key=v1,v2 …`: a grid of what-ifs into one Parquet table.

Keys are ``with_overrides`` paths (``workload.rate``, ``workload.burstiness``,
``candidates[NAME].k``, ``candidates[NAME].policy``, ``fleet.replicas``,
``fleet.engine.memory_utilization``, …) plus ``seed`` (one replication per value). Locally the
cells run on a Dask LocalCluster of processes (every core by default); ``--cluster
tcp://HOST:PORT`` sends them to a running Dask scheduler instead; ``--engine processes`` uses a
plain process pool. Finished cells are kept in ``OUT.cells/``; ``--resume`` skips them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sim.contracts.errors import SpecplanError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML")
    parser.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2,…",
                        help="a field and its values (repeatable; the grid is their product)")
    parser.add_argument("--out", default="sweep.parquet", metavar="PATH",
                        help="Parquet table to write (default sweep.parquet)")
    parser.add_argument("--engine", default="dask", metavar="NAME",
                        help="dask (default), processes or serial")
    parser.add_argument("--cluster", metavar="ADDRESS", help="Dask scheduler, e.g. tcp://host:8786")
    parser.add_argument("--workers", metavar="N", help="local workers (default: every core)")
    parser.add_argument("--resume", action="store_true", help="keep finished cells of OUT.cells/")
    parser.add_argument("--profile", metavar="PATH", help="profile instead of the scenario's fleet.profile")
    parser.add_argument("--segments", action="store_true",
                        help="keep per-segment rows too (default: segment 'all' only)")


def run(args: argparse.Namespace) -> int:
    from sim.contracts.scenario import load_scenario
    from sim.decisions.sweep import ENGINES, sweep
    from sim.decisions.sweep_grid import describe_grid, parse_vary
    from sim.results.runner import resolve_profile

    if not args.vary:
        raise SpecplanError("--vary: give at least one, e.g. --vary workload.rate=1,2,4")
    if args.engine not in ENGINES:
        raise SpecplanError(f"--engine: must be one of {', '.join(ENGINES)}, got {args.engine!r}")
    if args.cluster and args.engine != "dask":
        raise SpecplanError("--cluster: only with --engine dask")
    workers = None
    if args.workers is not None:
        try:
            workers = int(args.workers)
        except ValueError:
            raise SpecplanError(f"--workers: expected a whole number, got {args.workers!r}") from None
        if workers < 1:
            raise SpecplanError(f"--workers: must be ≥ 1, got {workers}")
    varies = [parse_vary(v) for v in args.vary]
    scenario = load_scenario(args.scenario)
    profile = resolve_profile(scenario, args.profile)
    out = Path(args.out)
    where = args.cluster or (f"{args.engine}, {workers or 'all'} workers" if args.engine != "serial"
                             else "serial")
    print(f"sweep {scenario.name}: {describe_grid(varies)} ({where})", flush=True)
    t0 = time.perf_counter()
    res = sweep(scenario, varies, out, profile=profile, engine=args.engine, workers=workers,
                cluster=args.cluster, resume=args.resume, all_segments=args.segments,
                progress=sys.stderr.isatty())
    dt = time.perf_counter() - t0
    for line in sweep_lines(res.frame, [v.key for v in varies]):
        print(line)
    print(f"{res.computed} computed, {res.skipped} already done in {dt:.1f} s; "
          f"{res.frame.height} rows → {out}")
    return 0


def sweep_lines(frame, keys: list[str], most: int = 12) -> list[str]:  # noqa: ANN001 - pl.DataFrame
    """One line per grid point: the decision each cell carries (computed in the cell)."""
    if frame.is_empty() or "decision_headline" not in frame.columns:
        return []
    keys = [k for k in keys if k in frame.columns]
    points = frame.select([*keys, "decision_headline"]).unique(maintain_order=True)
    out = ["verdict per grid point (each cell decided over its own seeds; sim/decisions/decision.py):"]
    if "seed" in keys:
        out.append("  (seed is varied: each cell holds one seed, and one seed decides nothing; list "
                   "the seeds in run.seeds instead)")
    for row in points.iter_rows(named=True):
        where = ", ".join(f"{k}={row[k]}" for k in keys) or "the scenario"
        out.append(f"  {where}: {row['decision_headline']}")
    if len(out) > most + 1:
        out = [*out[: most + 1], f"  … {len(out) - most - 1} more grid points in the table"]
    return out
