"""Emitted configs per engine and policy (sim/decisions/engine_config.py): valid for the engine
named, never vLLM's removed ``disable_by_batch_size``, and carrying the candidate's own k."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.candidate import AdaptiveConfig, Candidate, KvFallbackConfig
from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario
from sim.decisions.engine_config import candidate_config, emit, verdict_config
from sim.model.serving_engine import ServingEngine
from sim.model.speculation import PolicyState, policy_from_candidate

REPO = Path(__file__).resolve().parents[3]
ENGINES = {"vllm-v2": ServingEngine("vllm", "v2", None), "vllm-v1": ServingEngine("vllm", "v1", "0.11.0"),
           "sglang": ServingEngine("sglang", None, None), "trtllm": ServingEngine("trtllm", None, "1.2.0")}
NGRAM = SimpleNamespace(kind="ngram", model=None, note=None, prompt_lookup_min=2, prompt_lookup_max=4)
EAGLE3 = SimpleNamespace(kind="eagle3", model=SimpleNamespace(id="org/eagle3-head", config_only=False), note=None)
POLICIES = {
    "fixed": {"k": 3},
    "off_above_batch": {"k": 3, "max_batch": 16},
    "k_by_batch": {"k_by_batch": ((1, 4), (9, 2), (33, 0))},
    "adaptive": {"k": 3, "adaptive": AdaptiveConfig(on_below_batch=8, off_above_batch=16)},
    "kv_fallback": {"k": 3, "kv_fallback": KvFallbackConfig(off_above=0.9, on_below=0.7)},
}
TOP = 64

# (engine, policy) -> (runnable, the key that carries the batch schedule, or None)
TABLE = {
    ("vllm-v2", "fixed"): (True, None), ("vllm-v2", "off_above_batch"): (True, "num_speculative_tokens_per_batch_size"),
    ("vllm-v2", "k_by_batch"): (True, "num_speculative_tokens_per_batch_size"),
    ("vllm-v2", "adaptive"): (False, None), ("vllm-v2", "kv_fallback"): (False, None),
    ("vllm-v1", "fixed"): (True, None), ("vllm-v1", "off_above_batch"): (True, "num_speculative_tokens_per_batch_size"),
    ("vllm-v1", "k_by_batch"): (True, "num_speculative_tokens_per_batch_size"),
    ("vllm-v1", "adaptive"): (False, None), ("vllm-v1", "kv_fallback"): (False, None),
    ("sglang", "fixed"): (True, None), ("sglang", "off_above_batch"): (False, None),
    ("sglang", "k_by_batch"): (False, None), ("sglang", "adaptive"): (False, None),
    ("sglang", "kv_fallback"): (False, None),
    ("trtllm", "fixed"): (True, None), ("trtllm", "off_above_batch"): (True, "draft_len_schedule"),
    ("trtllm", "k_by_batch"): (True, "draft_len_schedule"), ("trtllm", "adaptive"): (False, None),
    ("trtllm", "kv_fallback"): (False, None),
}


def _cand(policy: str, proposer: str = "ngram", **kw) -> Candidate:
    return Candidate(name=f"{proposer}-{policy}", proposer=proposer, policy=policy, **{**POLICIES[policy], **kw})


def _find(obj, key):
    """``key``'s value anywhere in a nested config (None when absent)."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        return next((v for v in (_find(x, key) for x in obj.values()) if v is not None), None)
    return None


@pytest.mark.parametrize(("engine", "policy"), sorted(TABLE))
@pytest.mark.parametrize("proposer", [NGRAM, EAGLE3], ids=["ngram", "eagle3"])
def test_each_engine_gets_its_own_form_or_one_line_saying_it_cannot_run_the_policy(engine, policy, proposer) -> None:
    cand = _cand(policy, proposer.kind)
    out = emit(cand, proposer, ENGINES[engine], TOP)
    runnable, key = TABLE[(engine, policy)]
    assert out.runnable is runnable and out.k == cand.max_k
    text = json.dumps(out.to_json())
    assert "disable_by_batch_size" not in text  # removed from vLLM (PR #35060): never emitted
    if not runnable:
        assert out.config is None and f"not runnable on {ENGINES[engine].label}: idealised" in out.lines()[0]
        return
    assert out.config_k == cand.max_k
    if key is not None:
        assert _find(out.config, key) is not None
    for other in {"num_speculative_tokens_per_batch_size", "draft_len_schedule"} - {key}:
        assert _find(out.config, other) is None
    if engine.startswith("vllm"):
        assert out.config["method"] == proposer.kind and out.form == "--speculative-config (JSON)"
        assert ("model" in out.config) == (proposer.kind != "ngram")
    elif engine == "trtllm":
        assert out.config["speculative_config"]["decoding_type"] == {"ngram": "NGram", "eagle3": "Eagle3"}[proposer.kind]
    else:
        flags = out.config
        assert flags[flags.index("--speculative-algorithm") + 1] == {"ngram": "NGRAM", "eagle3": "EAGLE3"}[proposer.kind]
        assert flags[flags.index("--speculative-num-draft-tokens") + 1] == str(cand.max_k + 1)


