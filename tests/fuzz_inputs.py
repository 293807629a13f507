"""What the fuzz cases are made of: the small valid inputs they start from (a fast scenario, its
profile), the emitters (TOML, JSON) and the mutations (nasty values, dropped fields, bytes).
Case kinds: tests/fuzz_cases.py (scenario, profile, flags, paths, sizes),
tests/fuzz_trace_cases.py (traces of every format, vLLM results files) and
tests/fuzz_feature_cases.py (acceptance traces, profile sections, feature grafts, two routes)."""

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

# the same scenario with closed-loop clients (arrival "concurrency", think time)
CLOSED_SCENARIO: dict[str, Any] = {
    **BASE_SCENARIO,
    "workload": {**{k: v for k, v in BASE_SCENARIO["workload"].items() if k != "rate"},
                 "arrival": "concurrency", "concurrency": 4, "think_time_s": 0.1,
                 "think_time_dist": "exponential"},
}

# the same scenario with this year's features: prefix caching fed by a system prompt, documents
# and conversations, a KV-pressure fallback, a named fleet and two routes
FEATURE_SCENARIO: dict[str, Any] = {
    **BASE_SCENARIO,
    "workload": {**BASE_SCENARIO["workload"], "segments": [
        {**BASE_SCENARIO["workload"]["segments"][0], "shared_prefix_tokens": 16,
         "documents": {"count": 4, "tokens": 16, "zipf": 1.0},
         "conversation": {"turns": 2, "gap_s": 1.0, "user_tokens": 8}}]},
    "fleet": {**BASE_SCENARIO["fleet"], "engine": {**BASE_SCENARIO["fleet"]["engine"], "prefix_caching": True}},
    "fleets": {"other": {"profile": "profile.json", "tensor_parallel_size": 1, "price_per_gpu_hour": 3.0}},
    "candidates": [
        *BASE_SCENARIO["candidates"],
        {"name": "ngram-kvf", "proposer": "ngram", "k": 3, "policy": "kv_fallback",
         "kv_fallback": {"off_above": 0.8, "on_below": 0.5, "window_s": 2.0}},
        {"name": "ngram-other", "proposer": "ngram", "k": 2, "fleet": "other", "prefix_caching": False},
    ],
    "two_routes": [{"name": "split", "speculative": "ngram-k3", "baseline": "baseline", "rule": "overflow",
                    "window_s": 5.0}],
}

TRACE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"

NASTY_NUMBERS: list[Any] = [
    0, -1, 1, 2**63, 2**64 + 1, -(2**63) - 1, 10**18, 10**30, 10**400, 1e308, -1e308, 1.7976931348623157e308,
    5e-324, 1e-300, float("inf"), float("-inf"), float("nan"), 0.5, 1e9, 1e15, 3.5, -0.0,
]
NASTY_OTHER: list[Any] = [
    "", "x", "\u0000", "a" * 5000, True, False, [], {}, [1, 2], {"a": 1}, [[[[1]]]], "nan", "1e308",
    "../../../../etc/passwd", "~nosuchuser/p.json", "/dev/zero", ".",
    # unicode and control characters: a value echoed in an error must keep it one line
    "é", "日本語", "\u202eevil", "🙂" * 50, "e\u0301", "line1\nline2", "a\rb", "\t", "\x7f", "x" * 100000,
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
    fields: tuple[str, ...] = ()
    """The dotted fields that were mutated, where knowable (a whole-file byte mutation is not):
    a one-line error must name one of them, by its dotted path or its last key."""


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
        # a JSON string is a TOML basic string, but for \uD83D-style surrogate escapes (TOML wants
        # the scalar value) and a raw DEL (a control character TOML refuses)
        # (a lone surrogate, which no UTF-8 file can hold, stays an escape TOML then refuses)
        try:
            v.encode()
        except UnicodeEncodeError:
            return json.dumps(v)
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_value(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(type(v))


def to_toml(d: dict[str, Any]) -> str:
    """TOML text for a nested dict: top-level tables as ``[section]``, everything else inline."""
    lines = [f"{_toml_value(k)} = {_toml_value(v)}" for k, v in d.items() if not isinstance(v, dict)]
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(f"\n[{_toml_value(k)}]")
            lines += [f"{_toml_value(kk)} = {_toml_value(vv)}" for kk, vv in v.items()]
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


def dotted(path: tuple) -> str:
    """A tree path as the loaders write a field: ``workload.segments[0].share``."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def mutate_tree(tree: Any, rng: np.random.Generator, n: int) -> Any:
    return mutate_fields(tree, rng, n)[0]


def mutate_fields(tree: Any, rng: np.random.Generator, n: int) -> tuple[Any, tuple[str, ...]]:
    """``n`` leaves of a copy of ``tree`` set to nasty values or dropped; the copy and the dotted
    paths of what was changed (for the oracle: an error must name one of them)."""
    tree = json.loads(json.dumps(tree))
    leaves = _leaves(tree)
    fields: list[str] = []
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
                fields.append(dotted(path))
            continue
        try:
            _set(tree, path, _nasty(rng))
            fields.append(dotted(path))
        except (KeyError, IndexError, TypeError):
            pass
    return tree, tuple(fields)


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
