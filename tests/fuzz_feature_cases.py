"""Fuzz case kinds for what was added after the fuzzer was first written: acceptance traces
(every layout), profiles with whole sections corrupted (the synthetic one and a shipped GPU
profile), named fleets, two routes (sized by ``capacity``), the KV fallback, prefix-sharing
models, conversations and closed loops grafted onto each other, and paths in every path field.

Each case says which dotted fields it changed (``Case.fields``) when that is knowable, so the
oracle can check that a refusal names one of them.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np

from sim.contracts.synthetic import synthetic_profile_dict
from tests.fuzz_inputs import (
    BASE_SCENARIO,
    CLOSED_SCENARIO,
    FEATURE_SCENARIO,
    REPO,
    Case,
    _bad_path,
    _base_files,
    _json_bytes,
    _nasty,
    _set,
    byte_mutate,
    deep_nesting,
    dotted,
    mutate_fields,
    to_toml,
)

SHIPPED_PROFILE = REPO / "profiles" / "llama-3.1-8b-h100-vllm.json"  # a GPU profile with every timing section


def _copy(tree: Any) -> Any:
    return json.loads(json.dumps(tree))


def _pick(rng: np.random.Generator, items: list[Any]) -> Any:
    return items[int(rng.integers(len(items)))]


# ------------------------------------------------------------------------- acceptance traces

def _acceptance_record(i: int, layout: str) -> dict[str, Any]:
    if layout == "steps":
        return {"request": f"r{i}", "task": "chat", "language": "en", "temperature": 0.0, "k": 3,
                "accepted": [i % 4, None, 3, 1, 0, 2][: 3 + i % 4]}
    if layout == "positions":
        return {"request": f"r{i}", "task": "chat", "language": "en", "temperature": 0.0,
                "acc_len": [1 + (i + j) % 4 for j in range(6 + i % 5)]}
    acc = [1 + (i * j) % 5 for j in range(8)]
    return {"id": f"b{i}", "prompt_token_ids": [1, 2, 3], "generated_token_ids": [4, 5],
            "acc_eagle": {"acc_len": acc}, "acc_ngram": {"acc_len": acc[::-1]}}


def _acceptance_trace_case(rng: np.random.Generator) -> Case:
    """A candidate replaying an acceptance trace (specplan steps or positions, SpecDecode-Bench
    eagle or ngram), one record or the trace's scenario fields mutated."""
    layout = _pick(rng, ["steps", "positions", "specdecode-bench-eagle", "specdecode-bench-ngram"])
    fmt = "specplan" if layout in ("steps", "positions") else layout
    recs = [_acceptance_record(i, "bench" if fmt != "specplan" else layout) for i in range(12)]
    fields: tuple[str, ...] = ()
    changed_data = rng.random() < 0.7
    if changed_data:
        i = int(rng.integers(len(recs)))
        recs[i], fields = mutate_fields(recs[i], rng, 1)
    lines = [json.dumps(r, allow_nan=True, ensure_ascii=False) for r in recs]
    if rng.random() < 0.1:  # a line nested past any parser's recursion, or a number of 5,000 digits
        i = int(rng.integers(len(lines)))
        lines[i] = (deep_nesting("json", int(rng.choice([40, 5000, 100001]))).decode() if rng.random() < 0.5
                    else lines[i].replace('"temperature": 0.0', '"temperature": ' + "9" * 5000))
        fields, changed_data = (), True
    data = ("\n".join(lines) + "\n").encode()
    if rng.random() < 0.15:
        data, fields, changed_data = byte_mutate(data, rng), (), True
    tree = _copy(FEATURE_SCENARIO if rng.random() < 0.3 else BASE_SCENARIO)
    cand = {"name": "ngram-trace", "proposer": "ngram", "k": int(rng.choice([1, 3, 5])),
            "acceptance_trace": "a.jsonl", "trace_format": fmt, "trace_replay": bool(rng.random() < 0.5)}
    tree["candidates"].append(cand)
    names = ["a.jsonl", "s.toml"]
    knowable = bool(fields) or not changed_data
    if rng.random() < 0.2:
        key = _pick(rng, ["k", "trace_format", "trace_replay", "acceptance_trace"])
        cand[key] = _nasty(rng)
        # the record's change and this one (none when the record's change is unknowable)
        fields = (*fields, f"candidates[{len(tree['candidates']) - 1}].{key}") if knowable else ()
        if key == "acceptance_trace" and isinstance(cand[key], str) and "\x00" not in cand[key]:
            names.append(Path(cand[key]).name[:40])  # an error inside the file it reached names that file
    files = {**_base_files(), "s.toml": to_toml(tree).encode(), "a.jsonl": data}
    return Case("acceptance_trace", ["simulate", "s.toml", "--quiet"], files, tuple(n for n in names if n),
                fields=fields)


