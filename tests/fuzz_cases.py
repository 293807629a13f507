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
from typing import Any

import numpy as np

from sim.contracts.synthetic import synthetic_profile_dict
from tests.fuzz_feature_cases import (
    _acceptance_trace_case,
    _feature_path_case,
    _graft_case,
    _profile_section_case,
    _two_routes_case,
)
from tests.fuzz_inputs import (
    BASE_SCENARIO,
    CLOSED_SCENARIO,
    FEATURE_SCENARIO,
    FUZZ_MAX_REQUEST_STEPS,
    NASTY_FLAGS,
    REPO,
    Case,
    _bad_path,
    _base_files,
    _json_bytes,
    _set,
    byte_mutate,
    deep_nesting,
    dotted,
    mutate_fields,
    mutate_tree,
    to_toml,
)
from tests.fuzz_trace_cases import _trace_case, _trace_format_case, _vllm_case

__all__ = ["BASE_SCENARIO", "FUZZ_MAX_REQUEST_STEPS", "KINDS", "REPO", "Case", "byte_mutate", "deep_nesting",
           "make_case", "mutate_tree", "to_toml"]

# ------------------------------------------------------------------------- case kinds


def _scenario_case(rng: np.random.Generator) -> Case:
    files = _base_files()
    u = rng.random()
    base = CLOSED_SCENARIO if u < 0.25 else FEATURE_SCENARIO if u < 0.5 else BASE_SCENARIO
    tree, fields = mutate_fields(base, rng, int(rng.integers(1, 4)))
    files["s.toml"] = to_toml(tree).encode()
    if rng.random() < 0.25:
        files["s.toml"], fields = byte_mutate(files["s.toml"], rng), ()
    return Case("scenario", ["simulate", "s.toml", "--quiet", *_maybe_json(rng)], files, ("s.toml",),
                fields=fields)


def _maybe_json(rng: np.random.Generator) -> list[str]:
    return ["--json"] if rng.random() < 0.3 else []


def _profile_case(rng: np.random.Generator) -> Case:
    files = _base_files()
    prof, fields = mutate_fields(synthetic_profile_dict(), rng, int(rng.integers(1, 4)))
    files["p.json"] = _json_bytes(prof)
    if rng.random() < 0.25:
        files["p.json"], fields = byte_mutate(files["p.json"], rng), ()
    if rng.random() < 0.5:
        argv = ["simulate", "s.toml", "--profile", "p.json", "--quiet"]
    else:
        argv = ["breakeven", "--profile", "p.json", "--proposer", "ngram", "--json"]
    return Case("profile", argv, files, ("p.json",), fields=fields)


def _nesting_case(rng: np.random.Generator) -> Case:
    files = _base_files()
    depth = int(rng.choice([50, 1000, 5000, 100000]))
    if rng.random() < 0.5:
        files["s.toml"] = deep_nesting("toml", depth)
        return Case("nesting", ["simulate", "s.toml", "--quiet"], files, ("s.toml",))
    files["p.json"] = deep_nesting("json", depth)
    return Case("nesting", ["breakeven", "--profile", "p.json", "--proposer", "ngram"], files, ("p.json",))



_FEATURE_KEYS = ["fleets.other.price_per_gpu_hour", "fleets.other.tensor_parallel_size",
                 "candidates[ngram-kvf].kv_fallback.off_above", "candidates[ngram-kvf].kv_fallback.window_s",
                 "candidates[ngram-other].fleet", "two_routes[split].window_s", "two_routes[split].threshold_rps",
                 "workload.segments[chat].conversation.turns", "workload.segments[chat].documents.count",
                 "workload.segments[chat].shared_prefix_tokens", "fleet.engine.prefix_caching",
                 "workload.concurrency", "workload.think_time_s"]


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
                              "workload.segments[chat].share", "seed", *_FEATURE_KEYS]))
        if key in _FEATURE_KEYS:  # fields added since: on the scenario that has them
            closed = key in ("workload.concurrency", "workload.think_time_s")
            files["s.toml"] = to_toml(CLOSED_SCENARIO if closed else FEATURE_SCENARIO).encode()
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


_SIZES: list[tuple[tuple, Any]] = [
    (("fleet", "replicas"), 10**18), (("fleet", "replicas"), 10**6), (("run", "duration_s"), 1e12),
    (("run", "duration_s"), 1e308), (("workload", "rate"), 1e9), (("workload", "rate"), 1e300),
    (("run", "seeds"), list(range(100000))), (("fleet", "engine", "max_num_seqs"), 10**12),
    (("fleet", "engine", "max_num_batched_tokens"), 10**15), (("fleet", "engine", "block_size"), 10**9),
    (("candidates",), [{"name": f"c{i}", "speculation": "off"} for i in range(5000)]),
]
# the same for what was added since: sizes of prefix-sharing models, conversations, closed loops,
# named fleets and two routes (on the feature or the closed-loop scenario)
_FEATURE_SIZES: list[tuple[tuple, Any]] = [
    (("workload", "segments", 0, "conversation", "turns"), 1000),
    (("workload", "segments", 0, "conversation", "user_tokens"), 10**7),
    (("workload", "segments", 0, "conversation", "gap_s"), 1e-12),
    (("workload", "segments", 0, "documents", "count"), 10**7),
    (("workload", "segments", 0, "documents", "tokens"), 10**7),
    (("workload", "segments", 0, "shared_prefix_tokens"), 10**7),
    (("fleets",), {f"f{i}": {"profile": "profile.json", "price_per_gpu_hour": 1.0} for i in range(2000)}),
    (("two_routes", 0, "speculative_replicas"), 4096), (("two_routes", 0, "threshold_rps"), 1e15),
    (("candidates", 2, "kv_fallback", "window_s"), 1e15),
]
_CLOSED_SIZES: list[tuple[tuple, Any]] = [
    (("workload", "concurrency"), 100000), (("workload", "concurrency"), 10**7),
    (("workload", "think_time_s"), 1e15), (("workload", "think_time_s"), 5e-324),
]


def _size_case(rng: np.random.Generator) -> Case:
    files = _base_files()
    u = rng.random()
    base, sizes = ((FEATURE_SCENARIO, _FEATURE_SIZES) if u < 0.4 else (CLOSED_SCENARIO, _CLOSED_SIZES) if u < 0.55
                   else (BASE_SCENARIO, _SIZES))
    tree = json.loads(json.dumps(base))
    field_, value = sizes[int(rng.integers(len(sizes)))]
    _set(tree, field_, value)
    files["s.toml"] = to_toml(tree).encode()
    return Case("size", ["simulate", "s.toml", "--quiet"], files, ("s.toml",), fields=(dotted(field_),))


KINDS = {
    "scenario": (_scenario_case, 0.35), "profile": (_profile_case, 0.2), "nesting": (_nesting_case, 0.04),
    "trace": (_trace_case, 0.08), "trace_format": (_trace_format_case, 0.1), "vllm": (_vllm_case, 0.06),
    "flag": (_flag_case, 0.1), "path": (_path_case, 0.08), "size": (_size_case, 0.05),
    # what was added since: tests/fuzz_feature_cases.py
    "acceptance_trace": (_acceptance_trace_case, 0.06), "profile_section": (_profile_section_case, 0.08),
    "feature_path": (_feature_path_case, 0.03), "graft": (_graft_case, 0.1), "two_routes": (_two_routes_case, 0.03),
}


def make_case(rng: np.random.Generator) -> Case:
    names = list(KINDS)
    p = np.array([KINDS[k][1] for k in names])
    kind = names[int(rng.choice(len(names), p=p / p.sum()))]
    return KINDS[kind][0](rng)
