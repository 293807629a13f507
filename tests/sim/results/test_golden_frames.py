"""Golden per-request, per-step and per-burst (ITL) frames: the simulator's behaviour, pinned.

The frames of a set of runs (baseline and speculative, fused and summed steps, chunked prefill
on and off, preemption, client timeouts, a restart, every speculation policy, n-gram partial
proposals, trace replay, a padded KV layout) were recorded before the hot loop was rewritten for
speed (issue 18); every later version must give them back exactly — same rows, same float bits.

Re-record only on purpose (a behaviour change that is meant): ``SPECPLAN_RECORD_GOLDEN=1 pytest
tests/sim/results/test_golden_frames.py``, and say why in the commit.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sim.contracts.acceptance_trace import write_trace
from sim.contracts.profile import load_profile
from sim.contracts.scenario import load_scenario
from sim.contracts.synthetic import synthetic_profile
from sim.model import timer_packing
from sim.model.drivers import engine
from sim.results.simulation import simulate_once
from tests.helpers import BASELINE, NGRAM_K3, scenario_toml, segment, write_scenario

REPO = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).with_name("golden")
RECORD = os.environ.get("SPECPLAN_RECORD_GOLDEN") == "1"

ADAPTIVE = {"name": "ngram-adaptive", "proposer": "ngram", "policy": "adaptive", "k": 4,
            "adaptive": {"on_below_batch": 3, "off_above_batch": 8, "window_s": 2.0}}
BY_BATCH = {"name": "ngram-by-batch", "proposer": "ngram", "policy": "k_by_batch",
            "k_by_batch": [[1, 4], [3, 2], [8, 0]]}
CUTOFF = {"name": "ngram-cutoff4", "proposer": "ngram", "k": 3, "policy": "off_above_batch",
          "max_batch": 4}


def _shipped(name: str, overrides: dict[str, object]):
    sc = load_scenario(REPO / "scenarios" / name).with_overrides(overrides)
    return sc, load_profile(sc.require_profile_path())


def _tight(tmp: Path, chunked: bool, kv_layout: str):
    """A small replica under pressure: few KV blocks (preemption), client timeouts, a queue
    limit, n-gram proposals on 70 % of steps, every policy."""
    text = scenario_toml(
        "golden-tight",
        run={"duration_s": 60, "warmup_s": 5, "seeds": [1]},
        workload={"arrival": "poisson", "rate": 9.0, "client_timeout_s": 25},
        segments=[segment(prompt={"dist": "lognormal", "median": 300, "sigma": 0.8, "min": 8, "max": 1500},
                          output={"dist": "lognormal", "median": 80, "sigma": 0.8, "min": 1, "max": 600})],
        slo={"ttft_ms": 2000, "tpot_ms": 200},
        fleet={"profile": "profile.json", "replicas": 2, "routing": "round_robin", "price_per_gpu_hour": 1.0},
        engine={"max_num_seqs": 12, "max_num_batched_tokens": 512 if chunked else 1536, "chunked_prefill": chunked,
                "kv_layout": kv_layout},
        candidates=[BASELINE, NGRAM_K3, ADAPTIVE, BY_BATCH, CUTOFF],
    ) + "[fleet.admission]\nqueue_limit = 30\nmax_queue_time_s = 15\n"
    path = write_scenario(tmp, text, device_memory_bytes=int(3.34 * 2**30), proposal_rate=0.7)
    sc = load_scenario(path)
    return sc, load_profile(sc.require_profile_path())


def _replay(tmp: Path):
    from tests.sim.model.test_trace_replay import SCENARIO, clustered

    write_trace(str(tmp / "trace.jsonl"), clustered(4, np.random.default_rng(1)))
    sc = load_scenario(write_scenario(tmp, SCENARIO))
    return sc, synthetic_profile()


CASES = {
    # the shipped CPU default: off, fixed (ngram, self-draft), off_above_batch
    "default": lambda tmp: _shipped("default.toml", {"run.duration_s": 400, "run.warmup_s": 30}),
    # GPU batches, fused steps, a draft model's prefill pass, an EAGLE-3 head
    "gpu-chat": lambda tmp: _shipped("gpu-chat-h200.toml", {"run.duration_s": 30, "run.warmup_s": 5}),
    # two replicas, replica 0 restarts and falls back to the baseline
    "restart": lambda tmp: _shipped("decision-grid-restart.toml",
                                    {"run.duration_s": 700, "fleet.restart.at_s": 300}),
    # two GPU replicas routed to the least outstanding, busy enough that arrivals and both
    # replicas' steps interleave (recorded with the arrivals routed in Python, before issue 30)
    "gpu-chat-2lo": lambda tmp: _shipped("gpu-chat-h200.toml", {
        "run.duration_s": 20, "run.warmup_s": 5, "fleet.replicas": 2, "workload.rate": 40.0}),
    "tight-chunked": lambda tmp: _tight(tmp, True, "paged"),
    "tight-whole-padded": lambda tmp: _tight(tmp, False, "padded"),
    "replay": _replay,
}


def _frames(case: str, tmp: Path) -> dict[str, pl.DataFrame]:
    sc, prof = CASES[case](tmp)
    out: dict[str, pl.DataFrame] = {}
    for cand in sc.candidate_names:
        res = simulate_once(sc, prof, cand, 1)
        out[f"{cand}.requests"] = res.requests
        out[f"{cand}.steps"] = res.steps
        out[f"{cand}.itl"] = res.itl
    return out


NEWER_ZERO_COLUMNS = {"prefix_hit_tokens", "too_long"}
"""Record columns newer than the goldens, all 0 (false) in these runs: prefix caching off, no
context length known (the synthetic and shipped CPU profiles record none) or none exceeded."""

RUNS_ON = {"default": {"RoutedReplica"}, "gpu-chat": {"RoutedReplica"}, "replay": {"RoutedReplica"},
           "restart": {"RoutedReplica"}, "gpu-chat-2lo": {"RoutedReplica"},
           "tight-chunked": {"RoutedReplica"}, "tight-whole-padded": {"RoutedReplica"}}
"""Which replicas each case runs on: every built-in policy on a compiled timer takes its arrivals
in the fleet kernel (``sim.model.drivers.routed_fleet``: a lone replica's inline, several routed, a
restart included), the adaptive policy too (its window in its policy row); one SimPy event per
step only for a timer Python runs (and closed-loop clients)."""


@pytest.mark.parametrize("case", list(CASES))
def test_frames_match_the_recorded_goldens(case: str, tmp_path, monkeypatch) -> None:
    """The planner (the compiled kernels, restarts and trace replay included) gives the goldens."""
    built = []
    real_build = engine.build_replicas
    def build(*a):
        replicas = real_build(*a)
        built.append(type(replicas[0]).__name__)
        return replicas

    monkeypatch.setattr(engine, "build_replicas", build)
    frames = _frames(case, tmp_path)
    assert len(built) == len(frames) // 3, f"{case}: a candidate did not run"
    assert set(built) == RUNS_ON[case], f"{case}: ran on {built}, expected {RUNS_ON[case]}"
    folder = GOLDEN / case
    if RECORD:
        folder.mkdir(parents=True, exist_ok=True)
        for name, df in frames.items():
            df.write_parquet(folder / f"{name}.parquet", compression="zstd", statistics=False)
        pytest.skip(f"recorded {len(frames)} golden frames in {folder}")
    recorded = sorted(p.stem for p in folder.glob("*.parquet"))
    assert recorded == sorted(frames), f"{case}: golden set differs from the candidates run"
    for name, df in frames.items():
        want = pl.read_parquet(folder / f"{name}.parquet")
        # columns added since the goldens were recorded must read as if the feature were absent
        added = [c for c in df.columns if c not in want.columns]
        assert set(added) <= NEWER_ZERO_COLUMNS, f"{name}: unexpected new columns {added}"
        for c in added:
            assert (df[c].cast(pl.Int64) == 0).all(), f"{case}/{name}: {c} must be 0 (feature unused)"
        df = df.select(want.columns)
        assert df.columns == want.columns, name
        assert df.height == want.height, f"{case}/{name}: {df.height} rows, golden {want.height}"
        for col in df.columns:
            a, b = df[col], want[col]
            if not a.equals(b, check_dtypes=True):
                diff = (a != b).fill_null(True) if a.dtype == b.dtype else None
                first = int(diff.arg_true()[0]) if diff is not None and diff.any() else -1
                raise AssertionError(
                    f"{case}/{name}: column {col!r} differs from the golden (first row {first}: "
                    f"{a[first] if first >= 0 else a.dtype} vs {b[first] if first >= 0 else b.dtype})"
                )


@pytest.mark.parametrize("case", ["default", "gpu-chat", "tight-whole-padded"])
def test_compiled_timer_counts_what_the_python_one_counts(case: str, tmp_path, monkeypatch) -> None:
    """The notes a run carries (extrapolation shares per grid axis, unpriced padded-batch
    changes) come from the step timer's counts; the compiled timer adds its counts back, so
    they read as when Python prices every step (the timer not packed)."""
    sc, prof = CASES[case](tmp_path)
    notes = {}
    for which in ("compiled", "python"):
        with monkeypatch.context() as mp:
            if which == "python":
                mp.setattr(timer_packing, "pack", lambda timer, proposer: None)
            notes[which] = [simulate_once(sc, prof, cand, 1).notes for cand in sc.candidate_names]
    assert notes["compiled"] == notes["python"]
