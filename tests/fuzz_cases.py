"""Hostile inputs for every loader and the CLI, and the oracle they are judged by.

A seeded generator (``make_case(rng)``) mutates a small, fast scenario TOML, its profile JSON,
a trace CSV, a vLLM results file, CLI flags and ``--vary`` overrides: over-long paths, NUL
bytes, ``~user`` paths, deep nesting, integers beyond 64 bits, floats near 1e308/inf/nan,
absurd sizes, wrong types, missing files, directories as files, binary garbage.

Run and judged by tests/fuzz_oracle.py, for tests/cli/test_fuzz.py (in the suite) and bench/fuzz.py
(the long run).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sim.contracts.synthetic import synthetic_profile_dict

REPO = Path(__file__).resolve().parents[1]
# in-process runs are refused above this many simulated request-steps (SPECPLAN_MAX_REQUEST_STEPS)
FUZZ_MAX_REQUEST_STEPS = "50000"

BASE_SCENARIO: dict[str, Any] = {
    "name": "fuzz",
    "run": {"duration_s": 20, "warmup_s": 2, "seeds": [1], "drain": True},
    "workload": {
        "arrival": "poisson",
        "rate": 2.0,
        "client_timeout_s": 30,
        "segments": [
            {
                "name": "chat",
                "share": 1.0,
                "prompt_tokens": {"dist": "fixed", "value": 40},
                "output_tokens": {"dist": "lognormal", "median": 10, "sigma": 0.5, "min": 2, "max": 40},
                "acceptance": {"task": "chat", "language": "en"},
            }
        ],
    },
    "slo": {"ttft_ms": 1000, "tpot_ms": 100, "percentile": 95},
    "fleet": {
        "profile": "profile.json",
        "replicas": 1,
        "price_per_gpu_hour": 2.0,
        "engine": {"max_num_seqs": 8, "max_num_batched_tokens": 256, "block_size": 16,
                   "memory_utilization": 0.9},
        "admission": {"queue_limit": 100, "max_queue_time_s": 10},
    },
    "candidates": [
        {"name": "baseline", "speculation": "off"},
        {"name": "ngram-k3", "proposer": "ngram", "k": 3},
    ],
}

TRACE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"

NASTY_NUMBERS: list[Any] = [
    0, -1, 1, 2**63, 2**64 + 1, -(2**63) - 1, 10**18, 10**30, 10**400, 1e308, -1e308, 1.7976931348623157e308,
    5e-324, 1e-300, float("inf"), float("-inf"), float("nan"), 0.5, 1e9, 1e15, 3.5, -0.0,
]
NASTY_OTHER: list[Any] = [
    "", "x", "\u0000", "a" * 5000, True, False, [], {}, [1, 2], {"a": 1}, [[[[1]]]], "nan", "1e308",
    "../../../../etc/passwd", "~nosuchuser/p.json", "/dev/zero", ".",
]
NASTY_FLAGS = [
    "0", "-1", "1e308", "-1e308", "inf", "nan", "-nan", "99999999999999999999999999", "1e-320",
    "abc", "", " ", "1,,2", "\u00b9", "0x10", "1_000", "1..1000000000000", "3..1", "1,nan",
    "9" * 5000, "1,2,3", "0.5", "2", "50", "95", "\x00",
]


@dataclass
class Case:
    """One hostile invocation: files to write into a fresh folder, then ``specplan ARGV``."""

    kind: str
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    names: tuple[str, ...] = ()
    """Any of these must appear in a one-line error (the mutated file or flag)."""
    dirs: tuple[str, ...] = ()


# ------------------------------------------------------------------------- emitters


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(type(v))


def to_toml(d: dict[str, Any]) -> str:
    """TOML text for a nested dict: top-level tables as ``[section]``, everything else inline."""
    lines = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in d.items() if not isinstance(v, dict)]
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(f"\n[{json.dumps(k)}]")
            lines += [f"{json.dumps(kk)} = {_toml_value(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"


def _json_bytes(d: Any) -> bytes:
    return json.dumps(d, allow_nan=True).encode()


# ------------------------------------------------------------------------- mutation


def _leaves(d: Any, path: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(d, dict):
        for k, v in d.items():
            out += _leaves(v, (*path, k))
    elif isinstance(d, list) and d and all(isinstance(x, dict | list) for x in d):
        for i, v in enumerate(d):
            out += _leaves(v, (*path, i))
    else:
        out.append(path)
    return out


def _set(d: Any, path: tuple, value: Any) -> None:
    for p in path[:-1]:
        d = d[p]
    d[path[-1]] = value


def _nasty(rng: np.random.Generator) -> Any:
    pool = NASTY_NUMBERS if rng.random() < 0.7 else NASTY_OTHER
    return pool[int(rng.integers(len(pool)))]


def mutate_tree(tree: Any, rng: np.random.Generator, n: int) -> Any:
    tree = json.loads(json.dumps(tree))
    leaves = _leaves(tree)
    for _ in range(n):
        path = leaves[int(rng.integers(len(leaves)))]
        r = rng.random()
        if r < 0.08 and len(path) > 1:  # drop the field
            parent = tree
            for p in path[:-1]:
                parent = parent[p]
            if isinstance(parent, dict):
                parent.pop(path[-1], None)
                leaves = _leaves(tree)
            continue
        try:
            _set(tree, path, _nasty(rng))
        except (KeyError, IndexError, TypeError):
            pass
    return tree


def deep_nesting(kind: str, depth: int) -> bytes:
    if kind == "toml":
        return ("x = " + "[" * depth + "]" * depth + "\n").encode()
    return ("[" * depth + "]" * depth).encode() if depth % 2 else ('{"a":' * depth + "1" + "}" * depth).encode()


def byte_mutate(data: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(data)
    op = int(rng.integers(6))
    if op == 0 and b:  # truncate
        return bytes(b[: int(rng.integers(len(b)))])
    if op == 1:  # random bytes inserted
        at = int(rng.integers(len(b) + 1))
        return bytes(b[:at] + rng.integers(0, 256, int(rng.integers(1, 40)), dtype=np.uint8).tobytes() + b[at:])
    if op == 2:  # pure garbage
        return rng.integers(0, 256, int(rng.integers(0, 3000)), dtype=np.uint8).tobytes()
    if op == 3 and b:  # flip bytes
        for _ in range(int(rng.integers(1, 10))):
            b[int(rng.integers(len(b)))] = int(rng.integers(256))
        return bytes(b)
    if op == 4:  # NUL bytes
        at = int(rng.integers(len(b) + 1))
        return bytes(b[:at] + b"\x00" * int(rng.integers(1, 5)) + b[at:])
    return bytes(b) * int(rng.integers(2, 4))  # duplicated content


def _base_files() -> dict[str, bytes]:
    return {
        "s.toml": to_toml(BASE_SCENARIO).encode(),
        "profile.json": _json_bytes(synthetic_profile_dict()),
    }


def _bad_path(rng: np.random.Generator) -> str:
    choices = [
        "a" * int(rng.choice([300, 5000, 70000])) + ".toml",
        "dir/" * 2000 + "x.toml",
        "s\x00.toml",
        "~nosuchuser_fuzz/s.toml",
        "~/definitely-missing-fuzz.toml",
        "missing.toml",
        "adir",
        "/dev/zero",
        "/dev/null",
        "",
        "s.toml/child",
        "\udcff.toml",
    ]
    return choices[int(rng.integers(len(choices)))]


# ------------------------------------------------------------------------- case kinds


def _scenario_case(rng: np.random.Generator) -> Case:
    files = _base_files()
    tree = mutate_tree(BASE_SCENARIO, rng, int(rng.integers(1, 4)))
    files["s.toml"] = to_toml(tree).encode()
    if rng.random() < 0.25:
        files["s.toml"] = byte_mutate(files["s.toml"], rng)
    return Case("scenario", ["simulate", "s.toml", "--quiet", *_maybe_json(rng)], files, ("s.toml",))


def _maybe_json(rng: np.random.Generator) -> list[str]:
    return ["--json"] if rng.random() < 0.3 else []


def _profile_case(rng: np.random.Generator) -> Case:
    files = _base_files()
    prof = mutate_tree(synthetic_profile_dict(), rng, int(rng.integers(1, 4)))
    files["p.json"] = _json_bytes(prof)
    if rng.random() < 0.25:
        files["p.json"] = byte_mutate(files["p.json"], rng)
    if rng.random() < 0.5:
        argv = ["simulate", "s.toml", "--profile", "p.json", "--quiet"]
    else:
        argv = ["breakeven", "--profile", "p.json", "--proposer", "ngram", "--json"]
    return Case("profile", argv, files, ("p.json",))


def _nesting_case(rng: np.random.Generator) -> Case:
    files = _base_files()
    depth = int(rng.choice([50, 1000, 5000, 100000]))
    if rng.random() < 0.5:
        files["s.toml"] = deep_nesting("toml", depth)
        return Case("nesting", ["simulate", "s.toml", "--quiet"], files, ("s.toml",))
    files["p.json"] = deep_nesting("json", depth)
    return Case("nesting", ["breakeven", "--profile", "p.json", "--proposer", "ngram"], files, ("p.json",))


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
            o["hash_ids"] = list(range(i % 4))
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
    return Case("trace_format", ["simulate", "s.toml", "--quiet"], files, ("t.dat", "s.toml"))


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


def _flag_case(rng: np.random.Generator) -> Case:
    files = _base_files()
    v = NASTY_FLAGS[int(rng.integers(len(NASTY_FLAGS)))]
    cmd = int(rng.integers(4))
    if cmd == 0:
        flag = str(rng.choice(["--batch", "--context", "--k-max", "--alpha", "--T-ms", "--D-ms", "--V-ms",
                               "--H-ms", "--k"]))
        base = ["breakeven", "--alpha", "0.7", "--T-ms", "10", "--D-ms", "1", "--V-ms", "12"]
        if flag in ("--batch", "--context", "--k-max"):
            base = ["breakeven", "--profile", "profile.json", "--proposer", "ngram"]
        argv = [*base, flag, v]
    elif cmd == 1:
        flag = "--seeds"
        argv = ["simulate", "s.toml", "--quiet", "--seeds", v]
    elif cmd == 2:
        flag = str(rng.choice(["--target-rate", "--duration", "--rel-tol", "--max-evals", "--max-loss",
                               "--percentile"]))
        argv = ["capacity", "s.toml", "--candidates", "baseline", "--max-evals", "2", "--duration", "5", flag, v]
    else:
        flag = "--vary"
        key = str(rng.choice(["workload.rate", "run.duration_s", "fleet.replicas", "run.seeds",
                              "fleet.engine.max_num_seqs", "candidates[ngram-k3].k", "nosuch.key",
                              "workload.segments[chat].share", "seed"]))
        argv = ["sweep", "s.toml", "--engine", "serial", "--out", "o.parquet", "--vary", f"{key}={v}"]
    return Case("flag", argv, files, (flag, "--vary", "s.toml"))


def _path_case(rng: np.random.Generator) -> Case:
    files = _base_files()
    bad = _bad_path(rng)
    which = int(rng.integers(4))
    if which == 0:
        argv, names = ["simulate", bad, "--quiet"], ("scenario",)
    elif which == 1:
        argv, names = ["simulate", "s.toml", "--quiet", "--profile", bad], ("profile",)
    elif which == 2:
        argv, names = ["breakeven", "--profile", bad, "--proposer", "ngram"], ("profile",)
    else:
        tree = json.loads(json.dumps(BASE_SCENARIO))
        tree["fleet"]["profile"] = bad
        files["s.toml"] = to_toml(tree).encode()
        argv, names = ["simulate", "s.toml", "--quiet"], ("s.toml", "profile")
    if bad and "\x00" not in bad and "\udcff" not in bad:
        names = (*names, bad[:40])
    return Case("path", argv, files, names, dirs=("adir",))


def _size_case(rng: np.random.Generator) -> Case:
    files = _base_files()
    tree = json.loads(json.dumps(BASE_SCENARIO))
    field_, value = [
        (("fleet", "replicas"), 10**18), (("fleet", "replicas"), 10**6), (("run", "duration_s"), 1e12),
        (("run", "duration_s"), 1e308), (("workload", "rate"), 1e9), (("workload", "rate"), 1e300),
        (("run", "seeds"), list(range(100000))), (("fleet", "engine", "max_num_seqs"), 10**12),
        (("fleet", "engine", "max_num_batched_tokens"), 10**15), (("fleet", "engine", "block_size"), 10**9),
        (("candidates",), [{"name": f"c{i}", "speculation": "off"} for i in range(5000)]),
    ][int(rng.integers(11))]
    _set(tree, field_, value)
    files["s.toml"] = to_toml(tree).encode()
    return Case("size", ["simulate", "s.toml", "--quiet"], files, ("s.toml",))


KINDS = {
    "scenario": (_scenario_case, 0.35), "profile": (_profile_case, 0.2), "nesting": (_nesting_case, 0.04),
    "trace": (_trace_case, 0.08), "trace_format": (_trace_format_case, 0.1), "vllm": (_vllm_case, 0.06),
    "flag": (_flag_case, 0.1), "path": (_path_case, 0.08), "size": (_size_case, 0.05),
}


def make_case(rng: np.random.Generator) -> Case:
    names = list(KINDS)
    p = np.array([KINDS[k][1] for k in names])
    kind = names[int(rng.choice(len(names), p=p / p.sum()))]
    return KINDS[kind][0](rng)


