"""Policy advice against the synthetic profile's closed-form step times."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile_acceptance import AcceptanceKey
from sim.contracts.synthetic import synthetic_profile
from sim.decisions.policy_advice import advise_policy, mixed_survival

RATES = (0.7, 0.5, 0.35, 0.25, 0.18)
# Verification expensive per token: speculation wins at small batches (fixed cost dominates)
# and loses at large ones (every proposed token costs a full token of compute).
PARAMS = dict(base_step_s=0.010, per_seq_s=0.0001, per_token_s=0.001, per_context_token_s=1e-7,
              draft_base_s=0.0002, draft_per_token_s=0.00005, overhead_base_s=0.0003,
              overhead_per_seq_s=0.00002, acceptance_rates=RATES)
CTX = 512.0


def closed_form(b: int, k: int) -> float:
    """Seconds per committed token from the synthetic formulas (sim/contracts/synthetic.py docstring);
    survival rates as the synthetic profile stores them (its per-request counts round RATES)."""
    p = PARAMS
    rates = synthetic_profile(**PARAMS).acceptance["ngram"].segments[0].survival
    fwd = p["base_step_s"] + p["per_seq_s"] * b + p["per_token_s"] * b * (k + 1) + p["per_context_token_s"] * b * CTX
    if k == 0:
        return fwd / b
    step = fwd + p["draft_base_s"] + p["draft_per_token_s"] * b * k + p["overhead_base_s"] + p["overhead_per_seq_s"] * b
    return step / (b * (1 + sum(rates[:k])))


def test_k_by_batch_and_cutoff_match_closed_form() -> None:
    prof = synthetic_profile(**PARAMS)
    adv = advise_policy(prof, "ngram", context=CTX, batches=range(1, 65), margin=0.05)
    expected_best = []
    for r in adv.batches:
        times = [closed_form(r.batch, k) for k in range(1, 6)]
        assert r.per_k_s == pytest.approx(times, rel=1e-9)
        assert r.baseline_s == pytest.approx(closed_form(r.batch, 0), rel=1e-9)
        best = int(np.argmin(times)) + 1
        expected_best.append(best if times[best - 1] < closed_form(r.batch, 0) else 0)
    assert [r.best_k for r in adv.batches] == expected_best
    wins = [b for b, k in zip(range(1, 65), expected_best, strict=True) if k > 0]
    assert wins and wins == list(range(1, len(wins) + 1))  # a contiguous low-batch region
    assert adv.off_above_batch == wins[-1] < 64
    # hysteresis: back on only where the win is at least the margin, strictly below the cut-off
    assert adv.on_below_batch is not None and adv.on_below_batch < adv.off_above_batch
    strong = [r.batch for r in adv.batches if r.speedup >= 1.05]
    assert adv.on_below_batch == pytest.approx(max(strong))
    # k at batch 1 is larger than near the cut-off (cheap verification when the batch is small)
    assert adv.batches[0].best_k > adv.batches[adv.off_above_batch - 1].best_k
    kb = adv.k_by_batch
    assert kb[0][0] == 1 and kb[-1] == [adv.off_above_batch + 1, 0]
    assert all(a[0] < b[0] for a, b in zip(kb, kb[1:], strict=False))


def test_vllm_snippet_ngram() -> None:
    prof = synthetic_profile(**PARAMS)
    adv = advise_policy(prof, "ngram", context=CTX, batches=range(1, 65))
    cfg = adv.vllm_speculative_config()
    ident = prof.proposers["ngram"]
    assert cfg["method"] == "ngram" and cfg["num_speculative_tokens"] == adv.fixed_k >= 1
    assert "disable_by_batch_size" not in cfg  # removed from vLLM (PR #35060)
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, adv.off_above_batch, adv.fixed_k],
                                                            [adv.off_above_batch + 1, 64, 0]]
    assert cfg.get("prompt_lookup_max") == ident.prompt_lookup_max
    snippet = adv.vllm_snippet()
    assert json.loads(snippet.split("\n#")[0]) == cfg
    assert "PR #32374" in snippet and "disable_by_batch_size" in snippet  # said, never emitted
    toml = adv.scenario_candidates_toml()
    assert 'policy = "k_by_batch"' in toml and 'policy = "adaptive"' in toml
    assert any("cut-off" in line for line in adv.format_table())


def test_no_cutoff_when_speculation_always_wins_and_none_when_never() -> None:
    cheap = synthetic_profile(acceptance_rates=RATES)  # default: verification tokens are cheap
    adv = advise_policy(cheap, "ngram", context=CTX, batches=[1, 8, 64])
    assert adv.off_above_batch is None and adv.fixed_k >= 1
    assert "num_speculative_tokens_per_batch_size" not in adv.vllm_speculative_config()
    hopeless = synthetic_profile(**{**PARAMS, "acceptance_rates": (0.01, 0.0, 0.0, 0.0, 0.0),
                                    "draft_base_s": 0.02})
    adv2 = advise_policy(hopeless, "ngram", context=CTX, batches=[1, 2, 4])
    assert adv2.fixed_k == 0 and all(r.best_k == 0 for r in adv2.batches)
    assert adv2.vllm_speculative_config() == {} and "no speculative_config" in adv2.vllm_snippet()


def test_segment_mix_and_errors() -> None:
    prof = synthetic_profile(acceptance_rates=RATES, segments=(("chat", "en", 0.0), ("code", "sv", 0.0)))
    rates, label = mixed_survival(prof, "ngram", [(AcceptanceKey("chat", "en", 0.0), 3.0),
                                                  (AcceptanceKey("code", "sv", 0.0), 1.0)])
    assert rates == pytest.approx(prof.acceptance["ngram"].segments[0].survival) and "×0.75" in label
    with pytest.raises(SpecplanError, match="no segment matches"):
        mixed_survival(prof, "ngram", [(AcceptanceKey("math", "de", 0.0), 1.0)])
    with pytest.raises(SpecplanError, match="unknown proposer"):
        advise_policy(prof, "eagle")
    with pytest.raises(SpecplanError, match="margin"):
        advise_policy(prof, "ngram", margin=1.5)


def test_scenario_advice_considers_only_batches_the_fleet_reaches_and_weights_k_by_them() -> None:
    from sim.contracts.scenario import Scenario
    from sim.decisions.policy_advice import advise_for_scenario, reachable_batch

    prof = synthetic_profile(**PARAMS)
    sc = Scenario.from_dict({
        "name": "adv", "run": {"duration_s": 60, "warmup_s": 5, "seeds": [1]},
        "workload": {"arrival": "poisson", "rate": 1.0, "segments": [
            {"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 400},
             "output_tokens": {"dist": "fixed", "value": 224},
             "acceptance": {"task": "chat", "language": "en"}}]},
        "fleet": {"engine": {"max_num_seqs": 1024}},
        "candidates": [{"name": "baseline", "speculation": "off"},
                       {"name": "ngram-k3", "proposer": "ngram", "k": 3}],
    }, "<adv>")
    top, why = reachable_batch(sc, prof, "ngram", 512.0)
    assert top < 1024 and why == f"KV holds {top} requests at context 512"  # KV binds, not max_num_seqs
    adv = advise_for_scenario(sc, prof, "ngram")
    assert adv.batches[-1].batch == top
    assert any(n.startswith(f"batches 1–{top} considered") for n in adv.notes)
    # the fleet only ever runs batch 1 at this load: the fixed k is batch 1's best, with a note
    at_one = advise_for_scenario(sc, prof, "ngram", batch_weights={1: 1.0})
    assert at_one.fixed_k == adv.batches[0].best_k != adv.fixed_k  # 4, not the mean over 1..top's 1
    assert any("weighted by the decode batches seen" in n for n in at_one.notes)


def test_advice_says_which_suggestions_vllm_runs_and_the_two_route_alternative() -> None:
    adv = advise_policy(synthetic_profile(**PARAMS), "ngram", context=CTX, batches=range(1, 65))
    rows = adv.engine_support()
    assert [e.policy for _, e in rows] == ["fixed", "k_by_batch", "adaptive", "kv_fallback"]
    assert [e.runs for _, e in rows] == [True, True, False, False]
    assert "num_speculative_tokens_per_batch_size" in rows[1][1].how
    for _, e in rows[2:]:
        assert "two routes" in e.deployable and "baseline pool" in e.deployable
    assert "kv_cache_usage_perc" in rows[-1][1].deployable
    table = adv.format_table()
    assert any(line.startswith("vLLM runs fixed k = ") for line in table)
    assert sum(line.startswith("vLLM cannot run") for line in table) == 2
    cheap = advise_policy(synthetic_profile(acceptance_rates=RATES), "ngram", context=CTX, batches=[1, 8])
    assert "adaptive" not in [e.policy for _, e in cheap.engine_support()]  # no cut-off advised


def test_every_simulated_policy_says_whether_vllm_runs_it() -> None:
    from sim.decisions.vllm_config import engine_support
    from sim.model.speculation import POLICY_NAMES

    assert {p for p in POLICY_NAMES if engine_support(p).runs} == {"off", "fixed", "off_above_batch", "k_by_batch"}
    assert all(engine_support(p).deployable for p in POLICY_NAMES if not engine_support(p).runs)
    with pytest.raises(ValueError, match="valid: off, fixed"):
        engine_support("per_token")
