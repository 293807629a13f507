"""`specplan breakeven`'s speed-up against a single-user simulation of the same profile and
segment: the check behind issue 41's "break-even equals the simulator", on a real profile.

    .venv/bin/python bench/breakeven_vs_simulate.py [PROFILE] [--proposer ngram] [--k 5] [--pooled]

For each temperature-0 segment named below: the table's speed-up at batch 1 (context = prompt +
half the output) and the simulator's, as plain over speculative seconds per committed token over
the decode-only steps of one replica serving one request at a time (``max_num_seqs = 1``, a queue
that never empties, 400 requests of 448 + 128 tokens). ``--pooled`` drops the profile's
per-request acceptance rows first, so every simulated request draws the pooled rates the table
prices: what is left is the mix of steps. Without it, the spread across requests (each simulated
request draws one measured request's rates) shows too: the table does not model it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEGMENTS = (("summarization", "en"), ("translation", "sv"), ("support", "sv"), ("code", "en"), ("creative", "de"))
PROMPT, OUTPUT, REQUESTS = 448, 128, 400


def main() -> None:
    import polars as pl

    from sim.contracts.profile import load_profile
    from sim.contracts.profile_acceptance import AcceptanceKey
    from sim.contracts.scenario import load_scenario
    from sim.decisions.breakeven import breakeven_from_profile
    from sim.results.simulation import simulate_once
    from tests.helpers import scenario_toml, segment

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", nargs="?", default=str(REPO / "profiles" / "smollm2-135m-cpu.json"))
    ap.add_argument("--proposer", default="ngram")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--pooled", action="store_true", help="drop per-request acceptance rows first")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    path = Path(args.profile).resolve()
    if args.pooled:
        doc = json.loads(path.read_text(encoding="utf-8"))
        for entry in doc["acceptance"].values():
            for seg in entry["segments"]:
                seg["per_request"] = []
        path = tmp / "pooled.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
    profile = load_profile(path)
    print(f"profile {profile.name}{' (per-request rows dropped)' if args.pooled else ''}, {args.proposer} "
          f"k={args.k}, batch 1, {REQUESTS} requests of {PROMPT} + {OUTPUT} tokens")
    for task, lang in SEGMENTS:
        text = scenario_toml(
            "single-user", run={"duration_s": 10, "warmup_s": 0, "seeds": [1]},
            workload={"arrival": "poisson", "rate": REQUESTS / 10},
            segments=[segment(prompt=PROMPT, output=OUTPUT, task=task, language=lang)],
            fleet={"profile": str(path), "replicas": 1}, engine={"max_num_seqs": 1},
            candidates=[{"name": "baseline", "speculation": "off"},
                        {"name": "spec", "proposer": args.proposer, "k": args.k}])
        (tmp / "s.toml").write_text(text, encoding="utf-8")
        scenario = load_scenario(tmp / "s.toml")

        def s_per_token(cand: str, scenario=scenario) -> tuple[float, int]:
            steps = simulate_once(scenario, profile, cand, 1).steps.filter(
                (pl.col("prefill_tokens") == 0) & (pl.col("decode_seqs") == 1))
            return steps["duration_s"].sum() / (steps["decode_seqs"].sum() + steps["accepted_tokens"].sum()), len(steps)

        plain, _ = s_per_token("baseline")
        spec, n = s_per_token("spec")
        table = breakeven_from_profile(profile, args.proposer, segment=AcceptanceKey(task, lang, 0.0),
                                       context=PROMPT + OUTPUT / 2).rows[args.k - 1].speedup
        sim = plain / spec
        print(f"  {task}:{lang}:0  breakeven {table:.3f}x  simulate {sim:.3f}x  "
              f"({table / sim - 1:+.1%}; {n} decode steps)")


if __name__ == "__main__":
    main()