# ------------------------------------------------------------------------- profiles, by section

@functools.cache
def _shipped_profile() -> str:
    return SHIPPED_PROFILE.read_text()


def _sections(tree: Any, path: tuple = (), depth: int = 0) -> list[tuple]:
    """Every object (and array of objects) of a profile down to four levels: the sections."""
    out: list[tuple] = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for k, v in items:
        if isinstance(v, dict | list) and v and depth < 4:
            out.append((*path, k))
            out += _sections(v, (*path, k), depth + 1)
    return out


def _corrupt_section(sec: Any, rng: np.random.Generator) -> Any:
    """A section made wrong as a whole: another type, emptied, lists cut or reversed, numbers
    negated or blown up, an unknown key added."""
    op = int(rng.integers(7))
    if op == 0:
        return _nasty(rng)
    if op == 1:
        return {} if isinstance(sec, dict) else []

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            xs = [walk(x) for x in v]
            if op == 2 and len(xs) > 1:
                return xs[:-1]
            return xs[::-1] if op == 3 else xs
        if isinstance(v, int | float) and not isinstance(v, bool):
            return -v if op == 4 else v * 1e300 if op == 5 else v
        return v

    out = walk(sec)
    if op == 6 and isinstance(out, dict):
        out["nosuch_key"] = 1
    return out


def _profile_section_case(rng: np.random.Generator) -> Case:
    """A profile with one section corrupted or dropped, read by simulate (--profile or a named
    fleet's profile) or breakeven."""
    shipped = rng.random() < 0.3
    prof = json.loads(_shipped_profile()) if shipped else synthetic_profile_dict()
    secs = _sections(prof)
    path = _pick(rng, secs)
    parent = prof
    for p in path[:-1]:
        parent = parent[p]
    if rng.random() < 0.15 and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        _set(prof, path, _corrupt_section(parent[path[-1]], rng))
    files = _base_files()
    files["p.json"] = _json_bytes(prof)
    how = int(rng.integers(3))
    if how == 0:
        argv = ["simulate", "s.toml", "--profile", "p.json", "--quiet"]
    elif how == 1:
        tree = _copy(FEATURE_SCENARIO)
        tree["fleets"]["other"]["profile"] = "p.json"
        files["s.toml"] = to_toml(tree).encode()
        argv = ["simulate", "s.toml", "--quiet"]
    else:
        argv = ["breakeven", "--profile", "p.json", "--proposer", "ngram", "--json"]
    return Case("profile_section", argv, files, ("p.json",), fields=(dotted(path),))


# ------------------------------------------------------------------------- paths in path fields

_PATH_FIELDS = [("fleets", "other", "profile"), ("candidates", 4, "acceptance_trace"), ("workload", "trace", "path")]