def _vllm_k(ranges, b: int) -> int:
    """vLLM's k at scheduled batch ``b`` from inclusive ranges (none covering it: the maximum)."""
    return next((k for s, e, k in ranges if s <= b <= e), None)


def _trtllm_k(schedule: dict[int, int], b: int) -> int:
    """TensorRT-LLM's k at batch ``b``: the value of the smallest key ≥ b, 0 above the largest."""
    return next((schedule[key] for key in sorted(schedule) if b <= key), 0)


@st.composite
def candidates(draw):
    policy = draw(st.sampled_from(["fixed", "off_above_batch", "k_by_batch"]))
    if policy == "k_by_batch":
        n = draw(st.integers(1, 5))
        starts = [1, *sorted(draw(st.sets(st.integers(2, 200), min_size=n - 1, max_size=n - 1)))]
        ks = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n).filter(lambda v: max(v) >= 1))
        return Candidate(name="c", proposer="ngram", policy=policy, k_by_batch=tuple(zip(starts, ks, strict=True)))
    kw = {"max_batch": draw(st.integers(1, 300))} if policy == "off_above_batch" else {}
    return Candidate(name="c", proposer="ngram", policy=policy, k=draw(st.integers(1, 8)), **kw)


@settings(max_examples=200, deadline=None)
@given(candidates(), st.integers(1, 256), st.sampled_from(["vllm-v2", "vllm-v1", "trtllm", "sglang"]))
def test_the_emitted_k_is_the_candidates_k_at_every_batch_size(cand, top, engine) -> None:
    """The config's k (its maximum, and per batch size where it has a schedule) is the k the
    simulator ran this candidate at, for every decode batch up to the engine's max_num_seqs."""
    out = emit(cand, NGRAM, ENGINES[engine], top)
    assert out.k == cand.max_k
    pol, state = policy_from_candidate(cand), PolicyState()
    sim_k = {b: pol.k_for(state, b) for b in range(1, top + 1)}
    if not out.runnable:  # SGLang: one k at start-up only
        assert engine == "sglang" and set(sim_k.values()) != {cand.max_k}
        return
    assert out.config_k == cand.max_k
    if engine.startswith("vllm"):
        ranges = out.config.get("num_speculative_tokens_per_batch_size")
        if ranges is None:  # a fixed k: the candidate runs its k at every batch in reach
            assert set(sim_k.values()) == {cand.max_k}
            return
        assert ranges[0][0] == 1 and ranges[-1][1] == top
        assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:], strict=False))  # contiguous
        assert all(k <= out.config["num_speculative_tokens"] for *_, k in ranges)
        assert {b: _vllm_k(ranges, b) for b in sim_k} == sim_k
    elif engine == "trtllm":
        schedule = out.config["speculative_config"].get("draft_len_schedule")
        if schedule is None:
            assert set(sim_k.values()) == {cand.max_k}
            return
        assert {b: _trtllm_k(schedule, b) for b in sim_k} == sim_k


def _shipped():
    traces = REPO.parent / "shared" / "traces"
    for path in sorted((REPO / "scenarios").glob("*.toml")):
        if "shared/traces" in path.read_text(encoding="utf-8") and not traces.is_dir():
            yield pytest.param(path, "", id=f"{path.stem}:skipped", marks=pytest.mark.skip(
                reason=f"{traces} absent: the public Azure traces are not available here"))
            continue
        sc = load_scenario(path)
        for c in sc.speculative:
            yield pytest.param(path, c.name, id=f"{path.stem}:{c.name}")


@pytest.mark.parametrize(("path", "name"), list(_shipped()))
def test_every_shipped_candidate_emits_its_own_k_for_its_engine(path, name) -> None:
    sc = load_scenario(path)
    profile = load_profile(sc.require_profile_path())
    cand = sc.candidate(name)
    out = candidate_config(sc, profile, name)
    assert out is not None and out.k == cand.max_k
    assert "disable_by_batch_size" not in json.dumps(out.to_json())
    if out.runnable:
        assert out.config_k == cand.max_k
    else:
        assert cand.policy in ("adaptive", "kv_fallback") or out.config is None


def test_the_deployed_config_is_the_verdicts_candidate() -> None:
    sc = load_scenario(REPO / "scenarios" / "default.toml")
    profile = load_profile(sc.require_profile_path())
    for c in sc.speculative:
        out = verdict_config(sc, profile, SimpleNamespace(whole=SimpleNamespace(winner=c.name)))
        assert out.candidate == c.name and out.k == c.max_k
    assert verdict_config(sc, profile, SimpleNamespace(whole=SimpleNamespace(winner=None))) is None
    assert verdict_config(sc, profile, SimpleNamespace(whole=SimpleNamespace(winner=sc.baseline.name))) is None
