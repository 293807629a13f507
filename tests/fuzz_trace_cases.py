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
    mutate_fields,
    to_toml,
)


def _trace_rows(rng: np.random.Generator) -> tuple[list[str], tuple[str, ...]]:
    """Azure rows, 2023's naive times or 2024's with a UTC offset, a few cells made hostile;
    the rows and the columns changed."""
    if rng.random() < 0.5:
        rows = [f"2023-11-16 18:15:{i:02d}.0,{40 + i},{5 + i % 7}" for i in range(40)]
    else:
        rows = [f"2024-05-10 00:00:{i:02d}.009930+00:00,{40 + i},{5 + i % 7}" for i in range(40)]
    nasty = ["99999999999999999999999", "-5", "1e308", "nan", "", "x", "0", str(2**63), "1" * 400]
    header = TRACE_HEADER.split(",")
    cols = []
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(len(rows)))
        parts = rows[i].split(",")
        j = int(rng.integers(3))
        if j == 0:
            parts[0] = str(rng.choice(["9999-12-31 23:59:59", "0001-01-01 00:00:00", "2023-13-45 99:99:99",
                                       "2023-11-16 18:15:00.0000000000000001", "", "2024-05-10 00:00:00+25:00",
                                       "2024-05-10 00:00:00Z", "2024-05-10 00:00:00.5-07:00",
                                       "2024-05-10T00:00:00+00:00", "2023-11-16 18:15:00.1234567890"]))
        else:
            parts[j] = str(rng.choice(nasty))
        rows[i] = ",".join(parts)
        cols.append(header[j])
    return rows, tuple(cols)


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
    _maybe_prefix_sharing(tree, rng)
    files["s.toml"] = to_toml(tree).encode()
    rows, fields = _trace_rows(rng)
    data = "\n".join([TRACE_HEADER, *rows]).encode() + b"\n"
    if rng.random() < 0.3:
        data, fields = byte_mutate(data, rng), ()
    if fields and w["trace"]["rate_scale"] != 1.0:  # an extreme scale may be what is refused
        fields = (*fields, "workload.trace.rate_scale")
    files["t.csv"] = data
    return Case("trace", ["simulate", "s.toml", "--quiet"], files, ("t.csv", "s.toml"), fields=fields)


def _maybe_prefix_sharing(tree: dict[str, Any], rng: np.random.Generator) -> None:
    """Prefix caching on a replayed trace, with a system prompt and documents at times: what
    reads a trace's hash_ids (or finds none) and the prompt lengths it must cover."""
    if rng.random() < 0.4:
        tree["fleet"]["engine"]["prefix_caching"] = True
        seg = tree["workload"]["segments"][0]
        if rng.random() < 0.5:
            seg["shared_prefix_tokens"] = int(rng.choice([0, 16, 64, 10**6]))
        if rng.random() < 0.3:
            seg["documents"] = {"count": int(rng.choice([1, 4, 1000])), "tokens": int(rng.choice([1, 16, 10**5]))}


_NASTY_CELLS = ["99999999999999999999999", "-5", "1e308", "nan", "", "x", "0", str(2**63), "1" * 400,
                "9" * 5000, "1.5", " 7 ", "\u00b9", "\x00"]
_HUGE = "__a number of 5,000 digits__"
_JSON_NASTY: list[Any] = [*NASTY_NUMBERS, *NASTY_OTHER, _HUGE, [1, "x"], [-1], [2**70]]
GENERIC_COLUMNS = {"timestamp": "sent_ms", "prompt_tokens": "prompt_n", "output_tokens": "output_n",
                   "timestamp_unit": "ms"}


def _csv_trace(rng: np.random.Generator, header: str, row: Any) -> tuple[bytes, tuple[str, ...]]:
    """Rows with hostile cells (the columns changed are returned), a short row or the rows
    reversed (then no one column is to blame: none returned)."""
    rows = [row(i) for i in range(30)]
    names = header.split(",")
    cols: list[str] | None = []
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(len(rows)))
        parts = rows[i].split(",")
        j = int(rng.integers(len(parts) + 1))
        if j == len(parts):
            parts = parts[: int(rng.integers(len(parts)))]  # a short (ragged) row
            cols = None
        else:
            parts[j] = str(rng.choice(_NASTY_CELLS))
            if cols is not None:
                cols.append(names[j])
        rows[i] = ",".join(parts)
    if rng.random() < 0.1:
        rows.reverse()  # unsorted
        cols = None
    return ("\n".join([header, *rows]) + "\n").encode(), tuple(cols or ())


