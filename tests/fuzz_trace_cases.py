"""Fuzz case kinds for request traces (Azure CSV rows, and mooncake, burstgpt, vllm-bench,
csv, jsonl files, mutated; the format named or left to detection) and vLLM results files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tests.fuzz_inputs import (
    BASE_SCENARIO,
    NASTY_NUMBERS,
    NASTY_OTHER,
    TRACE_HEADER,
    Case,
    _base_files,
    _json_bytes,
    byte_mutate,
    mutate_tree,
    to_toml,
)


def _trace_rows(rng: np.random.Generator) -> list[str]:
    rows = [f"2023-11-16 18:15:{i:02d}.0,{40 + i},{5 + i % 7}" for i in range(40)]
    nasty = ["99999999999999999999999", "-5", "1e308", "nan", "", "x", "0", str(2**63), "1" * 400]
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(len(rows)))
        parts = rows[i].split(",")
        j = int(rng.integers(3))
        if j == 0:
            parts[0] = str(rng.choice(["9999-12-31 23:59:59", "0001-01-01 00:00:00", "2023-13-45 99:99:99",
                                       "2023-11-16 18:15:00.0000000000000001", ""]))
        else:
            parts[j] = str(rng.choice(nasty))
        rows[i] = ",".join(parts)
    return rows


def _trace_case(rng: np.random.Generator) -> Case:
    files = _base_files()
    tree = json.loads(json.dumps(BASE_SCENARIO))
    w = tree["workload"]
    w["arrival"] = "trace"
    del w["rate"]
    w["trace"] = {"path": "t.csv", "rate_scale": float(rng.choice([1.0, 1.0, 1e308, 1e-300, 1e6]))}
    for seg in w["segments"]:
        seg.pop("prompt_tokens")
        seg.pop("output_tokens")
    files["s.toml"] = to_toml(tree).encode()
    data = "\n".join([TRACE_HEADER, *_trace_rows(rng)]).encode() + b"\n"
    if rng.random() < 0.3:
        data = byte_mutate(data, rng)
    files["t.csv"] = data
    return Case("trace", ["simulate", "s.toml", "--quiet"], files, ("t.csv", "s.toml"))


_NASTY_CELLS = ["99999999999999999999999", "-5", "1e308", "nan", "", "x", "0", str(2**63), "1" * 400,
                "9" * 5000, "1.5", " 7 ", "\u00b9", "\x00"]
_HUGE = "__a number of 5,000 digits__"
_JSON_NASTY: list[Any] = [*NASTY_NUMBERS, *NASTY_OTHER, _HUGE, [1, "x"], [-1], [2**70]]
GENERIC_COLUMNS = {"timestamp": "t", "prompt_tokens": "p", "output_tokens": "o", "timestamp_unit": "ms"}


def _csv_trace(rng: np.random.Generator, header: str, row: Any) -> bytes:
    rows = [row(i) for i in range(30)]
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(len(rows)))
        parts = rows[i].split(",")
        j = int(rng.integers(len(parts) + 1))
        if j == len(parts):
            parts = parts[: int(rng.integers(len(parts)))]  # a short (ragged) row
        else:
            parts[j] = str(rng.choice(_NASTY_CELLS))
        rows[i] = ",".join(parts)
    if rng.random() < 0.1:
        rows.reverse()  # unsorted
    return ("\n".join([header, *rows]) + "\n").encode()


def _jsonl_trace(rng: np.random.Generator, keys: tuple[str, ...], ids: bool) -> bytes:
    objs: list[dict[str, Any]] = [dict(zip(keys, (i * 250, 40 + i, 3 + i % 5), strict=True)) for i in range(30)]
    if ids:
        for i, o in enumerate(objs):
            o["hash_ids"] = [i % 4]  # prompts of 40-69 tokens: one (partial) 512-token block each
    for _ in range(int(rng.integers(1, 4))):
        o = objs[int(rng.integers(len(objs)))]
        key = str(rng.choice([*keys, "hash_ids"]))
        if rng.random() < 0.15:
            o.pop(key, None)
        else:
            o[key] = _JSON_NASTY[int(rng.integers(len(_JSON_NASTY)))]
    # Python will not print an int of over 4,300 digits: the placeholder becomes one in the text
    lines = [json.dumps(o, allow_nan=True).replace(json.dumps(_HUGE), "9" * 5000) for o in objs]
    if rng.random() < 0.1:
        lines.reverse()
    return ("\n".join(lines) + "\n").encode()


def _trace_format_case(rng: np.random.Generator) -> Case:
    """A trace in one of the other formats (mooncake, burstgpt, vllm-bench, csv, jsonl),
    mutated; its format named in the scenario or left to detection."""
    files = _base_files()
    fmt = str(rng.choice(["mooncake", "burstgpt", "vllm-bench", "csv", "jsonl"]))
    if fmt == "mooncake":
        data = _jsonl_trace(rng, ("timestamp", "input_length", "output_length"), ids=True)
    elif fmt == "jsonl":
        data = _jsonl_trace(rng, ("t", "p", "o"), ids=False)
    elif fmt == "burstgpt":
        data = _csv_trace(rng, "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
                          lambda i: f"{i * 0.5},ChatGPT,{40 + i},{i % 4},{40 + i + i % 4},API log")
    elif fmt == "csv":
        data = _csv_trace(rng, "t,p,o", lambda i: f"{i * 250},{40 + i},{3 + i % 5}")
    else:
        data = _json_bytes(mutate_tree(_vllm_result(rng), rng, int(rng.integers(1, 4))))
    if rng.random() < 0.2:
        data = byte_mutate(data, rng)
    trace: dict[str, Any] = {"path": "t.dat", "rate_scale": float(rng.choice([1.0, 1.0, 1e6, 1e-300]))}
    if fmt in ("csv", "jsonl") or rng.random() < 0.5:
        trace["format"] = fmt
    if fmt in ("csv", "jsonl"):
        trace["columns"] = dict(GENERIC_COLUMNS)
    if fmt == "vllm-bench" and rng.random() < 0.5:
        trace["schedule_seed"] = int(rng.choice([0, 7, 2**40]))
    if rng.random() < 0.2:
        trace = mutate_tree(trace, rng, 1)
    tree = json.loads(json.dumps(BASE_SCENARIO))
    w = tree["workload"]
    w["arrival"] = "trace"
    del w["rate"]
    w["trace"] = trace
    for seg in w["segments"]:
        seg.pop("prompt_tokens")
        seg.pop("output_tokens")
    files["s.toml"] = to_toml(tree).encode()
    files["t.dat"] = data
    names = ["t.dat", "s.toml"]
    raw = trace.get("path")
    if isinstance(raw, str) and raw != "t.dat" and "\x00" not in raw:  # a mutated path names the file it reached
        names.append(Path(raw).name[:40])
    return Case("trace_format", ["simulate", "s.toml", "--quiet"], files, tuple(n for n in names if n))


def _vllm_result(rng: np.random.Generator) -> dict[str, Any]:
    n = 20
    return {
        "date": "20250101-000000", "backend": "vllm", "model_id": "x", "tokenizer_id": "x",
        "num_prompts": n, "request_rate": 1.0, "burstiness": 1.0, "max_concurrency": None,
        "duration": 20.0, "completed": n,
        "input_lens": [40] * n, "output_lens": [10] * n,
        "ttfts": [0.05] * n, "itls": [[0.01] * 9 for _ in range(n)],
        "generated_texts": [""] * n, "errors": [""] * n,
    }


def _vllm_case(rng: np.random.Generator) -> Case:
    files = _base_files()
    res = mutate_tree(_vllm_result(rng), rng, int(rng.integers(1, 4)))
    data = _json_bytes(res)
    if rng.random() < 0.3:
        data = byte_mutate(data, rng)
    files["r.json"] = data
    argv = ["validate", "--scenario", "s.toml", "--vllm-results", "r.json", "--seeds", "0", "--out", "vout"]
    return Case("vllm", argv, files, ("r.json", "s.toml"))
