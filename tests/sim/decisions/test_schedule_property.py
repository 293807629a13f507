"""The computed schedule (``schedule = "auto"``) against the baseline and the best fixed k,
simulated on generated profiles and loads: it is never worse by more than the decisions'
indifference amount (paired per-seed differences, ``sim.decisions.paired``; the amounts are
``Facts``' defaults: 2 % throughput, 5 % latency)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.contracts.scenario import load_scenario
from sim.decisions.facts import Facts
from sim.decisions.paired import paired
from sim.results import metric_names as mn
from sim.results.runner import run_scenario
from tests.helpers import BASELINE, scenario_toml, segment, write_scenario

K_MAX = 3
SEEDS = [1, 2, 3]
THROUGHPUT_DELTA = Facts.__dataclass_fields__["indifference"].default
LATENCY_DELTA = Facts.__dataclass_fields__["latency_indifference"].default


def _run(tmp: Path, per_token_s: float, alpha: float, rate: float):
    rates = [round(alpha ** i, 6) for i in range(1, K_MAX + 1)]
    fixed = [{"name": f"k{k}", "proposer": "ngram", "k": k} for k in range(1, K_MAX + 1)]
    auto = {"name": "auto", "proposer": "ngram", "policy": "k_by_batch", "schedule": "auto", "k": K_MAX}
    text = scenario_toml(
        "schedule-property", run={"duration_s": 40, "warmup_s": 5, "seeds": SEEDS},
        workload={"arrival": "poisson", "rate": rate},
        segments=[segment(prompt={"dist": "lognormal", "median": 200, "sigma": 0.5, "min": 16, "max": 1000},
                          output={"dist": "lognormal", "median": 60, "sigma": 0.5, "min": 4, "max": 300})],
        fleet={"profile": "profile.json", "replicas": 1}, engine={"max_num_seqs": 24},
        candidates=[BASELINE, *fixed, auto])
    path = write_scenario(tmp, text, per_token_s=per_token_s, acceptance_rates=rates)
    return run_scenario(load_scenario(path))


def _per_seed(result, name: str, col: str) -> list[float]:
    rows = result.per_seed.filter((result.per_seed[mn.CANDIDATE] == name)
                                  & (result.per_seed[mn.SEGMENT] == mn.ALL_SEGMENTS)).sort(mn.SEED)
    return rows[col].to_list()


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(per_token_s=st.sampled_from([0.0002, 0.0008, 0.002]), alpha=st.floats(0.3, 0.9),
       load=st.floats(0.2, 0.9))
def test_auto_schedule_is_never_worse_than_the_baseline_or_the_best_fixed_k(per_token_s, alpha, load) -> None:
    # the load as a share of what plain decoding serves at batch 24 (output ~60 tokens a request)
    step = 0.010 + 0.0005 * 24 + per_token_s * 24 + 1e-7 * 24 * 230
    rate = load * 24 / step / 65
    with tempfile.TemporaryDirectory() as d:
        r = _run(Path(d), per_token_s, alpha, rate)
    others = ["baseline", *(f"k{k}" for k in range(1, K_MAX + 1))]
    for col, higher, delta in ((mn.OUTPUT_THROUGHPUT, True, THROUGHPUT_DELTA),
                               ("tpot_ms_mean", False, LATENCY_DELTA),
                               ("e2el_ms_mean", False, LATENCY_DELTA)):
        auto = _per_seed(r, "auto", col)
        means = {o: sum(_per_seed(r, o, col)) / len(SEEDS) for o in others}
        best_fixed = (max if higher else min)((o for o in others if o != "baseline"), key=means.__getitem__)
        for rival in ("baseline", best_fixed):
            p = paired(auto, _per_seed(r, rival, col), higher_better=higher, rel_delta=delta)
            assert p.verdict != "worse", (
                f"auto schedule {[x for x in r.sources if x.startswith('auto:')]} worse than {rival} on {col}: "
                f"{p.diff:+.4g} ± {p.half}, indifference {p.delta:.4g} (rate {rate:.2f}, alpha {alpha:.2f})")


def test_the_emitted_config_carries_the_schedule_the_run_simulated(tmp_path) -> None:
    from sim.contracts.profile import load_profile
    from sim.decisions.engine_config import candidate_config
    from sim.model.k_schedule import candidate_schedule

    auto = {"name": "auto", "proposer": "ngram", "policy": "k_by_batch", "schedule": "auto", "k": K_MAX}
    for engine in ("vllm", "trtllm"):
        text = scenario_toml(
            "schedule-emit", run={"duration_s": 10, "warmup_s": 1, "seeds": [1]},
            workload={"arrival": "poisson", "rate": 4.0}, segments=[segment(prompt=200, output=40)],
            fleet={"profile": "profile.json", "replicas": 1}, engine={"max_num_seqs": 24, "name": engine},
            candidates=[BASELINE, auto])
        path = write_scenario(tmp_path, text, per_token_s=0.0008, acceptance_rates=[0.7, 0.5, 0.35])
        sc = load_scenario(path)
        prof = load_profile(tmp_path / "profile.json")
        sched = candidate_schedule(sc, prof, sc.candidate("auto"))
        assert f"auto: {sched.describe()}" in run_scenario(sc).sources  # the schedule the run simulated
        rows = sched.k_by_batch
        assert len({k for _, k in rows}) > 1  # a real schedule, not one k
        want = [[a, (rows[i + 1][0] - 1) if i + 1 < len(rows) else 24, k] for i, (a, k) in enumerate(rows)]
        cfg = candidate_config(sc, prof, "auto")
        assert cfg.runnable and cfg.k == max(k for _, k in rows)
        if engine == "vllm":
            assert cfg.config["num_speculative_tokens_per_batch_size"] == want
        else:
            last = max(i for i, r in enumerate(want) if r[2] > 0)
            assert cfg.config["speculative_config"]["draft_len_schedule"] == {e: k for _, e, k in want[:last + 1]}
        assert any("#49548" in n for n in cfg.notes)


def test_a_schedule_k_beyond_the_profiles_acceptance_is_one_line_naming_the_field(tmp_path) -> None:
    import pytest

    from sim.contracts.errors import SpecplanError

    auto = {"name": "auto", "proposer": "ngram", "policy": "k_by_batch", "schedule": "auto", "k": 4}
    text = scenario_toml("schedule-k", run={"duration_s": 5, "warmup_s": 1, "seeds": [1]},
                         workload={"arrival": "poisson", "rate": 2.0}, segments=[segment()],
                         fleet={"profile": "profile.json", "replicas": 1}, candidates=[BASELINE, auto])
    path = write_scenario(tmp_path, text, acceptance_rates=[0.7, 0.5, 0.3])
    with pytest.raises(SpecplanError, match=r"candidates\[auto\]\.k: 4 is beyond .*valid: 1–3") as err:
        run_scenario(load_scenario(path))
    assert "\n" not in str(err.value)


def test_a_run_whose_decode_batch_hovers_at_a_k_switch_says_so_and_one_away_from_it_does_not(tmp_path) -> None:
    def notes(switch: int) -> list[str]:
        cand = {"name": "by-batch", "proposer": "ngram", "policy": "k_by_batch",
                "k_by_batch": [[1, 3], [switch, 1]]}
        text = scenario_toml("schedule-straddle", run={"duration_s": 30, "warmup_s": 2, "seeds": [1]},
                             workload={"arrival": "poisson", "rate": 3.0}, segments=[segment(prompt=100, output=40)],
                             fleet={"profile": "profile.json", "replicas": 1}, candidates=[BASELINE, cand])
        return [n for n in run_scenario(load_scenario(write_scenario(tmp_path, text))).notes if "#49548" in n]

    (line,) = notes(2)
    assert line.startswith("warning: by-batch's load sits at a k switch") and "batch 2 (k=3)" in line
    assert notes(20) == []
