"""Scenario loading: shipped files parse, and every validation rule names its field (overrides
and round trips: test_scenario_overrides.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from sim.contracts.candidate import Candidate
from sim.contracts.errors import SpecplanError
from sim.contracts.lengths import LengthDist
from sim.contracts.scenario import Scenario, load_scenario
from sim.contracts.scenario_fields import resolve_path
from tests.helpers import MINIMAL_SCENARIO, load_scenario_text, write_text

REPO = Path(__file__).resolve().parents[3]
SCENARIOS = sorted((REPO / "scenarios").glob("*.toml"))
TRACES = REPO.parent / "shared" / "traces"


# ---------------------------------------------------------------------------- shipped files


def test_shipped_scenarios_exist() -> None:
    names = {p.name for p in SCENARIOS}
    assert {
        "default.toml",
        "decision-grid.toml",
        "decision-grid-peak.toml",
        "decision-grid-restart.toml",
        "azure-conv-replay.toml",
    } <= names


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_shipped_scenario_parses_and_round_trips(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    if "shared/traces" in text and not TRACES.is_dir():
        pytest.skip(f"{TRACES} absent: the public Azure traces are not available here")
    s = load_scenario(path)
    assert s.baseline.is_baseline and s.candidates[0].is_baseline
    assert s.profile_path is not None and s.profile_path.is_file()  # a shipped profile (CPU or GPU)
    assert s.profile_path.parent == (REPO / "profiles")
    assert s.slo.limits, "shipped scenarios must state SLOs"
    assert len(s.run.seeds) >= 1 and s.run.duration_s <= 7200
    again = Scenario.from_dict(tomllib.loads(s.to_toml()), s.origin, s.base_dir)
    assert again == s


def test_decision_grid_candidates() -> None:
    for name in ("decision-grid.toml", "decision-grid-peak.toml", "decision-grid-restart.toml"):
        s = load_scenario(REPO / "scenarios" / name)
        got = {(c.name, c.proposer, c.max_k) for c in s.candidates}
        assert got == {
            ("baseline", None, 0),
            ("ngram-k2", "ngram", 2),
            ("ngram-k5", "ngram", 5),
            ("selfdraft-l6-k3", "selfdraft-l6", 3),
        }
    peak = load_scenario(REPO / "scenarios" / "decision-grid-peak.toml")
    assert peak.workload.piecewise is not None
    rates = [r for _, r in peak.workload.piecewise.points]
    assert max(rates) == pytest.approx(3 * min(rates))  # the peak triples the rate
    restart = load_scenario(REPO / "scenarios" / "decision-grid-restart.toml")
    assert restart.fleet.restart is not None and restart.fleet.restart.fallback == "baseline"
    assert restart.fleet.replicas == 2


# ---------------------------------------------------------------------------- basics


def test_minimal_defaults_and_baseline_added(tmp_path: Path) -> None:
    s = load_scenario_text(tmp_path, MINIMAL_SCENARIO)
    assert s.run.seeds == (0,) and s.run.warmup_s == 0.0 and s.run.drain is True
    assert s.candidate_names == ("baseline",)
    assert s.baseline.max_k == 0
    assert s.fleet.engine.block_size == 16 and s.fleet.profile_path is None
    assert s.slo.limits == {} and s.slo.percentile == 95.0
    assert s.workload.client_timeout_s is None


def test_baseline_added_first_when_absent(tmp_path: Path) -> None:
    s = load_scenario_text(tmp_path, MINIMAL_SCENARIO + '[[candidates]]\nname = "ng"\nproposer = "ngram"\nk = 3\n')
    assert s.candidate_names == ("baseline", "ng")
    assert s.speculative[0].max_k == 3 and not s.speculative[0].is_baseline


def test_name_defaults_to_file_stem(tmp_path: Path) -> None:
    s = load_scenario(write_text(tmp_path, MINIMAL_SCENARIO.replace('name = "t"\n', ""), "my-case.toml"))
    assert s.name == "my-case"


def test_slo_limits_and_derived(tmp_path: Path) -> None:
    s = load_scenario_text(tmp_path, MINIMAL_SCENARIO + "[slo]\nttft_ms = 500\npause_ms = 900\npercentile = 99\n")
    assert s.slo.limits == {"ttft": 500.0, "pause": 900.0}
    assert s.run.measured_s == 100.0


def test_max_k_by_policy() -> None:
    assert Candidate("a", proposer="p", policy="k_by_batch",
                     k_by_batch=((1, 5), (8, 2), (32, 0))).max_k == 5
    assert Candidate("b", proposer="p", policy="off_above_batch", k=4, max_batch=8).max_k == 4


def test_path_resolution_scenario_folder_then_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = tmp_path / "scen"
    sub.mkdir()
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "p.json").write_text("{}")
    monkeypatch.chdir(tmp_path / "cwd")
    # only in the cwd → found there
    assert resolve_path("p.json", str(sub)) == (tmp_path / "cwd" / "p.json").resolve()
    # in both → the scenario folder wins
    (sub / "p.json").write_text("{}")
    assert resolve_path("p.json", str(sub)) == (sub / "p.json").resolve()
    # nowhere → points at the scenario folder
    assert resolve_path("q.json", str(sub)) == (sub / "q.json").resolve()


def test_require_profile_path(tmp_path: Path) -> None:
    s = load_scenario_text(tmp_path, MINIMAL_SCENARIO + '[fleet]\nprofile = "missing.json"\n')
    with pytest.raises(SpecplanError, match=r"fleet\.profile: file not found; looked in .*missing\.json"):
        s.require_profile_path()
    (tmp_path / "missing.json").write_text("{}")
    assert s.require_profile_path() == (tmp_path / "missing.json").resolve()
    with pytest.raises(SpecplanError, match=r"fleet\.profile: not set"):
        load_scenario_text(tmp_path, MINIMAL_SCENARIO).require_profile_path()


def test_trace_path_resolved_relative_to_scenario(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    text = MINIMAL_SCENARIO.replace('rate = 1.0', 'trace = {path = "data/t.csv", rate_scale = 2.0}')
    text = text.replace('arrival = "poisson"', 'arrival = "trace"')
    text = text.replace('prompt_tokens = {dist = "fixed", value = 10}\n', "")
    text = text.replace('output_tokens = {dist = "fixed", value = 5}\n', "")
    s = load_scenario_text(tmp_path, text)
    assert s.trace_path == (tmp_path / "data" / "t.csv").resolve()
    assert s.workload.trace is not None and s.workload.trace.effective_window_s(100) == 200.0


# ---------------------------------------------------------------------------- validation table

# (replacement applied to MINIMAL_SCENARIO or text appended, expected substring of the message)
BAD: list[tuple[str, tuple[str, str] | None, str, str]] = [
    # id, (old, new) replacement or None, appended text, expected substring
    ("unknown-top", ('name = "t"', 'nmae = "x"\nname = "t"'), "", "s.toml: nmae: unknown key; valid: name, run, workload"),
    ("unknown-run", ("duration_s = 100", "duration_s = 100\nduraton = 3"), "", "run.duraton: unknown key; valid: duration_s, warmup_s, seeds, drain"),
    ("missing-run", ("[run]\nduration_s = 100\n", ""), "", "run: required; add a [run] table"),
    ("duration-neg", ("duration_s = 100", "duration_s = -1"), "", "run.duration_s: must be > 0"),
    ("duration-type", ("duration_s = 100", 'duration_s = "long"'), "", "run.duration_s: expected a number, got string 'long'"),
    ("warmup-too-long", ("duration_s = 100", "duration_s = 100\nwarmup_s = 100"), "", "run.warmup_s: must be ≥ 0 and < duration_s"),
    ("seeds-empty", ("duration_s = 100", "duration_s = 100\nseeds = []"), "", "run.seeds: must list at least one seed"),
    ("seeds-dup", ("duration_s = 100", "duration_s = 100\nseeds = [1, 1]"), "", "run.seeds: must be distinct"),
    ("seeds-neg", ("duration_s = 100", "duration_s = 100\nseeds = [1, -2]"), "", "run.seeds[1]: must be ≥ 0"),
    ("seeds-float", ("duration_s = 100", "duration_s = 100\nseeds = [1.5]"), "", "run.seeds[0]: expected an integer"),
    ("drain-type", ("duration_s = 100", "duration_s = 100\ndrain = 1"), "", "run.drain: expected true or false"),
    ("arrival-bad", ('arrival = "poisson"', 'arrival = "poison"'), "", "workload.arrival: must be one of 'poisson', 'gamma', 'piecewise', 'trace', 'concurrency'; got string 'poison'"),
    ("rate-missing", ("rate = 1.0\n", ""), "", "workload.rate: required for arrival 'poisson'"),
    ("rate-zero", ("rate = 1.0", "rate = 0"), "", "workload.rate: must be > 0 req/s"),
    ("rate-inf", ("rate = 1.0", "rate = inf"), "", "workload.rate: must be a finite number"),
    ("rate-bool", ("rate = 1.0", "rate = true"), "", "workload.rate: expected a number, got boolean true"),
    ("burst-poisson", ("rate = 1.0", "rate = 1.0\nburstiness = 0.5"), "", 'workload.burstiness: only used by arrival "gamma"'),
    ("burst-zero", ('arrival = "poisson"\nrate = 1.0', 'arrival = "gamma"\nrate = 1.0\nburstiness = 0'), "", "workload.burstiness: must be > 0"),
    ("piecewise-missing", ('arrival = "poisson"\nrate = 1.0', 'arrival = "piecewise"'), "", "workload.piecewise: required for arrival"),
    ("piecewise-with-poisson", ("rate = 1.0", 'rate = 1.0\npiecewise = {shape = "step", points = [[0, 1]]}'), "", 'workload.piecewise: only used by arrival "piecewise"'),
    ("rate-with-piecewise", ('arrival = "poisson"', 'arrival = "piecewise"\npiecewise = {shape = "step", points = [[0, 1]]}'), "", "workload.rate: only used by poisson and gamma"),
    ("pw-shape", ('arrival = "poisson"\nrate = 1.0', 'arrival = "piecewise"\npiecewise = {shape = "wave", points = [[0, 1]]}'), "", "workload.piecewise.shape: must be one of 'step', 'linear', 'daily'"),
    ("pw-empty", ('arrival = "poisson"\nrate = 1.0', 'arrival = "piecewise"\npiecewise = {shape = "step", points = []}'), "", "workload.piecewise.points: must hold at least one"),
    ("pw-order", ('arrival = "poisson"\nrate = 1.0', 'arrival = "piecewise"\npiecewise = {shape = "step", points = [[10, 1], [5, 2]]}'), "", "workload.piecewise.points[1]: times must be non-decreasing"),
    ("pw-neg-rate", ('arrival = "poisson"\nrate = 1.0', 'arrival = "piecewise"\npiecewise = {shape = "linear", points = [[0, 1], [5, -2]]}'), "", "workload.piecewise.points[1]: rate must be ≥ 0"),
    ("pw-all-zero", ('arrival = "poisson"\nrate = 1.0', 'arrival = "piecewise"\npiecewise = {shape = "linear", points = [[0, 0], [5, 0]]}'), "", "workload.piecewise.points: at least one rate must be > 0"),
    ("pw-point-len", ('arrival = "poisson"\nrate = 1.0', 'arrival = "piecewise"\npiecewise = {shape = "linear", points = [[0, 1, 2]]}'), "", "workload.piecewise.points[0]: expected an array of 2 values"),
    ("pw-daily-hours", ('arrival = "poisson"\nrate = 1.0', 'arrival = "piecewise"\npiecewise = {shape = "daily", points = [[0, 1], [25, 2]]}'), "", "workload.piecewise.points[1]: daily times are hours in [0, 24)"),
    ("pw-start-h", ('arrival = "poisson"\nrate = 1.0', 'arrival = "piecewise"\npiecewise = {shape = "step", points = [[0, 1]], start_h = 3}'), "", "workload.piecewise.start_h: only used by shape 'daily'"),
    ("trace-missing", ('arrival = "poisson"\nrate = 1.0', 'arrival = "trace"'), "", "workload.trace: required for arrival"),
    ("trace-file", ('arrival = "poisson"\nrate = 1.0', 'arrival = "trace"\ntrace = {path = "nope.csv"}'), "", "workload.trace.path: file not found; looked in"),
    ("timeout", ("rate = 1.0", "rate = 1.0\nclient_timeout_s = 0"), "", "workload.client_timeout_s: must be > 0"),
    ("conc-missing", ('arrival = "poisson"\nrate = 1.0', 'arrival = "concurrency"'), "", 'workload.concurrency: required for arrival "concurrency": clients in flight, an integer 1..100000'),
    ("conc-zero", ('arrival = "poisson"\nrate = 1.0', 'arrival = "concurrency"\nconcurrency = 0'), "", "workload.concurrency: must be an integer 1..100000, got 0"),
    ("conc-big", ('arrival = "poisson"\nrate = 1.0', 'arrival = "concurrency"\nconcurrency = 100001'), "", "workload.concurrency: must be an integer 1..100000, got 100001"),
    ("conc-float", ('arrival = "poisson"\nrate = 1.0', 'arrival = "concurrency"\nconcurrency = 2.5'), "", "workload.concurrency: expected an integer"),
    ("conc-bool", ('arrival = "poisson"\nrate = 1.0', 'arrival = "concurrency"\nconcurrency = true'), "", "workload.concurrency: expected an integer, got boolean true"),
    ("conc-rate", ('arrival = "poisson"', 'arrival = "concurrency"\nconcurrency = 4'), "", "workload.rate: only used by poisson and gamma arrivals, not 'concurrency'"),
    ("conc-trace", ('arrival = "poisson"\nrate = 1.0', 'arrival = "concurrency"\nconcurrency = 4\ntrace = {path = "t.csv"}'), "", "workload.trace: only used by arrival \"trace\", not 'concurrency'"),
    ("think-neg", ('arrival = "poisson"\nrate = 1.0', 'arrival = "concurrency"\nconcurrency = 4\nthink_time_s = -1'), "", "workload.think_time_s: must be a finite number of seconds ≥ 0, got -1"),
    ("think-inf", ('arrival = "poisson"\nrate = 1.0', 'arrival = "concurrency"\nconcurrency = 4\nthink_time_s = inf'), "", "workload.think_time_s: must be a finite number"),
    ("think-poisson", ("rate = 1.0", "rate = 1.0\nthink_time_s = 1"), "", "workload.think_time_s: only used by arrival \"concurrency\", not 'poisson'"),
    ("conc-poisson", ("rate = 1.0", "rate = 1.0\nconcurrency = 4"), "", "workload.concurrency: only used by arrival \"concurrency\", not 'poisson'"),
    ("think-dist-poisson", ("rate = 1.0", "rate = 1.0\nthink_time_dist = \"exponential\""), "", "workload.think_time_dist: only used by arrival \"concurrency\", not 'poisson'"),
    ("think-dist-no-mean", ('arrival = "poisson"\nrate = 1.0', 'arrival = "concurrency"\nconcurrency = 4\nthink_time_dist = "exponential"'), "", "workload.think_time_dist: \"exponential\" needs think_time_s > 0"),
    ("think-dist-bad", ('arrival = "poisson"\nrate = 1.0', 'arrival = "concurrency"\nconcurrency = 4\nthink_time_dist = "gauss"'), "", "workload.think_time_dist: must be one of 'fixed', 'exponential'"),
    ("segments-missing", ("[[workload.segments]]", "[[other]]"), "", "other: unknown key"),
    ("segments-empty", None, "", "workload.segments: required; add at least one [[workload.segments]] table"),
    ("seg-dup", None, '[[workload.segments]]\nname = "a"\nshare = 1\nprompt_tokens = {dist = "fixed", value = 1}\noutput_tokens = {dist = "fixed", value = 1}\n', "workload.segments[1].name: duplicate segment name 'a'"),
    ("seg-share", ("share = 1", "share = -0.2"), "", "workload.segments[0].share: must be > 0, got -0.2"),
    ("seg-name", ('name = "a"', 'name = "a b"'), "", "workload.segments[0].name: must match"),
    ("seg-unknown", ("share = 1", "share = 1\nweight = 3"), "", "workload.segments[0].weight: unknown key; valid: name, share, prompt_tokens"),
    ("seg-temp", ("share = 1", "share = 1\ntemperature = -1"), "", "workload.segments[0].temperature: must be ≥ 0"),
    ("seg-no-lengths", ('output_tokens = {dist = "fixed", value = 5}\n', ""), "", "workload.segments[0].output_tokens: required for arrival 'poisson'"),
    ("acc-unknown", ('acceptance = {task = "support", language = "en"}', 'acceptance = {task = "support", lang = "en"}'), "", "workload.segments[0].acceptance.lang: unknown key; valid: task, language"),
    ("acc-missing-lang", ('acceptance = {task = "support", language = "en"}', 'acceptance = {task = "support"}'), "", "workload.segments[0].acceptance.language: required"),
    ("len-dist", ('prompt_tokens = {dist = "fixed", value = 10}', 'prompt_tokens = {dist = "normal", value = 10}'), "", "workload.segments[0].prompt_tokens.dist: must be one of 'fixed', 'uniform', 'lognormal', 'empirical'"),
    ("len-fixed-zero", ('prompt_tokens = {dist = "fixed", value = 10}', 'prompt_tokens = {dist = "fixed", value = 0}'), "", "workload.segments[0].prompt_tokens.value: must be ≥ 1 token"),
    ("len-fixed-extra", ('prompt_tokens = {dist = "fixed", value = 10}', 'prompt_tokens = {dist = "fixed", value = 10, sigma = 1.0}'), "", "workload.segments[0].prompt_tokens.sigma: not used by dist 'fixed'; valid: dist, value"),
    ("len-uniform-order", ('prompt_tokens = {dist = "fixed", value = 10}', 'prompt_tokens = {dist = "uniform", min = 10, max = 5}'), "", "workload.segments[0].prompt_tokens.max: must be ≥ min (10)"),
    ("len-uniform-missing", ('prompt_tokens = {dist = "fixed", value = 10}', 'prompt_tokens = {dist = "uniform", min = 10}'), "", "workload.segments[0].prompt_tokens.max: required for dist 'uniform'"),
    ("len-lognormal-median", ('output_tokens = {dist = "fixed", value = 5}', 'output_tokens = {dist = "lognormal", median = 0, sigma = 1}'), "", "workload.segments[0].output_tokens.median: must be > 0"),
    ("len-lognormal-sigma", ('output_tokens = {dist = "fixed", value = 5}', 'output_tokens = {dist = "lognormal", median = 10, sigma = -1}'), "", "workload.segments[0].output_tokens.sigma: must be ≥ 0"),
    ("len-empirical", ('output_tokens = {dist = "fixed", value = 5}', 'output_tokens = {dist = "empirical", values = [3, 0]}'), "", "workload.segments[0].output_tokens.values[1]: must be ≥ 1 token"),
    ("len-empirical-empty", ('output_tokens = {dist = "fixed", value = 5}', 'output_tokens = {dist = "empirical", values = []}'), "", "workload.segments[0].output_tokens.values: must hold at least one"),
    ("slo-neg", None, "[slo]\nttft_ms = -5\n", "slo.ttft_ms: must be > 0 ms"),
    ("slo-pct", None, "[slo]\npercentile = 100\n", "slo.percentile: must be in (0, 100)"),
    ("slo-unknown", None, "[slo]\nttft = 5\n", "slo.ttft: unknown key; valid: ttft_ms, tpot_ms, e2el_ms, pause_ms, percentile"),
    ("fleet-replicas", None, "[fleet]\nreplicas = 0\n", "fleet.replicas: must be ≥ 1"),
    ("fleet-routing", None, '[fleet]\nrouting = "random"\n', "fleet.routing: must be one of 'round_robin', 'least_outstanding'"),
    ("kv-layout", None, '[fleet.engine]\nkv_layout = "ragged"\n', "fleet.engine.kv_layout: must be one of 'paged', 'padded'; got string 'ragged'"),
    ("fleet-price", None, "[fleet]\nprice_per_gpu_hour = -1\n", "fleet.price_per_gpu_hour: must be ≥ 0"),
    ("fleet-draft-price", None, "[fleet]\ndraft_price_per_hour = -1\n", "fleet.draft_price_per_hour: must be ≥ 0"),
    ("engine-seqs", None, "[fleet.engine]\nmax_num_seqs = 0\n", "fleet.engine.max_num_seqs: must be ≥ 1"),
    ("engine-tokens", None, "[fleet.engine]\nmax_num_batched_tokens = 0\n", "fleet.engine.max_num_batched_tokens: must be ≥ 1"),
    ("engine-block", None, "[fleet.engine]\nblock_size = 0\n", "fleet.engine.block_size: must be ≥ 1"),
    ("engine-mem", None, "[fleet.engine]\nmemory_utilization = 1.5\n", "fleet.engine.memory_utilization: must be in (0, 1]"),
    ("engine-chunk", None, "[fleet.engine]\nmax_num_batched_tokens = 8\nchunked_prefill = false\n", "workload.segments[0].prompt_tokens: longest prompt (10) must fit fleet.engine.max_num_batched_tokens (8)"),
    ("engine-unknown", None, "[fleet.engine]\ngpu_memory_utilization = 0.5\n", "fleet.engine.gpu_memory_utilization: unknown key; valid: max_num_seqs"),
    ("admission-queue", None, "[fleet.admission]\nqueue_limit = -1\n", "fleet.admission.queue_limit: must be ≥ 0"),
    ("admission-time", None, "[fleet.admission]\nmax_queue_time_s = 0\n", "fleet.admission.max_queue_time_s: must be > 0"),
    ("restart-replica", None, "[fleet.restart]\nat_s = 10\ncold_start_s = 5\nreplica = 1\n", "fleet.restart.replica: must be < replicas (1)"),
    ("restart-at", None, "[fleet.restart]\nat_s = 100\ncold_start_s = 5\n", "fleet.restart.at_s: must be < run.duration_s"),
    ("restart-cold", None, "[fleet.restart]\nat_s = 10\ncold_start_s = -5\n", "fleet.restart.cold_start_s: must be ≥ 0"),
    ("restart-missing", None, "[fleet.restart]\ncold_start_s = 5\n", "fleet.restart.at_s: required"),
    ("restart-on", None, '[fleet.restart]\nat_s = 10\ncold_start_s = 5\non_restart = "wait"\n', "fleet.restart.on_restart: must be one of 'reroute', 'drop'"),
    ("restart-fallback", None, '[fleet.restart]\nat_s = 10\ncold_start_s = 5\nfallback = "off"\n', "fleet.restart.fallback: must be one of 'baseline', 'same'"),
    ("cand-no-proposer", None, '[[candidates]]\nname = "x"\nk = 3\n', "candidates[0].proposer: required for a speculative candidate"),
    ("cand-no-k", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\n', "candidates[0].k: required by policy 'fixed'"),
    ("cand-k-zero", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 0\n', "candidates[0].k: must be in 1..1024"),
    ("cand-policy", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 2\npolicy = "greedy"\n', "candidates[0].policy: must be one of 'fixed', 'off_above_batch', 'k_by_batch', 'adaptive'"),
    ("cand-extra", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 2\nmax_batch = 4\n', "candidates[0].max_batch: not used by policy 'fixed'; valid: k"),
    ("cand-cutoff", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 2\npolicy = "off_above_batch"\n', "candidates[0].max_batch: required by policy 'off_above_batch'"),
    ("cand-kbb-first", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\npolicy = "k_by_batch"\nk_by_batch = [[2, 3]]\n', "candidates[0].k_by_batch[0]: first threshold must be 1"),
    ("cand-kbb-order", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\npolicy = "k_by_batch"\nk_by_batch = [[1, 3], [1, 2]]\n', "candidates[0].k_by_batch[1]: thresholds must increase"),
    ("cand-kbb-neg", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\npolicy = "k_by_batch"\nk_by_batch = [[1, 3], [4, -1]]\n', "candidates[0].k_by_batch[1]: k must be in 0..1024"),
    ("cand-k-huge", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 1000000000\n', "candidates[0].k: must be in 1..1024 draft tokens"),
    ("cand-no-proposer-says-speculation", None, '[[candidates]]\nname = "x"\nk = 2\n', 'candidates[0].proposer: required for a speculative candidate (speculation = "on"'),
    ("cand-adaptive", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\npolicy = "adaptive"\nk = 3\nadaptive = {on_below_batch = 8, off_above_batch = 4}\n', "candidates[0].adaptive.off_above_batch: must be > on_below_batch (8.0)"),
    ("cand-adaptive-window", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\npolicy = "adaptive"\nk = 3\nadaptive = {on_below_batch = 2, off_above_batch = 4, window_s = 0}\n', "candidates[0].adaptive.window_s: must be > 0"),
    ("cand-assumed-len", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 3\nassumed_acceptance = [0.5, 0.4]\n', "candidates[0].assumed_acceptance: needs ≥ max k (3) rates"),
    ("cand-assumed-range", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 2\nassumed_acceptance = [1.5, 0.4]\n', "candidates[0].assumed_acceptance[0]: must be in [0, 1]"),
    ("cand-assumed-incr", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 2\nassumed_acceptance = [0.4, 0.5]\n', "candidates[0].assumed_acceptance[1]: survival rates must be non-increasing"),
    ("cand-dup", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 2\n[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 3\n', "candidates[2].name: duplicate candidate name 'x'"),
    ("cand-two-baselines", None, '[[candidates]]\nname = "b1"\nspeculation = "off"\n[[candidates]]\nname = "b2"\nspeculation = "off"\n', "candidates[1].speculation: at most one baseline"),
    ("cand-baseline-k", None, '[[candidates]]\nname = "b"\nspeculation = "off"\nk = 2\n', "candidates[0].k: not used by the baseline"),
    ("cand-named-baseline", None, '[[candidates]]\nname = "baseline"\nproposer = "ngram"\nk = 2\n', 'candidates[0].name: a speculative candidate is named "baseline"'),
    ("cand-trace-nul", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 2\nacceptance_trace = "a\\u0000b"\n', "candidates[0].acceptance_trace: path contains a NUL byte"),
    ("cand-trace-empty", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 2\nacceptance_trace = ""\n', "candidates[0].acceptance_trace: path is empty"),
    ("cand-baseline-cache-on", None, '[[candidates]]\nname = "baseline"\nspeculation = "off"\nprefix_caching = true\n', 'candidates[0].prefix_caching: true makes "baseline" a cache-on candidate, not the baseline'),
    ("cand-unknown", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 2\nnum_speculative_tokens = 3\n', "candidates[0].num_speculative_tokens: unknown key; valid: name, speculation, proposer"),
    ("pw-neg-time", ('arrival = "poisson"\nrate = 1.0', 'arrival = "piecewise"\npiecewise = {shape = "step", points = [[-1, 1]]}'), "", "workload.piecewise.points[0]: time must be ≥ 0"),
    ("pw-start-h-range", ('arrival = "poisson"\nrate = 1.0', 'arrival = "piecewise"\npiecewise = {shape = "daily", points = [[0, 1]], start_h = 24}'), "", "workload.piecewise.start_h: must be in [0, 24)"),
    ("trace-empty-path", ('arrival = "poisson"\nrate = 1.0', 'arrival = "trace"\ntrace = {path = ""}'), "", "workload.trace.path: must name a trace file"),
    ("trace-start", ('arrival = "poisson"\nrate = 1.0', 'arrival = "trace"\ntrace = {path = "t.csv", start_s = -1}'), "", "workload.trace.start_s: must be ≥ 0"),
    ("trace-window", ('arrival = "poisson"\nrate = 1.0', 'arrival = "trace"\ntrace = {path = "t.csv", window_s = 0}'), "", "workload.trace.window_s: must be > 0"),
    ("trace-scale", ('arrival = "poisson"\nrate = 1.0', 'arrival = "trace"\ntrace = {path = "t.csv", rate_scale = 0}'), "", "workload.trace.rate_scale: must be > 0"),
    ("trace-unknown", ('arrival = "poisson"\nrate = 1.0', 'arrival = "trace"\ntrace = {path = "t.csv", scale = 2}'), "", "workload.trace.scale: unknown key; valid: path, format, columns, start_s, window_s, rate_scale"),
    ("trace-lengths-given", ('arrival = "poisson"\nrate = 1.0', 'arrival = "trace"\ntrace = {path = "t.csv"}'), "", 'workload.segments[0].prompt_tokens: not used with arrival "trace"'),
    ("trace-with-poisson", ("rate = 1.0", 'rate = 1.0\ntrace = {path = "t.csv"}'), "", 'workload.trace: only used by arrival "trace"'),
    ("acc-empty-task", ('acceptance = {task = "support", language = "en"}', 'acceptance = {task = "", language = "en"}'), "", "workload.segments[0].acceptance.task: must be a non-empty task name"),
    ("acc-empty-lang", ('acceptance = {task = "support", language = "en"}', 'acceptance = {task = "support", language = ""}'), "", "workload.segments[0].acceptance.language: must be an ISO 639-1 code"),
    ("len-min-zero", ('prompt_tokens = {dist = "fixed", value = 10}', 'prompt_tokens = {dist = "lognormal", median = 10, sigma = 1, min = 0}'), "", "workload.segments[0].prompt_tokens.min: must be ≥ 1 token"),
    ("len-max-zero", ('prompt_tokens = {dist = "fixed", value = 10}', 'prompt_tokens = {dist = "lognormal", median = 10, sigma = 1, max = 0}'), "", "workload.segments[0].prompt_tokens.max: must be ≥ 1 token"),
    ("table-expected", ("[run]\nduration_s = 100\n", "run = 3\n"), "", "run: expected a table, got int 3"),
    ("array-expected", ("duration_s = 100", "duration_s = 100\nseeds = 3"), "", "run.seeds: expected an array, got int 3"),
    ("string-expected", ('name = "a"', "name = 5"), "", "workload.segments[0].name: expected a string, got int 5"),
    ("restart-at-neg", None, "[fleet.restart]\nat_s = -1\ncold_start_s = 5\n", "fleet.restart.at_s: must be ≥ 0"),
    ("restart-replica-neg", None, "[fleet.restart]\nat_s = 1\ncold_start_s = 5\nreplica = -1\n", "fleet.restart.replica: must be ≥ 0"),
    ("fleet-profile-empty", None, '[fleet]\nprofile = ""\n', "fleet.profile: must name a profile JSON file"),
    ("engine-chunk-unbounded", ('prompt_tokens = {dist = "fixed", value = 10}', 'prompt_tokens = {dist = "lognormal", median = 10, sigma = 1}'), "[fleet.engine]\nchunked_prefill = false\n", "workload.segments[0].prompt_tokens: longest prompt (unbounded: set max) must fit"),
    ("cand-name", None, '[[candidates]]\nname = "a/b"\nproposer = "ngram"\nk = 2\n', "candidates[0].name: must match [A-Za-z0-9._+-]+"),
    ("cand-baseline-policy", None, '[[candidates]]\nname = "b"\nspeculation = "off"\npolicy = "adaptive"\n', "candidates[0].policy: not used by the baseline"),
    ("cand-max-batch", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 2\npolicy = "off_above_batch"\nmax_batch = 0\n', "candidates[0].max_batch: must be ≥ 1"),
    ("cand-kbb-empty", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\npolicy = "k_by_batch"\nk_by_batch = []\n', "candidates[0].k_by_batch: must hold at least one"),
    ("cand-kbb-all-zero", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\npolicy = "k_by_batch"\nk_by_batch = [[1, 0]]\n', "candidates[0].k_by_batch: at least one k must be ≥ 1"),
    ("cand-adaptive-neg", None, '[[candidates]]\nname = "x"\nproposer = "ngram"\npolicy = "adaptive"\nk = 2\nadaptive = {on_below_batch = -1, off_above_batch = 4}\n', "candidates[0].adaptive.on_below_batch: must be ≥ 0"),
    ("cand-speculation", None, '[[candidates]]\nname = "x"\nspeculation = "maybe"\n', "candidates[0].speculation: must be one of 'on', 'off'"),
    ("cand-needs-acceptance", ('acceptance = {task = "support", language = "en"}\n', ""), '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 2\n', "workload.segments[0].acceptance: required by candidate 'x'"),
]


@pytest.mark.parametrize(("replace", "append", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_validation_names_the_field(
    tmp_path: Path, replace: tuple[str, str] | None, append: str, expected: str
) -> None:
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,1,1\n")
    text = MINIMAL_SCENARIO
    if replace is not None:
        assert replace[0] in text, f"test table out of date: {replace[0]!r}"
        text = text.replace(replace[0], replace[1], 1)
    if expected.startswith("workload.segments: required"):
        text = text[: text.index("[[workload.segments]]")]
    text += append
    with pytest.raises(SpecplanError) as info:
        load_scenario_text(tmp_path, text)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(str(tmp_path / "s.toml") + ":")
    assert expected in msg


def test_toml_syntax_error_reports_line(tmp_path: Path) -> None:
    with pytest.raises(SpecplanError, match=r"s\.toml:5: TOML syntax error"):
        load_scenario_text(tmp_path, 'name = "t"\n[run]\nduration_s = 100\n\nrate = = 2\n')


def test_missing_file() -> None:
    with pytest.raises(SpecplanError, match="scenario file not found"):
        load_scenario("/nonexistent/x.toml")


def test_direct_construction_errors_are_located() -> None:
    with pytest.raises(SpecplanError, match=r"^max: must be ≥ min \(9\), got 3$"):
        LengthDist("uniform", min=9, max=3)


def test_assumed_acceptance_without_segment_keys_is_fine(tmp_path: Path) -> None:
    text = MINIMAL_SCENARIO.replace('acceptance = {task = "support", language = "en"}\n', "")
    text += '[[candidates]]\nname = "x"\nproposer = "ngram"\nk = 2\nassumed_acceptance = [0.6, 0.3]\n'
    s = load_scenario_text(tmp_path, text)
    assert s.candidate("x").assumed_acceptance == (0.6, 0.3)


# ---------------------------------------------------------------------------- overrides
