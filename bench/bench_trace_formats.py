"""How long each trace reader takes on a file of N rows (default 200,000; BurstGPT's first file
has ~1.4 million, a Mooncake trace ~23,000).

Run: PYTHONPATH=$PWD .venv/bin/python bench/bench_trace_formats.py [N]
The files are synthetic (written here, in each documented layout, with made-up lengths and
hash ids); the times are measured on this machine, median of 3 reads after a warm-up.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.contracts.trace import read_trace  # noqa: E402
from sim.contracts.trace_config import TraceColumns, TraceConfig  # noqa: E402


def _files(folder: Path, n: int) -> dict[str, TraceConfig]:
    rng = np.random.default_rng(0)
    ms = np.cumsum(rng.integers(0, 400, n))
    p = rng.integers(1, 8000, n)
    o = rng.integers(0, 1000, n)
    rows = list(zip(ms.tolist(), p.tolist(), o.tolist(), strict=True))
    out: dict[str, TraceConfig] = {}

    def write(name: str, text: str, **kw: object) -> None:
        (folder / name).write_text(text, encoding="utf-8")
        out[name] = TraceConfig(path=str(folder / name), **kw)  # type: ignore[arg-type]

    base = np.datetime64("2024-05-10T00:00:00", "ms")
    write("azure2024.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"{str(base + t).replace('T', ' ')}000+00:00,{a},{b}\n" for t, a, b in rows), format="azure")
    write("burstgpt.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + "".join(
        f"{t / 1000},ChatGPT,{a},{b},{a + b},Conversation log\n" for t, a, b in rows), format="burstgpt")
    write("mooncake.jsonl", "".join(json.dumps({"timestamp": t, "input_length": a, "output_length": b,
                                                "hash_ids": list(range(a // 512 + 1))}) + "\n"
                                    for t, a, b in rows), format="mooncake")
    write("generic.csv", "t,p,o\n" + "".join(f"{t},{a},{b}\n" for t, a, b in rows), format="csv",
          columns=TraceColumns("t", "p", "o", timestamp_unit="ms"))
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    with tempfile.TemporaryDirectory() as d:
        for name, cfg in _files(Path(d), n).items():
            read_trace(cfg)
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                tr = read_trace(cfg)
                times.append(time.perf_counter() - t0)
            size = Path(cfg.path).stat().st_size / 2**20
            print(f"  {name:15s} {len(tr):9,d} rows {size:7.1f} MiB  {statistics.median(times) * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