def _feature_path_case(rng: np.random.Generator) -> Case:
    """A bad path in a path field added since the first fuzzer: a named fleet's profile, a
    candidate's acceptance trace, a trace of any format."""
    tree = _copy(FEATURE_SCENARIO)
    path = _pick(rng, _PATH_FIELDS)
    if path[0] == "candidates":
        tree["candidates"].append({"name": "ngram-trace", "proposer": "ngram", "k": 3, "acceptance_trace": "x"})
    elif path[0] == "workload":
        w = tree["workload"]
        w["arrival"] = "trace"
        del w["rate"]
        w["trace"] = {"path": "x"}
        for seg in w["segments"]:
            for key in ("prompt_tokens", "output_tokens", "conversation"):
                seg.pop(key, None)
    bad = _bad_path(rng).replace("\udcff", "\u00ff")  # a TOML file holds text, not raw bytes
    _set(tree, path, bad)
    files = _base_files()
    files["s.toml"] = to_toml(tree).encode()
    return Case("feature_path", ["simulate", "s.toml", "--quiet"], files, ("s.toml",), dirs=("adir",),
                fields=(dotted(path),))


# ------------------------------------------------------------------------- features grafted together

def _grafts() -> list[tuple[tuple, Any]]:
    """(dotted path, value) fragments that combine this year's features in ways that must be
    refused (or run) with a line naming the field."""
    return [
        (("workload", "segments", 0, "conversation"), {"turns": 3, "gap_s": 0.5, "user_tokens": 4}),
        (("workload", "segments", 0, "conversation"), {"turns": 1001, "gap_s": 0.0, "user_tokens": 10**8}),
        (("workload", "segments", 0, "documents"), {"count": 10**7, "tokens": 10**7, "zipf": 11}),
        (("workload", "segments", 0, "documents"), {"count": 0, "tokens": 16}),
        (("workload", "segments", 0, "shared_prefix_tokens"), 10**7 + 1),
        (("workload", "segments", 0, "shared_prefix_tokens"), 1000),
        (("workload", "concurrency"), 100001),
        (("workload", "concurrency"), 3),
        (("workload", "think_time_s"), 0.0),
        (("workload", "think_time_dist"), "exponential"),
        (("workload", "think_time_dist"), "weibull"),
        (("fleet", "engine", "prefix_caching"), True),
        (("candidates", 0, "prefix_caching"), True),
        (("candidates", 0, "kv_fallback"), {"off_above": 0.9, "on_below": 0.7}),
        (("candidates", 1, "kv_fallback"), {"off_above": 0.5, "on_below": 0.9, "window_s": 0}),
        (("candidates", 1, "policy"), "kv_fallback"),
        (("candidates", 1, "fleet"), "nosuch"),
        (("candidates", 1, "fleet"), "other"),
        (("fleets",), {"bad name!": {"profile": "profile.json"}}),
        (("fleets",), {f"f{i}": {"profile": "profile.json"} for i in range(1000)}),
        (("fleets", "other"), {"profile": "profile.json", "replicas": 2}),
        (("fleets", "other"), {"profile": "profile.json", "tensor_parallel_size": 8}),
        (("fleets", "other", "price_per_gpu_hour"), None),
        (("candidates",), [{"name": "baseline", "speculation": "off"},
                           {"name": "b2", "speculation": "off", "fleet": "other"},
                           {"name": "b3", "speculation": "off", "fleet": "other"}]),
        (("two_routes",), [{"name": "r", "speculative": "baseline"}]),
        (("two_routes",), [{"name": "baseline", "speculative": "ngram-k3"}]),
        (("two_routes",), [{"name": "r", "speculative": "ngram-k3", "speculative_replicas": 0,
                            "baseline_replicas": 0}]),
        (("two_routes",), [{"name": "r", "speculative": "ngram-k3", "speculative_replicas": 4097}]),
        (("two_routes",), [{"name": "r", "speculative": "ngram-k3", "idealised": "ngram-k3"}]),
        (("two_routes",), [{"name": f"r{i}", "speculative": "ngram-k3"} for i in range(1000)]),
        (("two_routes", 0, "rule"), "round_robin"),
        (("fleet", "restart"), {"at_s": 5, "cold_start_s": 2, "fallback": "same"}),
        (("workload", "trace"), {"path": "profile.json"}),
    ]