def _jsonl_trace(rng: np.random.Generator, keys: tuple[str, ...], ids: str | None) -> tuple[bytes, tuple[str, ...]]:
    """JSON Lines rows (``ids``: the key of a hash_ids list per row), a few values made hostile
    or dropped; the keys changed (none when the rows were reversed)."""
    objs: list[dict[str, Any]] = [dict(zip(keys, (i * 250, 40 + i, 3 + i % 5), strict=True)) for i in range(30)]
    if ids:
        for i, o in enumerate(objs):
            o[ids] = [i % 4]  # prompts of 40-69 tokens: one (partial) 512-token block each
    changed: list[str] = []
    for _ in range(int(rng.integers(1, 4))):
        o = objs[int(rng.integers(len(objs)))]
        key = str(rng.choice([*keys, ids or "hash_ids"]))
        if rng.random() < 0.15:
            o.pop(key, None)
        else:
            o[key] = _JSON_NASTY[int(rng.integers(len(_JSON_NASTY)))]
        changed.append(key)
    if any(_HUGE in o.values() for o in objs):  # a line JSON cannot parse: no key is knowable
        changed = []
    # Python will not print an int of over 4,300 digits: the placeholder becomes one in the text
    lines = [json.dumps(o, allow_nan=True).replace(json.dumps(_HUGE), "9" * 5000) for o in objs]
    if rng.random() < 0.1:
        lines.reverse()
        changed = []
    return ("\n".join(lines) + "\n").encode(), tuple(changed)


def _trace_format_case(rng: np.random.Generator) -> Case:
    """A trace in one of the other formats (mooncake, burstgpt, vllm-bench, csv, jsonl),
    mutated; its format named in the scenario or left to detection; prefix caching on at times
    (reading mooncake's or a mapped hash_ids)."""
    files = _base_files()
    fmt = str(rng.choice(["mooncake", "burstgpt", "vllm-bench", "csv", "jsonl"]))
    ids = "blocks" if fmt == "jsonl" and rng.random() < 0.5 else None
    if fmt == "mooncake":
        data, fields = _jsonl_trace(rng, ("timestamp", "input_length", "output_length"), ids="hash_ids")
    elif fmt == "jsonl":
        data, fields = _jsonl_trace(rng, ("sent_ms", "prompt_n", "output_n"), ids=ids)
    elif fmt == "burstgpt":
        data, fields = _csv_trace(rng, "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
                                  lambda i: f"{i * 0.5},ChatGPT,{40 + i},{i % 4},{40 + i + i % 4},API log")
    elif fmt == "csv":
        data, fields = _csv_trace(rng, "sent_ms,prompt_n,output_n", lambda i: f"{i * 250},{40 + i},{3 + i % 5}")
    else:
        res, fields = mutate_fields(_vllm_result(rng), rng, int(rng.integers(1, 4)))
        data = _json_bytes(res)
    if rng.random() < 0.2:
        data, fields = byte_mutate(data, rng), ()
    trace: dict[str, Any] = {"path": "t.dat", "rate_scale": float(rng.choice([1.0, 1.0, 1e6, 1e-300]))}
    if fmt in ("csv", "jsonl") or rng.random() < 0.5:
        trace["format"] = fmt
    if fmt in ("csv", "jsonl"):
        trace["columns"] = dict(GENERIC_COLUMNS)
        if ids:
            trace["columns"].update(hash_ids=ids, hash_block_tokens=int(rng.choice([16, 512, 512])))
            if trace["columns"]["hash_block_tokens"] != 512:  # one id a row is then too few: refused naming ids
                fields = (*fields, ids) if fields else ()
    if fmt == "vllm-bench" and rng.random() < 0.5:
        trace["schedule_seed"] = int(rng.choice([0, 7, 2**40]))
    for key, usual in (("rate_scale", 1.0), ("schedule_seed", 0)):  # an extreme value may be what is refused
        if trace.get(key, usual) != usual:
            fields = (*fields, f"workload.trace.{key}") if fields else ()
    if rng.random() < 0.2:  # what is changed in the data and in the scenario (unknowable stays so)
        trace, changed = mutate_fields(trace, rng, 1)
        fields = (*fields, *(f"workload.trace.{f}" for f in changed)) if fields else ()
    tree = json.loads(json.dumps(BASE_SCENARIO))
    w = tree["workload"]
    w["arrival"] = "trace"
    del w["rate"]
    w["trace"] = trace
    for seg in w["segments"]:
        seg.pop("prompt_tokens")
        seg.pop("output_tokens")
    _maybe_prefix_sharing(tree, rng)
    files["s.toml"] = to_toml(tree).encode()
    files["t.dat"] = data
    names = ["t.dat", "s.toml"]
    raw = trace.get("path")
    if isinstance(raw, str) and raw != "t.dat" and "\x00" not in raw:  # a mutated path names the file it reached
        names.append(Path(raw).name[:40])
    return Case("trace_format", ["simulate", "s.toml", "--quiet"], files, tuple(n for n in names if n),
                fields=fields)


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
    res, fields = mutate_fields(_vllm_result(rng), rng, int(rng.integers(1, 4)))
    data = _json_bytes(res)
    if rng.random() < 0.3:
        data, fields = byte_mutate(data, rng), ()
    files["r.json"] = data
    argv = ["validate", "--scenario", "s.toml", "--vllm-results", "r.json", "--seeds", "0", "--out", "vout"]
    return Case("vllm", argv, files, ("r.json", "s.toml"), fields=fields)
