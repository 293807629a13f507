"""Engine cost per step and per request-iteration, at small and at GPU-sized batches.

A *request-iteration* is one decoding request in one engine step (the steps frame's
``decode_seqs`` summed). Cases: a small replica (synthetic profile, mean batch ~10) and
Llama-3.1-8B on an H200 (the shipped profile imported from aiconfigurator-core, vLLM defaults
1024 seqs / 8192 tokens, mean batch 200-500). Timed: CPU seconds of ``Fleet.run`` (the engine:
scheduler, step timer, acceptance draws, SimPy), and of the whole ``simulate_once`` (frames and
summary too). A third GPU case runs the shared-system-prompt scenario at 20 req/s with prefix
caching on (many prefills of one prompt at once: hits, duplicates, evictions). Two closed-loop
cases run ``concurrency-eagle3-h100`` with 8 and 64 clients (arrivals made during the run). Medians of
``--repeats`` runs; the machine is shared, so compare trees in one run:

    .venv/bin/python bench/bench_engine.py --tree /path/to/old/checkout

runs every case in this tree and in the other one, interleaved, and prints the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TREE = Path(os.environ.get("SPECPLAN_BENCH_TREE", REPO))
"""The checkout whose scenarios and profiles a case reads (``--tree`` runs set it)."""

CASES = {
    # name: (scenario builder, candidate)
    "small-baseline": ("small", "baseline"),
    "small-ngram-k3": ("small", "ngram-k3"),
    # the adaptive policy switching at the small case's load (the fleet kernel since issue 40 item 3)
    "small-ngram-adaptive": ("small", "ngram-adaptive"),
    "gpu-baseline": ("gpu", "baseline"),
    "gpu-draft-1b-k3": ("gpu", "draft-1b-k3"),
    # prefix caching with many prefills of one shared prompt at once (duplicate blocks)
    "gpu-prefix-cache": ("prefix", "cache"),
    # closed-loop clients (scenarios/concurrency-eagle3-h100.toml, 60 s): arrivals made in the run
    "clients-8-eagle3": ("clients-8", "eagle3-k3"),
    "clients-64-baseline": ("clients-64", "baseline"),
}

def _small_toml() -> str:
    """A 16-sequence replica of a synthetic profile at 4 req/s (mean decode batch ~10-16)."""
    from tests.helpers import BASELINE, NGRAM_K3, scenario_toml, segment

    adaptive = {"name": "ngram-adaptive", "proposer": "ngram", "k": 3, "policy": "adaptive",
                "adaptive": {"on_below_batch": 8, "off_above_batch": 12, "window_s": 5.0}}
    return scenario_toml(
        "bench-small", run={"duration_s": 300, "warmup_s": 0, "seeds": [1]},
        workload={"arrival": "poisson", "rate": 4.0},
        segments=[segment(prompt={"dist": "uniform", "min": 200, "max": 400},
                          output={"dist": "uniform", "min": 100, "max": 300})],
        fleet={"profile": "p.json", "replicas": 1, "price_per_gpu_hour": 1.0},
        engine={"max_num_seqs": 16, "max_num_batched_tokens": 2048}, candidates=[BASELINE, NGRAM_K3, adaptive])


def _load(kind: str, tmp: Path):
    """The case's scenario and profile, each tree its own (a newer profile may carry keys an
    older tree refuses)."""
    from sim.contracts.profile import load_profile
    from sim.contracts.scenario import load_scenario
    from sim.contracts.synthetic import synthetic_profile_dict

    if kind == "small":
        (tmp / "p.json").write_text(json.dumps(synthetic_profile_dict()), encoding="utf-8")
        (tmp / "s.toml").write_text(_small_toml(), encoding="utf-8")
        sc = load_scenario(tmp / "s.toml")
    elif kind.startswith("clients-"):
        sc = load_scenario(TREE / "scenarios" / "concurrency-eagle3-h100.toml").with_overrides(
            {"workload.concurrency": int(kind.split("-")[1]), "run.duration_s": 60.0})
    elif kind == "prefix":
        sc = load_scenario(TREE / "scenarios" / "prefix-cache-system-prompt.toml").with_overrides(
            {"workload.rate": 20.0, "run.duration_s": 120.0, "run.warmup_s": 0.0})
    else:
        sc = load_scenario(TREE / "scenarios" / "gpu-chat-h200.toml").with_overrides(
            {"workload.rate": 30.0, "run.duration_s": 120.0, "run.warmup_s": 0.0})
    return sc, load_profile(sc.require_profile_path())


def measure(case: str, repeats: int) -> dict[str, float]:
    """Run one case ``repeats`` times in this process (the tree on sys.path)."""
    # the engine whose run is timed (sim/model/assembly.py builds it)
    import sim.results.simulation as simulation
    from sim.model.drivers.engine import Fleet

    kind, cand = CASES[case]
    engine_cpu: list[float] = []
    orig = Fleet.run

    def timed_run(self, reqs, *args, **kwargs):
        t0 = time.process_time()
        out = orig(self, reqs, *args, **kwargs)
        engine_cpu.append(time.process_time() - t0)
        return out

    Fleet.run = timed_run
    with tempfile.TemporaryDirectory() as td:
        sc, prof = _load(kind, Path(td))
        simulation.simulate_once(sc, prof, cand, 1)  # warm: imports, grid caches
        engine_cpu.clear()
        totals = []
        for _ in range(repeats):
            t0 = time.process_time()
            res = simulation.simulate_once(sc, prof, cand, 1)
            totals.append(time.process_time() - t0)
    Fleet.run = orig
    steps = res.steps.height
    req_iters = int(res.steps["decode_seqs"].sum())
    eng = statistics.median(engine_cpu)
    return {"steps": steps, "req_iters": req_iters, "mean_batch": req_iters / max(steps, 1),
            "engine_s": eng, "total_s": statistics.median(totals),
            "us_per_step": 1e6 * eng / max(steps, 1), "us_per_req_iter": 1e6 * eng / max(req_iters, 1)}


def _in_tree(tree: Path, case: str, repeats: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree), SPECPLAN_BENCH_TREE=str(tree))
    out = subprocess.run([sys.executable, __file__, "--one", case, "--repeats", str(repeats)],
                         capture_output=True, text=True, check=True, env=env, cwd=tree)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tree", type=Path, help="another checkout to compare with (run interleaved)")
    ap.add_argument("--rounds", type=int, default=2, help="with --tree: interleaved rounds")
    ap.add_argument("--cases", help=f"comma-separated cases (default: all of {', '.join(CASES)})")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        sys.path.insert(0, os.environ.get("PYTHONPATH", str(REPO)))
        print(json.dumps(measure(args.one, args.repeats)))
        return 0
    print("engine CPU per step / per request-iteration (medians; CPU time of Fleet.run)")
    cases = args.cases.split(",") if args.cases else list(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case {unknown[0]!r}; valid: {', '.join(CASES)}")
    for case in cases:
        if args.tree is None:
            m = _in_tree(REPO, case, args.repeats)
            print(f"{case:16s} batch {m['mean_batch']:6.1f}  {m['steps']:7d} steps  "
                  f"{m['us_per_step']:8.1f} us/step  {m['us_per_req_iter']:6.3f} us/req-iter  "
                  f"(engine {m['engine_s']:.2f} s, simulate_once {m['total_s']:.2f} s)")
            continue
        new, old = [], []
        for _ in range(args.rounds):
            new.append(_in_tree(REPO, case, args.repeats))
            old.append(_in_tree(args.tree.resolve(), case, args.repeats))
        n = statistics.median(x["us_per_req_iter"] for x in new)
        o = statistics.median(x["us_per_req_iter"] for x in old)
        ns = statistics.median(x["us_per_step"] for x in new)
        os_ = statistics.median(x["us_per_step"] for x in old)
        nt = statistics.median(x["total_s"] for x in new)
        ot = statistics.median(x["total_s"] for x in old)
        print(f"{case:16s} batch {new[0]['mean_batch']:6.1f}  per req-iter {o:6.3f} -> {n:6.3f} us "
              f"({o / n:4.1f}x)  per step {os_:8.1f} -> {ns:8.1f} us  simulate_once {ot:.2f} -> "
              f"{nt:.2f} s ({ot / nt:4.1f}x)  [same records: {new[0]['steps'] == old[0]['steps']}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