def _graft_case(rng: np.random.Generator) -> Case:
    """One feature grafted onto an open, closed or feature scenario (possibly where it does not
    belong: a conversation in a closed loop, a fallback on the baseline, a route to nowhere)."""
    base = _copy(_pick(rng, [BASE_SCENARIO, CLOSED_SCENARIO, FEATURE_SCENARIO]))
    grafts = _grafts()
    fields = []
    for _ in range(int(rng.integers(1, 3))):
        path, value = _pick(rng, grafts)
        try:
            parent = base
            for i, p in enumerate(path[:-1]):
                if isinstance(parent, dict) and p not in parent:  # a table the graft creates is changed too
                    parent[p] = {}
                    fields.append(dotted(path[: i + 1]))
                parent = parent[p]
            if value is None:
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = _copy(value)
            fields.append(dotted(path))
        except (IndexError, KeyError, TypeError):
            continue
    files = _base_files()
    files["s.toml"] = to_toml(base).encode()
    argv = ["simulate", "s.toml", "--quiet", *(["--json"] if rng.random() < 0.3 else [])]
    return Case("graft", argv, files, ("s.toml",), fields=tuple(fields))


# ------------------------------------------------------------------------- two routes, sized

_EXTREME_ROUTES: list[tuple[tuple, Any]] = [
    (("two_routes", 0, "window_s"), 1e-9), (("two_routes", 0, "window_s"), 1e9),
    (("two_routes", 0, "threshold_rps"), 1e-9), (("two_routes", 0, "threshold_rps"), 1e9),
    (("two_routes", 0, "speculative_replicas"), 0), (("two_routes", 0, "baseline_replicas"), 0),
    (("two_routes", 0, "speculative_replicas"), 4096), (("two_routes", 0, "rule"), "overflow"),
    (("candidates", 2, "kv_fallback", "off_above"), 1.0), (("candidates", 2, "kv_fallback", "on_below"), 1e-9),
    (("candidates", 2, "kv_fallback", "window_s"), 1e-9), (("candidates", 2, "kv_fallback", "window_s"), 1e9),
]


def _two_routes_case(rng: np.random.Generator) -> Case:
    """``capacity`` on a scenario with [[two_routes]] (the only command that sizes them), its
    route, fallback or fleet fields mutated."""
    tree = _copy(FEATURE_SCENARIO)
    tree["workload"]["segments"][0].pop("conversation")
    idealised = rng.random() < 0.3
    keep = ("baseline", "ngram-k3", "ngram-kvf") if idealised else ("baseline", "ngram-k3")
    tree["candidates"] = [c for c in tree["candidates"] if c["name"] in keep]
    tree.pop("fleets")
    routes = [{"name": "split", "speculative": "ngram-k3", "rule": str(rng.choice(["rate", "overflow"])),
               "window_s": 2.0}]
    if rng.random() < 0.5:
        routes[0].update(speculative_replicas=1, baseline_replicas=1, threshold_rps=1.0)
    if idealised:
        routes[0]["idealised"] = "ngram-kvf"
    tree["two_routes"] = routes
    fields: tuple[str, ...] = ()
    u = rng.random()
    if u < 0.45:  # a hostile value
        sub = _pick(rng, ["two_routes", "two_routes", "candidates"])
        part, fields = mutate_fields({sub: tree[sub]}, rng, 1)
        tree[sub] = part.get(sub, tree[sub])
    elif u < 0.9:  # a valid but extreme one, to reach the sizing and the router
        path, value = _pick(rng, _EXTREME_ROUTES)
        if path[0] == "candidates" and len(tree["candidates"]) < 3:
            path = ("two_routes", 0, "window_s")
        _set(tree, path, value)
        fields = (dotted(path),)
    files = _base_files()
    files["s.toml"] = to_toml(tree).encode()
    argv = ["capacity", "s.toml", "--max-evals", "2", "--duration", "3", "--no-profile-band", "--max-seeds", "1", *(["--json"] if rng.random() < 0.3 else [])]
    return Case("two_routes", argv, files, ("s.toml",), fields=fields)
