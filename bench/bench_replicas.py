"""CPU per engine iteration of ``specplan simulate`` as a whole process, 1 replica against 2.

Why: a fleet of several replicas should cost the simulator what its engine iterations cost, not
an event loop's overhead per arrival or per step (bar of issue #30: 2 replicas within 1.3x the
CPU per iteration of 1). The workload is the Azure LLM 2023 conversation trace's first hour at its
own rate on ``profiles/llama-3.1-8b-h100-vllm.json``; each measurement is one ``specplan simulate``
child process (imports, trace, kernels from the disk cache, records and Parquet included), its CPU
time (user + system, from ``getrusage``) divided by the engine iterations in its ``steps.parquet``.

Run: ``.venv/bin/python bench/bench_replicas.py [--tree OTHER_CHECKOUT] [--repeat N]``
(``--tree`` measures another checkout the same way, interleaved; its own ``.venv``).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = (REPO / ".." / "shared" / "traces" / "azure_llm_2023_conv.csv").resolve()
PROFILE = REPO / "profiles" / "llama-3.1-8b-h100-vllm.json"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenario_text import bench_scenario  # noqa: E402


def scenario(replicas: int, routing: str) -> str:
    """The trace's first hour at its own rate, baseline vs EAGLE-3 k = 3, on ``replicas``."""
    return bench_scenario(
        "bench-replicas", run={"duration_s": 3600, "warmup_s": 0, "seeds": [1]},
        workload={"arrival": "trace", "trace": {"path": str(TRACE)}, "client_timeout_s": 120},
        segment={"name": "chat", "share": 1.0, "acceptance": {"task": "chat", "language": "any"}, "temperature": 0.0},
        slo={"ttft_ms": 2000, "tpot_ms": 60, "percentile": 95},
        fleet={"profile": str(PROFILE), "replicas": replicas, "routing": routing, "price_per_gpu_hour": 4.0},
        candidates=[{"name": "eagle3-k3", "proposer": "eagle3", "k": 3}])


def once(tree: Path, replicas: int, routing: str, work: Path) -> tuple[float, int]:
    """CPU seconds of one ``specplan simulate`` process and the engine iterations it simulated."""
    name = f"r{replicas}-{routing}-{tree.name}"
    toml = work / f"{name}.toml"
    toml.write_text(scenario(replicas, routing))
    out = work / name
    py = tree / ".venv" / "bin" / "python"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([str(py if py.exists() else sys.executable), "-m", "cli.main", "simulate", str(toml),
                    "--quiet", "--max-seeds", "1", "--out", str(out)],
                   cwd=tree, check=True, capture_output=True, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    import polars as pl

    steps = pl.scan_parquet(out / "steps.parquet").select(pl.len()).collect().item()
    return cpu, int(steps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, help="another checkout to measure the same way")
    ap.add_argument("--repeat", type=int, default=1, help="measurements per case (the minimum is kept)")
    args = ap.parse_args()
    trees = [("this tree", REPO)] + ([("other tree", args.tree.resolve())] if args.tree else [])
    cases = ((1, "least_outstanding"), (2, "least_outstanding"), (2, "round_robin"))
    with tempfile.TemporaryDirectory() as tmp:
        for name, tree in trees:
            per: dict[tuple[int, str], float] = {}
            for replicas, routing in cases:
                runs = [once(tree, replicas, routing, Path(tmp)) for _ in range(args.repeat)]
                cpu, steps = min(runs)
                per[(replicas, routing)] = cpu / steps
                print(f"{name:10s} {replicas} replica(s) {routing:17s}: {cpu:6.2f} CPU s, {steps:8d} "
                      f"iterations, {1e6 * cpu / steps:5.1f} us/iteration", flush=True)
            one = per[cases[0]]
            print(f"{name:10s} ratio 2/1 replicas: least_outstanding {per[cases[1]] / one:.2f}x, "
                  f"round_robin {per[cases[2]] / one:.2f}x (bar 1.3x)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
