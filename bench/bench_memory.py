"""Peak resident memory of ``specplan simulate`` as a whole process, on two hostile or large loads.

Why: issue 39 item 5 (memory bounded by design): a run's records must grow with the largest
single candidate × seed run, not with candidates × seeds. Cases:

- ``1e6 req/s``: ``scenarios/default.toml`` (four candidates, seeds 1-3, the answer's added
  seeds included) at 10^6 req/s for 1 simulated second (warm-up 0): ~10^6 requests per seed,
  nearly all refused by the admission queue. Target: peak RSS <= 2 GB.
- ``Azure hour``: the Azure LLM 2023 conversation trace's first hour at its own rate on
  ``profiles/llama-3.1-8b-h100-vllm.json``, baseline and eagle3-k3 (``bench_replicas.py``'s
  scenario), on 1 and 2 replicas, one seed (``--max-seeds 1``), with ``--out`` (Parquet
  written). Target: <= 502 MiB on one
  replica (Vidur's peak on the same hour, as issue 39 reports it; not measured here).

Each measurement is one child process; its peak RSS is the kernel's ``ru_maxrss`` for that child
alone (``os.wait4``). Run: ``.venv/bin/python bench/bench_memory.py [--tree OTHER_CHECKOUT]
[--repeat N] [--only 1e6|azure]`` (``--tree`` measures another checkout the same way, with its
own ``.venv`` when it has one).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from bench_replicas import PROFILE, SCENARIO, TRACE  # noqa: E402


def hostile_scenario(tree: Path) -> str:
    """``tree``'s default scenario at 10^6 req/s for one second, its profile path made absolute."""
    text = (tree / "scenarios" / "default.toml").read_text(encoding="utf-8")
    subs = ((r"(?m)^duration_s = .*$", "duration_s = 1"), (r"(?m)^warmup_s = .*$", "warmup_s = 0"),
            (r"(?m)^rate = .*$", "rate = 1e6"),
            (r'(?m)^profile = ".*"$', f'profile = "{tree / "profiles" / "smollm2-135m-cpu.json"}"'))
    for pattern, repl in subs:
        text, n = re.subn(pattern, repl, text, count=1)
        if n != 1:
            raise SystemExit(f"default.toml has no line matching {pattern!r}")
    return text


def peak(tree: Path, toml: Path, out: Path | None) -> tuple[float, float, int, str]:
    """Peak RSS (MiB) and wall seconds of one ``specplan simulate`` child, its exit code and
    the last line of its stderr."""
    py = tree / ".venv" / "bin" / "python"
    cmd = [str(py if py.exists() else sys.executable), "-m", "cli.main", "simulate", str(toml), "--quiet"]
    if out is not None:  # the Azure hour: one seed, as bench_replicas.py runs it (and Vidur does)
        cmd += ["--max-seeds", "1", "--out", str(out)]
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, cwd=tree, stdout=subprocess.DEVNULL, stderr=err,
                                 env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        err.seek(0)
        lines = err.read().decode("utf-8", "replace").strip().splitlines()
    return usage.ru_maxrss / 1024, wall, child.returncode, (lines[-1][:200] if lines else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, help="another checkout to measure the same way")
    ap.add_argument("--repeat", type=int, default=1, help="measurements per case (each printed)")
    ap.add_argument("--only", choices=("1e6", "azure"), help="one case only")
    args = ap.parse_args()
    trees = [("this tree", REPO)] + ([("other tree", args.tree.resolve())] if args.tree else [])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, tree in trees:
            cases = []
            if args.only in (None, "1e6"):
                toml = work / f"hostile-{len(cases)}-{tree.name}.toml"
                toml.write_text(hostile_scenario(tree), encoding="utf-8")
                cases.append(("1e6 req/s x 1 s, default.toml (target <= 2048 MiB)", toml, None))
            if args.only in (None, "azure"):
                if not TRACE.is_file():
                    print(f"skip Azure hour: trace not found at {TRACE} (shared/traces is not part of the repo)")
                else:
                    for replicas in (1, 2):
                        toml = work / f"azure-r{replicas}-{tree.name}.toml"
                        toml.write_text(SCENARIO.format(trace=TRACE, profile=PROFILE, replicas=replicas,
                                                        routing="least_outstanding"), encoding="utf-8")
                        vidur = {1: 502, 2: 766}[replicas]
                        cases.append((f"Azure conv hour, {replicas} replica(s), --out (Vidur {vidur} MiB)",
                                      toml, work / f"out-r{replicas}-{tree.name}"))
            for label, toml, out in cases:
                for _ in range(args.repeat):
                    mib, wall, rc, last = peak(tree, toml, out)
                    tail = "" if rc == 0 else f"  exit {rc}: {last}"
                    print(f"{name:10s} {label:60s}: peak RSS {mib:7.1f} MiB, {wall:6.1f} s wall{tail}",
                          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
