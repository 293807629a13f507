"""Speed-up against batch: a closed-loop scenario at N clients, each candidate against the
baseline, and what the clients' step-by-step engine costs.

    .venv/bin/python bench/concurrency_sweep.py [SCENARIO] [--n 1,8,32,64,128] [--seeds 1]

For each N (``workload.concurrency``): output tokens per second of each candidate and its ratio
to the baseline (the speed-up benchmark papers report at batch N; at N = 1 it is the latency
speed-up), the TPOT ratio, the mean decode batch, and the CPU seconds and steps of each run.
The cost line compares the clients' engine (the fleet kernel with the clients in it,
``client_kernels``; SimPy's one event per step where it cannot run them) with the open-loop
engine (steps between events in one compiled call) on the same profile, at a
Poisson rate giving about the same mean batch: a speed number, so it lives here, not in tests.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO / "scenarios" / "concurrency-eagle3-h100.toml"


def _run(sc, prof, cand: str, seed: int):
    from sim.results.simulation import simulate_once

    t0 = time.process_time()
    res = simulate_once(sc, prof, cand, seed)
    return res, time.process_time() - t0


def _row(res, t0: float, t1: float) -> dict:
    """Steady state: steps that start while the clients send, after warm-up (``t0``..``t1``);
    a step emits one token per decoding sequence plus its accepted drafts (a prefill's first
    token, one per request, is left out: under 1 % of the tokens here)."""
    s = res.summary.filter(pl.col("segment") == "all").row(0, named=True)
    steps = res.steps.filter(pl.col("t_start_s").is_between(t0, t1, closed="left"))
    dur = float(steps["duration_s"].sum())
    emitted = float((steps["decode_seqs"] + steps["accepted_tokens"]).sum())
    batch = float((steps["decode_seqs"] * steps["duration_s"]).sum()) / dur
    return {"tok_s": emitted / dur, "window_tok_s": s["output_throughput"], "tpot": s["tpot_ms_mean"],
            "batch": batch, "steps": res.steps.height}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?", default=str(DEFAULT))
    ap.add_argument("--n", default="1,8,32,64,128", help="client counts, comma-separated")
    ap.add_argument("--seeds", default="1", help="seeds, comma-separated (output averaged)")
    ap.add_argument("--no-cost", action="store_true", help="skip the open-loop cost comparison")
    args = ap.parse_args()
    from sim.contracts.profile import load_profile
    from sim.contracts.scenario import load_scenario

    base = load_scenario(args.scenario)
    prof = load_profile(base.profile_path)
    seeds = [int(x) for x in args.seeds.split(",")]
    names = base.candidate_names
    ref = base.baseline.name
    print(f"{base.name}: {base.description}")
    print(f"profile {base.profile_path.name}; {base.run.duration_s:g} s of sending, warm-up "
          f"{base.run.warmup_s:g} s, seeds {seeds}; speed-up = output tok/s ÷ {ref}'s at the same N")
    print("out tok/s, batch: steady state (steps started after warm-up, before the clients stop); "
          "window tok/s: the summary's (measured window, drain included)")
    head = f"{'N':>5}  {'candidate':<16}{'out tok/s':>10}{'speed-up':>9}{'window tok/s':>13}{'TPOT ms':>9}" \
           f"{'TPOT ÷':>8}{'batch':>7}{'steps':>8}{'cpu s':>7}"
    print(head)
    print("-" * len(head))
    _ = _run(base, prof, ref, seeds[0])  # warm: imports, kernels
    per_step: list[float] = []
    for n in [int(x) for x in args.n.split(",")]:
        sc = base.with_overrides({"workload.concurrency": n})
        rows = {}
        for cand in names:
            acc = []
            for seed in seeds:
                res, cpu = _run(sc, prof, cand, seed)
                r = _row(res, sc.run.warmup_s, sc.run.duration_s)
                r["cpu"] = cpu
                acc.append(r)
                per_step.append(cpu / max(r["steps"], 1))
            rows[cand] = {k: sum(a[k] for a in acc) / len(acc) for k in acc[0]}
        b = rows[ref]
        for cand in names:
            r = rows[cand]
            print(f"{n:>5}  {cand:<16}{r['tok_s']:>10,.0f}{r['tok_s'] / b['tok_s']:>8.2f}x"
                  f"{r['window_tok_s']:>13,.0f}{r['tpot']:>9.2f}{r['tpot'] / b['tpot']:>8.2f}{r['batch']:>7.1f}"
                  f"{r['steps']:>8,.0f}{r['cpu']:>7.2f}")
    if not args.no_cost:
        _cost(base, prof, ref, seeds[0], per_step)


def _cost(base, prof, ref: str, seed: int, per_step: list[float]) -> None:
    """CPU per step of the clients' engine against the open-loop one at about the same batch."""
    sc = base.with_overrides({"workload.concurrency": 32})
    res, cpu = _run(sc, prof, ref, seed)
    r = _row(res, sc.run.warmup_s, sc.run.duration_s)
    done = res.requests.filter(pl.col("outcome") == "completed").height
    rate = done / float(res.requests["finish_s"].max())
    open_sc = base.with_overrides({"workload.arrival": "poisson", "workload.concurrency": None,
                                   "workload.think_time_s": None, "workload.rate": rate})
    _run(open_sc, prof, ref, seed)  # warm: the open-loop kernels
    res2, cpu2 = _run(open_sc, prof, ref, seed)
    r2 = _row(res2, sc.run.warmup_s, sc.run.duration_s)
    print(f"\ncost ({ref}, N = 32 clients vs Poisson at their rate {rate:.1f} req/s): clients "
          f"{1e6 * cpu / r['steps']:.0f} µs CPU per step (mean batch {r['batch']:.1f}, "
          f"{r['steps']:,} steps), open loop {1e6 * cpu2 / r2['steps']:.0f} µs per step (mean "
          f"batch {r2['batch']:.1f}, {r2['steps']:,} steps); whole simulate_once, frames included")


if __name__ == "__main__":
    main()
